#include "mgt/grid.h"

#include <stdlib.h>
#include <string.h>

mgt_status mgt_grid_create(MPI_Comm world, int tp, mgt_grid **out) {
  *out = NULL;
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  MGT_REQUIRE(tp >= 1, "--tensor-model-parallel-size must be at least 1 (got %d)", tp);
  MGT_REQUIRE(size % tp == 0,
              "--tensor-model-parallel-size %d does not divide the number of ranks %d", tp, size);
  mgt_grid *g = NULL;
  MGT_CHECK(mgt_calloc(sizeof *g, "process grid", (void **)&g));
  g->rank = rank;
  g->size = size;
  g->tp = tp;
  g->dp = size / tp;
  g->tp_rank = rank % tp;
  g->dp_rank = rank / tp;
  g->world = g->tp_comm = g->dp_comm = MPI_COMM_NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(
      mgt_mpi_status(MPI_Comm_dup(world, &g->world), __FILE__, __LINE__, __func__, "MPI_Comm_dup"));
  MGT_TRY(mgt_mpi_status(MPI_Comm_set_errhandler(g->world, MPI_ERRORS_RETURN), __FILE__, __LINE__,
                         __func__, "MPI_Comm_set_errhandler"));
  /* Color by replica gives the tp group; color by shard gives the dp group. */
  MGT_TRY(mgt_mpi_status(MPI_Comm_split(g->world, g->dp_rank, g->tp_rank, &g->tp_comm), __FILE__,
                         __LINE__, __func__, "MPI_Comm_split(tp)"));
  MGT_TRY(mgt_mpi_status(MPI_Comm_split(g->world, g->tp_rank, g->dp_rank, &g->dp_comm), __FILE__,
                         __LINE__, __func__, "MPI_Comm_split(dp)"));
  *out = g;
  return MGT_OK;
done:
  mgt_grid_destroy(&g);
  return st;
}

void mgt_grid_destroy(mgt_grid **grid) {
  mgt_grid *g = *grid;
  if (!g) return;
  if (g->dp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->dp_comm);
  if (g->tp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->tp_comm);
  if (g->world != MPI_COMM_NULL) MPI_Comm_free(&g->world);
  mgt_free(g);
  *grid = NULL;
}

int mgt_local_rank(MPI_Comm world) {
  const char *vars[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                        "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  MPI_Comm node;
  int r = 0;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &r);
    MPI_Comm_free(&node);
  }
  return r;
}
