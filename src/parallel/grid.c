#include "mgt/grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int first, local, rank; /* the node's lowest rank, the rank in the node, in world */
} proc_key;

static int by_node(const void *a, const void *b) {
  const proc_key *x = a, *y = b;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->local < y->local ? -1 : (x->local > y->local);
}

/* Where every process runs: the shared-memory communicator is the node, named by its lowest
   rank so that every process numbers the nodes alike. Sets the grid's order and nodes. */
static mgt_status learn_nodes(MPI_Comm world, int rank, int size, mgt_grid *g, int *grid_rank) {
  mgt_status st = MGT_OK;
  MPI_Comm node = MPI_COMM_NULL;
  proc_key *keys = NULL;
  int *got = NULL;
  char(*all)[64] = NULL;
  MGT_MPI_TRY(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int mine[2] = {rank, 0};
  MGT_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &mine[0], 1, MPI_INT, MPI_MIN, node));
  MGT_MPI_TRY(MPI_Comm_rank(node, &mine[1]));
  MGT_TRY(mgt_calloc(sizeof *keys * (size_t)size, "process placement", (void **)&keys));
  MGT_TRY(mgt_calloc(sizeof *got * 2 * (size_t)size, "process placement", (void **)&got));
  MGT_MPI_TRY(MPI_Allgather(mine, 2, MPI_INT, got, 2, MPI_INT, world));
  for (int q = 0; q < size; q++)
    keys[q] = (proc_key){got[2 * q], got[2 * q + 1], q};
  qsort(keys, (size_t)size, sizeof *keys, by_node);
  MGT_TRY(
      mgt_calloc(sizeof *g->from_rank * (size_t)size, "process placement", (void **)&g->from_rank));
  MGT_TRY(mgt_calloc(sizeof *g->node_of * (size_t)size, "process placement", (void **)&g->node_of));
  g->nodes = 0;
  for (int i = 0; i < size; i++) {
    if (i > 0 && keys[i].first != keys[i - 1].first) g->nodes++;
    g->from_rank[i] = keys[i].rank;
    g->node_of[i] = g->nodes;
    if (keys[i].rank == rank) *grid_rank = i;
  }
  g->nodes++;
  /* names for the log, gathered where it is written: grid rank 0 is world rank 0 */
  char name[MPI_MAX_PROCESSOR_NAME] = "", mine64[64];
  int len = 0;
  MGT_MPI_TRY(MPI_Get_processor_name(name, &len));
  snprintf(mine64, sizeof mine64, "%s", name);
  if (rank == 0) MGT_TRY(mgt_calloc(sizeof *all * (size_t)size, "node names", (void **)&all));
  MGT_MPI_TRY(MPI_Gather(mine64, 64, MPI_CHAR, all, 64, MPI_CHAR, 0, world));
  if (rank == 0) {
    MGT_TRY(mgt_calloc(sizeof *g->names * (size_t)g->nodes, "node names", (void **)&g->names));
    for (int i = 0; i < size; i++)
      memcpy(g->names[g->node_of[i]], all[g->from_rank[i]], 64);
  }
done:
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  mgt_free(keys);
  mgt_free(got);
  mgt_free(all);
  return st;
}

static int spans(const mgt_grid *g, int first, int step, int n) {
  for (int i = 1; i < n; i++)
    if (g->node_of[first + i * step] != g->node_of[first]) return 1;
  return 0;
}

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
  g->world = g->tp_comm = g->dp_comm = g->ep_comm = g->edp_comm = MPI_COMM_NULL;
  mgt_status st = MGT_OK;
  int grank = rank;
  MGT_TRY(learn_nodes(world, rank, size, g, &grank));
  g->rank = grank;
  g->size = size;
  g->tp = tp;
  g->dp = size / tp;
  g->tp_rank = grank % tp;
  g->dp_rank = grank / tp;
  g->ep = 1, g->ep_rank = 0, g->edp = g->dp, g->edp_rank = g->dp_rank;
  for (int k = 0; k < g->dp; k++)
    g->tp_spanning += spans(g, k * tp, 1, tp);
  for (int j = 0; j < tp; j++)
    g->dp_spanning += spans(g, j, tp, g->dp);
  g->edp_spanning = g->dp_spanning;
  MGT_MPI_TRY(MPI_Comm_split(world, 0, grank, &g->world));
  MGT_MPI_TRY(MPI_Comm_set_errhandler(g->world, MPI_ERRORS_RETURN));
  /* Color by replica gives the tp group; color by shard gives the dp group. */
  MGT_MPI_TRY(MPI_Comm_split(g->world, g->dp_rank, g->tp_rank, &g->tp_comm));
  MGT_MPI_TRY(MPI_Comm_split(g->world, g->tp_rank, g->dp_rank, &g->dp_comm));
  *out = g;
  return MGT_OK;
done:
  mgt_grid_destroy(&g);
  return st;
}

mgt_status mgt_grid_set_experts(mgt_grid *g, int ep) {
  MGT_REQUIRE(ep >= 1 && g->dp % ep == 0,
              "--expert-model-parallel-size %d does not divide the data-parallel size %d", ep,
              g->dp);
  if (g->ep_comm != MPI_COMM_NULL) MPI_Comm_free(&g->ep_comm);
  if (g->edp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->edp_comm);
  g->ep = ep, g->ep_rank = g->dp_rank % ep, g->edp = g->dp / ep, g->edp_rank = g->dp_rank / ep;
  g->ep_spanning = g->edp_spanning = 0;
  for (int j = 0; j < g->tp; j++) { /* grid rank = dp_rank * tp + tp_rank */
    for (int k = 0; k < g->edp; k++)
      g->ep_spanning += spans(g, j + k * ep * g->tp, g->tp, ep);
    for (int e = 0; e < ep; e++)
      g->edp_spanning += spans(g, j + e * g->tp, ep * g->tp, g->edp);
  }
  if (ep == 1) return MGT_OK;
  MGT_MPI(MPI_Comm_split(g->dp_comm, g->edp_rank, g->ep_rank, &g->ep_comm));
  MGT_MPI(MPI_Comm_split(g->dp_comm, g->ep_rank, g->edp_rank, &g->edp_comm));
  return MGT_OK;
}

void mgt_grid_destroy(mgt_grid **grid) {
  mgt_grid *g = *grid;
  if (!g) return;
  if (g->ep_comm != MPI_COMM_NULL) MPI_Comm_free(&g->ep_comm);
  if (g->edp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->edp_comm);
  if (g->dp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->dp_comm);
  if (g->tp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->tp_comm);
  if (g->world != MPI_COMM_NULL) MPI_Comm_free(&g->world);
  mgt_free(g->from_rank);
  mgt_free(g->node_of);
  mgt_free(g->names);
  mgt_free(g);
  *grid = NULL;
}

static const char *node_name(const mgt_grid *g, int node, char *buf, size_t cap) {
  if (g->names) return g->names[node];
  snprintf(buf, cap, "node %d", node);
  return buf;
}

size_t mgt_grid_ranks_text(const mgt_grid *g, int first, int step, int n, char *out, size_t cap) {
  size_t k = (size_t)snprintf(out, cap, "{");
  for (int i = 0; i < n && k < cap; i++) {
    if (i == 8 && n > 9) {
      k += (size_t)snprintf(out + k, cap - k, ",... %d ranks", n);
      break;
    }
    k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? "," : "", g->from_rank[first + i * step]);
  }
  if (k < cap) k += (size_t)snprintf(out + k, cap - k, "}");
  return k < cap ? k : cap;
}

/* "{2,3}@node1+node2": tensor-parallel group k by its ranks in the caller's communicator. */
static void group_text(const mgt_grid *g, int k, char *out, size_t cap) {
  size_t n = mgt_grid_ranks_text(g, k * g->tp, 1, g->tp, out, cap);
  char buf[32];
  for (int i = 0; i < g->tp && n < cap; i++) {
    const int node = g->node_of[k * g->tp + i];
    if (i > 0 && node == g->node_of[k * g->tp + i - 1]) continue;
    n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? "+" : "@",
                          node_name(g, node, buf, sizeof buf));
  }
}

enum { SHOWN = 16 }; /* groups and nodes named in one line */

void mgt_grid_print_placement(const mgt_grid *g, FILE *out) {
  if (!g->names) return;
  int *count = calloc((size_t)g->nodes, sizeof *count);
  if (!count) return;
  for (int i = 0; i < g->size; i++)
    count[g->node_of[i]]++;
  int same = 1;
  for (int n = 1; n < g->nodes; n++)
    same &= count[n] == count[0];
  fprintf(out, "placement: %d node%s", g->nodes, g->nodes > 1 ? "s" : "");
  if (same) fprintf(out, " x %d rank%s (", count[0], count[0] > 1 ? "s" : "");
  for (int n = 0; n < g->nodes && n < SHOWN; n++)
    if (same)
      fprintf(out, "%s%s", n ? ", " : "", g->names[n]);
    else
      fprintf(out, "%s%s %d rank%s", n ? ", " : ": ", g->names[n], count[n],
              count[n] > 1 ? "s" : "");
  if (g->nodes > SHOWN) fprintf(out, ", %d more", g->nodes - SHOWN);
  fprintf(out, "%s; tensor-parallel groups", same ? ")" : "");
  if (g->tp == 1) {
    fprintf(out, ": single ranks\n");
  } else {
    if (g->tp_spanning == 0)
      fprintf(out, " all within a node");
    else
      fprintf(out, " spanning nodes: %d of %d", g->tp_spanning, g->dp);
    char text[1024];
    for (int k = 0; k < g->dp && k < SHOWN; k++) {
      group_text(g, k, text, sizeof text);
      fprintf(out, "%s%s", k ? " " : ": ", text);
    }
    fprintf(out, "%s\n", g->dp > SHOWN ? " ..." : "");
  }
  free(count);
}

mgt_status mgt_grid_check_nodes(const mgt_grid *g, int refuse) {
  if (g->tp_spanning == 0) return MGT_OK;
  char list[1024] = "";
  size_t n = 0;
  for (int k = 0, shown = 0; k < g->dp && n < sizeof list; k++) {
    if (!spans(g, k * g->tp, 1, g->tp)) continue;
    if (shown++ == SHOWN / 2) {
      n += (size_t)snprintf(list + n, sizeof list - n, " ...");
      break;
    }
    char text[512];
    group_text(g, k, text, sizeof text);
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", shown > 1 ? " " : "", text);
  }
  MGT_REQUIRE(!refuse,
              "%d of %d tensor-parallel groups span nodes (%s) and --require-node-local-tp "
              "refuses it: give every node a multiple of %d ranks (sbatch --ntasks-per-node)",
              g->tp_spanning, g->dp, list, g->tp);
  if (g->rank == 0)
    fprintf(stderr,
            "mgt: warning: %d of %d tensor-parallel groups span nodes (%s): their all-reduces "
            "cross the network in every layer; give every node a multiple of %d ranks (sbatch "
            "--ntasks-per-node), or --require-node-local-tp to refuse\n",
            g->tp_spanning, g->dp, list, g->tp);
  return MGT_OK;
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
