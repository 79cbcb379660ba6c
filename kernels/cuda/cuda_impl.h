/* Private to the CUDA backend's files (kernels/cuda/, the .cu files): the backend's context, the
   cuBLASLt plans, launch helpers, block reductions and the device functions several operations
   share, and the operations' declarations for the table in backend_cuda.cu. Each operation computes
   what its CPU twin in kernels/cpu computes; tests/test_cuda.c holds them to it. Row-major
   (rows, cols) as in include/mgt/backend.h; cuBLAS is column-major, so a row-major
   C = op(A) op(B) is issued as the column-major C^T = op(B)^T op(A)^T. */
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>
#include <stdint.h>

#include "../philox.h"
#include "../backend_impl.h"
#include "mgt/rng.h"
extern "C" {
#include "../cpu/cpu.h" /* the CPU twins: initialization is drawn by the same code */
}
#include "cuda_check.h"
#include "flash16.h" /* the 16-bit tensor-core flash attention */

namespace mgt_cu {

/* The fused cuBLASLt epilogues, by backend operation (numbered as MGT_CUDA_EPI_*):
   linear_bias_gelu (GELU_AUX_BIAS), linear_bias (BIAS), linear_param_grads (BGRADB),
   linear_dgelu (DGELU_BGRAD). */
enum { LT_GELU, LT_BIAS_ONLY, LT_BGRAD, LT_DGELU, LT_KINDS };

/* The operands whose address alignments (bytes, a power of two up to 256) an algorithm
   depends on: cuBLASLt's A, B, D (also C), the bias (or bias gradient) and the aux matrix. */
enum { LT_A, LT_B, LT_D, LT_BIAS, LT_AUX, LT_NPTR };

/* One fused matmul in cuBLAS's column-major terms: D (m x n, ld ldd) = op(A) op(B) [+ D]. */
struct lt_shape {
  int kind, ta, tb, m, n, k, lda, ldb, ldd, beta;
  cudaDataType_t type; /* of A and B; C, D, bias and aux are fp32 */
};

/* A cuBLASLt matmul set up once per shape and operand alignments (descriptors and the chosen
   algorithm); only the bias and aux pointers change between calls. A plan without an
   algorithm (found false) is kept too, so that a case cuBLASLt cannot fuse is asked once. */
struct lt_plan {
  bool used, found;
  lt_shape sh;
  uint32_t align[LT_NPTR];
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
};
enum { LT_PLANS = 16 };

inline void lt_plan_free(lt_plan *p) {
  if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  memset(p, 0, sizeof *p);
}

struct cuda_ctx {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  mgt_precision precision;
  void *half[2]; /* 16-bit copies of GEMM inputs */
  size_t half_n[2];
  /* hold: [held, held + held_n) is unchanged until the next hold; half[0] keeps its copy of
     rows x cols (leading dimension ld) while held_in, until anything else is rounded there */
  const float *held;
  size_t held_n;
  bool held_in;
  int held_rows, held_cols, held_ld;
  void *gptr; /* a grouped GEMM's operands' addresses */
  size_t gptr_n;
  void *gargs; /* its host staging (sizes, scalars, addresses) */
  size_t gargs_n;
  int grouped[3]; /* per precision: -1 when cuBLAS's grouped GEMM refused its types */
  /* set_weights: the fp32 parameters and their 16-bit copy in the current precision's format
     (NULL at fp32 or after a change of precision) */
  const float *wbase;
  size_t wn;
  void *wcopy;
  /* set_act16: 16-bit activations in the current precision's format, [a16, a16 + a16n bytes) */
  const char *a16;
  size_t a16n;
  double *dsum;  /* sumsq's result */
  double *dpart; /* sumsq's partial sums, one per block */
  size_t dpart_n;
  /* AdamW's segment table on the device, and the host copy it was made from */
  mgt_segment *dsegs, *hsegs;
  size_t dsegs_n, hsegs_n;
  float *fscratch;
  size_t fscratch_n;
  float *rscratch; /* a rounded fp32 copy (linear_param_grads without the epilogue) */
  size_t rscratch_n;
  float *bgrad; /* an epilogue's bias gradient, to be added to an accumulated one */
  size_t bgrad_n;
  float *host; /* pinned staging for argmax values */
  size_t host_n;
  bool own_stream, own_blas; /* created here (else the caller's, left to the caller) */
  /* a caller's handle's stream and math mode, restored at destruction: the backend binds the
     handle to its stream (which may be one it creates and destroys) and sets its math mode */
  cudaStream_t blas_stream0;
  cublasMath_t blas_math0;
  cublasLtHandle_t lt;
  void *lt_work; /* cuBLASLt workspace */
  size_t lt_work_n;
  /* Per epilogue and precision (mgt_precision): 0 untried, 1 the fused epilogue has run, -1
     cuBLASLt failed (not for want of an algorithm for one case): GEMM + kernels from then on.
     A failure leaves the other epilogues and precisions their own try. */
  int lt_state[LT_KINDS][3];
  bool lt_last[LT_KINDS][3]; /* the last call of that operation at that precision ran fused */
  lt_plan plans[LT_PLANS];
  int next_plan; /* the slot the next new shape replaces */
};

#define CUBLAS(call)                                                                               \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      mgt_error_set(MGT_ERR_BACKEND, __FILE__, __LINE__, "cublas", "%s: cuBLAS status %d", #call,  \
                    (int)s_);                                                                      \
      return MGT_ERR_BACKEND;                                                                      \
    }                                                                                              \
  } while (0)

inline cuda_ctx *C_(void *ctx) { return static_cast<cuda_ctx *>(ctx); }

inline unsigned blocks_for(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 65535u * 16u ? (b > 0 ? b : 1) : 65535u * 16u);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)blockDim.x * gridDim.x)

/* ---- block reductions (blockDim.x a multiple of 32, at most 1024) ---- */

struct op_sum {
  static constexpr float identity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct op_max {
  static constexpr float identity = -FLT_MAX;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op> __device__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Every thread of the block receives the reduction; sh holds 32 floats. */
template <typename Op> __device__ float block_reduce(float v, float *sh, Op op) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = threadIdx.x < (unsigned)nw ? sh[threadIdx.x] : Op::identity;
  if (w == 0) v = warp_reduce(v, op);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  float r = sh[0];
  __syncthreads();
  return r;
}

__device__ inline float block_sum(float v, float *sh) { return block_reduce(v, sh, op_sum()); }
__device__ inline float block_max(float v, float *sh) { return block_reduce(v, sh, op_max()); }

__device__ inline float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
}

/* Keep decision of dropout word e of a stream. */
__device__ inline bool keep_word(uint64_t seed, uint64_t stream, uint64_t e, uint32_t thr) {
  uint32_t w[4];
  mgt_philox_at(seed, stream, e >> 2, w);
  return w[e & 3] >= thr;
}

/* Keys row (b*Hl + h)*T + i attends to: i + 1 when causal (keylen NULL), else the sample's
   length, as the CPU's key_limit. */
__device__ inline int key_limit(const int32_t *keylen, size_t row, int Hl, int T) {
  const int i = (int)(row % T);
  if (!keylen) return i + 1;
  const int n = keylen[row / ((size_t)Hl * T)];
  return n < 1 ? 1 : (n > T ? T : n);
}

/* The first key row (b*Hl + h)*T + i attends to: its document's first row (kfirst[b*T + i],
   --reset-attention-mask and --sft), else 0, as the CPU's cpu_key_first. */
__device__ inline int key_first(const int32_t *kfirst, size_t row, int Hl, int T) {
  if (!kfirst) return 0;
  return kfirst[(row / ((size_t)Hl * T)) * T + row % T];
}

struct mask_args {
  uint64_t seed, sample_base;
  int layer, site, head_offset, Hl, T;
  uint32_t thr;
  float dscale;
};

/* Mask word of element (row, j) of the probabilities: ((global head)*T + i)*T + j. */
__device__ inline bool attn_keep(const mask_args &a, size_t row, int j) {
  const int i = (int)(row % a.T), bh = (int)(row / a.T), h = bh % a.Hl, b = bh / a.Hl;
  const uint64_t stream = mgt_philox_dropout_stream(a.sample_base + (uint64_t)b, a.layer, a.site);
  const uint64_t e = ((uint64_t)(a.head_offset + h) * a.T + (uint64_t)i) * (uint64_t)a.T + j;
  return keep_word(a.seed, stream, e, a.thr);
}

/* The dropout of the attention probabilities as the kernels read it (attention.cu). */
mask_args mask_of(const mgt_dropout *d, int head_offset, int Hl, int T);

/* A float rounded to 16 bits (round to nearest even). */
__device__ inline void store16(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ inline void store16(__half *p, float v) { *p = __float2half_rn(v); }

/* An output element as fp32 or, for a 16-bit activation, rounded to bf16 / half. */
__device__ inline void put(float *p, float v) { *p = v; }
__device__ inline void put(__nv_bfloat16 *p, float v) { store16(p, v); }
__device__ inline void put(__half *p, float v) { store16(p, v); }

/* ---- the operations and helpers, by file ---- */

mgt_status cu_alloc(void *ctx, size_t bytes, const char *what, void **out);
void cu_free(void *ctx, void *p);
mgt_status cu_zero(void *ctx, void *p, size_t bytes);
mgt_status cu_upload(void *ctx, void *dst, const void *src, size_t bytes);
mgt_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes);
mgt_status cu_download(void *ctx, void *dst, const void *src, size_t bytes);
mgt_status cu_sync(void *ctx);
void cu_destroy(void *ctx);
mgt_status cu_set_precision(void *ctx, mgt_precision prec);
mgt_status grow(void **p, size_t *have, size_t bytes);
mgt_status host_buffer(cuda_ctx *c, size_t n, float **out);
mgt_status cu_init_normal(void *ctx, float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream,
                          float std);
mgt_status cu_fill(void *ctx, float *p, size_t n, float value);
mgt_status cu_set_weights(void *ctx, const float *w, size_t n);
mgt_status cu_refresh_weights(void *ctx, size_t offset, size_t n);
mgt_status cu_set_act16(void *ctx, void *p, size_t bytes);
mgt_status cu_hold(void *ctx, const float *p, size_t n);
bool in_act16(const cuda_ctx *c, const void *p, size_t n);
mgt_status half_copy(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                     const void **out);
mgt_status cu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                   int ldc);
mgt_status cu_gemm_grouped(void *ctx, int transa, int transb, int count, const int *M, const int *N,
                           const int *K, float alpha, const float *const *A, int lda,
                           const float *const *B, int ldb, float beta, float *const *C, int ldc);
mgt_status gemm_batched(cuda_ctx *c, int transa, int transb, int M, int N, int K, float alpha,
                        const float *A, int lda, long long sa, const float *B, int ldb,
                        long long sb, float beta, float *Cm, int ldc, long long sc, int batch);
mgt_status cu_add_bias(void *ctx, float *y, const float *b, int N, int C);
mgt_status column_sums(cuda_ctx *c, float *out, const float *dy, const float *x, const float *mean,
                       const float *rstd, int N, int C, int acc);
/* column_sums over head_rmsnorm's strided vectors (kernels/cuda/linear.cu). */
mgt_status column_sums_heads(cuda_ctx *c, float *out, const float *dy, int ld, int heads,
                             const float *raw, const float *rstd, int N, int hd, int acc);
mgt_status cu_bias_backward(void *ctx, float *db, const float *dy, int N, int C, int accumulate);
mgt_status cu_bias_gelu_forward(void *ctx, float *out, float *pre, const float *b, int N, int C);
bool lt_plan_make(cuda_ctx *c, lt_plan *p, const void *bias, const void *aux);
bool lt_shape_equal(const lt_shape *a, const lt_shape *b);
bool lt_plan_fits(const lt_plan *q, const lt_shape *sh, const uint32_t *al);
mgt_status lt_matmul(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                     const void *bias, const void *aux, bool *fused);
mgt_status gemm_operand(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                        const void **out);
bool lt_wanted(cuda_ctx *c, int kind);
mgt_status lt_fused(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                    const void *bias, const void *aux, bool *done);
mgt_status lt_linear(cuda_ctx *c, int kind, int M, int N, int K, const float *A, int lda,
                     const float *W, int ldw, const float *b, float *aux, float *out, bool *done);
mgt_status cu_linear_bias_gelu(void *ctx, int M, int N, int K, const float *A, int lda,
                               const float *W, int ldw, const float *b, float *pre, float *out);
mgt_status cu_linear_bias(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                          int ldw, const float *b, float *out);
mgt_status bias_target(cuda_ctx *c, float *db, int n, int accumulate, float **out);
mgt_status cu_linear_param_grads(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                 float *dW, float *db, int accumulate);
mgt_status cu_linear_dgelu(void *ctx, int M, int N, int K, const float *dy, const float *W,
                           const float *pre, float *dpre, float *db, int accumulate);
mgt_status cu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n);
mgt_status cu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C, float eps);
mgt_status cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                              int N, int C, float eps);
mgt_status cu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int C, int accumulate);
mgt_status cu_swiglu_forward(void *ctx, float *out, const float *x, int N, int F);
mgt_status cu_swiglu_backward(void *ctx, float *dx, const float *dout, const float *x, int N,
                              int F);
mgt_status cu_gemm32(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
mgt_status cu_moe_route(void *ctx, const float *logits, int N, int E, int k, int score, int pre,
                        float scale, const float *bias, int32_t *idx, float *w, float *probs,
                        float *lse);
mgt_status cu_moe_route_backward(void *ctx, float *dlogits, const float *dw, const float *logits,
                                 const int32_t *idx, const float *w, const float *probs,
                                 const float *lse, int N, int E, int k, int score, int pre,
                                 float scale, const float *aux, int aux_rows, float zc);
mgt_status cu_moe_combine(void *ctx, float *y, const float *src, const int32_t *pos, const float *w,
                          int N, int k, int C, int accumulate);
mgt_status cu_moe_combine_backward(void *ctx, float *dsrc, float *dw, const float *dy,
                                   const float *src, const int32_t *pos, const float *w, int N,
                                   int k, int C);
mgt_status cu_head_rmsnorm_forward(void *ctx, float *x, int ld, float *raw, float *rstd,
                                   const float *w, int N, int heads, int hd, float eps,
                                   const float *sums, int width);
mgt_status cu_head_rmsnorm_backward(void *ctx, float *dx, int ld, float *dw, const float *raw,
                                    const float *rstd, const float *w, int N, int heads, int hd,
                                    int accumulate, const float *sums, int width);
mgt_status cu_row_dots(void *ctx, float *out, const float *a, int lda, const float *b, int ldb,
                       const float *w, int N, int n);
mgt_status cu_rope(void *ctx, float *x, int N, int T, int pos0, const int32_t *pos, int heads,
                   int hd, int ld, const float *inv_freq, int inverse);
mgt_status cu_kv_group(void *ctx, float *dst, const float *src, int N, int Hl, int Gl, int hd,
                       int reduce);
mgt_status cu_layernorm_backward(void *ctx, float *dx, float *dw, float *db, const float *dout,
                                 const float *x, const float *w, const float *mean,
                                 const float *rstd, int N, int C, int accumulate);
mgt_status cu_bias_act_forward(void *ctx, int act, float *out, float *pre, const float *b, int N,
                               int C);
mgt_status cu_act_backward(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                           size_t n);
mgt_status cu_gather_rows(void *ctx, float *out, const float *x, const int32_t *idx, int M, int C);
mgt_status cu_scatter_add_rows(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                               int C);
mgt_status cu_attention_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                const int32_t *kfirst, const mgt_dropout *d, float *scratch);
mgt_status cu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                 const float *P, int B, int T, int Hl, int hd, int head_offset,
                                 int H, const int32_t *keylen, const int32_t *kfirst,
                                 const mgt_dropout *d, float *scratch);
mgt_status cu_flash_attention_forward(void *ctx, float *out, float *lse, const float *qkv, int B,
                                      int T, int Hl, int hd, int head_offset, const int32_t *keylen,
                                      const int32_t *kfirst, const mgt_dropout *d);
mgt_status cu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int Hl,
                                       int hd, int head_offset, const int32_t *keylen,
                                       const int32_t *kfirst, const mgt_dropout *d);
mgt_status cu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                               const float *vc, int len, int Hl, int Gl, int hd);
mgt_status cu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                int N, int C, int v0, int Vl);
mgt_status cu_add_position(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C,
                           const int32_t *pos);
mgt_status cu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, const int32_t *pos, int B, int T, int C,
                                 int v0, int Vl, int accumulate);
mgt_status cu_dropout_forward(void *ctx, float *out, const float *x, const float *res, size_t n,
                              size_t row, const mgt_dropout *d);
mgt_status cu_dropout_backward(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                               const mgt_dropout *d);
mgt_status cu_bias_dropout_add_ln(void *ctx, float *out, float *x, const float *b, const float *res,
                                  int N, int C, size_t row, const mgt_dropout *d, float *ln,
                                  float *mean, float *rstd, const float *w, const float *lb,
                                  float eps);
mgt_status cu_add(void *ctx, float *y, const float *x, size_t n);
mgt_status cu_xent_max(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv);
mgt_status cu_xent_sumexp(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                          const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp);
mgt_status cu_xent_loss(void *ctx, float *losses, const float *rowmax, const float *sum,
                        const float *tgt, const int32_t *targets, int N, double *total);
mgt_status cu_xent_backward(void *ctx, float *logits, const float *sum, const int32_t *targets,
                            int N, int Vl, int nv, int v0, float scale);
mgt_status cu_argmax(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                     int32_t *idx);
unsigned sumsq_blocks(size_t n);
mgt_status cu_sumsq(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out);
mgt_status cu_adamw(void *ctx, float *p, const float *g, float *m, float *v,
                    const mgt_segment *segs, int nseg, const mgt_adamw_step *s);

} // namespace mgt_cu
