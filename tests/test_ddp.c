/* The data-parallel machinery (src/parallel/ddp.c) on its own, under mpiexec with 1 to 4 ranks
   (as tp=1 x dp, or tp=2 x dp): integer-valued gradients, so that every sum is exact, reduced
   bucket by bucket (blocking and overlapped, pieces of 7 elements and whole buckets, an empty
   bucket among them) must equal the sum over the data-parallel ranks computed here; the
   distributed optimizer's shards must be dp even cuts holding that sum; after an update of the
   owned parts every rank must hold every owner's values, bucket by bucket as the forward waits
   for them; the 16-bit weight copies are remade once per bucket after a change, and only then
   (counted through a backend whose refresh_weights records its ranges). With expert ranges
   (ep = 2 and 4 where they divide dp): those elements summed over the ranks that hold the same
   experts only, and the distributed optimizer's shards the rest's elements cut over dp and the
   experts' over those ranks, packed in the buffers' order. */
#include <mpi.h>
#include <string.h>

#include "backend_impl.h" /* a copy of the CPU table that counts refresh_weights */
#include "mgt/comm.h"
#include "mgt/ddp.h"
#include "mgt/grid.h"
#include "testutil.h"

enum { N = 1003, NB = 6 };
/* buckets in the order backward completes them: the end of the buffers first, one empty */
static const size_t LO[NB] = {900, 600, 600, 250, 1, 0}, HI[NB] = {1003, 900, 600, 600, 250, 1};
/* expert ranges, across buckets, one at the end */
enum { NE = 3 };
static const size_t ELO[NE] = {100, 610, 950}, EHI[NE] = {250, 700, 1003};

static int is_expert(const mgt_ddp_opts *o, size_t i) {
  for (int k = 0; k < o->n_expert; k++)
    if (i >= o->expert_lo[k] && i < o->expert_hi[k]) return 1;
  return 0;
}

/* The data-parallel rank that owns element i among those holding what dp rank r holds there:
   the k-th of the experts' (or the rest's) elements in order, cut evenly over those ranks. */
static int owner_of(const mgt_grid *g, const mgt_ddp_opts *o, int r, size_t i) {
  const int e = is_expert(o, i), members = e ? g->edp : g->dp;
  size_t k = 0, total = 0;
  for (size_t j = 0; j < N; j++)
    if (is_expert(o, j) == e) total++, k += j < i;
  int q = 0;
  while (total * (size_t)(q + 1) / (size_t)members <= k)
    q++;
  return e ? q * g->ep + r % g->ep : q;
}

static const mgt_backend *cpu;
static size_t refreshed[N]; /* times each element's copy was remade */
static mgt_status count_refresh(void *ctx, size_t offset, size_t n) {
  for (size_t i = offset; i < offset + n; i++)
    refreshed[i]++;
  return cpu->refresh_weights(ctx, offset, n);
}

static float grad_of(int dp_rank, size_t i) {
  return (float)((dp_rank + 1) * (int)(i % 17) + (int)(i % 5));
}

static void run(const mgt_grid *grid, const mgt_comm *comm, const mgt_backend *be,
                const mgt_ddp_opts *o) {
  const int dp = grid->dp, r = grid->dp_rank;
  char what[128];
  snprintf(what, sizeof what, "ep %d, bucket %zu, overlap %d, distributed %d, gather overlap %d",
           grid->ep, o->bucket_size, o->overlap_grad_reduce, o->distributed,
           o->overlap_param_gather);
  static float w[N], g[N];
  for (size_t i = 0; i < N; i++)
    g[i] = grad_of(r, i), w[i] = -1.0f;
  mgt_ddp *d = NULL;
  T_OK(mgt_ddp_create(grid, comm, be, w, g, N, NB, LO, HI, o, &d));
  mgt_ddp_begin(d);
  for (int b = 0; b < NB; b++) {
    T_OK(mgt_ddp_progress(d));
    T_OK(mgt_ddp_start_bucket(d, b));
  }
  T_OK(mgt_ddp_finish(d));
  const mgt_span *sp = NULL;
  int ns = 0;
  size_t n = 0;
  const float *sum = mgt_ddp_grad_shard(d, &sp, &ns, &n);
  /* the owned elements, in order: every i whose owner is this rank (all without distributed) */
  size_t want_n = 0, packed = 0;
  int misplaced = 0;
  for (size_t i = 0; i < N; i++)
    want_n += !o->distributed || owner_of(grid, o, r, i) == r;
  for (int k = 0; k < ns; k++) {
    misplaced += sp[k].to != packed || (k && sp[k].at <= sp[k - 1].at + sp[k - 1].n);
    for (size_t i = sp[k].at; i < sp[k].at + sp[k].n; i++)
      misplaced += o->distributed && owner_of(grid, o, r, i) != r;
    packed += sp[k].n;
  }
  T_CHECK(misplaced == 0 && packed == n && n == want_n,
          "%s: rank %d's %d spans hold %zu elements (%d misplaced), not its %zu", what, r, ns, n,
          misplaced, want_n);
  T_CHECK(o->distributed || (ns == 1 && sp[0].at == 0 && n == N), "%s: the whole buffer", what);
  T_CHECK(o->n_expert || !o->distributed || (ns == 1 && sp[0].at == (size_t)N * r / dp),
          "%s: without experts the shard is the %d-th of %d even cuts", what, r, dp);
  int bad = 0;
  for (int k = 0; k < ns && misplaced == 0; k++)
    for (size_t i = sp[k].at; i < sp[k].at + sp[k].n; i++) {
      double want = 0;
      for (int q = 0; q < dp; q++) /* experts: the ranks that hold the same ones */
        if (!is_expert(o, i) || q % grid->ep == r % grid->ep) want += grad_of(q, i);
      bad += sum[sp[k].to + (i - sp[k].at)] != (float)want;
    }
  T_CHECK(bad == 0, "%s: %d summed gradients differ from the sum over the ranks", what, bad);
  if (o->distributed) { /* the update of the owned part, then everyone's parts to everyone */
    for (int k = 0; k < ns; k++)
      for (size_t i = sp[k].at; i < sp[k].at + sp[k].n; i++)
        w[i] = (float)(1000 * r + (int)(i % 13));
    T_OK(mgt_ddp_gather_params(d));
    for (int b = NB - 1; b >= 0; b--) { /* the forward's order */
      T_OK(mgt_ddp_params_ready(d, b));
      int wrong = 0;
      for (size_t i = LO[b]; i < HI[b]; i++)
        wrong += w[i] != (float)(1000 * owner_of(grid, o, r, i) + (int)(i % 13));
      T_CHECK(wrong == 0, "%s: bucket %d holds %d parameters not its owners'", what, b, wrong);
    }
  }
  if (o->weight_copies) {
    memset(refreshed, 0, sizeof refreshed);
    T_OK(mgt_be_set_weights(be, w, N));
    mgt_ddp_weights_changed(d);
    T_OK(mgt_ddp_weights_ready(d, 3));
    T_OK(mgt_ddp_weights_ready(d, 3)); /* fresh: not remade again */
    int wrong = 0;
    for (size_t i = 0; i < N; i++)
      wrong += refreshed[i] != (i >= LO[3] && i < HI[3]);
    T_CHECK(wrong == 0, "%s: bucket 3 alone remade once (%d elements wrong)", what, wrong);
    T_OK(mgt_ddp_weights_ready(d, -1));
    wrong = 0;
    for (size_t i = 0; i < N; i++)
      wrong += refreshed[i] != 1;
    T_CHECK(wrong == 0, "%s: every copy remade once (%d elements wrong)", what, wrong);
    T_OK(mgt_be_set_weights(be, w, 0));
  }
  mgt_ddp_destroy(&d);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int tp = argc > 1 ? atoi(argv[1]) : 1;
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, tp, &grid));
  T_OK(mgt_backend_cpu_create(&be));
  cpu = be;
  struct mgt_backend counting = *be;
  counting.refresh_weights = count_refresh;
  T_OK(mgt_be_set_precision(&counting, MGT_PREC_BF16));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  for (int k = 0; k < 2; k++)
    for (int overlap = 0; overlap < 2; overlap++)
      for (int distributed = 0; distributed < 2; distributed++) {
        const mgt_ddp_opts o = {k ? (size_t)1 << 20 : 7,
                                overlap,
                                distributed,
                                overlap && k,
                                distributed,
                                0,
                                NULL,
                                NULL};
        run(grid, comm, &counting, &o);
      }
  for (int ep = 2; ep <= grid->dp; ep *= 2) { /* expert ranges, on grids of their own */
    if (grid->dp % ep) continue;
    mgt_grid *eg = NULL;
    mgt_comm *ec = NULL;
    T_OK(mgt_grid_create(MPI_COMM_WORLD, tp, &eg));
    T_OK(mgt_grid_set_experts(eg, ep));
    T_OK(mgt_comm_mpi_create(eg, NULL, &ec));
    for (int k = 0; k < 2; k++)
      for (int distributed = 0; distributed < 2; distributed++) {
        const mgt_ddp_opts o = {
            k ? (size_t)1 << 20 : 7, k, distributed, k, distributed, NE, ELO, EHI};
        run(eg, ec, &counting, &o);
      }
    mgt_comm_destroy(&ec);
    mgt_grid_destroy(&eg);
  }
  mgt_ddp *d = NULL; /* a bucket outside the buffers is refused */
  const size_t lo = 0, hi = N + 1;
  const mgt_ddp_opts o = {64, 0, 0, 0, 0, 0, NULL, NULL};
  T_CHECK(mgt_ddp_create(grid, comm, be, NULL, NULL, N, 1, &lo, &hi, &o, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "outside"),
          "a bucket past the buffers refused: %s", mgt_error_message());
  int fails = t_failures, total = 0;
  MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (grid->rank == 0)
    printf("test_ddp (tp=%d, dp=%d): %d checks per rank, %d failures on all ranks\n", grid->tp,
           grid->dp, t_checks, total);
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return total ? 1 : 0;
}
