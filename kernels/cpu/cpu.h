/* Private to the CPU backend: the operations of its table and vectorizable math. */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mgt/backend.h"

/* exp for float, accurate to about 1 ulp on [-87, 88]; clamps outside. Written so that
   GCC vectorizes it inside `omp simd` loops (libm's expf does not vectorize without
   -ffast-math). */
static inline float mgt_fast_expf(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float k = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t n = (int32_t)k;
  uint32_t bits = (uint32_t)(n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline float mgt_fast_tanhf(float x) {
  float e = mgt_fast_expf(2.0f * x);
  return 1.0f - 2.0f / (e + 1.0f);
}

#define MGT_GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define MGT_GELU_K1 0.044715f

/* The CPU backend's state: the GEMM input precision and the scratch it rounds into. */
typedef struct cpu_ctx {
  mgt_precision precision;
  float *scratch[2];
  size_t scratch_n[2];
  /* set_weights: the fp32 parameters and their rounded copy (NULL at fp32 or after a change
     of precision), in floats so that BLAS multiplies it as it is */
  const float *wbase;
  size_t wn;
  float *wcopy;
  /* set_act16: the 16-bit activations, [a16, a16 + a16_bytes): floats holding 16-bit values
     (a16b 4), or bf16 itself under native GEMMs (a16b 2), which no GEMM converts again */
  char *a16;
  size_t a16_bytes;
  int a16b;
  struct mgt_backend *be; /* the table, whose act16_bytes follows the mode */
  /* native bf16 GEMMs (mgt_backend_cpu_native): oneDNN's state, the weights' bf16 copy (in
     place of wcopy) and the bf16 operands of one call */
  struct cpu_native *nat;
  int native;
  int f32dnn; /* fp32 GEMMs through oneDNN's matmul (mgt_backend_cpu_fp32_onednn), not sgemm */
  uint16_t *w16;
  uint16_t *s16[3];
  size_t s16_n[3];
  struct cpu_native **tnat; /* one per OpenMP thread, for flash attention's tiles */
  int tnat_n;
  /* hold: [held, held + held_n) is unchanged until the next hold; slot 0 keeps its conversion
     of rows x cols (leading dimension ld), in rounded floats (held_in 1) or bf16 (2), until
     anything else is converted into slot 0 (held_in 0) */
  const float *held;
  size_t held_n;
  int held_in, held_rows, held_cols, held_ld;
} cpu_ctx;

/* Whether [p, p + n) lies in the region [lo, lo + len) (floats). */
static inline int cpu_inside(const float *p, size_t n, const float *lo, size_t len) {
  return lo && p >= lo && p < lo + len && n <= (size_t)(lo + len - p);
}

/* Whether the n elements at p lie in the 16-bit activation region. */
static inline int cpu_in_act16(const cpu_ctx *c, const void *p, size_t n) {
  const char *q = (const char *)p;
  return c && c->a16 && q >= c->a16 && q < c->a16 + c->a16_bytes &&
         n * (size_t)c->a16b <= (size_t)(c->a16 + c->a16_bytes - q);
}

/* The same where the region holds bf16 (native GEMMs): the n elements at p are uint16_t. */
static inline uint16_t *cpu_act16_bf16(const cpu_ctx *c, const void *p, size_t n) {
  return c && c->a16b == 2 && cpu_in_act16(c, p, n) ? (uint16_t *)(uintptr_t)p : NULL;
}

/* Largest team the reductions keep per-thread partials for. */
enum { MGT_CPU_MAX_THREADS = 256 };

mgt_status cpu_init_normal(void *ctx, float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream,
                           float std);
mgt_status cpu_fill(void *ctx, float *p, size_t n, float value);
mgt_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc);
mgt_status cpu_gemm_grouped(void *ctx, int transa, int transb, int count, const int *M,
                            const int *N, const int *K, float alpha, const float *const *A, int lda,
                            const float *const *B, int ldb, float beta, float *const *C, int ldc);
mgt_status cpu_linear_bias(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                           int ldw, const float *b, float *out);
mgt_status cpu_linear_param_grads(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                  float *dW, float *db, int accumulate);
mgt_status cpu_linear_dgelu(void *ctx, int M, int N, int K, const float *dy, const float *W,
                            const float *pre, float *dpre, float *db, int accumulate);
mgt_status cpu_bias_dropout_add_ln(void *ctx, float *out, float *x, const float *b,
                                   const float *res, int N, int C, size_t row, const mgt_dropout *d,
                                   float *ln, float *mean, float *rstd, const float *w,
                                   const float *lb, float eps);
mgt_status cpu_set_weights(void *ctx, const float *w, size_t n);
mgt_status cpu_set_act16(void *ctx, void *p, size_t bytes);
/* dst = src rounded to the 16-bit precision (dst may be src) */
void cpu_round16(cpu_ctx *c, float *dst, const float *src, size_t n);
/* A GEMM operand under 16 bits: a 16-bit activation as it is, its part of the weights' copy,
   or rounded into scratch slot k. */
mgt_status cpu_operand(cpu_ctx *c, int k, const float *src, int rows, int cols, int ld,
                       const float **out);
mgt_status cpu_refresh_weights(void *ctx, size_t offset, size_t n);
/* Frees the weights' 16-bit copies (after a change of format): GEMMs round the weights again
   until the next set_weights. */
void cpu_drop_copies(cpu_ctx *c);
/* Native bf16 GEMMs are on: the backend runs bf16 with oneDNN. */
static inline int cpu_native_on(const cpu_ctx *c) {
  return c && c->native && c->precision == MGT_PREC_BF16;
}
/* Sets the table's act16_bytes to the mode's: bf16 under native GEMMs, else floats. */
void cpu_act16_mode(cpu_ctx *c);
/* The bf16 bits of x rounded as mgt_round_bf16, branch-free so that the conversion loops
   vectorize (calling mgt_round_bf16 there made a native step 25% slower); a NaN stays a NaN
   (quieted: one whose mantissa lies in the low 16 bits would otherwise become an infinity). */
static inline uint16_t cpu_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) != 0x7F800000u)
    u += 0x7FFFu + ((u >> 16) & 1u);
  else if (u & 0x007FFFFFu)
    u |= 0x00400000u;
  return (uint16_t)(u >> 16);
}
/* mgt_round_bf16, inline so that the rounding loops vectorize (the same bits: infinities and
   NaNs kept as they are). */
static inline float cpu_round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}
#ifdef MGT_HAVE_ONEDNN
/* Makes c->tnat hold a oneDNN state for each of omp_get_max_threads() threads. */
mgt_status cpu_native_threads(cpu_ctx *c);
#endif
mgt_status cpu_hold(void *ctx, const float *p, size_t n);
/* dst (same layout) = the bf16 bits of a rows x cols matrix with leading dimension ld. */
void cpu_to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld);
/* Scratch slot k (0-2) of native operands, at least n elements. */
mgt_status cpu_bf16_scratch(cpu_ctx *c, int k, size_t n, uint16_t **out);
/* Scratch slot k (0-1) of floats, at least n (slot 0 forgets the held operand's conversion). */
mgt_status cpu_f32_scratch(cpu_ctx *c, int k, size_t n, float **out);
mgt_status cpu_linear_bias_gelu(void *ctx, int M, int N, int K, const float *A, int lda,
                                const float *W, int ldw, const float *b, float *pre, float *out);
mgt_status cpu_add_bias(void *ctx, float *y, const float *b, int N, int C);
/* bias_backward of dy in bf16 (N x C) */
void cpu_bias_backward16(float *db, const uint16_t *dy, int N, int C, int accumulate);
#ifdef MGT_HAVE_ONEDNN
/* linear_param_grads with native GEMMs: dy converted to bf16 once, for the GEMM and the bias */
mgt_status cpu_native_param_grads(cpu_ctx *c, int M, int N, int K, const float *dy, const float *x,
                                  float *dW, float *db, int accumulate);
#endif
mgt_status cpu_bias_backward(void *ctx, float *db, const float *dy, int N, int C, int accumulate);
mgt_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *x,
                                 const float *w, const float *b, int N, int C, float eps);
mgt_status cpu_layernorm_backward(void *ctx, float *dx, float *dw, float *db, const float *dout,
                                  const float *x, const float *w, const float *mean,
                                  const float *rstd, int N, int C, int accumulate);
mgt_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                               int N, int C, float eps);
mgt_status cpu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                                const float *w, const float *rstd, int N, int C, int accumulate);
mgt_status cpu_swiglu_forward(void *ctx, float *out, const float *x, int N, int F);
mgt_status cpu_swiglu_backward(void *ctx, float *dx, const float *dout, const float *x, int N,
                               int F);
mgt_status cpu_gemm32(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);
mgt_status cpu_moe_route(void *ctx, const float *logits, int N, int E, int k, int score, int pre,
                         float scale, const float *bias, int32_t *idx, float *w, float *probs,
                         float *lse);
mgt_status cpu_moe_route_backward(void *ctx, float *dlogits, const float *dw, const float *logits,
                                  const int32_t *idx, const float *w, const float *probs,
                                  const float *lse, int N, int E, int k, int score, int pre,
                                  float scale, const float *aux, int aux_rows, float zc);
mgt_status cpu_moe_combine(void *ctx, float *y, const float *src, const int32_t *pos,
                           const float *w, int N, int k, int C, int accumulate);
mgt_status cpu_moe_combine_backward(void *ctx, float *dsrc, float *dw, const float *dy,
                                    const float *src, const int32_t *pos, const float *w, int N,
                                    int k, int C);
mgt_status cpu_head_rmsnorm_forward(void *ctx, float *x, int ld, float *raw, float *rstd,
                                    const float *w, int N, int heads, int hd, float eps,
                                    const float *sums, int width);
mgt_status cpu_head_rmsnorm_backward(void *ctx, float *dx, int ld, float *dw, const float *raw,
                                     const float *rstd, const float *w, int N, int heads, int hd,
                                     int accumulate, const float *sums, int width);
mgt_status cpu_row_dots(void *ctx, float *out, const float *a, int lda, const float *b, int ldb,
                        const float *w, int N, int n);
mgt_status cpu_rope(void *ctx, float *x, int N, int T, int pos0, const int32_t *pos, int heads,
                    int hd, int ld, const float *inv_freq, int inverse);
mgt_status cpu_kv_group(void *ctx, float *dst, const float *src, int N, int Hl, int Gl, int hd,
                        int reduce);
mgt_status cpu_bias_gelu_forward(void *ctx, float *out, float *pre, const float *b, int N, int C);
/* bias_gelu_forward with out in bf16 (the native mode's 16-bit activations) */
mgt_status cpu_bias_gelu_forward16(void *ctx, uint16_t *out, float *pre, const float *b, int N,
                                   int C);
mgt_status cpu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n);
mgt_status cpu_bias_act_forward(void *ctx, int act, float *out, float *pre, const float *b, int N,
                                int C);
mgt_status cpu_act_backward(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                            size_t n);
mgt_status cpu_gather_rows(void *ctx, float *out, const float *x, const int32_t *idx, int M, int C);
mgt_status cpu_scatter_add_rows(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                                int C);
mgt_status cpu_attention_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                 int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                 const int32_t *kfirst, const mgt_dropout *d, float *scratch);
mgt_status cpu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                  const float *P, int B, int T, int Hl, int hd, int head_offset,
                                  int H, const int32_t *keylen, const int32_t *kfirst,
                                  const mgt_dropout *d, float *scratch);
mgt_status cpu_flash_attention_forward(void *ctx, float *out, float *lse, const float *qkv, int B,
                                       int T, int Hl, int hd, int head_offset,
                                       const int32_t *keylen, const int32_t *kfirst,
                                       const mgt_dropout *d);
mgt_status cpu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, int B, int T, int Hl,
                                        int hd, int head_offset, const int32_t *keylen,
                                        const int32_t *kfirst, const mgt_dropout *d);
mgt_status cpu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                 int N, int C, int v0, int Vl);
mgt_status cpu_add_position(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C,
                            const int32_t *pos);
mgt_status cpu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *pos, int B, int T, int C,
                                  int v0, int Vl, int accumulate);
mgt_status cpu_dropout_forward(void *ctx, float *out, const float *x, const float *res, size_t n,
                               size_t row, const mgt_dropout *d);
mgt_status cpu_dropout_backward(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                                const mgt_dropout *d);
mgt_status cpu_add(void *ctx, float *y, const float *x, size_t n);
mgt_status cpu_xent_max(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv);
mgt_status cpu_xent_sumexp(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                           const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp);
mgt_status cpu_xent_loss(void *ctx, float *losses, const float *rowmax, const float *sum,
                         const float *tgt, const int32_t *targets, int N, double *total);
mgt_status cpu_xent_backward(void *ctx, float *logits, const float *sum, const int32_t *targets,
                             int N, int Vl, int nv, int v0, float scale);
mgt_status cpu_argmax(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                      int32_t *idx);
mgt_status cpu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                                const float *vc, int len, int Hl, int Gl, int hd);
mgt_status cpu_sumsq(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out);
mgt_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v,
                     const mgt_segment *segs, int nseg, const mgt_adamw_step *s);

/* Keep-mask helper for dropout: fills keep[0..n) (1 or 0) for words [e0, e0+n) of the
   stream. */
void cpu_dropout_mask(uint8_t *keep, uint64_t seed, uint64_t stream, uint64_t e0, size_t n,
                      uint32_t threshold);

/* Attention's shared pieces (attention.c, flash.c). The keys [0, lim) row i of sample b sees:
   i + 1 (causal, keylen NULL) or the sample's length. */
static inline int cpu_key_limit(const int32_t *keylen, int b, int T, int i) {
  if (!keylen) return i + 1;
  int n = keylen[b];
  return n < 1 ? 1 : (n > T ? T : n);
}
/* The first key row i of sample b sees: its document's first (kfirst) or 0. */
static inline int cpu_key_first(const int32_t *kfirst, int b, int T, int i) {
  return kfirst ? kfirst[(size_t)b * T + i] : 0;
}
/* Keep flags of row i's keys [j0, j0 + n) of global head hg: mask words ((hg*T + i)*T + j). */
void cpu_attn_mask(uint8_t *keep, const mgt_dropout *d, int b, int hg, int T, int i, int j0, int n,
                   uint32_t thr);
/* Head dims of the 16-bit tensor-core flash attention (kernels/cuda/flash16.cu). Under bf16
   or fp16 flash.c rounds its operands for these head dims only: for any other the CUDA
   backend runs its fp32 kernels, and the twins must keep the same numerics. */
static inline int cpu_flash16_hd(int hd) { return hd == 32 || hd == 64 || hd == 128; }
/* Widths, scales and the dropout threshold of an attention call. */
typedef struct cpu_att {
  int Cl, ld; /* local width Hl*hd; qkv row stride */
  float scale, dscale;
  int drop;
  uint32_t thr;
} cpu_att;
cpu_att cpu_att_of(int Hl, int hd, const mgt_dropout *d);
