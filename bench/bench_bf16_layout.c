/* The two choices behind native bf16 GEMMs on the CPU (kernels/cpu/native.c, flash.c), measured
   with oneDNN's matmul primitive on GPT-2 124M's weight shapes:
   - weights in the plain layout the trainer keeps, against oneDNN's own packed layout
     (format "any") plus the reorder into it that each use costs when a weight changes every
     step and is multiplied once per orientation (forward; data gradient);
   - one 64 x 64 x 64 tile product per call from every OpenMP thread at once, each with its own
     primitive (flash attention's tiles), against OpenBLAS's sgemm on the same tiles;
   - a product with a long inner dimension K whole, against the sum over blocks of K of at most
     4096 that native.c runs on AMX.
   Usage: OMP_NUM_THREADS=N bench_bf16_layout */
#define _POSIX_C_SOURCE 200809L
#include "cblas_any.h"
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dnnl_compat.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void check(dnnl_status_t s, const char *what) {
  if (s == dnnl_success) return;
  fprintf(stderr, "bench_bf16_layout: oneDNN: %s failed (status %d)\n", what, (int)s);
  exit(1);
}

static double run_ms(dnnl_primitive_t p, dnnl_stream_t st, int nargs, const dnnl_exec_arg_t *a,
                     int reps) {
  check(dnnl_primitive_execute(p, st, nargs, a), "a warm-up");
  check(dnnl_stream_wait(st), "waiting");
  const double t0 = now();
  for (int i = 0; i < reps; i++)
    check(dnnl_primitive_execute(p, st, nargs, a), "a timed call");
  check(dnnl_stream_wait(st), "waiting");
  return (now() - t0) / reps * 1e3;
}

/* y (M x N) = x (M x K) B, B (K x N) the weight read as W^T (W is N x K) or as W (K x N). */
static void layout(dnnl_engine_t eng, dnnl_stream_t st, int M, int N, int K, int wt, double *plain,
                   double *packed, double *reorder) {
  mgt_dnnl_md am, bm, cm, anym;
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N}, as = {K, 1}, cs = {N, 1};
  dnnl_dims_t bs = {wt ? 1 : N, wt ? K : 1};
  check(mgt_dnnl_md_strides(&am, 2, ad, dnnl_bf16, as), "x");
  check(mgt_dnnl_md_strides(&bm, 2, bd, dnnl_bf16, bs), "W");
  check(mgt_dnnl_md_strides(&cm, 2, cd, dnnl_f32, cs), "y");
  check(mgt_dnnl_md_any(&anym, 2, bd, dnnl_bf16), "W any");
  dnnl_primitive_desc_t pd1, pd2, rpd;
  dnnl_primitive_t p1, p2, r;
  check(mgt_dnnl_matmul_pd(&pd1, eng, &am, &bm, &cm, NULL), "plain matmul");
  check(dnnl_primitive_create(&p1, pd1), "plain matmul");
  check(mgt_dnnl_matmul_pd(&pd2, eng, &am, &anym, &cm, NULL), "packed matmul");
  check(dnnl_primitive_create(&p2, pd2), "packed matmul");
  mgt_dnnl_cmd pm = dnnl_primitive_desc_query_md(pd2, dnnl_query_weights_md, 0);
  check(dnnl_reorder_primitive_desc_create(&rpd, MGT_DNNL_MD(bm), eng, pm, eng, NULL), "reorder");
  check(dnnl_primitive_create(&r, rpd), "reorder");
  dnnl_memory_t x, w, y, wp;
  check(dnnl_memory_create(&x, MGT_DNNL_MD(am), eng, DNNL_MEMORY_ALLOCATE), "x");
  check(dnnl_memory_create(&w, MGT_DNNL_MD(bm), eng, DNNL_MEMORY_ALLOCATE), "W");
  check(dnnl_memory_create(&y, MGT_DNNL_MD(cm), eng, DNNL_MEMORY_ALLOCATE), "y");
  check(dnnl_memory_create(&wp, pm, eng, DNNL_MEMORY_ALLOCATE), "packed W");
  void *h;
  check(dnnl_memory_get_data_handle(x, &h), "x");
  for (size_t i = 0; i < (size_t)M * K; i++)
    ((uint16_t *)h)[i] = 0x3f80; /* 1.0 */
  check(dnnl_memory_get_data_handle(w, &h), "W");
  for (size_t i = 0; i < (size_t)K * N; i++)
    ((uint16_t *)h)[i] = 0x3c00; /* 2^-7 */
  const int reps = M * (double)N * K > 1e10 ? 3 : 10;
  dnnl_exec_arg_t a1[3] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}};
  dnnl_exec_arg_t a2[3] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_DST, y}};
  dnnl_exec_arg_t ar[2] = {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, wp}};
  *plain = run_ms(p1, st, 3, a1, reps);
  *reorder = run_ms(r, st, 2, ar, reps);
  *packed = run_ms(p2, st, 3, a2, reps);
  dnnl_memory_destroy(x), dnnl_memory_destroy(w), dnnl_memory_destroy(y), dnnl_memory_destroy(wp);
  dnnl_primitive_destroy(p1), dnnl_primitive_destroy(p2), dnnl_primitive_destroy(r);
  dnnl_primitive_desc_destroy(pd1), dnnl_primitive_desc_destroy(pd2);
  dnnl_primitive_desc_destroy(rpd);
  mgt_dnnl_md_free(am), mgt_dnnl_md_free(bm), mgt_dnnl_md_free(cm), mgt_dnnl_md_free(anym);
}

/* A bf16 matmul C (M x N, fp32) = A (M x K) B (K x N) + beta C over the given strides, with its
   memory objects (their own buffers, or none: set per call). */
typedef struct bmm {
  dnnl_primitive_t p;
  dnnl_post_ops_t po;
  dnnl_memory_t m[3]; /* A, B, C */
} bmm;

static void bmm_make(bmm *x, dnnl_engine_t eng, int M, int N, int K, const dnnl_dims_t as,
                     const dnnl_dims_t bs, const dnnl_dims_t cs, float beta, int own) {
  mgt_dnnl_md md[3];
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  check(mgt_dnnl_md_strides(&md[0], 2, ad, dnnl_bf16, as), "A");
  check(mgt_dnnl_md_strides(&md[1], 2, bd, dnnl_bf16, bs), "B");
  check(mgt_dnnl_md_strides(&md[2], 2, cd, dnnl_f32, cs), "C");
  dnnl_primitive_attr_t at;
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_attr_create(&at), "attributes");
  check(mgt_dnnl_alpha_beta(at, &x->po, 1.0f, beta), "beta");
  check(mgt_dnnl_matmul_pd(&pd, eng, &md[0], &md[1], &md[2], at), "a bf16 matmul");
  check(dnnl_primitive_create(&x->p, pd), "a bf16 matmul");
  for (int i = 0; i < 3; i++)
    check(dnnl_memory_create(&x->m[i], MGT_DNNL_MD(md[i]), eng,
                             own ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE),
          "an operand");
  dnnl_primitive_desc_destroy(pd), dnnl_primitive_attr_destroy(at);
  for (int i = 0; i < 3; i++)
    mgt_dnnl_md_free(md[i]);
}

static void bmm_free(bmm *x) {
  if (!x->p) return;
  dnnl_primitive_destroy(x->p);
  for (int i = 0; i < 3; i++)
    dnnl_memory_destroy(x->m[i]);
  if (x->po) dnnl_post_ops_destroy(x->po);
}

/* GFLOP/s per thread of 64^3 tile products, native and sgemm, every thread at once. */
static void tiles(double *native, double *sgemm) {
  enum { n = 64, reps = 20000 };
  double tn = 0, ts = 0;
#pragma omp parallel reduction(max : tn, ts)
  {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    check(dnnl_engine_create(&eng, dnnl_cpu, 0), "an engine");
    check(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "a stream");
    dnnl_dims_t s = {n, 1}, t = {1, n}; /* B read transposed */
    bmm x;
    bmm_make(&x, eng, n, n, n, s, t, s, 1.0f, 1);
    float *af = calloc(n * n, sizeof *af), *bf = calloc(n * n, sizeof *bf),
          *cf = calloc(n * n, sizeof *cf);
    if (!af || !bf || !cf) exit(1);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, x.m[0]}, {DNNL_ARG_WEIGHTS, x.m[1]}, {DNNL_ARG_DST, x.m[2]}};
#pragma omp barrier
    tn = run_ms(x.p, st, 3, args, reps);
#pragma omp barrier
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, af, n, bf, n, 1.0f, cf, n);
    const double t0 = now();
    for (int i = 0; i < reps; i++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, af, n, bf, n, 1.0f, cf,
                  n);
    ts = (now() - t0) / reps * 1e3;
    free(af), free(bf), free(cf);
    bmm_free(&x);
    dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
  }
  const double gf = 2.0 * n * n * n * 1e-6;
  *native = gf / tn, *sgemm = gf / ts;
}

/* ms of C (M x N) = A (M x K) B (K x N), row-major, in nb even blocks of K (the first with beta 0,
   the rest added), as native.c runs a long inner dimension. */
static double kblocks_ms(dnnl_engine_t eng, dnnl_stream_t st, int M, int N, int K, int nb) {
  const int kb = (K + nb - 1) / nb;
  uint16_t *A = malloc(sizeof *A * (size_t)M * K), *B = malloc(sizeof *B * (size_t)K * N);
  float *C = malloc(sizeof *C * (size_t)M * N);
  if (!A || !B || !C) exit(1);
  for (size_t i = 0; i < (size_t)M * K; i++)
    A[i] = (uint16_t)(0x3c00 + i % 7);
  for (size_t i = 0; i < (size_t)K * N; i++)
    B[i] = (uint16_t)(0x3c00 + i % 5);
  bmm x[2][2] = {{{0}}}; /* [last block][added] */
  const dnnl_dims_t as = {K, 1}, bs = {N, 1}, cs = {N, 1};
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    const double t0 = now();
    for (int k0 = 0; k0 < K; k0 += kb) {
      const int kk = K - k0 < kb ? K - k0 : kb, last = kk != kb, add = k0 > 0;
      bmm *b = &x[last][add];
      if (!b->p) bmm_make(b, eng, M, N, kk, as, bs, cs, add ? 1.0f : 0.0f, 0);
      check(dnnl_memory_set_data_handle(b->m[0], A + k0), "A");
      check(dnnl_memory_set_data_handle(b->m[1], B + (size_t)k0 * N), "B");
      check(dnnl_memory_set_data_handle(b->m[2], C), "C");
      dnnl_exec_arg_t a[3] = {
          {DNNL_ARG_SRC, b->m[0]}, {DNNL_ARG_WEIGHTS, b->m[1]}, {DNNL_ARG_DST, b->m[2]}};
      check(dnnl_primitive_execute(b->p, st, 3, a), "a block");
      check(dnnl_stream_wait(st), "waiting");
    }
    const double t = now() - t0;
    if (rep > 0 && t < best) best = t; /* the first makes the primitives */
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      bmm_free(&x[i][j]);
  free(A), free(B), free(C);
  return best * 1e3;
}

int main(void) {
  dnnl_engine_t eng;
  dnnl_stream_t st;
  check(dnnl_engine_create(&eng, dnnl_cpu, 0), "an engine");
  check(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "a stream");
  /* N, K and orientation of each weight GEMM of a GPT-2 124M layer, then the output layer */
  static const int shapes[][3] = {{2304, 768, 1},  {768, 768, 1},  {3072, 768, 1}, {768, 3072, 1},
                                  {768, 2304, 0},  {768, 768, 0},  {768, 3072, 0}, {3072, 768, 0},
                                  {50304, 768, 1}, {768, 50304, 0}};
  const int ns = (int)(sizeof shapes / sizeof shapes[0]);
  printf("threads: %d\n", omp_get_max_threads());
  /* 333: the output layer's chunk of 64 MiB of logits, where one reorder per step would serve
     every chunk */
  static const int rows[] = {256, 333, 512, 1024, 2048};
  for (int mi = 0; mi < 5; mi++) {
    const int M = rows[mi];
    double sp = 0, sk = 0;
    for (int s = 0; s < ns; s++) {
      double p, k, r;
      const int N = shapes[s][0], K = shapes[s][1];
      layout(eng, st, M, N, K, shapes[s][2], &p, &k, &r);
      printf("%5d tokens, %5d x %5d %s: plain %8.2f ms, reorder + packed %8.2f ms (%+.0f%%; the "
             "packed product alone %+.0f%%)\n",
             M, N, K, shapes[s][2] ? "W^T" : "W  ", p, r + k, 100.0 * (r + k - p) / p,
             100.0 * (k - p) / p);
      sp += p, sk += r + k;
    }
    printf("%5d tokens, all: plain %.1f ms, reorder + packed %.1f ms (%+.0f%%)\n", M, sp, sk,
           100.0 * (sk - sp) / sp);
  }
  /* the output layer's data gradient (K the vocabulary), weight gradients over many tokens, and
     a layer's shorter K */
  static const int kshapes[][3] = {{333, 768, 50304},
                                   {2048, 768, 50304},
                                   {768, 3072, 16384},
                                   {768, 768, 8192},
                                   {2048, 768, 3072}};
  for (int s = 0; s < 5; s++) {
    const int M = kshapes[s][0], N = kshapes[s][1], K = kshapes[s][2];
    const int nb = (K + 4095) / 4096;
    const double whole = kblocks_ms(eng, st, M, N, K, 1),
                 blocked = kblocks_ms(eng, st, M, N, K, nb);
    printf("%5d x %5d x %5d: K whole %8.2f ms, in %2d blocks %8.2f ms (%.2fx)\n", M, N, K, whole,
           nb, blocked, whole / blocked);
  }
  double tn, ts;
  tiles(&tn, &ts);
  printf("64^3 tiles, every thread at once: native bf16 %.1f GFLOP/s per thread, sgemm %.1f\n", tn,
         ts);
  dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
  return 0;
}
