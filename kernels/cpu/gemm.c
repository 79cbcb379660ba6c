/* GEMM through CBLAS; in mixed precision the inputs are first rounded to 16 bits, the
   same numbers a GPU's half-precision GEMM multiplies. Native bf16 GEMMs (native.c) take the
   same rounded numbers as bf16 and accumulate in fp32 on the CPU's bf16 units. */
#include "cblas_any.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_impl.h"
#include "cpu.h"
#ifdef MGT_HAVE_ONEDNN
#include "native.h"
#endif

float mgt_round_bf16(float x) { return cpu_round_bf16(x); }

float mgt_round_fp16(float x) {
  if (!isfinite(x)) return x;
  float a = fabsf(x);
  if (a >= 65520.0f) return copysignf(INFINITY, x); /* beyond the largest half, rounded */
  if (a < 6.103515625e-05f) {                       /* subnormal halves: steps of 2^-24 */
    float q = a * 16777216.0f, f = floorf(q), r = q - f;
    if (r > 0.5f || (r == 0.5f && fmodf(f, 2.0f) != 0.0f)) f += 1.0f;
    return copysignf(f / 16777216.0f, x);
  }
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u += 0xFFFu + ((u >> 13) & 1u); /* 10 mantissa bits, ties to even */
  u &= ~0x1FFFu;
  memcpy(&x, &u, sizeof x);
  return x;
}

mgt_status cpu_hold(void *ctx, const float *p, size_t n) {
  cpu_ctx *c = ctx;
  c->held = p, c->held_n = p ? n : 0, c->held_in = 0;
  return MGT_OK;
}

/* Whether slot 0 holds the conversion (kind 1: rounded floats, 2: bf16) of this operand. */
static int held_ready(const cpu_ctx *c, int k, int kind, const float *src, int rows, int cols,
                      int ld) {
  return k == 0 && c->held_in == kind && src == c->held && rows == c->held_rows &&
         cols == c->held_cols && ld == c->held_ld;
}

/* After a conversion into slot k (which forgot slot 0's): the held operand's is there now. */
static void held_mark(cpu_ctx *c, int k, int kind, const float *src, int rows, int cols, int ld) {
  const size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  if (k == 0 && c->held && src == c->held && n <= c->held_n)
    c->held_in = kind, c->held_rows = rows, c->held_cols = cols, c->held_ld = ld;
}

/* Rounds a rows x cols matrix with leading dimension ld into the scratch slot `k`. */
static mgt_status cpu_rounded(cpu_ctx *c, int k, const float *src, int rows, int cols, int ld,
                              const float **out) {
  if (held_ready(c, k, 1, src, rows, cols, ld)) {
    *out = c->scratch[0];
    return MGT_OK;
  }
  float *dst;
  MGT_CHECK(cpu_f32_scratch(c, k, (size_t)(rows - 1) * (size_t)ld + (size_t)cols, &dst));
  if (c->precision == MGT_PREC_BF16) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
      const float *s = src + (size_t)i * ld;
      float *d = dst + (size_t)i * ld;
#pragma omp simd
      for (int j = 0; j < cols; j++)
        d[j] = cpu_round_bf16(s[j]);
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < cols; j++)
        dst[(size_t)i * ld + j] = mgt_round_fp16(src[(size_t)i * ld + j]);
  }
  held_mark(c, k, 1, src, rows, cols, ld);
  *out = dst;
  return MGT_OK;
}

static void to_bf16_flat(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    dst[i] = cpu_bf16_bits(src[i]);
}

void cpu_to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
  if (cols == ld || rows == 1) {
    to_bf16_flat(dst, src, (size_t)(rows - 1) * (size_t)ld + (size_t)cols);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    const float *s = src + (size_t)i * ld;
    uint16_t *d = dst + (size_t)i * ld;
#pragma omp simd
    for (int j = 0; j < cols; j++)
      d[j] = cpu_bf16_bits(s[j]);
  }
}

/* Grows *p (capacity *cap elements of `size` bytes) to n elements; slot 0 of either kind holds the
   held operand's conversion, which a new use forgets. */
static mgt_status scratch_slot(cpu_ctx *c, int k, void **p, size_t *cap, size_t n, size_t size,
                               void **out) {
  if (k == 0) c->held_in = 0;
  if (n > *cap) {
    void *q = realloc(*p, n * size);
    if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %zu scratch elements of %zu bytes", n, size);
    *p = q, *cap = n;
  }
  *out = *p;
  return MGT_OK;
}

mgt_status cpu_f32_scratch(cpu_ctx *c, int k, size_t n, float **out) {
  void *q;
  MGT_CHECK(scratch_slot(c, k, (void **)&c->scratch[k], &c->scratch_n[k], n, sizeof(float), &q));
  *out = q;
  return MGT_OK;
}

mgt_status cpu_bf16_scratch(cpu_ctx *c, int k, size_t n, uint16_t **out) {
  void *q;
  MGT_CHECK(scratch_slot(c, k, (void **)&c->s16[k], &c->s16_n[k], n, sizeof(uint16_t), &q));
  *out = q;
  return MGT_OK;
}

void cpu_drop_copies(cpu_ctx *c) {
  mgt_free(c->wcopy);
  mgt_free(c->w16);
  c->wcopy = NULL, c->w16 = NULL;
}

mgt_status cpu_set_weights(void *ctx, const float *w, size_t n) {
  cpu_ctx *c = ctx;
  if (!n && w != c->wbase) return MGT_OK; /* another owner's registration stays */
  cpu_drop_copies(c);
  c->wbase = w, c->wn = n;
  if (n && c->native && c->precision == MGT_PREC_BF16)
    MGT_CHECK(mgt_calloc(n * sizeof(uint16_t), "bf16 copies of the weights", (void **)&c->w16));
  else if (n && c->precision != MGT_PREC_FP32)
    MGT_CHECK(mgt_calloc(n * sizeof(float), "16-bit copies of the weights", (void **)&c->wcopy));
  return MGT_OK;
}

mgt_status cpu_refresh_weights(void *ctx, size_t offset, size_t n) {
  cpu_ctx *c = ctx;
  if (!c->wcopy && !c->w16) return MGT_OK;
  MGT_REQUIRE(offset <= c->wn && n <= c->wn - offset,
              "refresh of weights [%zu, %zu) outside the %zu registered", offset, offset + n,
              c->wn);
  if (c->w16) {
    to_bf16_flat(c->w16 + offset, c->wbase + offset, n);
  } else {
    cpu_round16(c, c->wcopy + offset, c->wbase + offset, n);
  }
  return MGT_OK;
}

mgt_status cpu_set_act16(void *ctx, void *p, size_t bytes) {
  cpu_ctx *c = ctx;
  if (!bytes) {
    if (p == c->a16) c->a16 = NULL, c->a16_bytes = 0;
    return MGT_OK;
  }
  MGT_REQUIRE(c->precision != MGT_PREC_FP32, "16-bit activations need a 16-bit precision");
  c->a16 = p, c->a16_bytes = bytes, c->a16b = cpu_native_on(c) ? 2 : (int)sizeof(float);
  return MGT_OK;
}

void cpu_act16_mode(cpu_ctx *c) {
  if (c->be) c->be->act16_bytes = cpu_native_on(c) ? 2 : (int)sizeof(float);
}

/* A 16-bit operand: a 16-bit activation as it is, its part of the weights' copy when it lies
   inside the registered weights, else rounded into scratch slot k. */
mgt_status cpu_operand(cpu_ctx *c, int k, const float *src, int rows, int cols, int ld,
                       const float **out) {
  const size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  if (cpu_in_act16(c, src, n)) {
    MGT_REQUIRE(c->a16b == (int)sizeof(float),
                "a bf16 activation read by a GEMM that is not native");
    *out = src;
    return MGT_OK;
  }
  if (c->wcopy && cpu_inside(src, n, c->wbase, c->wn)) {
    *out = c->wcopy + (src - c->wbase);
    return MGT_OK;
  }
  return cpu_rounded(c, k, src, rows, cols, ld, out);
}

#ifdef MGT_HAVE_ONEDNN
/* A native GEMM operand: its part of the weights' bf16 copy, else converted into slot k. */
static mgt_status cpu_operand_bf16(cpu_ctx *c, int k, const float *src, int rows, int cols, int ld,
                                   const uint16_t **out) {
  const size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  if (c->w16 && cpu_inside(src, n, c->wbase, c->wn)) {
    *out = c->w16 + (src - c->wbase);
    return MGT_OK;
  }
  const uint16_t *a = cpu_act16_bf16(c, src, n); /* an activation kept in bf16 */
  if (a) {
    *out = a;
    return MGT_OK;
  }
  if (held_ready(c, k, 2, src, rows, cols, ld)) {
    *out = c->s16[0];
    return MGT_OK;
  }
  uint16_t *p;
  MGT_CHECK(cpu_bf16_scratch(c, k, n, &p));
  cpu_to_bf16(p, src, rows, cols, ld);
  held_mark(c, k, 2, src, rows, cols, ld);
  *out = p;
  return MGT_OK;
}

mgt_status cpu_native_param_grads(cpu_ctx *c, int M, int N, int K, const float *dy, const float *x,
                                  float *dW, float *db, int accumulate) {
  const uint16_t *g, *a;
  MGT_CHECK(cpu_operand_bf16(c, 0, dy, M, N, N, &g));
  if (db) cpu_bias_backward16(db, g, M, N, accumulate);
  if (N == 0 || K == 0) return MGT_OK;
  MGT_CHECK(cpu_operand_bf16(c, 1, x, M, K, K, &a));
  return cpu_native_gemm(c->nat, MGT_TRANS, MGT_NOTRANS, N, K, M, 1.0f, g, N, a, K,
                         accumulate ? 1.0f : 0.0f, dW, K);
}

mgt_status cpu_native_threads(cpu_ctx *c) {
  const int n = omp_get_max_threads();
  if (n <= c->tnat_n) return MGT_OK;
  struct cpu_native **t = realloc(c->tnat, (size_t)n * sizeof *t);
  if (!t) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %d threads' bf16 GEMM state", n);
  c->tnat = t;
  for (; c->tnat_n < n; c->tnat_n++)
    MGT_CHECK(cpu_native_create(&c->tnat[c->tnat_n]));
  return MGT_OK;
}

static mgt_status cpu_gemm_native(cpu_ctx *c, int transa, int transb, int M, int N, int K,
                                  float alpha, const float *A, int lda, const float *B, int ldb,
                                  float beta, float *C, int ldc) {
  const uint16_t *a, *b;
  MGT_CHECK(cpu_operand_bf16(c, 0, A, transa ? K : M, transa ? M : K, lda, &a));
  MGT_CHECK(cpu_operand_bf16(c, 1, B, transb ? N : K, transb ? K : N, ldb, &b));
  return cpu_native_gemm(c->nat, transa, transb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}
#endif

mgt_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
  if (M == 0 || N == 0) return MGT_OK;
  cpu_ctx *c = ctx;
#ifdef MGT_HAVE_ONEDNN
  if (c && c->native && c->precision == MGT_PREC_BF16 && K > 0)
    return cpu_gemm_native(c, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
#ifdef MGT_HAVE_ONEDNN
  if (c && c->f32dnn && c->precision == MGT_PREC_FP32 && K > 0)
    return cpu_native_gemm_f32(c->nat, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                               ldc);
#endif
  if (c && c->precision != MGT_PREC_FP32 && K > 0) {
    MGT_CHECK(cpu_operand(c, 0, A, transa ? K : M, transa ? M : K, lda, &A));
    MGT_CHECK(cpu_operand(c, 1, B, transb ? N : K, transb ? K : N, ldb, &B));
  }
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return MGT_OK;
}

mgt_status cpu_gemm_grouped(void *ctx, int transa, int transb, int count, const int *M,
                            const int *N, const int *K, float alpha, const float *const *A, int lda,
                            const float *const *B, int ldb, float beta, float *const *C, int ldc) {
  for (int g = 0; g < count; g++)
    MGT_CHECK(cpu_gemm(ctx, transa, transb, M[g], N[g], K[g], alpha, A[g], lda, B[g], ldb, beta,
                       C[g], ldc));
  return MGT_OK;
}

mgt_status cpu_linear_bias_gelu(void *ctx, int M, int N, int K, const float *A, int lda,
                                const float *W, int ldw, const float *b, float *pre, float *out) {
  MGT_CHECK(cpu_gemm(ctx, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, pre, N));
  cpu_ctx *c = ctx; /* kept in 16 bits (set_act16): rounded once, here */
  uint16_t *o16 = cpu_act16_bf16(c, out, (size_t)M * N);
  if (o16) return cpu_bias_gelu_forward16(ctx, o16, pre, b, M, N);
  MGT_CHECK(cpu_bias_gelu_forward(ctx, out, pre, b, M, N));
  if (cpu_in_act16(c, out, (size_t)M * N)) cpu_round16(c, out, out, (size_t)M * N);
  return MGT_OK;
}

void cpu_round16(cpu_ctx *c, float *dst, const float *src, size_t n) {
  if (c->precision == MGT_PREC_BF16) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
      dst[i] = cpu_round_bf16(src[i]);
    return;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    dst[i] = mgt_round_fp16(src[i]);
}

#ifndef MGT_HAVE_ONEDNN
int mgt_cpu_bf16_units(char *what, size_t n) {
  if (what && n) snprintf(what, n, "built without oneDNN");
  return 0;
}
#endif

mgt_status mgt_backend_cpu_native(mgt_backend *be, int on) {
  MGT_REQUIRE(be && !strcmp(be->name, "cpu"), "native bf16 GEMMs are the CPU backend's");
  cpu_ctx *c = be->ctx;
  char why[128];
  if (on) MGT_REQUIRE(mgt_cpu_bf16_units(why, sizeof why), "native bf16 GEMMs: %s", why);
#ifdef MGT_HAVE_ONEDNN
  if (on && !c->nat) MGT_CHECK(cpu_native_create(&c->nat));
#endif
  MGT_REQUIRE(on == c->native || !c->a16,
              "native bf16 GEMMs cannot be switched while 16-bit activations are held");
  if (on != c->native) cpu_drop_copies(c); /* the copies are in the other mode's format */
  c->native = on;
  cpu_act16_mode(c);
  return MGT_OK;
}

mgt_status mgt_backend_cpu_fp32_onednn(mgt_backend *be, int on) {
  MGT_REQUIRE(be && !strcmp(be->name, "cpu"), "fp32 GEMMs through oneDNN are the CPU backend's");
  cpu_ctx *c = be->ctx;
#ifdef MGT_HAVE_ONEDNN
  if (on && !c->nat) MGT_CHECK(cpu_native_create(&c->nat));
#else
  MGT_REQUIRE(!on, "fp32 GEMMs through oneDNN: this mgt was built without oneDNN");
#endif
  c->f32dnn = on;
  return MGT_OK;
}

/* One layer's fp32 GEMMs (each product forward, and both backward orientations) through
   sgemm (nat NULL) or oneDNN: seconds (1e30 where oneDNN fails). */
static double layer_seconds(struct cpu_native *nat, const int (*sh)[3], int ns, float *A, float *B,
                            float *C) {
  const double t0 = omp_get_wtime();
  for (int s = 0; s < ns; s++) {
    const int M = sh[s][0], N = sh[s][1], K = sh[s][2];
    const int o[3][5] = {{0, 1, M, N, K}, {0, 0, M, K, N}, {1, 0, N, K, M}}; /* ta tb m n k */
    for (int q = 0; q < 3; q++) {
      const int ta = o[q][0], tb = o[q][1], m = o[q][2], n = o[q][3], k = o[q][4];
      const int lda = ta ? m : k, ldb = tb ? k : n;
#ifdef MGT_HAVE_ONEDNN
      if (nat) {
        if (cpu_native_gemm_f32(nat, ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n)) {
          mgt_error_clear();
          return 1e30;
        }
        continue;
      }
#endif
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                  n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n);
    }
  }
  return omp_get_wtime() - t0;
}

double mgt_cpu_fp32_gemm_rates(int rows, int C, int qkv, int f, double *blas, double *dnn) {
  const int att = qkv >= 3 ? qkv / 3 : 1; /* the attention's width: the projection's input */
  const int sh[4][3] = {{rows, qkv, C}, {rows, C, att}, {rows, f, C}, {rows, C, f}};
  size_t big = 0;
  double flops = 0;
  for (int s = 0; s < 4; s++) {
    const size_t a = (size_t)sh[s][0] * sh[s][1], b = (size_t)sh[s][1] * sh[s][2],
                 c = (size_t)sh[s][0] * sh[s][2];
    big = a > big ? a : big, big = b > big ? b : big, big = c > big ? c : big;
    flops += 3.0 * 2.0 * sh[s][0] * sh[s][1] * sh[s][2];
  }
  float *A = malloc(big * sizeof(float)), *B = malloc(big * sizeof(float)),
        *Cm = malloc(big * sizeof(float));
  *blas = *dnn = 0.0;
  if (A && B && Cm) {
    for (size_t i = 0; i < big; i++)
      A[i] = (float)((int)(i % 17) - 8) * 0.01f, B[i] = (float)((int)(i % 13) - 6) * 0.01f;
    struct cpu_native *nat = NULL;
#ifdef MGT_HAVE_ONEDNN
    if (cpu_native_create(&nat) != MGT_OK) mgt_error_clear(), nat = NULL;
#endif
    /* alternating, so that a slow spell of a shared machine hits both; the first round warms
       the caches and makes oneDNN's primitives */
    double tb = 1e30, td = 1e30;
    for (int round = 0; round < 4; round++) {
      const double b = layer_seconds(NULL, sh, 4, A, B, Cm);
      const double d = nat ? layer_seconds(nat, sh, 4, A, B, Cm) : 1e30;
      if (round > 0) tb = b < tb ? b : tb, td = d < td ? d : td;
    }
    *blas = flops / tb, *dnn = nat ? flops / td : 0.0;
#ifdef MGT_HAVE_ONEDNN
    cpu_native_destroy(nat);
#endif
  }
  free(A), free(B), free(Cm);
  return flops;
}

#ifdef MGT_HAVE_OPENBLAS
const char *mgt_cpu_blas_name(void) { return openblas_get_corename(); }
#else
const char *mgt_cpu_blas_name(void) { return "CBLAS"; }
#endif
