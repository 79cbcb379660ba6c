/* MPI calls checked like every other call, and errors agreed across ranks, so that a failure on
   one rank stops every rank at the same point with the same message. The ground layer: every
   module that talks MPI uses these. */
#pragma once

#include <mpi.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Agrees on a status that ranks computed independently: if any rank failed, every rank
   returns the failure of the lowest failing rank, with its message. Collective over comm. */
MGT_NODISCARD mgt_status mgt_mpi_agree(MPI_Comm comm, mgt_status local);

/* Checks an MPI return code; on failure records MPI's message and returns MGT_ERR_MPI. */
MGT_NODISCARD mgt_status mgt_mpi_status(int rc, const char *file, int line, const char *func,
                                        const char *call);
#define MGT_MPI(call) MGT_CHECK(mgt_mpi_status((call), __FILE__, __LINE__, __func__, #call))
/* MGT_MPI in a function with a `done:` label: the status to `st`, then there. */
#define MGT_MPI_TRY(call) MGT_TRY(mgt_mpi_status((call), __FILE__, __LINE__, __func__, #call))

#ifdef __cplusplus
}
#endif
