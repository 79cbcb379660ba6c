/* GPU training benchmark: one training step of the Megatron-LM paper's 1.2B configuration
   (hidden 1536, 40 layers, 16 heads, sequence 1024) and of GPT-2 350M, bf16 GEMM inputs,
   activation recomputation, one GPU. Measures, in the same run, the GPU's bf16 GEMM rate
   (cuBLAS, fp32 accumulation, large square products) and reports tokens/s, model FLOP/s
   (6 N + 12 L C T per token, recomputation not counted) and MFU against that rate.
   usage: bench_gpu [--steps N] [--micro-batch-size B] [--config 1.2b|350m|both] [--fp32] */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/config.h"
#include "mgt/device.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/log.h"
#include "mgt/train.h"

/* TFLOP/s of bf16 x bf16 -> fp32 GEMMs of size n (the best of a few repetitions). */
static double gemm_peak(int n) {
  void *a = NULL, *b = NULL, *c = NULL;
  cublasHandle_t h;
  if (cudaMalloc(&a, (size_t)n * n * 2) != cudaSuccess ||
      cudaMalloc(&b, (size_t)n * n * 2) != cudaSuccess ||
      cudaMalloc(&c, (size_t)n * n * 4) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
    return 0.0;
  cudaMemset(a, 0, (size_t)n * n * 2);
  cudaMemset(b, 0, (size_t)n * n * 2);
  const float one = 1.0f, zero = 0.0f;
  double best = 0.0;
  for (int rep = 0; rep < 6; rep++) {
    cudaDeviceSynchronize();
    double t0 = mgt_now();
    const int k = 10;
    for (int i = 0; i < k; i++)
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                   &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaDeviceSynchronize();
    double t = (mgt_now() - t0) / k;
    if (rep > 0 && 2.0 * n * n * (double)n / t > best) best = 2.0 * n * n * (double)n / t;
  }
  cublasDestroy(h);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return best / 1e12;
}

static int run(const char *name, int L, int C, int H, int B, int steps, int bf16,
               const mgt_grid *grid, double peak) {
  mgt_config cfg;
  mgt_config_defaults(&cfg);
  cfg.num_layers = L;
  cfg.hidden_size = C;
  cfg.num_attention_heads = H;
  cfg.vocab_size = 50257;
  cfg.seq_length = cfg.max_position_embeddings = 1024;
  cfg.micro_batch_size = cfg.global_batch_size = B;
  cfg.train_iters = steps + 1;
  cfg.recompute_activations = 1;
  cfg.device = MGT_DEVICE_CUDA;
  cfg.bf16 = bf16;
  cfg.mock_data = 1;
  cfg.lr = 1e-4;
  cfg.log_interval = 1000;
  mgt_device dev;
  mgt_trainer *tr = NULL;
  if (mgt_config_finalize(&cfg, grid->size) != MGT_OK ||
      mgt_device_open(&dev, MGT_DEVICE_CUDA, -1, bf16 ? MGT_PREC_BF16 : MGT_PREC_FP32, grid,
                      NULL) != MGT_OK) {
    mgt_error_print(stderr);
    return 1;
  }
  if (mgt_trainer_create(&cfg, grid, dev.be, &dev.comm, NULL, &tr) != MGT_OK) {
    mgt_error_print(stderr);
    mgt_device_close(&dev);
    return 1;
  }
  mgt_step_stats s;
  double best = 1e30;
  for (int i = 0; i <= steps; i++) {
    double t0 = mgt_now();
    if (mgt_trainer_step(tr, &s) != MGT_OK) { /* the step ends with a device sync */
      mgt_error_print(stderr);
      return 1;
    }
    double t = mgt_now() - t0;
    if (i > 0 && t < best) best = t; /* the first step pays for cuBLAS's setup */
  }
  double flops = mgt_gpt_flops_per_iteration(&cfg), tokens = (double)B * cfg.seq_length;
  printf("%s (L=%d C=%d H=%d) B=%d T=1024 %s, recomputation: %.1f ms/step, %.0f tokens/s, "
         "%.1f model TFLOP/s, MFU %.3f of the measured bf16 GEMM rate | %s | loss %.3f\n",
         name, L, C, H, B, bf16 ? "bf16" : "fp32", 1e3 * best, tokens / best, flops / best / 1e12,
         peak > 0 ? flops / best / 1e12 / peak : 0.0, dev.desc, s.loss);
  mgt_trainer_destroy(&tr);
  mgt_device_close(&dev);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int steps = 3, B = 8, bf16 = 1;
  const char *which = "both";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--micro-batch-size") && i + 1 < argc)
      B = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--config") && i + 1 < argc)
      which = argv[++i];
    else if (!strcmp(argv[i], "--fp32"))
      bf16 = 0;
  }
  if (steps < 1) steps = 1;
  if (B < 1) B = 1;
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
  double peak = gemm_peak(8192);
  printf("bf16 GEMM (cuBLAS, 8192^3, fp32 accumulation): %.1f TFLOP/s\n", peak);
  int rc = 0;
  if (strcmp(which, "350m") != 0) rc |= run("paper 1.2B", 40, 1536, 16, B, steps, bf16, grid, peak);
  if (strcmp(which, "1.2b") != 0) rc |= run("GPT-2 350M", 24, 1024, 16, B, steps, bf16, grid, peak);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return rc;
}
