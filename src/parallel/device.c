/* Backend and communicator selection. */
#include "mgt/device.h"

#include <stdio.h>
#include <string.h>

#include "mgt/config.h"

/* --bf16 on the CPU: native GEMMs where asked or (by default) where every rank can. */
static mgt_status cpu_gemm_open(mgt_device *d, int cpu_gemm, const mgt_grid *grid) {
  char what[128];
  int can = mgt_cpu_bf16_units(what, sizeof what), all = can;
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, grid->world));
  const int native = cpu_gemm == MGT_CPU_GEMM_NATIVE || (cpu_gemm < 0 && all);
  mgt_status st = native ? mgt_backend_cpu_native(d->be, 1) : MGT_OK;
  MGT_CHECK(mgt_mpi_agree(grid->world, st));
  size_t len = strlen(d->desc) - 1; /* in place of the closing parenthesis */
  if (native)
    snprintf(d->desc + len, sizeof d->desc - len, "; bf16 GEMMs on %s)", what);
  else if (cpu_gemm == MGT_CPU_GEMM_EMULATED)
    snprintf(d->desc + len, sizeof d->desc - len, "; bf16 GEMMs emulated in fp32, as asked)");
  else
    snprintf(d->desc + len, sizeof d->desc - len, "; bf16 GEMMs emulated in fp32: %s)",
             can ? "not every rank's CPU has bf16 units" : what);
  return MGT_OK;
}

mgt_status mgt_device_fp32_gemm(mgt_device *d, int choice, int rows, int C, int qkv, int f,
                                mgt_precision precision, const mgt_grid *grid) {
  if (d->cuda) return MGT_OK;
  /* rank 0 times both where asked and where the products are big enough to time (a tiny
     model's are noise, and its runs keep the BLAS, the same numbers every time) */
  const double gemm = 2.0 * rows * (double)qkv * C;
  int onednn = choice == MGT_FP32_GEMM_ONEDNN;
  double r[2] = {0, 0};
  const int timed = choice == MGT_FP32_GEMM_AUTO && precision == MGT_PREC_FP32 && gemm >= 1e8;
  if (timed && grid->rank == 0) {
    /* rows capped so that one timing is about 8 GFLOP (tens of ms), but not below 128 rows,
       where the kernels would run other code than the step's */
    const double per_row = 6.0 * ((double)qkv + qkv / 3 + 2.0 * f) * C;
    int capped = rows * per_row > 8e9 ? (int)(8e9 / per_row) + 1 : rows;
    if (capped < 128) capped = rows < 128 ? rows : 128;
    mgt_cpu_fp32_gemm_rates(capped, C, qkv, f, &r[0], &r[1]);
    onednn = r[1] > 1.1 * r[0];
  }
  MGT_MPI(MPI_Bcast(&onednn, 1, MPI_INT, 0, grid->world));
  MGT_MPI(MPI_Bcast(r, 2, MPI_DOUBLE, 0, grid->world));
  MGT_CHECK(mgt_mpi_agree(grid->world, mgt_backend_cpu_fp32_onednn(d->be, onednn)));
  size_t len = strlen(d->desc) - 1; /* in place of the closing parenthesis */
  const char *lib = onednn ? "oneDNN" : "OpenBLAS";
  if (timed)
    snprintf(d->desc + len, sizeof d->desc - len,
             "; fp32 GEMMs %s: %.0f GFLOP/s against %s's %.0f on a layer's shapes)", lib,
             (onednn ? r[1] : r[0]) / 1e9, onednn ? "OpenBLAS" : "oneDNN",
             (onednn ? r[0] : r[1]) / 1e9);
  else if (choice != MGT_FP32_GEMM_AUTO)
    snprintf(d->desc + len, sizeof d->desc - len, "; fp32 GEMMs %s, as asked)", lib);
  return MGT_OK;
}

mgt_status mgt_device_open(mgt_device *d, int device, int dist_backend, int cpu_gemm,
                           mgt_precision precision, const mgt_grid *grid, mgt_comm_stats *stats) {
  memset(d, 0, sizeof *d);
  mgt_status st = MGT_OK;
  if (device == MGT_DEVICE_CPU) {
    st = mgt_mpi_agree(grid->world, mgt_backend_cpu_create(&d->be));
    if (st != MGT_OK) return st;
    st = mgt_comm_mpi_create(grid, stats, &d->comm);
    if (st != MGT_OK) {
      mgt_backend_destroy(&d->be);
      return st;
    }
    snprintf(d->desc, sizeof d->desc, "cpu (BLAS: %s)", mgt_cpu_blas_name());
  } else {
#ifdef MGT_HAVE_CUDA
    int n = mgt_cuda_device_count(), local = mgt_local_rank(grid->world);
    d->gpu = n > 0 ? local % n : 0;
    int shared = n > 0 && local >= n; /* some GPU serves two ranks */
    MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, grid->world));
#ifdef MGT_HAVE_NCCL
    int use_nccl = dist_backend == MGT_DIST_BACKEND_NCCL || (dist_backend < 0 && !shared);
#else
    int use_nccl = dist_backend == MGT_DIST_BACKEND_NCCL; /* refused below, with the reason */
#endif
    st = mgt_mpi_agree(grid->world, mgt_backend_cuda_create(d->gpu, &d->be));
    if (st != MGT_OK) { /* where this rank's start-up succeeded and another's did not */
      mgt_backend_destroy(&d->be);
      return st;
    }
    mgt_dist_mode mode = MGT_DIST_MPI_STAGED;
    st = mgt_mpi_agree(grid->world, mgt_comm_cuda_create(grid, mgt_backend_cuda_stream(d->be),
                                                         use_nccl, stats, &mode, &d->comm));
    if (st != MGT_OK) {
      mgt_backend_destroy(&d->be);
      return st;
    }
    d->cuda = 1;
    char name[128] = "";
    size_t fr = 0, tot = 0;
    if (mgt_backend_cuda_info(d->be, name, sizeof name, &fr, &tot) != MGT_OK) mgt_error_clear();
    snprintf(d->desc, sizeof d->desc,
             "cuda: %s, %.0f GiB, rank 0 on GPU %d of %d; "
             "collectives: %s",
             name, tot / 1073741824.0, d->gpu, n, mgt_dist_mode_name(mode));
#else
    (void)dist_backend;
    MGT_FAIL(MGT_ERR_INPUT, "--device cuda: this mgt was built without CUDA (configure with "
                            "-DMGT_CUDA=ON)");
#endif
  }
  if (precision != MGT_PREC_FP32) st = mgt_be_set_precision(d->be, precision);
  if (st == MGT_OK && !d->cuda && precision == MGT_PREC_BF16) st = cpu_gemm_open(d, cpu_gemm, grid);
  if (st != MGT_OK) mgt_device_close(d);
  return st;
}

void mgt_device_close(mgt_device *d) {
  mgt_comm_destroy(&d->comm);
  mgt_backend_destroy(&d->be);
  d->cuda = 0;
}

void mgt_device_memory(const mgt_device *d, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
#ifdef MGT_HAVE_CUDA
  char name[8];
  if (d->cuda && mgt_backend_cuda_info(d->be, name, sizeof name, free_bytes, total_bytes) != MGT_OK)
    mgt_error_clear();
#endif
}

int mgt_device_auto(MPI_Comm world, char *why, size_t why_size) {
#ifdef MGT_HAVE_CUDA
  int all = mgt_cuda_device_count() > 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, world);
  snprintf(why, why_size, "--device not given: %s",
           all ? "cuda, every rank sees a GPU" : "cpu, not every rank sees a GPU");
  return all ? MGT_DEVICE_CUDA : MGT_DEVICE_CPU;
#else
  (void)world;
  snprintf(why, why_size, "--device not given: cpu, this mgt was built without CUDA");
  return MGT_DEVICE_CPU;
#endif
}

void mgt_device_probe_gpu(MPI_Comm world, size_t *free_bytes, char *what, size_t what_size) {
  *free_bytes = 0;
#ifdef MGT_HAVE_CUDA
  const int n = mgt_cuda_device_count(), local = mgt_local_rank(world);
  size_t total = 0;
  if (n > 0 && mgt_cuda_device_memory(local % n, free_bytes, &total)) {
    snprintf(what, what_size, "free on the GPU (rank 0: GPU %d of %d, %.0f GiB)", local % n, n,
             total / 1073741824.0);
    return;
  }
  snprintf(what, what_size, "unknown: no GPU visible here");
#else
  (void)world;
  snprintf(what, what_size, "unknown: this mgt was built without CUDA");
#endif
}
