/* MPI calls checked like every other call, and errors agreed across ranks, so that a failure on
   one rank stops every rank at the same point with the same message. The ground layer: every
   module that talks MPI uses these. */
#pragma once

#include <mpi.h>
#include <stdint.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Agrees on a status that ranks computed independently: if any rank failed, every rank
   returns the failure of the lowest failing rank, with its message. Collective over comm. */
MGT_NODISCARD mgt_status mgt_mpi_agree(MPI_Comm comm, mgt_status local);

/* Whether every rank holds rank 0's n bytes. Where one does not, the lowest such rank puts
   the difference into words (describe(mine, rank 0's, why, cap)) and every rank returns
   MGT_ERR_INPUT with "rank R: why". Collective over comm. */
typedef void (*mgt_describe_difference)(const char *mine, size_t mine_n, const char *root,
                                        size_t root_n, char *why, size_t cap);
MGT_NODISCARD mgt_status mgt_mpi_same_bytes(MPI_Comm comm, const char *bytes, size_t n,
                                            mgt_describe_difference describe);

/* Checks an MPI return code; on failure records MPI's message and returns MGT_ERR_MPI. */
MGT_NODISCARD mgt_status mgt_mpi_status(int rc, const char *file, int line, const char *func,
                                        const char *call);
#define MGT_MPI(call) MGT_CHECK(mgt_mpi_status((call), __FILE__, __LINE__, __func__, #call))
/* MGT_MPI in a function with a `done:` label: the status to `st`, then there. */
#define MGT_MPI_TRY(call) MGT_TRY(mgt_mpi_status((call), __FILE__, __LINE__, __func__, #call))

/* Marks around blocking collectives, read by the watchdog (src/mgt/watchdog.h) from its
   thread: `op` ("all-reduce", a static string) on grid axis `axis` (0 tensor-parallel, 1
   data-parallel, 2 world). They cost nothing until mgt_watch_enable(1). */
void mgt_watch_enable(int on);
/* This thread's waits unwatched (off 1) or watched (0); returns the setting before. Checkpoint
   saves run unwatched, and a background writer thread throughout. */
int mgt_watch_thread(int off);
void mgt_watch_begin(const char *op, int axis);
void mgt_watch_end(void);
void mgt_watch_iteration(int64_t iteration);
/* 1 while a marked wait is in progress, with what it is and since when (CLOCK_MONOTONIC). */
int mgt_watch_read(const char **op, int *axis, double *since, int64_t *iteration);
/* MGT_MPI around a blocking collective, marked for the watchdog. */
#define MGT_MPI_WATCHED(op, axis, call)                                                            \
  do {                                                                                             \
    mgt_watch_begin(op, axis);                                                                     \
    int mgt_rc_ = (call);                                                                          \
    mgt_watch_end();                                                                               \
    MGT_CHECK(mgt_mpi_status(mgt_rc_, __FILE__, __LINE__, __func__, #call));                       \
  } while (0)

#ifdef __cplusplus
}
#endif
