/* MPI statuses and agreed errors: see include/mgt/agree.h. */
#include "mgt/agree.h"

#include <stdio.h>
#include <string.h>

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
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
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
