/* The `mgt` command line: subcommands over one MPI job. */
#pragma once

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `mgt <subcommand> [flags]` on the ranks of `world` (MPI already initialized) and
   returns the process exit status: 0 on success, 2 for bad input found identically on
   every rank. A failure that may differ between ranks is printed by the failing rank and
   ends the job with MPI_Abort. Collective over `world`. */
int mgt_cli_main(int argc, char **argv, MPI_Comm world);

/* Chooses OpenMP threads per rank when OMP_NUM_THREADS is unset: the CPUs this rank is
   bound to, or the node's CPUs shared among its ranks. Collective over `world`. */
void mgt_cli_configure_threads(MPI_Comm world);

#ifdef __cplusplus
}
#endif
