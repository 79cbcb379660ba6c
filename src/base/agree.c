/* MPI statuses and agreed errors: see include/mgt/agree.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "mgt/agree.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
  pthread_mutex_t mu;
  int on;
  const char *op; /* NULL: not waiting */
  int axis;
  double since;
  int64_t iteration;
} watch = {.mu = PTHREAD_MUTEX_INITIALIZER, .iteration = -1};

void mgt_watch_enable(int on) {
  pthread_mutex_lock(&watch.mu);
  watch.on = on;
  watch.op = NULL;
  pthread_mutex_unlock(&watch.mu);
}

/* A thread whose waits are not watched: checkpoint I/O, which may outlast the timeout, and a
   background writer (whose marks would also clear the training thread's). */
static _Thread_local int unwatched;

int mgt_watch_thread(int off) {
  const int was = unwatched;
  unwatched = off;
  return was;
}

void mgt_watch_begin(const char *op, int axis) {
  if (!watch.on || unwatched) return; /* on is set before the watched thread waits: no race */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  pthread_mutex_lock(&watch.mu);
  watch.op = op;
  watch.axis = axis;
  watch.since = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  pthread_mutex_unlock(&watch.mu);
}

void mgt_watch_end(void) {
  if (!watch.on || unwatched) return;
  pthread_mutex_lock(&watch.mu);
  watch.op = NULL;
  pthread_mutex_unlock(&watch.mu);
}

void mgt_watch_iteration(int64_t iteration) {
  pthread_mutex_lock(&watch.mu);
  watch.iteration = iteration;
  pthread_mutex_unlock(&watch.mu);
}

int mgt_watch_read(const char **op, int *axis, double *since, int64_t *iteration) {
  pthread_mutex_lock(&watch.mu);
  const int waiting = watch.op != NULL;
  *op = watch.op, *axis = watch.axis, *since = watch.since, *iteration = watch.iteration;
  pthread_mutex_unlock(&watch.mu);
  return waiting;
}

mgt_status mgt_mpi_status(int rc, const char *file, int line, const char *func, const char *call) {
  if (rc == MPI_SUCCESS) return MGT_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
  mgt_error_set(MGT_ERR_MPI, file, line, func, "MPI call failed: %s: %s", call, msg);
  return MGT_ERR_MPI;
}

mgt_status mgt_mpi_agree(MPI_Comm comm, mgt_status local) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(comm, &rank));
  MGT_MPI(MPI_Comm_size(comm, &size));
  int first = local != MGT_OK ? rank : size;
  MGT_MPI_WATCHED("agreement", 2, MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return MGT_OK;
  struct {
    int status;
    char msg[1024];
  } e;
  memset(&e, 0, sizeof e);
  if (rank == first) {
    e.status = (int)local;
    snprintf(e.msg, sizeof e.msg, "%s", mgt_error_message());
  }
  MGT_MPI(MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, comm));
  if (rank != first) mgt_error_set((mgt_status)e.status, __FILE__, __LINE__, __func__, "%s", e.msg);
  mgt_error_set_agreed(size);
  return (mgt_status)e.status;
}

mgt_status mgt_mpi_same_bytes(MPI_Comm comm, const char *bytes, size_t n,
                              mgt_describe_difference describe) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(comm, &rank));
  MGT_MPI(MPI_Comm_size(comm, &size));
  if (size == 1) return MGT_OK;
  unsigned long long root_n = n;
  MGT_MPI(MPI_Bcast(&root_n, 1, MPI_UNSIGNED_LONG_LONG, 0, comm));
  MGT_REQUIRE(root_n < (1ull << 30), "%llu bytes to compare across ranks", root_n);
  char *root = rank == 0 ? (char *)bytes : malloc(root_n + 1);
  int lost = root == NULL, first;
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &lost, 1, MPI_INT, MPI_MAX, comm));
  if (lost) {
    if (rank != 0) free(root);
    return mgt_mpi_agree(comm, MGT_ERROR(MGT_ERR_NOMEM, "out of memory comparing across ranks"));
  }
  mgt_status st = mgt_mpi_status(MPI_Bcast(root, (int)root_n, MPI_CHAR, 0, comm), __FILE__,
                                 __LINE__, __func__, "MPI_Bcast");
  if (st == MGT_OK) {
    first = root_n != n || memcmp(root, bytes, n) != 0 ? rank : size;
    st = mgt_mpi_status(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), __FILE__,
                        __LINE__, __func__, "MPI_Allreduce");
  }
  if (st == MGT_OK && first < size) {
    char why[900] = "";
    if (rank == first) describe(bytes, n, root, (size_t)root_n, why, sizeof why);
    st = mgt_mpi_agree(comm,
                       rank == first ? MGT_ERROR(MGT_ERR_INPUT, "rank %d: %s", rank, why) : MGT_OK);
  }
  if (rank != 0) free(root);
  return st;
}
