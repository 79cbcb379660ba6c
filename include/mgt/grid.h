/* The 2D process grid: world = tp * dp, the tensor-parallel rank varies fastest, over the
   processes ordered by node so that tensor-parallel groups stay inside a node. */
#include <stdio.h>

#pragma once

#include <mpi.h>

#include "mgt/agree.h"
#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_grid {
  MPI_Comm world;   /* the communicator the grid was built from, reordered by node */
  MPI_Comm tp_comm; /* ranks that share one layer: consecutive world ranks */
  MPI_Comm dp_comm; /* ranks that hold the same shard in different replicas */
  int rank, size;   /* in world */
  int tp, dp;
  int tp_rank, dp_rank;
  int nodes, node; /* nodes of the job (MPI_COMM_TYPE_SHARED), numbered by first rank */
  int tp_spanning; /* tensor-parallel groups with ranks on more than one node */
  int dp_spanning; /* data-parallel groups with ranks on more than one node */
  /* expert parallelism (mgt_grid_set_experts), carved out of the data-parallel ranks: groups of
     ep consecutive dp ranks share the experts out (ep_comm), and the ranks at the same place of
     each group hold the same experts (edp_comm, edp = dp / ep of them); MPI_COMM_NULL at ep 1 */
  int ep, ep_rank, edp, edp_rank;
  int ep_spanning, edp_spanning; /* of the tp x dp / ep groups of each, those spanning nodes */
  MPI_Comm ep_comm, edp_comm;
  int *from_rank;    /* grid rank -> rank in the communicator given to mgt_grid_create */
  int *node_of;      /* grid rank -> node */
  char (*names)[64]; /* node -> processor name; on grid rank 0 only, else NULL */
} mgt_grid;

/* Builds the grid over `world` with tensor-parallel size `tp`. The processes are ordered by
   (node, rank): rank 0 stays rank 0, one node keeps world's order, and a node holding a
   multiple of tp ranks holds whole tensor-parallel groups whatever the launcher's placement.
   tp_rank = rank % tp, dp_rank = rank / tp in that order. Fails with MGT_ERR_INPUT if the size
   is not a multiple of tp. Collective over `world`. The caller frees it with
   mgt_grid_destroy. */
MGT_NODISCARD mgt_status mgt_grid_create(MPI_Comm world, int tp, mgt_grid **out);
/* Splits the data-parallel ranks into expert-parallel groups of ep (ep divides dp). Collective
   over the grid's world. */
MGT_NODISCARD mgt_status mgt_grid_set_experts(mgt_grid *g, int ep);
/* Frees the communicators and the grid; collective over the grid's world. */
void mgt_grid_destroy(mgt_grid **grid);

/* "{0,2,4}": the ranks, in the communicator given to mgt_grid_create, of grid ranks first,
   first + step, ... (n of them; the first 8 and the count when there are more than 9). Returns
   the length written. */
size_t mgt_grid_ranks_text(const mgt_grid *g, int first, int step, int n, char *out, size_t cap);
/* Grid rank 0 only: the nodes, ranks per node and where each tensor-parallel group lives,
   as one line ("placement: ..."); the groups are named by ranks of the communicator given to
   mgt_grid_create ({0,2}@node1). */
void mgt_grid_print_placement(const mgt_grid *g, FILE *out);
/* MGT_ERR_INPUT naming a tensor-parallel group that spans nodes when `refuse`, else on grid
   rank 0 one warning on stderr naming them. Not collective: every rank has the same answer. */
MGT_NODISCARD mgt_status mgt_grid_check_nodes(const mgt_grid *g, int refuse);

/* This process's rank among the ranks of its node: SLURM_LOCALID, Open MPI's or MPICH's local
   rank, else the rank in MPI_COMM_TYPE_SHARED. Collective over world (the fallback splits it). */
int mgt_local_rank(MPI_Comm world);

#ifdef __cplusplus
}
#endif
