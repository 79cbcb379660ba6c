/* The `mgt` command line: subcommands over one MPI job. */
#pragma once

#include <mpi.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `mgt <subcommand> [flags]` on the ranks of `world` (MPI already initialized) and
   returns the process exit status: 0 on success, 2 for bad input found identically on
   every rank. A failure that may differ between ranks is printed by the failing rank and
   ends the job with MPI_Abort. Collective over `world`. */
int mgt_cli_main(int argc, char **argv, MPI_Comm world);

/* Reports a failure of a command and returns its exit status. Input errors found before any
   collective state are the same on every rank: rank 0 prints and all return 2 (`agreed`).
   Anything else is printed by the failing rank and aborts the job. */
int mgt_cli_fail(mgt_status st, int rank, MPI_Comm world, int agreed);

/* Ranks of this node in `world`. Collective over `world`. */
int mgt_cli_local_ranks(MPI_Comm world);

/* `mgt train ...` and `mgt finetune ...` (src/cmd/train_cmd.c). Collective over `world`. */
int mgt_cli_train(int argc, char **argv, MPI_Comm world);

/* `mgt dataset info ...` (src/cmd/dataset_cmd.c). Collective over `world`. */
int mgt_cli_dataset(int argc, char **argv, MPI_Comm world);

/* `mgt ckpt ...` (src/cmd/ckpt_cmd.c). Collective over `world`. */
int mgt_cli_ckpt(int argc, char **argv, MPI_Comm world);

/* Chooses OpenMP threads per rank when OMP_NUM_THREADS is unset: the CPUs this rank is
   bound to, or the node's CPUs shared among its ranks. Collective over `world`. */
void mgt_cli_configure_threads(MPI_Comm world);

#ifdef __cplusplus
}
#endif
