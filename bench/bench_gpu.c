/* GPU training benchmark: training steps of the Megatron-LM paper's 1.2B configuration
   (hidden 1536, 40 layers, 16 heads, sequence 1024) and of GPT-2 350M, bf16 GEMM inputs,
   activation recomputation, one GPU. Measures, in the same run, the GPU's bf16 GEMM rate
   (cuBLAS, fp32 accumulation, 8192^3 on random inputs: zeros run faster) and reports the
   median step time over --steps steps (after one warm-up step), tokens/s, model FLOP/s
   (6 N + 12 L C T per token, recomputation not counted) and MFU against both the measured
   GEMM rate and the datasheet peak (--peak-tflops, default 989: dense bf16 of the H100 and
   H200 SXM).
   --use-flash-attn runs the attention in tiles (tensor cores under bf16); --recompute auto
   (the default) takes the least recomputation whose memory plan fits in 90% of the GPU's free
   memory, as --dry-run advises.
   usage: bench_gpu [--steps N (10)] [--micro-batch-size B (8)] [--config 1.2b|350m|both]
                    [--fp32] [--use-flash-attn] [--recompute auto|none|selective|full]
                    [--peak-tflops P (989)] */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/config.h"
#include "mgt/device.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/log.h"
#include "mgt/train.h"

#include "median.h"

/* n*n bfloat16 values uniform in [-1, 1) (bits of mgt_round_bf16's result) from a fixed seed,
   uploaded to d through the host buffer h. */
static int upload_random_bf16(void *d, uint16_t *h, size_t n, uint64_t seed) {
  uint64_t z = seed;
  for (size_t i = 0; i < n; i++) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    float f = mgt_round_bf16((float)((double)(z >> 11) / 4503599627370496.0 - 1.0));
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    h[i] = (uint16_t)(u >> 16);
  }
  return cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess;
}

/* TFLOP/s of bf16 x bf16 -> fp32 GEMMs (n^3, random inputs): the median of `reps` timings of
   10 GEMMs each, after a warm-up. 0 with a message when CUDA or cuBLAS fails. */
static double gemm_rate(int n, int reps) {
  void *a = NULL, *b = NULL, *c = NULL;
  uint16_t *h = NULL;
  cublasHandle_t blas = NULL;
  double *t = calloc((size_t)reps, sizeof *t), rate = 0.0;
  const size_t nn = (size_t)n * n;
  const float one = 1.0f, zero = 0.0f;
  const char *failed = NULL;
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  if (!t || !(h = malloc(nn * sizeof *h)))
    failed = "host memory";
  else if (cudaMalloc(&a, nn * 2) != cudaSuccess || cudaMalloc(&b, nn * 2) != cudaSuccess ||
           cudaMalloc(&c, nn * 4) != cudaSuccess)
    failed = "cudaMalloc";
  else if (!upload_random_bf16(a, h, nn, 1) || !upload_random_bf16(b, h, nn, 2))
    failed = "uploading the inputs";
  else if ((bs = cublasCreate(&blas)) != CUBLAS_STATUS_SUCCESS)
    failed = "cublasCreate";
  for (int rep = -1; rep < reps && !failed; rep++) { /* rep -1: warm-up */
    if (cudaDeviceSynchronize() != cudaSuccess) {
      failed = "cudaDeviceSynchronize";
      break;
    }
    double t0 = mgt_now();
    const int k = 10;
    for (int i = 0; i < k && bs == CUBLAS_STATUS_SUCCESS; i++)
      bs = cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                        CUDA_R_16BF, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      failed = "cublasGemmEx";
      break;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) {
      failed = "the GEMMs";
      break;
    }
    if (rep >= 0) t[rep] = (mgt_now() - t0) / k;
  }
  if (failed) {
    fprintf(stderr, "bench_gpu: GEMM rate: %s failed (cuBLAS status %d, CUDA: %s)\n", failed,
            (int)bs, cudaGetErrorString(cudaGetLastError()));
  } else {
    rate = 2.0 * n * n * (double)n / median(t, reps) / 1e12;
  }
  if (blas) cublasDestroy(blas);
  cudaFree(a), cudaFree(b), cudaFree(c);
  free(h);
  free(t);
  return rate;
}

static const char *const recompute_names[] = {"none", "full", "selective"}; /* MGT_RECOMPUTE_* */

/* The least recomputation (none, selective, full) whose plan fits in 90% of free bytes. */
static int least_recompute(mgt_config *cfg, size_t free_bytes) {
  const int order[3] = {MGT_RECOMPUTE_NONE, MGT_RECOMPUTE_SELECTIVE, MGT_RECOMPUTE_FULL};
  for (int k = 0; k < 3; k++) {
    cfg->recompute_granularity = order[k];
    mgt_gpt_memory m;
    mgt_gpt_memory_plan_grid(cfg, 1, 1, &m);
    if ((double)m.total <= 0.9 * (double)free_bytes) return order[k];
  }
  return MGT_RECOMPUTE_FULL;
}

static int run(const char *name, int L, int C, int H, int B, int steps, int bf16, int flash,
               int recompute, const mgt_grid *grid, double measured, double datasheet) {
  mgt_config cfg;
  mgt_config_defaults(&cfg);
  cfg.num_layers = L;
  cfg.hidden_size = C;
  cfg.num_attention_heads = H;
  cfg.vocab_size = 50257;
  cfg.seq_length = cfg.max_position_embeddings = 1024;
  cfg.micro_batch_size = cfg.global_batch_size = B;
  cfg.train_iters = steps + 1;
  cfg.device = MGT_DEVICE_CUDA;
  cfg.bf16 = bf16;
  cfg.attention_backend = flash ? MGT_ATTN_FLASH : MGT_ATTN_UNFUSED;
  cfg.mock_data = 1;
  cfg.lr = 1e-4;
  cfg.log_interval = 1000;
  mgt_device dev;
  mgt_trainer *tr = NULL;
  double *t = calloc((size_t)steps, sizeof *t);
  if (!t || mgt_config_finalize(&cfg, grid->size) != MGT_OK ||
      mgt_device_open(&dev, MGT_DEVICE_CUDA, -1, -1, bf16 ? MGT_PREC_BF16 : MGT_PREC_FP32, grid,
                      NULL) != MGT_OK) {
    mgt_error_print(stderr);
    free(t);
    return 1;
  }
  if (recompute < 0) { /* after finalize: the plan needs the derived sizes */
    size_t fr = 0, tot = 0;
    mgt_cuda_device_memory(dev.gpu, &fr, &tot);
    recompute = least_recompute(&cfg, fr);
  }
  cfg.recompute_granularity = recompute;
  if (mgt_trainer_create(&cfg, grid, dev.be, dev.comm, NULL, &tr) != MGT_OK) {
    mgt_error_print(stderr);
    mgt_device_close(&dev);
    free(t);
    return 1;
  }
  mgt_step_stats s;
  for (int i = 0; i <= steps; i++) {
    double t0 = mgt_now();
    if (mgt_trainer_step(tr, &s) != MGT_OK) { /* the step ends with a device sync */
      mgt_error_print(stderr);
      mgt_trainer_destroy(&tr);
      mgt_device_close(&dev);
      free(t);
      return 1;
    }
    if (i > 0) t[i - 1] = mgt_now() - t0; /* step 0 pays for cuBLAS's and cuBLASLt's setup */
  }
  const double med = median(t, steps); /* sorts t */
  const double fastest = t[0], slowest = t[steps - 1];
  const double flops = mgt_gpt_flops_per_iteration(&cfg), tokens = (double)B * cfg.seq_length;
  const double tf = flops / med / 1e12;
  printf("%s (L=%d C=%d H=%d) B=%d T=1024 %s, %s attention, recomputation %s: %.1f ms/step "
         "(median of %d; %.1f to %.1f), %.0f tokens/s, %.1f model TFLOP/s, MFU %.3f of the "
         "measured bf16 GEMM rate, %.3f of the %.0f TFLOP/s datasheet peak | %s | loss %.3f\n",
         name, L, C, H, B, bf16 ? "bf16" : "fp32", flash ? "flash" : "materialized",
         recompute_names[recompute], 1e3 * med, steps, 1e3 * fastest, 1e3 * slowest, tokens / med,
         tf, measured > 0 ? tf / measured : 0.0, tf / datasheet, datasheet, dev.desc, s.loss);
  mgt_trainer_destroy(&tr);
  mgt_device_close(&dev);
  free(t);
  return 0;
}

/* A whole number in [lo, hi] from a flag's value, or -1 with a message naming the flag. */
static long parse_long(const char *flag, const char *v, long lo, long hi) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "bench_gpu: %s wants a whole number from %ld to %ld, not '%s'\n", flag, lo, hi,
            v);
    return -1;
  }
  return x;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long steps = 10, B = 8;
  int bf16 = 1, bad = 0, flash = 0, recompute = -1;
  double datasheet = 989.0; /* dense bf16 TFLOP/s of the H100 and H200 SXM */
  const char *which = "both";
  for (int i = 1; i < argc && !bad; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--fp32")) {
      bf16 = 0;
    } else if (!strcmp(a, "--use-flash-attn")) {
      flash = 1;
    } else if (!v) {
      fprintf(stderr, "bench_gpu: %s: unknown flag, or its value is missing\n", a);
      bad = 1;
    } else if (!strcmp(a, "--steps")) {
      bad = (steps = parse_long(a, v, 1, 100000)) < 0, i++;
    } else if (!strcmp(a, "--micro-batch-size")) {
      bad = (B = parse_long(a, v, 1, 4096)) < 0, i++;
    } else if (!strcmp(a, "--config") &&
               (!strcmp(v, "1.2b") || !strcmp(v, "350m") || !strcmp(v, "both"))) {
      which = v, i++;
    } else if (!strcmp(a, "--recompute")) {
      recompute = !strcmp(v, "auto")        ? -1
                  : !strcmp(v, "none")      ? MGT_RECOMPUTE_NONE
                  : !strcmp(v, "selective") ? MGT_RECOMPUTE_SELECTIVE
                  : !strcmp(v, "full")      ? MGT_RECOMPUTE_FULL
                                            : -2;
      if (recompute == -2) {
        fprintf(stderr, "bench_gpu: --recompute wants auto, none, selective or full, not '%s'\n",
                v);
        bad = 1;
      }
      i++;
    } else if (!strcmp(a, "--peak-tflops")) {
      char *end = NULL;
      datasheet = strtod(v, &end);
      bad = end == v || *end || !(datasheet > 0.0), i++;
      if (bad) fprintf(stderr, "bench_gpu: --peak-tflops wants a positive number, not '%s'\n", v);
    } else {
      fprintf(stderr,
              "bench_gpu: unknown flag %s %s (--steps N, --micro-batch-size B, "
              "--config 1.2b|350m|both, --fp32, --use-flash-attn, "
              "--recompute auto|none|selective|full, --peak-tflops P)\n",
              a, v);
      bad = 1;
    }
  }
  if (bad) {
    MPI_Finalize();
    return 2;
  }
  if (mgt_cuda_device_count() == 0) {
    printf("bench_gpu: no CUDA device is visible\n");
    MPI_Finalize();
    return 77;
  }
  mgt_grid *grid = NULL;
  if (mgt_grid_create(MPI_COMM_WORLD, 1, &grid) != MGT_OK) {
    mgt_error_print(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double measured = gemm_rate(8192, 10);
  printf("bf16 GEMM (cuBLAS, 8192^3 on random inputs, fp32 accumulation, median of 10): %.1f "
         "TFLOP/s, %.3f of the %.0f TFLOP/s datasheet peak\n",
         measured, measured / datasheet, datasheet);
  int rc = measured > 0 ? 0 : 1;
  if (strcmp(which, "350m") != 0)
    rc |= run("paper 1.2B", 40, 1536, 16, (int)B, (int)steps, bf16, flash, recompute, grid,
              measured, datasheet);
  if (strcmp(which, "1.2b") != 0)
    rc |= run("GPT-2 350M", 24, 1024, 16, (int)B, (int)steps, bf16, flash, recompute, grid,
              measured, datasheet);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return rc;
}
