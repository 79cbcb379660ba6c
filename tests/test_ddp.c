/* The data-parallel machinery (src/parallel/ddp.c) on its own, under mpiexec with 1 to 4 ranks
   (as tp=1 x dp, or tp=2 x dp): integer-valued gradients, so that every sum is exact, reduced
   bucket by bucket (blocking and overlapped, pieces of 7 elements and whole buckets, an empty
   bucket among them) must equal the sum over the data-parallel ranks computed here; the
   distributed optimizer's shards must be dp even cuts holding that sum; after an update of the
   owned parts every rank must hold every owner's values, bucket by bucket as the forward waits
   for them; the 16-bit weight copies are remade once per bucket after a change, and only then
   (counted through a backend whose refresh_weights records its ranges). */
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
  snprintf(what, sizeof what, "bucket %zu, overlap %d, distributed %d, gather overlap %d",
           o->bucket_size, o->overlap_grad_reduce, o->distributed, o->overlap_param_gather);
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
  size_t first = 0, n = 0;
  const float *sum = mgt_ddp_grad_shard(d, &first, &n);
  if (o->distributed) {
    T_CHECK(first == (size_t)N * r / dp && first + n == (size_t)N * (r + 1) / dp,
            "%s: rank %d owns [%zu, %zu), not the %d-th of %d even cuts", what, r, first, first + n,
            r, dp);
  } else {
    T_CHECK(first == 0 && n == N, "%s: the whole buffer is the shard", what);
  }
  int bad = 0;
  for (size_t i = first; i < first + n; i++) {
    double want = 0;
    for (int q = 0; q < dp; q++)
      want += grad_of(q, i);
    bad += sum[i - first] != (float)want;
  }
  T_CHECK(bad == 0, "%s: %d summed gradients differ from the sum over %d ranks", what, bad, dp);
  if (o->distributed) { /* the update of the owned part, then everyone's parts to everyone */
    for (size_t i = first; i < first + n; i++)
      w[i] = (float)(1000 * r + (int)(i % 13));
    T_OK(mgt_ddp_gather_params(d));
    for (int b = NB - 1; b >= 0; b--) { /* the forward's order */
      T_OK(mgt_ddp_params_ready(d, b));
      int wrong = 0;
      for (size_t i = LO[b]; i < HI[b]; i++) {
        int owner = 0;
        while ((size_t)N * (owner + 1) / dp <= i)
          owner++;
        wrong += w[i] != (float)(1000 * owner + (int)(i % 13));
      }
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
