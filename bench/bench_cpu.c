#define _GNU_SOURCE /* syscall: AMX tile permission */
/* CPU training benchmark: GPT-2 124M shapes. Measures, in one run, the machine's FMA peak
   and its sgemm rate on the model's GEMM shapes, then times training steps and reports
   tokens/s, model FLOP/s and both ratios. */
#include "cpu/cblas_any.h"
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mgt/backend.h"
#include "mgt/cli.h"
#include "mgt/config.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/log.h"
#include "mgt/train.h"

#include "median.h"

/* FLOP/s of independent FMA chains on every thread: the peak the cores can issue. Both
   vector widths are tried; the wider one only counts where the core runs it at full rate. */
#define FMA_CHAINS(VEC, SET1, FMA, ADD, STORE, LANES)                                              \
  do {                                                                                             \
    VEC a[16], x = SET1(0.999999f), y = SET1(1e-7f);                                               \
    for (int i = 0; i < 16; i++)                                                                   \
      a[i] = SET1((float)(i + omp_get_thread_num()));                                              \
    for (long it = 0; it < iters; it++)                                                            \
      for (int i = 0; i < 16; i++)                                                                 \
        a[i] = FMA(a[i], x, y);                                                                    \
    float out[LANES];                                                                              \
    VEC s = a[0];                                                                                  \
    for (int i = 1; i < 16; i++)                                                                   \
      s = ADD(s, a[i]);                                                                            \
    STORE(out, s);                                                                                 \
    sink += out[0];                                                                                \
  } while (0)

static double fma_peak_width(int wide) {
  const long iters = 100000000; /* about 0.25 s per repetition */
  double best = 0.0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = mgt_now();
    float sink = 0.0f;
    int lanes = 8;
#pragma omp parallel reduction(+ : sink)
    {
#ifdef __AVX512F__
      if (wide)
        FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16);
      else
#endif
        FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8);
    }
#ifdef __AVX512F__
    if (wide) lanes = 16;
#endif
    double t = mgt_now() - t0;
    double flops = (double)omp_get_max_threads() * iters * 16 * lanes * 2;
    if (flops / t > best) best = flops / t;
    if (sink == 12345.0f) printf(" ");
  }
  return best;
}

/* FLOP/s of independent bf16 dot-product chains (VDPBF16PS: 32 products and sums per 512-bit
   instruction) on every thread: the bf16 peak of AVX512-BF16 units; 0 where the CPU has none.
   AMX's tiles are faster still: there the native GEMM rate below is the reference. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_chains(long iters) {
  float sink = 0.0f;
  double t0 = mgt_now();
#pragma omp parallel reduction(+ : sink)
  {
    __m512 a[16];
    __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)), y = x;
    for (int i = 0; i < 16; i++)
      a[i] = _mm512_set1_ps((float)(i + omp_get_thread_num()));
    for (long it = 0; it < iters; it++)
      for (int i = 0; i < 16; i++)
        a[i] = _mm512_dpbf16_ps(a[i], x, y);
    __m512 s = a[0];
    for (int i = 1; i < 16; i++)
      s = _mm512_add_ps(s, a[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    sink += out[0];
  }
  double t = mgt_now() - t0;
  if (sink == 12345.0f) printf(" ");
  return (double)omp_get_max_threads() * iters * 16 * 64 / t;
}
static double bf16_peak(void) {
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  double best = 0.0;
  for (int rep = 0; rep < 5; rep++)
    best = fmax(best, dpbf16_chains(50000000));
  return best;
}

/* FLOP/s of AMX's bf16 tile products (TDPBF16PS: a 16 x 32 by 32 x 16 product and sum, 16,384
   FLOP an instruction) on every thread, four independent accumulator tiles each: the matrix
   units' peak; 0 where the CPU has none or the kernel does not lend the tile state. */
#if __GNUC__ >= 11 /* AMX's intrinsics */
struct amx_cfg {
  unsigned char palette, start, reserved[14];
  unsigned short colsb[16];
  unsigned char rows[16];
};
__attribute__((target("amx-tile,amx-bf16"))) static double amx_chains(long iters) {
  float sink = 0.0f;
  double t0 = mgt_now();
#pragma omp parallel reduction(+ : sink)
  {
    struct amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++)
      cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
    unsigned short ab[16 * 32];
    float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++)
      ab[i] = (unsigned short)(0x3f00 + (i & 7)); /* bf16 near 0.5 */
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long it = 0; it < iters; it++) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    sink += out[0];
    _tile_stored(3, out, 64);
    sink += out[0];
    _tile_release();
  }
  double t = mgt_now() - t0;
  if (sink == 12345.0f) printf(" ");
  return (double)omp_get_max_threads() * iters * 4 * 16384.0 / t;
}
static double amx_peak(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
    return 0.0;                                 /* no AMX-BF16 or no AMX-TILE */
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
    return 0.0;
  double best = 0.0;
  for (int rep = 0; rep < 5; rep++)
    best = fmax(best, amx_chains(2000000));
  return best;
}
#else
static double amx_peak(void) { return 0.0; }
#endif
#else
static double bf16_peak(void) { return 0.0; }
static double amx_peak(void) { return 0.0; }
#endif

/* GEMM FLOP/s over the GEMMs of one training step (forward and both backward products of
   each linear layer and the output layer), for N tokens: sgemm, or (nb) the backend's native
   bf16 GEMMs with the weights' bf16 copies registered, as a training step has them. */
static double gemm_rate(int N, int C, int V, mgt_backend *nb) {
  int shapes[][3] = {{N, 3 * C, C}, {N, C, C}, {N, 4 * C, C}, {N, C, 4 * C}, {N, V, C}};
  int ns = sizeof shapes / sizeof shapes[0];
  size_t maxa = 0, maxb = 0, maxc = 0;
  for (int s = 0; s < ns; s++) {
    size_t M = (size_t)shapes[s][0], Nn = (size_t)shapes[s][1], K = (size_t)shapes[s][2];
    if (M * K > maxa) maxa = M * K;
    if (Nn * K > maxb) maxb = Nn * K;
    if (M * Nn > maxc) maxc = M * Nn;
  }
  size_t big = maxa > maxb ? maxa : maxb;
  big = big > maxc ? big : maxc;
  float *A = malloc(big * sizeof(float)), *B = malloc(big * sizeof(float)),
        *Cm = malloc(big * sizeof(float));
  for (size_t i = 0; i < big; i++)
    A[i] = B[i] = Cm[i] = (float)((i % 17) - 8) * 0.01f;
  if (nb && (mgt_be_set_weights(nb, B, big) || mgt_be_refresh_weights(nb, 0, big))) {
    mgt_error_print(stderr);
    exit(1);
  }
  double best = 0.0;
  for (int rep = 0; rep < 3; rep++) {
    double flops = 0.0, t0 = mgt_now();
    for (int s = 0; s < ns; s++) {
      int M = shapes[s][0], Nn = shapes[s][1], K = shapes[s][2];
      /* forward y = x W^T, backward dx = dy W, dW = dy^T x (into the gradient, here Cm's
         end: the weights' copy stays what was registered) */
      if (nb) {
        float *dW = Cm + big - (size_t)Nn * K;
        if (mgt_be_gemm(nb, 0, 1, M, Nn, K, 1.0f, A, K, B, K, 0.0f, Cm, Nn) ||
            mgt_be_gemm(nb, 0, 0, M, K, Nn, 1.0f, Cm, Nn, B, K, 0.0f, A, K) ||
            mgt_be_gemm(nb, 1, 0, Nn, K, M, 1.0f, Cm, Nn, A, K, 1.0f, dW, K)) {
          mgt_error_print(stderr);
          exit(1);
        }
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Nn, K, 1.0f, A, K, B, K, 0.0f, Cm,
                    Nn);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, Nn, 1.0f, Cm, Nn, B, K, 0.0f,
                    A, K);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Nn, K, M, 1.0f, Cm, Nn, A, K, 1.0f, B,
                    K);
      }
      flops += 3.0 * 2.0 * M * Nn * K;
    }
    double r = flops / (mgt_now() - t0);
    if (r > best) best = r;
  }
  free(A);
  free(B);
  free(Cm);
  return best;
}

/* Memory bandwidth, bytes/s: the best of 5 triads a = b + s c on every thread over arrays of 64
   MiB each (far beyond the caches), counted as STREAM does (12 bytes an element: b and c read,
   a written). */
static double stream_bw(void) {
  const size_t n = (size_t)16 << 20;
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)),
        *c = malloc(n * sizeof(float));
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return 0.0;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  double best = 0.0;
  for (int rep = 0; rep < 5; rep++) {
    const float k = 0.5f + (float)rep;
    double t0 = mgt_now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
      a[i] = b[i] + k * c[i];
    double t = mgt_now() - t0;
    if (12.0 * n / t > best) best = 12.0 * n / t;
  }
  if (a[n / 2] == 12345.0f) printf(" ");
  free(a), free(b), free(c);
  return best;
}

typedef struct rates {
  double fma256, fma512, gemm, gemm2048; /* FLOP/s; 0 when not measured */
  double dpbf16, bgemm, bgemm2048;       /* bf16: dot-product peak, native GEMMs */
  double amx;                            /* AMX's bf16 tile peak; 0 without AMX */
  double bw;                             /* memory bandwidth, bytes/s */
  double dgemm, dgemm2048;               /* oneDNN's fp32 matmul on the same shapes */
} rates;

/* What a timed configuration did, for its roofline. */
typedef struct step_info {
  double seconds, flops, bytes; /* the median step; its model FLOPs; its bytes outside GEMMs */
} step_info;

/* The bytes a training step moves outside its GEMMs, estimated from the shapes (fp32
   activations, GPT-2's block: pre-LN, GeLU, biases, no dropout): each element-wise pass reads
   its inputs and writes its outputs once. Per token and layer 62 C floats (forward: LayerNorm
   2 C, the QKV bias 6 C, bias + residual + LayerNorm 4 C, bias + GeLU 12 C, bias + residual
   3 C; backward: two LayerNorms 8 C, GeLU 12 C, bias gradients 9 C, residual gradients 6 C)
   and, with the attention probabilities materialized, 5 H T (the softmax forward 2, backward
   3); the final LayerNorm 6 C; the cross-entropy's four passes over V logits a token; AdamW 28
   bytes a parameter (p, g, m, v read; p, m, v written), 2 more for a 16-bit copy of the
   weights under --bf16. GEMM operands (and their 16-bit conversions) are the GEMMs' own. */
static double step_bytes(const mgt_config *c, int materialized, size_t params) {
  const double N = (double)c->global_batch_size * c->seq_length, C = c->hidden_size;
  const double H = c->num_attention_heads, T = c->seq_length, V = c->vocab_size;
  const double layer = 62.0 * C + (materialized ? 5.0 * H * T : 0.0);
  const double acts = N * (c->num_layers * layer + 6.0 * C + 4.0 * V) * 4.0;
  return acts + (double)params * (28.0 + (c->bf16 ? 2.0 : 0.0));
}

static void measure(rates *r) {
  r->fma256 = fma_peak_width(0);
  r->fma512 = 0.0;
#ifdef __AVX512F__
  r->fma512 = fma_peak_width(1);
#endif
  r->gemm = gemm_rate(256, 768, 50304, NULL);
  r->gemm2048 = gemm_rate(2048, 768, 50304, NULL);
  r->dpbf16 = bf16_peak();
  r->amx = amx_peak();
  r->bw = stream_bw();
  r->bgemm = r->bgemm2048 = r->dgemm = r->dgemm2048 = 0.0;
  mgt_backend *nb = NULL;
  if (mgt_backend_cpu_create(&nb) == MGT_OK && mgt_backend_cpu_fp32_onednn(nb, 1) == MGT_OK) {
    r->dgemm = gemm_rate(256, 768, 50304, nb);
    r->dgemm2048 = gemm_rate(2048, 768, 50304, nb);
  } else {
    mgt_error_clear(); /* no oneDNN in this build */
  }
  mgt_backend_destroy(&nb);
  if (mgt_cpu_bf16_units(NULL, 0)) {
    if (mgt_backend_cpu_create(&nb) || mgt_be_set_precision(nb, MGT_PREC_BF16) ||
        mgt_backend_cpu_native(nb, 1)) {
      mgt_error_print(stderr);
      exit(1);
    }
    r->bgemm = gemm_rate(256, 768, 50304, nb);
    r->bgemm2048 = gemm_rate(2048, 768, 50304, nb);
    mgt_backend_destroy(&nb);
  }
}

/* Times `steps` training steps (after one warm-up step) of GPT-2 124M shapes with global
   batch B at the grid's layout; prints throughput and the share of time in collectives. */
static int overlap, distopt, param_gather, seqpar, flash, attn; /* attn: MGT_ATTN_* */
static int bf16, no_copies, emulated;   /* --bf16, --no-weight-copies, --emulated */
static int f32dnn;                      /* --fp32-gemm onednn: fp32 GEMMs through oneDNN */
static int moe_e, moe_k, moe_f, ep = 1; /* --moe E,K,F: the MLPs as E experts of F, top-K; --ep */
static int chunk_rows;                  /* --logits-chunk-rows (0: the trainer's default) */

/* This process's resident memory, now (VmRSS) or at its peak (VmHWM), MiB; 0 when /proc does
   not say. */
static double rss_mib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) kib = atof(line + strlen(key));
  if (f) fclose(f);
  return kib / 1024.0;
}

static double axes_seconds(const mgt_comm_stats *s) {
  double t = 0;
  for (int a = 0; a < MGT_N_AXES; a++)
    t += s->seconds[a];
  return t;
}

static int run_config(const mgt_grid *grid, const mgt_backend *be, int B, int T, int steps,
                      step_info *info) {
  mgt_config cfg;
  mgt_config_defaults(&cfg);
  cfg.num_layers = 12;
  cfg.hidden_size = 768;
  cfg.num_attention_heads = 12;
  cfg.vocab_size = 50257;
  cfg.max_position_embeddings = 1024;
  cfg.seq_length = T;
  cfg.micro_batch_size = B / grid->dp;
  cfg.global_batch_size = B;
  cfg.train_iters = steps + 1;
  cfg.hidden_dropout = cfg.attention_dropout = 0.0;
  cfg.tensor_model_parallel_size = grid->tp;
  cfg.mock_data = 1;
  cfg.lr = 1e-4;
  cfg.overlap_grad_reduce = overlap;
  cfg.use_distributed_optimizer = distopt;
  cfg.overlap_param_gather = param_gather;
  cfg.sequence_parallel = seqpar;
  cfg.attention_backend = attn;
  cfg.bf16 = bf16;
  if (emulated) cfg.cpu_gemm = MGT_CPU_GEMM_EMULATED;
  cfg.no_weight_copies = no_copies;
  cfg.logits_chunk_rows = chunk_rows;
  flash = mgt_config_flash(&cfg, NULL, 0); /* as the model chooses it (its label and bytes) */
  if (moe_e) { /* GPT-2's block without biases, its MLPs Mixture-of-Experts layers */
    cfg.num_experts = moe_e, cfg.moe_router_topk = moe_k, cfg.moe_ffn_hidden_size = moe_f;
    cfg.disable_bias_linear = 1, cfg.moe_aux_loss_coeff = 0.01;
    cfg.expert_model_parallel_size = ep;
  }
  if (T > cfg.max_position_embeddings) cfg.max_position_embeddings = T;
  if (mgt_config_finalize(&cfg, grid->size) != MGT_OK) {
    mgt_error_print(stderr);
    return 1;
  }
  mgt_comm_stats stats;
  memset(&stats, 0, sizeof stats);
  mgt_comm *comm = NULL;
  if (mgt_comm_mpi_create(grid, &stats, &comm) != MGT_OK) {
    mgt_error_print(stderr);
    return 1;
  }
  mgt_trainer *tr = NULL;
  double base = rss_mib("VmRSS:"); /* libraries, MPI: what the run had before the model */
  if (mgt_trainer_create(&cfg, grid, be, comm, NULL, &tr) != MGT_OK) {
    mgt_error_print(stderr);
    return 1;
  }
  double times[64], comm_s = 0.0;
  mgt_step_stats s;
  for (int i = 0; i <= steps; i++) {
    MPI_Barrier(grid->world);
    double c0 = axes_seconds(&stats), t0 = mgt_now();
    if (mgt_trainer_step(tr, &s) != MGT_OK) {
      mgt_error_print(stderr);
      MPI_Abort(grid->world, 1);
    }
    double t = mgt_now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, grid->world);
    if (i > 0) { /* the first step warms caches and pages */
      times[i - 1] = t;
      comm_s += axes_seconds(&stats) - c0;
    }
  }
  double cmax = comm_s;
  MPI_Allreduce(MPI_IN_PLACE, &cmax, 1, MPI_DOUBLE, MPI_MAX, grid->world);
  double total = 0;
  for (int i = 0; i < steps; i++)
    total += times[i];
  double t = median(times, steps);
  double flops = mgt_gpt_flops_per_iteration(&cfg);
  double tokens = (double)B * T;
  mgt_gpt_memory plan;
  mgt_gpt_memory_plan_grid(&cfg, grid->tp, grid->dp, &plan);
  double rss[2] = {rss_mib("VmHWM:"), 0};
  rss[1] = rss[0] - base;
  MPI_Allreduce(MPI_IN_PLACE, rss, 2, MPI_DOUBLE, MPI_MAX, grid->world);
  if (grid->rank == 0) {
    if (moe_e) printf("MoE %d experts of %d, top-%d, ep=%d: ", moe_e, moe_f, moe_k, grid->ep);
    printf("gpt2-124M B=%d T=%-4d tp=%d dp=%d threads/rank=%d: %8.1f ms/step %7.1f tokens/s "
           "%6.1f GFLOP/s",
           B, T, grid->tp, grid->dp, omp_get_max_threads(), 1e3 * t, tokens / t, flops / t / 1e9);
    if (grid->dp > 1) printf(" | %d samples per rank", B / grid->dp);
    if (grid->size > 1)
      printf(" | communication %.1f%% of step time%s", 100.0 * cmax / total,
             overlap && grid->dp > 1 ? " (overlapped gradient all-reduce)" : "");
    printf(" | optimizer state %.0f MiB/rank%s, activations %.0f MiB/rank%s, planned total %.0f "
           "MiB/rank, peak RSS %.0f MiB of which %.0f MiB above the RSS before the model "
           "(largest rank)",
           plan.optimizer / 1048576.0, distopt ? " (distributed optimizer)" : "",
           plan.activations / 1048576.0,
           seqpar ? (flash ? " (sequence parallel, flash attention)" : " (sequence parallel)")
                  : (flash ? " (flash attention)" : " (unfused attention)"),
           plan.total / 1048576.0, rss[0], rss[1]);
    if (!bf16) printf(" | fp32 GEMMs %s", f32dnn ? "oneDNN" : "OpenBLAS");
    if (bf16)
      printf(" | bf16 GEMMs %s, %s",
             !emulated && mgt_cpu_bf16_units(NULL, 0) ? "native" : "emulated in fp32",
             no_copies ? "weights rounded in every GEMM" : "16-bit weight copies once per step");
    printf(" | model %.1f GFLOP/step, loss %.3f\n", flops / 1e9, s.loss);
  }
  info->seconds = t, info->flops = flops;
  info->bytes = step_bytes(&cfg, !flash, mgt_gpt_param_count(mgt_trainer_model(tr)));
  mgt_trainer_destroy(&tr);
  return 0;
}

/* usage: bench_cpu [--steps N] [--tp T] [--no-peaks] [--overlap-grad-reduce]
                    [--use-distributed-optimizer] [--overlap-param-gather]
                    [--sequence-parallel] [--attention-backend auto|flash|unfused]
                    [--use-flash-attn] [--bf16 [--no-weight-copies]]
                    [--config small|large|both | --shape BxT] [--moe E,K,F [--ep N]]
                    [--fp32-gemm openblas|onednn] [--logits-chunk-rows N]
   One rank: measures the machine's peaks, then the step time at two shapes.
   Several ranks (under mpiexec): the same shapes at the given tensor-parallel size, the
   rest data-parallel, at the same global batch. */
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mgt_cli_configure_threads(MPI_COMM_WORLD);
  int steps = 5, tp = 1, peaks = 1, rank, shape_b = 0, shape_t = 0;
  const char *which = "both";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tp") && i + 1 < argc)
      tp = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-peaks"))
      peaks = 0;
    else if (!strcmp(argv[i], "--overlap-grad-reduce"))
      overlap = 1;
    else if (!strcmp(argv[i], "--use-distributed-optimizer"))
      distopt = 1;
    else if (!strcmp(argv[i], "--overlap-param-gather"))
      param_gather = 1;
    else if (!strcmp(argv[i], "--sequence-parallel"))
      seqpar = 1;
    else if (!strcmp(argv[i], "--use-flash-attn"))
      attn = MGT_ATTN_FLASH;
    else if (!strcmp(argv[i], "--attention-backend") && i + 1 < argc) {
      const char *a = argv[++i];
      attn = !strcmp(a, "flash") ? MGT_ATTN_FLASH
                                 : (!strcmp(a, "unfused") ? MGT_ATTN_UNFUSED : MGT_ATTN_AUTO);
      if (attn == MGT_ATTN_AUTO && strcmp(a, "auto") != 0) {
        fprintf(stderr, "bench_cpu: --attention-backend: auto, flash or unfused, not '%s'\n", a);
        MPI_Finalize();
        return 2;
      }
    } else if (!strcmp(argv[i], "--bf16"))
      bf16 = 1;
    else if (!strcmp(argv[i], "--no-weight-copies"))
      no_copies = 1;
    else if (!strcmp(argv[i], "--emulated"))
      emulated = 1;
    else if (!strcmp(argv[i], "--fp32-gemm") && i + 1 < argc)
      f32dnn = !strcmp(argv[++i], "onednn");
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
             sscanf(argv[i + 1], "%dx%d", &shape_b, &shape_t) == 2 && shape_b > 0 && shape_t > 0)
      i++, which = "shape";
    else if (!strcmp(argv[i], "--config") && i + 1 < argc)
      which = argv[++i];
    else if (!strcmp(argv[i], "--moe") && i + 1 < argc &&
             sscanf(argv[i + 1], "%d,%d,%d", &moe_e, &moe_k, &moe_f) == 3)
      i++;
    else if (!strcmp(argv[i], "--ep") && i + 1 < argc)
      ep = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--logits-chunk-rows") && i + 1 < argc)
      chunk_rows = atoi(argv[++i]);
  }
  if (steps < 1 || steps > 60) steps = 5;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  if (mgt_grid_create(MPI_COMM_WORLD, tp, &grid) != MGT_OK ||
      mgt_grid_set_experts(grid, ep) != MGT_OK || mgt_backend_cpu_create(&be) != MGT_OK ||
      (bf16 && mgt_be_set_precision(be, MGT_PREC_BF16) != MGT_OK) ||
      (bf16 && !emulated && mgt_cpu_bf16_units(NULL, 0) && mgt_backend_cpu_native(be, 1)) ||
      (f32dnn && mgt_backend_cpu_fp32_onednn(be, 1))) {
    mgt_error_print(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* The machine's rates are measured before and after the training steps and the higher
     reading kept: on a shared VM a single reading can come out low. */
  rates before = {0}, after = {0};
  if (peaks && rank == 0) measure(&before);
  int rc = 0;
  step_info info[2] = {{0, 0, 0}, {0, 0, 0}};
  if (!strcmp(which, "shape")) /* one shape of the caller's, e.g. 1x4096 */
    rc |= run_config(grid, be, shape_b, shape_t, steps, &info[0]), peaks = 0;
  else {
    if (strcmp(which, "large") != 0) rc |= run_config(grid, be, 4, 64, steps, &info[0]);
    if (strcmp(which, "small") != 0)
      rc |= run_config(grid, be, 8, 256, steps > 3 ? 3 : steps, &info[1]);
  }
  double got[2];
  for (int k = 0; k < 2; k++)
    got[k] = info[k].seconds > 0 ? info[k].flops / info[k].seconds : 0.0;
  if (peaks && rank == 0) {
    measure(&after);
    rates r;
    r.fma256 = fmax(before.fma256, after.fma256);
    r.fma512 = fmax(before.fma512, after.fma512);
    double g256 = fmax(before.gemm, after.gemm), g2048 = fmax(before.gemm2048, after.gemm2048);
    double b256 = fmax(before.bgemm, after.bgemm), b2048 = fmax(before.bgemm2048, after.bgemm2048);
    double dp = fmax(before.dpbf16, after.dpbf16), bw = fmax(before.bw, after.bw);
    char units[128];
    mgt_cpu_bf16_units(units, sizeof units);
    printf("threads: %d, BLAS kernels: %s\n", omp_get_max_threads(), mgt_cpu_blas_name());
    printf("FMA peak: %.1f GFLOP/s with 256-bit vectors, %.1f GFLOP/s with 512-bit vectors\n",
           r.fma256 / 1e9, r.fma512 / 1e9);
    printf("sgemm on the step's GEMM shapes: %.1f GFLOP/s at 256 tokens, %.1f GFLOP/s at 2048 "
           "tokens\n",
           g256 / 1e9, g2048 / 1e9);
    printf("bf16 dot-product peak (VDPBF16PS): %.1f GFLOP/s; native bf16 GEMMs (%s) on the "
           "step's shapes: %.1f GFLOP/s at 256 tokens, %.1f GFLOP/s at 2048 tokens\n",
           dp / 1e9, units, b256 / 1e9, b2048 / 1e9);
    const double amx = fmax(before.amx, after.amx);
    if (amx > 0)
      printf("AMX bf16 tile peak (TDPBF16PS): %.1f GFLOP/s; native bf16 GEMMs at %.3f of it (256 "
             "tokens), %.3f (2048)\n",
             amx / 1e9, b256 / amx, b2048 / amx);
    const double d256 = fmax(before.dgemm, after.dgemm);
    const double d2048 = fmax(before.dgemm2048, after.dgemm2048);
    printf("oneDNN's fp32 matmul on the step's GEMM shapes: %.1f GFLOP/s at 256 tokens, %.1f "
           "GFLOP/s at 2048 tokens\n",
           d256 / 1e9, d2048 / 1e9);
    printf("memory bandwidth (triad): %.1f GB/s\n", bw / 1e9);
    const char *names[2] = {"B=4 T=64 ", "B=8 T=256"};
    double gemm[2] = {g256, g2048}, bgemm[2] = {b256, b2048};
    /* the roofline's GEMM rate: the best this run measured for the GEMMs the step runs */
    const int native = bf16 && !emulated && b256 > 0;
    const double best = native ? fmax(b256, b2048) : fmax(fmax(g256, g2048), fmax(d256, d2048));
    for (int k = 0; k < 2; k++)
      if (got[k] > 0) {
        printf("%s: %.3f of the 256-bit FMA peak, %.3f of the 512-bit FMA peak, %.3f of sgemm, "
               "%.3f of the bf16 dot-product peak, %.3f of native bf16 GEMMs\n",
               names[k], got[k] / r.fma256, r.fma512 > 0 ? got[k] / r.fma512 : 0.0,
               got[k] / gemm[k], dp > 0 ? got[k] / dp : 0.0,
               bgemm[k] > 0 ? got[k] / bgemm[k] : 0.0);
        if (amx > 0) printf("%s: %.3f of the AMX bf16 tile peak\n", names[k], got[k] / amx);
        const double tg = info[k].flops / best, tm = bw > 0 ? info[k].bytes / bw : 0.0;
        printf("%s: roofline %.1f ms (GEMMs %.1f ms at %.1f GFLOP/s %s, memory %.1f ms: %.2f GB "
               "at %.1f GB/s): the step (%.1f ms) at %.3f of it\n",
               names[k], 1e3 * (tg + tm), 1e3 * tg, best / 1e9,
               native ? "native bf16" : "fp32, the faster library", 1e3 * tm, info[k].bytes / 1e9,
               bw / 1e9, 1e3 * info[k].seconds, (tg + tm) / info[k].seconds);
      }
  }
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return rc;
}
