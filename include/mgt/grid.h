/* The 2D process grid: world = tp * dp, the tensor-parallel rank varies fastest. */
#pragma once

#include <mpi.h>

#include "mgt/agree.h"
#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_grid {
  MPI_Comm world;   /* duplicate of the communicator the grid was built from */
  MPI_Comm tp_comm; /* ranks that share one layer: consecutive world ranks */
  MPI_Comm dp_comm; /* ranks that hold the same shard in different replicas */
  int rank, size;   /* in world */
  int tp, dp;
  int tp_rank, dp_rank;
} mgt_grid;

/* Builds the grid over `world` with tensor-parallel size `tp`: tp_rank = rank % tp,
   dp_rank = rank / tp. Fails with MGT_ERR_INPUT if the size is not a multiple of tp.
   Collective over `world`. The caller owns the grid and frees it with mgt_grid_destroy. */
MGT_NODISCARD mgt_status mgt_grid_create(MPI_Comm world, int tp, mgt_grid **out);
/* Frees the communicators and the grid; collective over the grid's world. */
void mgt_grid_destroy(mgt_grid **grid);

/* This process's rank among the ranks of its node: SLURM_LOCALID, Open MPI's or MPICH's local
   rank, else the rank in MPI_COMM_TYPE_SHARED. Collective over world (the fallback splits it). */
int mgt_local_rank(MPI_Comm world);

#ifdef __cplusplus
}
#endif
