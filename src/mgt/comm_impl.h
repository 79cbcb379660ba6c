/* The communicator's table of collectives: private to the implementations (src/parallel/
   comm_mpi.c, comm_cuda.c) and the checked wrappers (src/parallel/comm.c), as the backend's
   table is to kernels/. Everything else calls the wrappers of include/mgt/comm.h. */
#pragma once

#include "mgt/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mgt_comm {
  const char *name; /* "mpi", "cuda" */
  const mgt_grid *grid;
  void *ctx;
  mgt_status (*wait)(void *ctx, mgt_comm_req *req);
  mgt_status (*test)(void *ctx, mgt_comm_req *req, int *done);
  /* Frees ctx (NULL: nothing to free) */
  void (*destroy)(void *ctx);
  /* The list's collectives, each with the context, the grid and the axis first. */
#define MGT_COMM_SLOT(name, NAME, params, args)                                                    \
  mgt_status (*name)(void *ctx, const mgt_grid *g, mgt_axis axis, MGT_COMM_UNPACK params);
  MGT_COMM_OPERATIONS(MGT_COMM_SLOT)
#undef MGT_COMM_SLOT
};

/* Fills comm's slots of the list with PREFIX##name (mpi_allreduce, cu_allreduce, ...). */
#define MGT_COMM_FILL_SLOT(name, NAME, params, args) comm->name = MGT_COMM_PREFIXED(name);

/* The MPI implementation in the caller's storage (the device communicator keeps one for host
   buffers). */
void mgt_comm_mpi_init(mgt_comm *comm, const mgt_grid *grid, mgt_comm_stats *stats);

#ifdef __cplusplus
}
#endif
