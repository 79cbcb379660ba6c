/* The communicator's checked wrappers and its all-to-all with counts per rank, against a hand
   computation: on grids of tensor-parallel size 1 and 2 over the ranks, on every axis, rank r of
   the group sends c(r, q) floats to rank q, valued 1000 r + 10 q + i, and must receive from each
   q exactly c(q, r) floats valued 1000 q + 10 r + i. Counts of zero, and to oneself, included.
   The same on device buffers where a GPU is present (the CUDA communicator: NCCL where built).
   Run under mpiexec (4 ranks). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/comm_impl.h"
#include "mgt/grid.h"
#include "testutil.h"

/* How many floats rank r sends rank q: 0 for some pairs, never the same for every pair. */
static int count(int r, int q) { return (r * 3 + q * 5) % 4 + (r == q); }

static void check_axis(const mgt_comm *comm, const mgt_backend *dev, mgt_axis axis,
                       const char *what) {
  int size, r;
  MPI_Comm mc = mgt_grid_axis_comm(mgt_comm_grid(comm), axis, &size);
  MPI_Comm_rank(mc, &r);
  int *send = malloc(sizeof(int) * (size_t)size), *recv = malloc(sizeof(int) * (size_t)size);
  size_t ns = 0, nr = 0;
  for (int q = 0; q < size; q++)
    send[q] = count(r, q), ns += (size_t)send[q];
  T_OK(mgt_comm_exchange_counts(comm, axis, send, recv));
  int bad = 0;
  for (int q = 0; q < size; q++)
    bad += recv[q] != count(q, r), nr += (size_t)recv[q];
  T_CHECK(bad == 0, "%s: exchanged counts wrong from %d ranks", what, bad);
  float *in = malloc(sizeof(float) * (ns + 1)), *out = malloc(sizeof(float) * (nr + 1));
  for (int q = 0, at = 0; q < size; q++)
    for (int i = 0; i < send[q]; i++)
      in[at++] = (float)(1000 * r + 10 * q + i);
  for (size_t i = 0; i < nr; i++)
    out[i] = -1;
  if (dev) { /* through device buffers */
    float *din = NULL, *dout = NULL;
    T_OK(mgt_be_alloc(dev, sizeof(float) * (ns + 1), "in", (void **)&din));
    T_OK(mgt_be_alloc(dev, sizeof(float) * (nr + 1), "out", (void **)&dout));
    T_OK(mgt_be_upload(dev, din, in, sizeof(float) * ns));
    T_OK(mgt_comm_alltoallv(comm, axis, din, send, dout, recv));
    T_OK(mgt_be_download(dev, out, dout, sizeof(float) * nr));
    mgt_be_free(dev, din), mgt_be_free(dev, dout);
  } else {
    T_OK(mgt_comm_alltoallv(comm, axis, in, send, out, recv));
  }
  bad = 0;
  for (int q = 0, at = 0; q < size; q++)
    for (int i = 0; i < recv[q]; i++)
      bad += out[at++] != (float)(1000 * q + 10 * r + i);
  T_CHECK(bad == 0, "%s: %d of %zu floats received wrong", what, bad, nr);
  free(send), free(recv), free(in), free(out);
}

static void check_grid(MPI_Comm world, int tp) {
  mgt_grid *grid = NULL;
  T_OK(mgt_grid_create(world, tp, &grid));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  static const char *const axes[] = {"tensor-parallel", "data-parallel", "world"};
  for (int a = 0; a < 3; a++) {
    char what[96];
    snprintf(what, sizeof what, "mpi, tp=%d, %s group", tp, axes[a]);
    check_axis(comm, NULL, (mgt_axis)a, what);
  }
#ifdef MGT_HAVE_CUDA
  if (mgt_cuda_device_count() > 0) {
    mgt_backend *be = NULL;
    int rank;
    MPI_Comm_rank(world, &rank);
    T_OK(mgt_backend_cuda_create(rank % mgt_cuda_device_count(), &be));
    for (int nccl = 0; nccl < 2; nccl++) {
#ifndef MGT_HAVE_NCCL
      if (nccl) break;
#endif
      mgt_comm *dc = NULL;
      mgt_dist_mode mode;
      T_OK(mgt_comm_cuda_create(grid, mgt_backend_cuda_stream(be), nccl, NULL, &mode, &dc));
      for (int a = 0; a < 3; a++) {
        char what[96];
        snprintf(what, sizeof what, "cuda (%s), tp=%d, %s group", mgt_dist_mode_name(mode), tp,
                 axes[a]);
        check_axis(dc, be, (mgt_axis)a, what);
      }
      mgt_comm_destroy(&dc);
    }
    mgt_backend_destroy(&be);
  }
#endif
  mgt_comm_destroy(&comm);
  mgt_grid_destroy(&grid);
}

/* The wrappers: an empty slot is "communicator mpi lacks operation NAME"; every listed
   collective filled, seen by mgt_comm_has and named as in the list. */
static void check_wrappers(void) {
  mgt_grid *grid = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, 1, &grid));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  struct mgt_comm partial = *comm;
  partial.alltoallv = NULL;
  float x = 0;
  int c = 1;
  mgt_status st = mgt_comm_alltoallv(&partial, MGT_AXIS_TP, &x, &c, &x, &c);
  T_CHECK(st != MGT_OK &&
              !strcmp(mgt_error_message(), "communicator mpi lacks operation alltoallv"),
          "an empty slot: \"%s\"", mgt_error_message());
  mgt_error_clear();
  int bad = 0, n = 0;
#define ONE(name, NAME, params, args)                                                              \
  {                                                                                                \
    struct mgt_comm without = *comm;                                                               \
    without.name = NULL;                                                                           \
    bad += comm->name == NULL || mgt_comm_has(&without, MGT_COMM_##NAME) ||                        \
           !mgt_comm_has(comm, MGT_COMM_##NAME) ||                                                 \
           strcmp(mgt_comm_op_name(MGT_COMM_##NAME), #name) != 0 || MGT_COMM_##NAME != n;          \
    n++;                                                                                           \
  }
  MGT_COMM_OPERATIONS(ONE)
#undef ONE
  T_CHECK(bad == 0 && n == MGT_COMM_N_OPS && !strcmp(mgt_comm_name(comm), "mpi"),
          "the list of %d collectives: %d slots, names or enum values wrong", n, bad);
  mgt_comm_destroy(&comm);
  mgt_grid_destroy(&grid);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && !strcmp(argv[1], "--gpu")) { /* the device path, or skipped (77) */
    int gpus = 0;
#ifdef MGT_HAVE_CUDA
    gpus = mgt_cuda_device_count();
#endif
    if (gpus == 0) {
      MPI_Finalize();
      printf("test_comm: no GPU: the device path is not tested here\n");
      return 77;
    }
  }
  check_wrappers();
  check_grid(MPI_COMM_WORLD, 1);
  if (size % 2 == 0) check_grid(MPI_COMM_WORLD, 2);
  int rank, fails = t_failures;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_comm: all-to-all with counts on %d ranks, every axis of tp=1 and tp=2: %d "
           "failures over the ranks\n",
           size, fails);
  MPI_Finalize();
  return t_report("test_comm");
}
