/* The CUDA backend: cuBLAS for GEMMs (fp32, or bf16/fp16 inputs with fp32 accumulation),
   hand-written kernels for the rest, all on one stream. Each kernel computes what its CPU
   twin in kernels/cpu computes; the conformance test (tests/test_cuda.c) holds them to it.
   Row-major (rows, cols) as in include/mgt/backend.h; cuBLAS is column-major, so a row-major
   C = op(A) op(B) is issued as the column-major C^T = op(B)^T op(A)^T. */
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

namespace {

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

void lt_plan_free(lt_plan *p) {
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

cuda_ctx *C_(void *ctx) { return static_cast<cuda_ctx *>(ctx); }

unsigned blocks_for(size_t n, unsigned threads) {
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

__device__ float block_sum(float v, float *sh) { return block_reduce(v, sh, op_sum()); }
__device__ float block_max(float v, float *sh) { return block_reduce(v, sh, op_max()); }

__device__ float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
}

/* Keep decision of dropout word e of a stream. */
__device__ bool keep_word(uint64_t seed, uint64_t stream, uint64_t e, uint32_t thr) {
  uint32_t w[4];
  mgt_philox_at(seed, stream, e >> 2, w);
  return w[e & 3] >= thr;
}

/* ---- memory ---- */

mgt_status cu_alloc(void *ctx, size_t bytes, const char *what, void **out) {
  *out = NULL;
  if (bytes == 0) bytes = 1;
  cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess) {
    *out = NULL;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    MGT_FAIL(MGT_ERR_NOMEM, "GPU memory for %s: %.1f MiB requested, %.1f MiB free of %.1f MiB (%s)",
             what, bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0, cudaGetErrorString(e));
  }
  CU(cudaMemsetAsync(*out, 0, bytes, C_(ctx)->stream));
  return MGT_OK;
}

void cu_free(void *ctx, void *p) {
  if (p) cudaFree(p);
}

mgt_status cu_zero(void *ctx, void *p, size_t bytes) {
  if (bytes) CU(cudaMemsetAsync(p, 0, bytes, C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
  if (!bytes) return MGT_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, C_(ctx)->stream));
  CU(cudaStreamSynchronize(C_(ctx)->stream)); /* the host buffer may be reused at once */
  return MGT_OK;
}

mgt_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
  if (!bytes) return MGT_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, C_(ctx)->stream));
  CU(cudaStreamSynchronize(C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_sync(void *ctx) {
  CU(cudaStreamSynchronize(C_(ctx)->stream));
  return MGT_OK;
}

void cu_destroy(void *ctx) {
  cuda_ctx *c = C_(ctx);
  cudaStreamSynchronize(c->stream);
  cudaFree(c->half[0]);
  cudaFree(c->half[1]);
  cudaFree(c->wcopy);
  cudaFree(c->dsum);
  cudaFree(c->dpart);
  cudaFree(c->dsegs);
  free(c->hsegs);
  cudaFree(c->fscratch);
  cudaFree(c->rscratch);
  cudaFree(c->bgrad);
  cudaFreeHost(c->host);
  for (int i = 0; i < LT_PLANS; i++)
    lt_plan_free(&c->plans[i]);
  if (c->lt) cublasLtDestroy(c->lt);
  cudaFree(c->lt_work);
  if (c->own_blas) {
    cublasDestroy(c->blas);
  } else { /* the caller's handle goes back as it came, before the stream it was bound to ends */
    cublasSetStream(c->blas, c->blas_stream0);
    cublasSetMathMode(c->blas, c->blas_math0);
  }
  if (c->own_stream) cudaStreamDestroy(c->stream);
  free(c);
}

mgt_status cu_set_precision(void *ctx, mgt_precision prec) {
  MGT_REQUIRE(prec == MGT_PREC_FP32 || prec == MGT_PREC_BF16 || prec == MGT_PREC_FP16,
              "unknown precision %d", (int)prec);
  cuda_ctx *c = C_(ctx);
  MGT_REQUIRE(prec == c->precision || !c->a16,
              "the precision cannot change while 16-bit activations are held");
  if (prec != c->precision && c->wcopy) { /* the copies hold the old format's values */
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaFree(c->wcopy));
    c->wcopy = NULL;
  }
  c->precision = prec;
  return MGT_OK;
}

mgt_status grow(void **p, size_t *have, size_t bytes) {
  if (bytes <= *have) return MGT_OK;
  cudaFree(*p);
  *p = NULL;
  *have = 0;
  CU(cudaMalloc(p, bytes));
  *have = bytes;
  return MGT_OK;
}

/* Pinned host memory of at least n floats, kept for reuse. */
mgt_status host_buffer(cuda_ctx *c, size_t n, float **out) {
  if (c->host_n < n) {
    cudaFreeHost(c->host);
    c->host = NULL;
    c->host_n = 0;
    CU(cudaMallocHost((void **)&c->host, sizeof(float) * n));
    c->host_n = n;
  }
  *out = c->host;
  return MGT_OK;
}

/* ---- initialization ---- */

/* Drawn on the host by the CPU twin (once per run) and uploaded: the same numbers by
   construction. */
mgt_status cu_init_normal(void *ctx, float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream,
                          float std) {
  size_t n = 1;
  for (int i = 0; i < sh->ndim; i++)
    n *= (size_t)sh->shape[i];
  float *h = NULL;
  MGT_CHECK(mgt_calloc(n * sizeof(float), "initial values", (void **)&h));
  mgt_status st = cpu_init_normal(NULL, h, sh, seed, stream, std);
  if (st == MGT_OK) st = cu_upload(ctx, p, h, n * sizeof(float));
  mgt_free(h);
  return st;
}

__global__ void k_fill(float *p, size_t n, float v) { GRID_STRIDE(i, n) p[i] = v; }

mgt_status cu_fill(void *ctx, float *p, size_t n, float value) {
  if (!n) return MGT_OK;
  k_fill<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(p, n, value);
  LAUNCHED();
  return MGT_OK;
}

/* ---- GEMM ---- */

__device__ inline void store16(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ inline void store16(__half *p, float v) { *p = __float2half_rn(v); }

template <typename T>
__global__ void k_round(T *dst, const float *src, int rows, int cols, int ld) {
  GRID_STRIDE(i, (size_t)rows * cols) {
    size_t r = i / cols, c = i % cols;
    store16(&dst[r * ld + c], src[r * ld + c]);
  }
}

template <typename T> __global__ void k_round_flat(T *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) store16(&dst[i], src[i]);
}

mgt_status cu_set_weights(void *ctx, const float *w, size_t n) {
  cuda_ctx *c = C_(ctx);
  if (!n && w != c->wbase) return MGT_OK; /* another owner's registration stays */
  if (c->wcopy) {
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaFree(c->wcopy));
  }
  c->wcopy = NULL, c->wbase = w, c->wn = n;
  if (n && c->precision != MGT_PREC_FP32) CU(cudaMalloc(&c->wcopy, n * 2));
  return MGT_OK;
}

mgt_status cu_refresh_weights(void *ctx, size_t offset, size_t n) {
  cuda_ctx *c = C_(ctx);
  if (!c->wcopy || n == 0) return MGT_OK;
  MGT_REQUIRE(offset <= c->wn && n <= c->wn - offset,
              "refresh of weights [%zu, %zu) outside the %zu registered", offset, offset + n,
              c->wn);
  if (c->precision == MGT_PREC_BF16)
    k_round_flat<<<blocks_for(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)c->wcopy + offset,
                                                            c->wbase + offset, n);
  else
    k_round_flat<<<blocks_for(n, 256), 256, 0, c->stream>>>((__half *)c->wcopy + offset,
                                                            c->wbase + offset, n);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_set_act16(void *ctx, void *p, size_t bytes) {
  cuda_ctx *c = C_(ctx);
  if (!bytes) {
    if (p == (const void *)c->a16) c->a16 = NULL, c->a16n = 0;
    return MGT_OK;
  }
  MGT_REQUIRE(c->precision != MGT_PREC_FP32, "16-bit activations need a 16-bit precision");
  c->a16 = (const char *)p, c->a16n = bytes;
  return MGT_OK;
}

/* Whether a matrix of n elements starting at p is a 16-bit activation. */
bool in_act16(const cuda_ctx *c, const void *p, size_t n) {
  const char *q = (const char *)p;
  return c->a16 && q >= c->a16 && q < c->a16 + c->a16n && 2 * n <= (size_t)(c->a16 + c->a16n - q);
}

/* A 16-bit copy of a rows x cols row-major matrix (leading dimension ld): a 16-bit activation
   as it is, its part of the weights' copy when it lies inside the registered weights, else
   rounded into slot k. */
mgt_status half_copy(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                     const void **out) {
  size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  if (in_act16(c, src, n)) {
    *out = src;
    return MGT_OK;
  }
  if (c->wcopy && src >= c->wbase && src < c->wbase + c->wn &&
      n <= (size_t)(c->wbase + c->wn - src)) {
    *out = (const uint16_t *)c->wcopy + (src - c->wbase);
    return MGT_OK;
  }
  MGT_CHECK(grow(&c->half[k], &c->half_n[k], n * 2));
  if (c->precision == MGT_PREC_BF16)
    k_round<__nv_bfloat16><<<blocks_for((size_t)rows * cols, 256), 256, 0, c->stream>>>(
        (__nv_bfloat16 *)c->half[k], src, rows, cols, ld);
  else
    k_round<__half><<<blocks_for((size_t)rows * cols, 256), 256, 0, c->stream>>>(
        (__half *)c->half[k], src, rows, cols, ld);
  LAUNCHED();
  *out = c->half[k];
  return MGT_OK;
}

mgt_status cu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                   int ldc) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  const cublasOperation_t ob = transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          oa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (c->precision == MGT_PREC_FP32 || K == 0) {
    CUBLAS(cublasSgemm(c->blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, Cm, ldc));
    return MGT_OK;
  }
  const void *a16, *b16;
  MGT_CHECK(half_copy(c, 0, A, transa ? K : M, transa ? M : K, lda, &a16));
  MGT_CHECK(half_copy(c, 1, B, transb ? N : K, transb ? K : N, ldb, &b16));
  const cudaDataType_t t = c->precision == MGT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS(cublasGemmEx(c->blas, ob, oa, N, M, K, &alpha, b16, t, ldb, a16, t, lda, &beta, Cm,
                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MGT_OK;
}

/* Row-major strided-batched fp32 GEMM (attention's per-head products). */
mgt_status gemm_batched(cuda_ctx *c, int transa, int transb, int M, int N, int K, float alpha,
                        const float *A, int lda, long long sa, const float *B, int ldb,
                        long long sb, float beta, float *Cm, int ldc, long long sc, int batch) {
  CUBLAS(cublasSgemmStridedBatched(c->blas, transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   transa ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, sb,
                                   A, lda, sa, &beta, Cm, ldc, sc, batch));
  return MGT_OK;
}

/* ---- bias, LayerNorm, GeLU ---- */

__global__ void k_add_bias(float *y, const float *b, int N, int C) {
  GRID_STRIDE(i, (size_t)N * C) y[i] += b[i % C];
}

mgt_status cu_add_bias(void *ctx, float *y, const float *b, int N, int C) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_add_bias<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(y, b, N, C);
  LAUNCHED();
  return MGT_OK;
}

/* Column sums of (N, C) in two passes with a fixed order (deterministic run to run): chunks
   of rows give partial sums part[chunk][c], then one thread per column adds the chunks in
   order. With x given, the summand is dy * (x - mean) * rstd (LayerNorm's weight gradient). */
enum { COLSUM_CHUNKS = 64 };

__global__ void k_colsum_partial(float *part, const float *dy, const float *x, const float *mean,
                                 const float *rstd, int N, int C, int rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * rows;
  if (c >= C) return;
  const int r1 = min(N, r0 + rows);
  float s = 0.0f;
  for (int n = r0; n < r1; n++) {
    float d = dy[(size_t)n * C + c];
    s += x ? d * (x[(size_t)n * C + c] - mean[n]) * rstd[n] : d;
  }
  part[(size_t)blockIdx.y * C + c] = s;
}

__global__ void k_colsum_finish(float *out, const float *part, int chunks, int C, int acc) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = acc ? out[c] : 0.0f;
  for (int k = 0; k < chunks; k++)
    s += part[(size_t)k * C + c];
  out[c] = s;
}

mgt_status column_sums(cuda_ctx *c, float *out, const float *dy, const float *x, const float *mean,
                       const float *rstd, int N, int C, int acc) {
  if (C == 0) return MGT_OK;
  const int chunks = N < COLSUM_CHUNKS ? (N > 0 ? N : 1) : COLSUM_CHUNKS;
  const int rows = (N + chunks - 1) / chunks;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * (size_t)chunks * C));
  dim3 grid((unsigned)((C + 127) / 128), (unsigned)chunks);
  k_colsum_partial<<<grid, 128, 0, c->stream>>>(c->fscratch, dy, x, mean, rstd, N, C, rows);
  LAUNCHED();
  k_colsum_finish<<<(C + 127) / 128, 128, 0, c->stream>>>(out, c->fscratch, chunks, C, acc);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_bias_backward(void *ctx, float *db, const float *dy, int N, int C, int accumulate) {
  return column_sums(C_(ctx), db, dy, NULL, NULL, NULL, N, C, accumulate);
}

/* An output element as fp32 or, for a 16-bit activation, rounded to bf16 / half. */
__device__ inline void put(float *p, float v) { *p = v; }
__device__ inline void put(__nv_bfloat16 *p, float v) { store16(p, v); }
__device__ inline void put(__half *p, float v) { store16(p, v); }

template <typename TO>
__global__ void k_layernorm_forward(TO *out, float *mean, float *rstd, const float *x,
                                    const float *w, const float *b, int C, float eps) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  const float *xr = x + (size_t)n * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    s += xr[c];
  const float m = block_sum(s, sh) / C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    v += (xr[c] - m) * (xr[c] - m);
  const float r = rsqrtf(block_sum(v, sh) / C + eps);
  TO *o = out + (size_t)n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    put(&o[c], (xr[c] - m) * r * w[c] + b[c]);
  if (threadIdx.x == 0) mean[n] = m, rstd[n] = r;
}

mgt_status cu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C, float eps) {
  if (N == 0) return MGT_OK;
  cuda_ctx *c = C_(ctx);
  if (!in_act16(c, out, (size_t)N * C))
    k_layernorm_forward<<<N, 256, 0, c->stream>>>(out, mean, rstd, x, w, b, C, eps);
  else if (c->precision == MGT_PREC_BF16)
    k_layernorm_forward<<<N, 256, 0, c->stream>>>((__nv_bfloat16 *)out, mean, rstd, x, w, b, C,
                                                  eps);
  else
    k_layernorm_forward<<<N, 256, 0, c->stream>>>((__half *)out, mean, rstd, x, w, b, C, eps);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_layernorm_dx(float *dx, const float *dout, const float *x, const float *w,
                               const float *mean, const float *rstd, int C) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
  const float m = mean[n], r = rstd[n];
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dn = dr[c] * w[c];
    s1 += dn;
    s2 += dn * (xr[c] - m) * r;
  }
  s1 = block_sum(s1, sh) / C;
  s2 = block_sum(s2, sh) / C;
  float *dxr = dx + (size_t)n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dxr[c] += (dr[c] * w[c] - s1 - (xr[c] - m) * r * s2) * r;
}

mgt_status cu_layernorm_backward(void *ctx, float *dx, float *dw, float *db, const float *dout,
                                 const float *x, const float *w, const float *mean,
                                 const float *rstd, int N, int C, int accumulate) {
  cudaStream_t s = C_(ctx)->stream;
  if (N > 0) k_layernorm_dx<<<N, 256, 0, s>>>(dx, dout, x, w, mean, rstd, C);
  LAUNCHED();
  MGT_CHECK(column_sums(C_(ctx), dw, dout, x, mean, rstd, N, C, accumulate));
  MGT_CHECK(column_sums(C_(ctx), db, dout, NULL, NULL, NULL, N, C, accumulate));
  return MGT_OK;
}

__global__ void k_bias_gelu(float *out, float *pre, const float *b, int N, int C) {
  GRID_STRIDE(i, (size_t)N * C) {
    float x = pre[i] + b[i % C];
    pre[i] = x;
    out[i] = gelu_tanh(x);
  }
}

template <typename T>
__global__ void k_bias_gelu16(T *out, float *pre, const float *b, int C, size_t n) {
  GRID_STRIDE(i, n) {
    float x = pre[i] + b[i % C];
    pre[i] = x;
    store16(&out[i], gelu_tanh(x));
  }
}

mgt_status cu_bias_gelu_forward(void *ctx, float *out, float *pre, const float *b, int N, int C) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_bias_gelu<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(out, pre, b, N, C);
  LAUNCHED();
  return MGT_OK;
}

const size_t LT_WORK = 32u << 20;

/* The largest power of two, at most 256, that divides the address (256 for NULL). */
uint32_t ptr_align(const void *p) {
  const uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al != 0)
    al >>= 1;
  return al;
}

mgt_status cu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n);
mgt_status cu_add(void *ctx, float *y, const float *x, size_t n);

/* Builds the plan of one shape (p->sh) with its epilogue. The heuristic is told the operands'
   alignments (p->align: minimum-alignment preferences for A, B, C and D; the bias and aux
   pointers themselves, from which it reads theirs), so the algorithm suits every call whose
   pointers are at least as aligned. Returns false when a cuBLASLt call fails; p->found says
   whether an algorithm was offered. */
bool lt_plan_make(cuda_ctx *c, lt_plan *p, const void *bias, const void *aux) {
  const lt_shape *q = &p->sh;
  const cublasOperation_t ta = q->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = q->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  static const cublasLtEpilogue_t epis[LT_KINDS] = {
      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB,
      CUBLASLT_EPILOGUE_DGELU_BGRAD};
  const cublasLtEpilogue_t epi = epis[q->kind];
  const bool has_aux = q->kind == LT_GELU || q->kind == LT_DGELU;
  const int64_t aux_ld = q->ldd;
  const uint64_t work = LT_WORK;
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                       sizeof aux_ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->la, q->type, q->ta ? q->k : q->m, q->ta ? q->m : q->k,
                                   q->lda);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->lb, q->type, q->tb ? q->n : q->k, q->tb ? q->k : q->n,
                                   q->ldb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, q->m, q->n, q->ldd);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&pref);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &work,
                                             sizeof work);
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    int ptr;
  } aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, LT_A},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, LT_B},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, LT_D},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, LT_D}};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0] && s == CUBLAS_STATUS_SUCCESS; i++)
    s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &p->align[aligns[i].ptr],
                                             sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &h,
                                       &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) s = CUBLAS_STATUS_SUCCESS, found = 0; /* no algorithm */
  if (s != CUBLAS_STATUS_SUCCESS) {
    lt_plan_free(p);
    return false;
  }
  p->used = true;
  p->found = found > 0;
  if (p->found) p->algo = h.algo;
  return true;
}

bool lt_shape_equal(const lt_shape *a, const lt_shape *b) {
  return a->kind == b->kind && a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n &&
         a->k == b->k && a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd &&
         a->beta == b->beta && a->type == b->type;
}

/* Whether plan q serves a call of this shape whose operands have alignments al: a plan with an
   algorithm when every operand is at least as aligned as it was made for; one without when
   none is more aligned (an algorithm for weaker alignment would work for stronger). */
bool lt_plan_fits(const lt_plan *q, const lt_shape *sh, const uint32_t *al) {
  if (!q->used || !lt_shape_equal(&q->sh, sh)) return false;
  for (int i = 0; i < LT_NPTR; i++)
    if (q->found ? al[i] < q->align[i] : al[i] > q->align[i]) return false;
  return true;
}

/* One fused matmul. *fused is set to false, with MGT_OK, when cuBLASLt offers no algorithm
   for the case (the caller then runs the unfused path for this call); an error is a failure
   of cuBLASLt itself. */
mgt_status lt_matmul(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                     const void *bias, const void *aux, bool *fused) {
  *fused = false;
  if (!c->lt && cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS)
    MGT_FAIL(MGT_ERR_BACKEND, "cublasLtCreate failed");
  MGT_CHECK(grow(&c->lt_work, &c->lt_work_n, LT_WORK));
  uint32_t al[LT_NPTR];
  al[LT_A] = ptr_align(A), al[LT_B] = ptr_align(B), al[LT_D] = ptr_align(D);
  al[LT_BIAS] = ptr_align(bias), al[LT_AUX] = ptr_align(aux);
  lt_plan *p = NULL;
  for (int i = 0; i < LT_PLANS && !p; i++)
    if (lt_plan_fits(&c->plans[i], sh, al)) p = &c->plans[i];
  if (!p) {
    p = &c->plans[c->next_plan];
    c->next_plan = (c->next_plan + 1) % LT_PLANS;
    lt_plan_free(p);
    p->sh = *sh;
    memcpy(p->align, al, sizeof al);
    if (!lt_plan_make(c, p, bias, aux)) MGT_FAIL(MGT_ERR_BACKEND, "cuBLASLt matmul setup failed");
  }
  if (!p->found) return MGT_OK;
  const bool has_aux = sh->kind == LT_GELU || sh->kind == LT_DGELU;
  cublasStatus_t s =
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
  const float one = 1.0f, beta = sh->beta ? 1.0f : 0.0f;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmul(c->lt, p->op, &one, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld, &p->algo,
                       c->lt_work, LT_WORK, c->stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    MGT_FAIL(MGT_ERR_BACKEND, "cublasLtMatmul (epilogue %d): cuBLAS status %d", sh->kind, (int)s);
  *fused = true;
  return MGT_OK;
}

cudaDataType_t gemm_type(const cuda_ctx *c) {
  return c->precision == MGT_PREC_FP32 ? CUDA_R_32F
                                       : (c->precision == MGT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F);
}

/* A row-major (rows, cols) operand as the GEMMs multiply it: itself at fp32, else its 16-bit
   copy (the weights' own, or one made in slot k). */
mgt_status gemm_operand(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                        const void **out) {
  if (c->precision == MGT_PREC_FP32) {
    *out = src;
    return MGT_OK;
  }
  return half_copy(c, k, src, rows, cols, ld, out);
}

/* Whether the fused path of `kind` is to be tried at the current precision (and clears the
   record of the last call). */
bool lt_wanted(cuda_ctx *c, int kind) {
  c->lt_last[kind][c->precision] = false;
  return c->lt_state[kind][c->precision] >= 0;
}

/* Runs a fused matmul; *done tells whether it ran, false sending the caller to its unfused
   path. A failure of cuBLASLt itself turns that epilogue off for good at this precision. */
mgt_status lt_fused(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                    const void *bias, const void *aux, bool *done) {
  const int pr = (int)c->precision;
  *done = false;
  if (lt_matmul(c, sh, A, B, D, bias, aux, done) != MGT_OK) {
    c->lt_state[sh->kind][pr] = -1;
    mgt_error_clear();
    *done = false;
    return MGT_OK;
  }
  if (*done) c->lt_state[sh->kind][pr] = 1, c->lt_last[sh->kind][pr] = true;
  return MGT_OK;
}

lt_shape lt_shape_of(const cuda_ctx *c, int kind, int ta, int tb, int m, int n, int k, int lda,
                     int ldb, int ldd, int beta) {
  lt_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.kind = kind, sh.ta = ta, sh.tb = tb, sh.m = m, sh.n = n, sh.k = k;
  sh.lda = lda, sh.ldb = ldb, sh.ldd = ldd, sh.beta = beta, sh.type = gemm_type(c);
  return sh;
}

/* A forward linear layer out (M,N) = A (M,K) W (N,K)^T with a bias epilogue (aux: GeLU's
   pre-activation). Column-major: D (N x M, ld N) = op_T(W: K x N) * (A: K x M). */
mgt_status lt_linear(cuda_ctx *c, int kind, int M, int N, int K, const float *A, int lda,
                     const float *W, int ldw, const float *b, float *aux, float *out, bool *done) {
  const void *a, *w;
  MGT_CHECK(gemm_operand(c, 0, A, M, K, lda, &a));
  MGT_CHECK(gemm_operand(c, 1, W, N, K, ldw, &w));
  const lt_shape sh = lt_shape_of(c, kind, 1, 0, N, M, K, ldw, lda, N, 0);
  return lt_fused(c, &sh, w, a, out, b, aux, done);
}

/* pre = A W^T + b and out = gelu(pre) in one cuBLASLt matmul where it has an algorithm (and N
   is a multiple of 8, which the aux matrix's leading dimension must be), else a GEMM and the
   bias + GeLU kernel. */
mgt_status cu_linear_bias_gelu(void *ctx, int M, int N, int K, const float *A, int lda,
                               const float *W, int ldw, const float *b, float *pre, float *out) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  if (in_act16(c, out, (size_t)M * N)) { /* out kept in 16 bits: GEMM, then bias + GeLU */
    MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, pre, N));
    const size_t n = (size_t)M * N;
    if (c->precision == MGT_PREC_BF16)
      k_bias_gelu16<<<blocks_for(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)out, pre, b, N, n);
    else
      k_bias_gelu16<<<blocks_for(n, 256), 256, 0, c->stream>>>((__half *)out, pre, b, N, n);
    LAUNCHED();
    return MGT_OK;
  }
  if (lt_wanted(c, LT_GELU) && K > 0 && N % 8 == 0) {
    bool done;
    MGT_CHECK(lt_linear(c, LT_GELU, M, N, K, A, lda, W, ldw, b, pre, out, &done));
    if (done) return MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, pre, N));
  return cu_bias_gelu_forward(ctx, out, pre, b, M, N);
}

/* out = A W^T + b: the BIAS epilogue. */
mgt_status cu_linear_bias(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                          int ldw, const float *b, float *out) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  if (b && lt_wanted(c, LT_BIAS_ONLY) && K > 0) {
    bool done;
    MGT_CHECK(lt_linear(c, LT_BIAS_ONLY, M, N, K, A, lda, W, ldw, b, NULL, out, &done));
    if (done) return MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, out, N));
  return b ? cu_add_bias(ctx, out, b, M, N) : MGT_OK;
}

/* Where an epilogue writes a bias gradient of n: db itself, or scratch to be added to an
   accumulated db. */
mgt_status bias_target(cuda_ctx *c, float *db, int n, int accumulate, float **out) {
  *out = db;
  if (!accumulate) return MGT_OK;
  MGT_CHECK(grow((void **)&c->bgrad, &c->bgrad_n, sizeof(float) * (size_t)n));
  *out = c->bgrad;
  return MGT_OK;
}

__global__ void k_round_f32(float *dst, const float *src, size_t n, int bf16) {
  GRID_STRIDE(i, n) {
    dst[i] = bf16 ? __bfloat162float(__float2bfloat16_rn(src[i]))
                  : __half2float(__float2half_rn(src[i]));
  }
}

/* dW (N,K) = [dW +] dy^T x with db = [db +] column sums of dy (as multiplied: rounded under
   16 bits). Column-major: D = dW^T (K x N, ld K) = (x: K x M) * op_T(dy: N x M); BGRADB sums
   B = op_T(dy) over the GEMM's k (the rows M), one value per column of D. An accumulated db
   takes the epilogue's sums from scratch. */
mgt_status cu_linear_param_grads(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                 float *dW, float *db, int accumulate) {
  cuda_ctx *c = C_(ctx);
  if (N == 0 || K == 0) return MGT_OK;
  if (db && M > 0 && lt_wanted(c, LT_BGRAD)) {
    const void *g, *a;
    MGT_CHECK(gemm_operand(c, 0, dy, M, N, N, &g));
    MGT_CHECK(gemm_operand(c, 1, x, M, K, K, &a));
    float *bias;
    MGT_CHECK(bias_target(c, db, N, accumulate, &bias));
    const lt_shape sh = lt_shape_of(c, LT_BGRAD, 0, 1, K, N, M, K, N, K, accumulate);
    bool done;
    MGT_CHECK(lt_fused(c, &sh, a, g, dW, bias, NULL, &done));
    if (done) return accumulate ? cu_add(ctx, db, c->bgrad, (size_t)N) : MGT_OK;
  }
  if (db) {
    const float *src = dy;
    if (c->precision != MGT_PREC_FP32 && M > 0) {
      const size_t n = (size_t)M * N;
      MGT_CHECK(grow((void **)&c->rscratch, &c->rscratch_n, sizeof(float) * n));
      k_round_f32<<<blocks_for(n, 256), 256, 0, c->stream>>>(c->rscratch, dy, n,
                                                             c->precision == MGT_PREC_BF16);
      LAUNCHED();
      src = c->rscratch;
    }
    MGT_CHECK(cu_bias_backward(ctx, db, src, M, N, accumulate));
  }
  return cu_gemm(ctx, 1, 0, N, K, M, 1.0f, dy, N, x, K, accumulate ? 1.0f : 0.0f, dW, K);
}

/* dpre (M,N) = (dy (M,K) W (K,N)) * gelu'(pre), db = [db +] its column sums. Column-major: D
   = dpre^T (N x M, ld N) = (W: N x K) * (dy: K x M); DGELU_BGRAD takes pre as its aux input
   (ld N, a multiple of 8) and sums D along its rows, one value per row of D. */
mgt_status cu_linear_dgelu(void *ctx, int M, int N, int K, const float *dy, const float *W,
                           const float *pre, float *dpre, float *db, int accumulate) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  if (db && K > 0 && N % 8 == 0 && lt_wanted(c, LT_DGELU)) {
    const void *g, *w;
    MGT_CHECK(gemm_operand(c, 0, dy, M, K, K, &g));
    MGT_CHECK(gemm_operand(c, 1, W, K, N, N, &w));
    float *bias;
    MGT_CHECK(bias_target(c, db, N, accumulate, &bias));
    const lt_shape sh = lt_shape_of(c, LT_DGELU, 0, 0, N, M, K, N, K, N, 0);
    bool done;
    MGT_CHECK(lt_fused(c, &sh, w, g, dpre, bias, pre, &done));
    if (done) return accumulate ? cu_add(ctx, db, c->bgrad, (size_t)N) : MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 0, M, N, K, 1.0f, dy, K, W, N, 0.0f, dpre, N));
  MGT_CHECK(cu_gelu_backward(ctx, dpre, dpre, pre, (size_t)M * N));
  return db ? cu_bias_backward(ctx, db, dpre, M, N, accumulate) : MGT_OK;
}

__global__ void k_gelu_backward(float *dpre, const float *dout, const float *pre, size_t n) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  GRID_STRIDE(i, n) {
    float x = pre[i];
    float t = tanhf(k0 * (x + k1 * x * x * x));
    float du = k0 * (1.0f + 3.0f * k1 * x * x);
    dpre[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

mgt_status cu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n) {
  if (!n) return MGT_OK;
  k_gelu_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dpre, dout, pre, n);
  LAUNCHED();
  return MGT_OK;
}

/* ---- BERT's head activations (the CPU's act_value / act_slope) ---- */

__device__ float act_value(int act, float x) {
  if (act == MGT_ACT_GELU_ERF) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if (act == MGT_ACT_TANH) return tanhf(x);
  return gelu_tanh(x);
}

__device__ float act_slope(int act, float x) {
  if (act == MGT_ACT_GELU_ERF)
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
           x * 0.39894228040143268f * expf(-0.5f * x * x);
  if (act == MGT_ACT_TANH) {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  float t = tanhf(k0 * (x + k1 * x * x * x)), du = k0 * (1.0f + 3.0f * k1 * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ void k_bias_act(int act, float *out, float *pre, const float *b, int C, size_t n) {
  GRID_STRIDE(i, n) {
    float x = pre[i] + (b ? b[i % C] : 0.0f);
    pre[i] = x;
    out[i] = act_value(act, x);
  }
}

mgt_status cu_bias_act_forward(void *ctx, int act, float *out, float *pre, const float *b, int N,
                               int C) {
  const size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  k_bias_act<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(act, out, pre, b, C, n);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_act_backward(int act, float *dpre, const float *dout, const float *pre,
                               size_t n) {
  GRID_STRIDE(i, n) dpre[i] = dout[i] * act_slope(act, pre[i]);
}

mgt_status cu_act_backward(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                           size_t n) {
  if (!n) return MGT_OK;
  k_act_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(act, dpre, dout, pre, n);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_gather_rows(float *out, const float *x, const int32_t *idx, int C, size_t n) {
  GRID_STRIDE(i, n) out[i] = x[(size_t)idx[i / C] * C + i % C];
}

mgt_status cu_gather_rows(void *ctx, float *out, const float *x, const int32_t *idx, int M, int C) {
  const size_t n = (size_t)M * C;
  if (!n) return MGT_OK;
  k_gather_rows<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(out, x, idx, C, n);
  LAUNCHED();
  return MGT_OK;
}

/* distinct rows: no two threads write one element */
__global__ void k_scatter_add_rows(float *dx, const float *dy, const int32_t *idx, int C,
                                   size_t n) {
  GRID_STRIDE(i, n) dx[(size_t)idx[i / C] * C + i % C] += dy[i];
}

mgt_status cu_scatter_add_rows(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                               int C) {
  const size_t n = (size_t)M * C;
  if (!n) return MGT_OK;
  k_scatter_add_rows<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dx, dy, idx, C, n);
  LAUNCHED();
  return MGT_OK;
}

/* ---- attention ---- */

/* Keys row (b*Hl + h)*T + i attends to: i + 1 when causal (keylen NULL), else the sample's
   length, as the CPU's key_limit. */
__device__ int key_limit(const int32_t *keylen, size_t row, int Hl, int T) {
  const int i = (int)(row % T);
  if (!keylen) return i + 1;
  const int n = keylen[row / ((size_t)Hl * T)];
  return n < 1 ? 1 : (n > T ? T : n);
}

/* Softmax of one row over its keys, in place, zeros beyond them. One block per row. */
__global__ void k_masked_softmax(float *P, const int32_t *keylen, int Hl, int T) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x; /* (b*Hl + h)*T + i */
  const int lim = key_limit(keylen, row, Hl, T);
  float *r = P + row * T;
  float mx = -FLT_MAX;
  for (int j = threadIdx.x; j < lim; j += blockDim.x)
    mx = fmaxf(mx, r[j]);
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int j = threadIdx.x; j < lim; j += blockDim.x) {
    float e = __expf(r[j] - mx);
    r[j] = e;
    s += e;
  }
  const float inv = 1.0f / block_sum(s, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    r[j] = j < lim ? r[j] * inv : 0.0f;
}

struct mask_args {
  uint64_t seed, sample_base;
  int layer, site, head_offset, Hl, T;
  uint32_t thr;
  float dscale;
};

/* Mask word of element (row, j) of the probabilities: ((global head)*T + i)*T + j. */
__device__ bool attn_keep(const mask_args &a, size_t row, int j) {
  const int i = (int)(row % a.T), bh = (int)(row / a.T), h = bh % a.Hl, b = bh / a.Hl;
  const uint64_t stream = mgt_philox_dropout_stream(a.sample_base + (uint64_t)b, a.layer, a.site);
  const uint64_t e = ((uint64_t)(a.head_offset + h) * a.T + (uint64_t)i) * (uint64_t)a.T + j;
  return keep_word(a.seed, stream, e, a.thr);
}

/* out = dropout(x) on the probabilities (or gradients) of B*Hl*T rows, within their keys. */
__global__ void k_attn_dropout(float *out, const float *x, size_t n, const int32_t *keylen,
                               mask_args a) {
  GRID_STRIDE(k, n) {
    size_t row = k / a.T;
    int j = (int)(k % a.T);
    out[k] =
        (j < key_limit(keylen, row, a.Hl, a.T) && attn_keep(a, row, j)) ? x[k] * a.dscale : 0.0f;
  }
}

/* dS from dP (in s) and P: r = P * (dP - sum(P dP)) * scale within the row's keys. One
   block per row. */
__global__ void k_softmax_backward(float *s, const float *P, const int32_t *keylen, int Hl, int T,
                                   float scale) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  const int lim = key_limit(keylen, row, Hl, T);
  float *r = s + row * T;
  const float *pr = P + row * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j < lim; j += blockDim.x)
    dot += pr[j] * r[j];
  dot = block_sum(dot, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    r[j] = j < lim ? pr[j] * (r[j] - dot) * scale : 0.0f;
}

mask_args mask_of(const mgt_dropout *d, int head_offset, int Hl, int T) {
  mask_args a;
  a.seed = d->seed;
  a.sample_base = d->sample_base;
  a.layer = d->layer;
  a.site = d->site;
  a.head_offset = head_offset;
  a.Hl = Hl;
  a.T = T;
  a.thr = mgt_dropout_threshold(d->p);
  a.dscale = 1.0f / (1.0f - d->p);
  return a;
}

mgt_status cu_attention_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                const mgt_dropout *d, float *scratch) {
  cuda_ctx *c = C_(ctx);
  const int Cl = Hl * hd, ld = 3 * Cl;
  const float scale = 1.0f / sqrtf((float)hd);
  const long long TT = (long long)T * T;
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * ld;
    MGT_CHECK(gemm_batched(c, 0, 1, T, T, hd, scale, q, ld, hd, q + Cl, ld, hd, 0.0f,
                           P + (size_t)b * Hl * TT, T, TT, Hl));
  }
  k_masked_softmax<<<(unsigned)rows, 128, 0, c->stream>>>(P, keylen, Hl, T);
  LAUNCHED();
  const float *probs = P;
  if (d->p > 0.0f) {
    k_attn_dropout<<<blocks_for(rows * T, 256), 256, 0, c->stream>>>(
        scratch, P, rows * T, keylen, mask_of(d, head_offset, Hl, T));
    LAUNCHED();
    probs = scratch;
  }
  for (int b = 0; b < B; b++)
    MGT_CHECK(gemm_batched(c, 0, 0, T, hd, T, 1.0f, probs + (size_t)b * Hl * TT, T, TT,
                           qkv + (size_t)b * T * ld + 2 * Cl, ld, hd, 0.0f,
                           out + (size_t)b * T * Cl, Cl, hd, Hl));
  return MGT_OK;
}

mgt_status cu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                 const float *P, int B, int T, int Hl, int hd, int head_offset,
                                 int H, const int32_t *keylen, const mgt_dropout *d,
                                 float *scratch) {
  cuda_ctx *c = C_(ctx);
  const int Cl = Hl * hd, ld = 3 * Cl;
  const float scale = 1.0f / sqrtf((float)hd);
  const int drop = d->p > 0.0f;
  const long long TT = (long long)T * T;
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  const mask_args ma = drop ? mask_of(d, head_offset, Hl, T) : mask_args();
  /* dV = Pd^T dO, with Pd rebuilt from the mask into scratch */
  const float *probs = P;
  if (drop) {
    k_attn_dropout<<<blocks_for(rows * T, 256), 256, 0, c->stream>>>(scratch, P, rows * T, keylen,
                                                                     ma);
    LAUNCHED();
    probs = scratch;
  }
  for (int b = 0; b < B; b++)
    MGT_CHECK(gemm_batched(c, 1, 0, T, hd, T, 1.0f, probs + (size_t)b * Hl * TT, T, TT,
                           dout + (size_t)b * T * Cl, Cl, hd, 0.0f,
                           dqkv + (size_t)b * T * ld + 2 * Cl, ld, hd, Hl));
  /* dPd = dO V^T into scratch, through the mask, then the softmax */
  for (int b = 0; b < B; b++)
    MGT_CHECK(gemm_batched(c, 0, 1, T, T, hd, 1.0f, dout + (size_t)b * T * Cl, Cl, hd,
                           qkv + (size_t)b * T * ld + 2 * Cl, ld, hd, 0.0f,
                           scratch + (size_t)b * Hl * TT, T, TT, Hl));
  if (drop) {
    k_attn_dropout<<<blocks_for(rows * T, 256), 256, 0, c->stream>>>(scratch, scratch, rows * T,
                                                                     keylen, ma);
    LAUNCHED();
  }
  k_softmax_backward<<<(unsigned)rows, 128, 0, c->stream>>>(scratch, P, keylen, Hl, T, scale);
  LAUNCHED();
  /* dQ = dS K, dK = dS^T Q */
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * ld;
    float *dq = dqkv + (size_t)b * T * ld;
    const float *s = scratch + (size_t)b * Hl * TT;
    MGT_CHECK(
        gemm_batched(c, 0, 0, T, hd, T, 1.0f, s, T, TT, q + Cl, ld, hd, 0.0f, dq, ld, hd, Hl));
    MGT_CHECK(
        gemm_batched(c, 1, 0, T, hd, T, 1.0f, s, T, TT, q, ld, hd, 0.0f, dq + Cl, ld, hd, Hl));
  }
  return MGT_OK;
}

/* ---- flash attention (--use-flash-attn) ----
   The twin of kernels/cpu/flash.c, written for correctness first: one block per query row
   (forward, dQ) or key row (dK, dV), keys or queries in tiles of the block's 128 threads with
   an online softmax, nothing of T x T in memory and no atomics (each block owns its outputs).
   The same mask words as the materialized kernels (attn_keep). */

enum { FLASH_TILE = 128 };

/* (b, h, i) of row (b*Hl + h)*T + i, and where head h of sample b starts in qkv. */
struct flash_row {
  int b, h, i;
  size_t base; /* qkv offset of token 0's query of this head */
};

__device__ flash_row flash_row_of(size_t row, int T, int Hl, int hd) {
  flash_row r;
  r.i = (int)(row % T);
  const int bh = (int)(row / T);
  r.h = bh % Hl, r.b = bh / Hl;
  r.base = (size_t)r.b * T * 3 * Hl * hd + (size_t)r.h * hd;
  return r;
}

/* Dot product of hd floats (shared x, global y). */
__device__ float flash_dot(const float *x, const float *y, int hd) {
  float acc = 0.0f;
  for (int e = 0; e < hd; e++)
    acc += x[e] * y[e];
  return acc;
}

/* Shared memory: q (hd), output accumulator (hd), tile weights (FLASH_TILE). */
__global__ void k_flash_forward(float *out, float *lse, const float *qkv, int T, int Hl, int hd,
                                float scale, const int32_t *keylen, mask_args a, int drop) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  float *sq = sm, *so = sm + hd, *sp = sm + 2 * hd;
  const size_t row = blockIdx.x;
  const flash_row r = flash_row_of(row, T, Hl, hd);
  const int Cl = Hl * hd, ld = 3 * Cl, lim = key_limit(keylen, row, Hl, T);
  const float *k = qkv + r.base + Cl, *v = qkv + r.base + 2 * Cl;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    sq[e] = qkv[r.base + (size_t)r.i * ld + e];
    so[e] = 0.0f;
  }
  __syncthreads();
  float m = -FLT_MAX, l = 0.0f;
  for (int j0 = 0; j0 < lim; j0 += FLASH_TILE) {
    const int j = j0 + (int)threadIdx.x, n = lim - j0 < FLASH_TILE ? lim - j0 : FLASH_TILE;
    const float s = j < lim ? flash_dot(sq, k + (size_t)j * ld, hd) * scale : -FLT_MAX;
    const float mx = fmaxf(m, block_max(s, red)), alpha = __expf(m - mx);
    float p = j < lim ? __expf(s - mx) : 0.0f;
    l = l * alpha + block_sum(p, red);
    m = mx;
    if (drop && j < lim && !attn_keep(a, row, j)) p = 0.0f;
    sp[threadIdx.x] = drop ? p * a.dscale : p;
    __syncthreads();
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
      float acc = so[e] * alpha;
      for (int t = 0; t < n; t++)
        acc += sp[t] * v[(size_t)(j0 + t) * ld + e];
      so[e] = acc;
    }
    __syncthreads();
  }
  const float inv = 1.0f / l;
  for (int e = threadIdx.x; e < hd; e += blockDim.x)
    out[((size_t)r.b * T + r.i) * Cl + (size_t)r.h * hd + e] = so[e] * inv;
  if (threadIdx.x == 0) lse[row] = m + logf(l);
}

/* dQ of one query row, and D = dO . O kept for the key rows. Shared: q, dO, dq (hd each), tile
   dS (FLASH_TILE). */
__global__ void k_flash_dq(float *dqkv, float *D, const float *dout, const float *qkv,
                           const float *out, const float *lse, int T, int Hl, int hd, float scale,
                           const int32_t *keylen, mask_args a, int drop) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  float *sq = sm, *sdo = sm + hd, *sdq = sm + 2 * hd, *sds = sm + 3 * hd;
  const size_t row = blockIdx.x;
  const flash_row r = flash_row_of(row, T, Hl, hd);
  const int Cl = Hl * hd, ld = 3 * Cl, lim = key_limit(keylen, row, Hl, T);
  const float *k = qkv + r.base + Cl, *v = qkv + r.base + 2 * Cl;
  const size_t orow = ((size_t)r.b * T + r.i) * Cl + (size_t)r.h * hd;
  float part = 0.0f;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    sq[e] = qkv[r.base + (size_t)r.i * ld + e];
    sdo[e] = dout[orow + e];
    sdq[e] = 0.0f;
    part += sdo[e] * out[orow + e];
  }
  const float Di = block_sum(part, red), L = lse[row];
  if (threadIdx.x == 0) D[row] = Di;
  for (int j0 = 0; j0 < lim; j0 += FLASH_TILE) {
    const int j = j0 + (int)threadIdx.x, n = lim - j0 < FLASH_TILE ? lim - j0 : FLASH_TILE;
    float ds = 0.0f;
    if (j < lim) {
      const float p = __expf(flash_dot(sq, k + (size_t)j * ld, hd) * scale - L);
      const float kd = drop ? (attn_keep(a, row, j) ? a.dscale : 0.0f) : 1.0f;
      ds = p * (flash_dot(sdo, v + (size_t)j * ld, hd) * kd - Di) * scale;
    }
    sds[threadIdx.x] = ds;
    __syncthreads();
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
      float acc = sdq[e];
      for (int t = 0; t < n; t++)
        acc += sds[t] * k[(size_t)(j0 + t) * ld + e];
      sdq[e] = acc;
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < hd; e += blockDim.x)
    dqkv[r.base + (size_t)r.i * ld + e] = sdq[e];
}

/* dK and dV of one key row j over the query rows that see it. Shared: k, v, dk, dv (hd each),
   tile dS and dropped probabilities (FLASH_TILE each). */
__global__ void k_flash_dkv(float *dqkv, const float *D, const float *dout, const float *qkv,
                            const float *lse, int T, int Hl, int hd, float scale,
                            const int32_t *keylen, mask_args a, int drop) {
  extern __shared__ float sm[];
  float *sk = sm, *sv = sm + hd, *sdk = sm + 2 * hd, *sdv = sm + 3 * hd, *sds = sm + 4 * hd,
        *spd = sds + FLASH_TILE;
  const size_t krow = blockIdx.x; /* (b*Hl + h)*T + j */
  const flash_row r = flash_row_of(krow, T, Hl, hd);
  const int Cl = Hl * hd, ld = 3 * Cl, j = r.i;
  const size_t first = krow - (size_t)j; /* row of query 0 of this (b, h) */
  const float *q = qkv + r.base;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    sk[e] = qkv[r.base + Cl + (size_t)j * ld + e];
    sv[e] = qkv[r.base + 2 * Cl + (size_t)j * ld + e];
    sdk[e] = sdv[e] = 0.0f;
  }
  __syncthreads();
  /* the queries that see key j: i >= j (causal), every row if j is inside the sample's length */
  const int i_lo = keylen ? 0 : j, i_hi = key_limit(keylen, first, Hl, T) > j || !keylen ? T : 0;
  for (int i0 = i_lo; i0 < i_hi; i0 += FLASH_TILE) {
    const int i = i0 + (int)threadIdx.x, n = i_hi - i0 < FLASH_TILE ? i_hi - i0 : FLASH_TILE;
    float ds = 0.0f, pd = 0.0f;
    if (i < i_hi) {
      const size_t qrow = first + (size_t)i;
      const size_t orow = ((size_t)r.b * T + i) * Cl + (size_t)r.h * hd;
      const float p = __expf(flash_dot(sk, q + (size_t)i * ld, hd) * scale - lse[qrow]);
      const float kd = drop ? (attn_keep(a, qrow, j) ? a.dscale : 0.0f) : 1.0f;
      pd = p * kd;
      ds = p * (flash_dot(sv, dout + orow, hd) * kd - D[qrow]) * scale;
    }
    sds[threadIdx.x] = ds;
    spd[threadIdx.x] = pd;
    __syncthreads();
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
      float gk = sdk[e], gv = sdv[e];
      for (int t = 0; t < n; t++) {
        gk += sds[t] * q[(size_t)(i0 + t) * ld + e];
        gv += spd[t] * dout[((size_t)r.b * T + i0 + t) * Cl + (size_t)r.h * hd + e];
      }
      sdk[e] = gk, sdv[e] = gv;
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    dqkv[r.base + Cl + (size_t)j * ld + e] = sdk[e];
    dqkv[r.base + 2 * Cl + (size_t)j * ld + e] = sdv[e];
  }
}

mgt_status cu_flash_attention_forward(void *ctx, float *out, float *lse, const float *qkv, int B,
                                      int T, int Hl, int hd, int head_offset, const int32_t *keylen,
                                      const mgt_dropout *d) {
  cuda_ctx *c = C_(ctx);
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  if (c->precision != MGT_PREC_FP32 && flash16_supported(hd))
    return flash16_forward(c->stream, c->precision == MGT_PREC_BF16, out, lse, qkv, B, T, Hl, hd,
                           head_offset, keylen, d);
  const int drop = d->p > 0.0f;
  const mask_args a = drop ? mask_of(d, head_offset, Hl, T) : mask_args();
  const size_t shared = sizeof(float) * (2 * (size_t)hd + FLASH_TILE);
  k_flash_forward<<<(unsigned)rows, FLASH_TILE, shared, c->stream>>>(
      out, lse, qkv, T, Hl, hd, 1.0f / sqrtf((float)hd), keylen, a, drop);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int Hl,
                                       int hd, int head_offset, const int32_t *keylen,
                                       const mgt_dropout *d) {
  cuda_ctx *c = C_(ctx);
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  const int drop = d->p > 0.0f;
  const mask_args a = drop ? mask_of(d, head_offset, Hl, T) : mask_args();
  const float scale = 1.0f / sqrtf((float)hd);
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * rows));
  if (c->precision != MGT_PREC_FP32 && flash16_supported(hd))
    return flash16_backward(c->stream, c->precision == MGT_PREC_BF16, dqkv, c->fscratch, dout, qkv,
                            out, lse, B, T, Hl, hd, head_offset, keylen, d);
  k_flash_dq<<<(unsigned)rows, FLASH_TILE, sizeof(float) * (3 * (size_t)hd + FLASH_TILE),
               c->stream>>>(dqkv, c->fscratch, dout, qkv, out, lse, T, Hl, hd, scale, keylen, a,
                            drop);
  LAUNCHED();
  k_flash_dkv<<<(unsigned)rows, FLASH_TILE, sizeof(float) * (4 * (size_t)hd + 2 * FLASH_TILE),
                c->stream>>>(dqkv, c->fscratch, dout, qkv, lse, T, Hl, hd, scale, keylen, a, drop);
  LAUNCHED();
  return MGT_OK;
}

/* One block per head: scores over the cache, softmax, weighted sum of values. w holds
   Hl * len floats. */
__global__ void k_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                                   float *w, int len, int Hl, int hd, float scale) {
  __shared__ float sh[32];
  const int h = blockIdx.x, Cl = Hl * hd;
  const float *qh = q + (size_t)h * hd;
  float *wh = w + (size_t)h * len;
  float mx = -FLT_MAX;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    const float *k = kc + (size_t)t * Cl + (size_t)h * hd;
    float dot = 0.0f;
    for (int e = 0; e < hd; e++)
      dot += qh[e] * k[e];
    wh[t] = dot * scale;
    mx = fmaxf(mx, wh[t]);
  }
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    wh[t] = __expf(wh[t] - mx);
    s += wh[t];
  }
  const float inv = 1.0f / block_sum(s, sh); /* also orders the writes of wh before the reads */
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < len; t++)
      acc += wh[t] * vc[(size_t)t * Cl + (size_t)h * hd + e];
    out[(size_t)h * hd + e] = acc * inv;
  }
}

mgt_status cu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                               const float *vc, int len, int Hl, int hd) {
  cuda_ctx *c = C_(ctx);
  if (Hl == 0 || len == 0) return MGT_OK;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * (size_t)Hl * len));
  k_attention_decode<<<Hl, 128, 0, c->stream>>>(out, q, kc, vc, c->fscratch, len, Hl, hd,
                                                1.0f / sqrtf((float)hd));
  LAUNCHED();
  return MGT_OK;
}

/* ---- embeddings ---- */

__global__ void k_embedding_forward(float *out, const int32_t *tokens, const float *wte, int N,
                                    int C, int v0, int Vl) {
  GRID_STRIDE(i, (size_t)N * C) {
    int n = (int)(i / C), c = (int)(i % C), t = tokens[n] - v0;
    out[i] = (t >= 0 && t < Vl) ? wte[(size_t)t * C + c] : 0.0f;
  }
}

mgt_status cu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                int N, int C, int v0, int Vl) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_embedding_forward<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(out, tokens, wte,
                                                                                   N, C, v0, Vl);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_add_position(float *x, const float *wpe, int t0, int T, int C, size_t n) {
  GRID_STRIDE(i, n) x[i] += wpe[((t0 + i / C) % T) * C + i % C];
}

mgt_status cu_add_position(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C) {
  size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  k_add_position<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(x, wpe, t0, T, C, n);
  LAUNCHED();
  return MGT_OK;
}

/* One thread per column, rows in order: a token seen twice adds in row order, as on the CPU,
   without atomics. */
__global__ void k_embedding_backward_wte(float *dwte, const float *dout, const int32_t *tokens,
                                         int N, int C, int v0, int Vl) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; n++) {
    int t = tokens[n] - v0;
    if (t >= 0 && t < Vl) dwte[(size_t)t * C + c] += dout[(size_t)n * C + c];
  }
}

__global__ void k_embedding_backward_wpe(float *dwpe, const float *dout, int B, int T, int C,
                                         int acc) {
  GRID_STRIDE(i, (size_t)T * C) {
    float s = acc ? dwpe[i] : 0.0f;
    for (int b = 0; b < B; b++)
      s += dout[(size_t)b * T * C + i];
    dwpe[i] = s;
  }
}

mgt_status cu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, int B, int T, int C, int v0, int Vl,
                                 int accumulate) {
  cudaStream_t s = C_(ctx)->stream;
  if (C == 0) return MGT_OK;
  k_embedding_backward_wte<<<(C + 127) / 128, 128, 0, s>>>(dwte, dout, tokens, B * T, C, v0, Vl);
  LAUNCHED();
  if (dwpe && (size_t)T * C > 0) {
    k_embedding_backward_wpe<<<blocks_for((size_t)T * C, 256), 256, 0, s>>>(dwpe, dout, B, T, C,
                                                                            accumulate);
    LAUNCHED();
  }
  return MGT_OK;
}

/* ---- dropout, residual ---- */

__global__ void k_dropout(float *out, const float *x, const float *res, size_t n, size_t row,
                          uint64_t first, uint64_t seed, uint64_t sample_base, int layer, int site,
                          uint32_t thr, float scale, int drop) {
  GRID_STRIDE(i, n) {
    float v = x[i];
    if (drop) {
      uint64_t b = (first + i) / row, e = (first + i) % row;
      uint64_t stream = mgt_philox_dropout_stream(sample_base + b, layer, site);
      v = keep_word(seed, stream, e, thr) ? v * scale : 0.0f;
    }
    out[i] = (res ? res[i] : 0.0f) + v;
  }
}

mgt_status cu_dropout_forward(void *ctx, float *out, const float *x, const float *res, size_t n,
                              size_t row, const mgt_dropout *d) {
  if (!n) return MGT_OK;
  const int drop = d->p > 0.0f;
  k_dropout<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(
      out, x, res, n, row, d->first, d->seed, d->sample_base, d->layer, d->site,
      drop ? mgt_dropout_threshold(d->p) : 0u, drop ? 1.0f / (1.0f - d->p) : 1.0f, drop);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_dropout_backward(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                               const mgt_dropout *d) {
  if (d->p <= 0.0f && dx == dout) return MGT_OK;
  return cu_dropout_forward(ctx, dx, dout, NULL, n, row, d);
}

/* A dropout site's parameters as the kernels take them. */
struct drop_args {
  uint64_t first, seed, sample_base;
  int layer, site, drop;
  uint32_t thr;
  float scale;
};

drop_args drop_args_of(const mgt_dropout *d) {
  drop_args a;
  a.first = d->first, a.seed = d->seed, a.sample_base = d->sample_base;
  a.layer = d->layer, a.site = d->site, a.drop = d->p > 0.0f;
  a.thr = a.drop ? mgt_dropout_threshold(d->p) : 0u;
  a.scale = a.drop ? 1.0f / (1.0f - d->p) : 1.0f;
  return a;
}

/* res + dropout(x + b) for element i of the buffer, the CPU's operations in its order. */
__device__ float bias_dropout_add_at(const float *x, const float *b, const float *res, int C,
                                     size_t i, size_t row, const drop_args &a) {
  float v = b ? x[i] + b[i % C] : x[i];
  if (a.drop) {
    uint64_t s = (a.first + i) / row, e = (a.first + i) % row;
    v = keep_word(a.seed, mgt_philox_dropout_stream(a.sample_base + s, a.layer, a.site), e, a.thr)
            ? v * a.scale
            : 0.0f;
  }
  return (res ? res[i] : 0.0f) + v;
}

__global__ void k_bias_dropout_add(float *out, const float *x, const float *b, const float *res,
                                   int C, size_t n, size_t row, drop_args a) {
  GRID_STRIDE(i, n) out[i] = bias_dropout_add_at(x, b, res, C, i, row, a);
}

/* One row per block: the sum, then the LayerNorm of it with k_layernorm_forward's arithmetic. */
template <typename TO>
__global__ void k_bias_dropout_add_ln(float *out, TO *ln, float *mean, float *rstd, const float *x,
                                      const float *b, const float *res, const float *w,
                                      const float *lb, int C, float eps, size_t row, drop_args a) {
  __shared__ float sh[32];
  const size_t base = (size_t)blockIdx.x * C;
  float *o = out + base;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = bias_dropout_add_at(x, b, res, C, base + c, row, a);
    o[c] = y;
    s += y;
  }
  const float m = block_sum(s, sh) / C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) /* each thread rereads what it wrote */
    v += (o[c] - m) * (o[c] - m);
  const float r = rsqrtf(block_sum(v, sh) / C + eps);
  TO *l = ln + base;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    put(&l[c], (o[c] - m) * r * w[c] + lb[c]);
  if (threadIdx.x == 0) mean[blockIdx.x] = m, rstd[blockIdx.x] = r;
}

mgt_status cu_bias_dropout_add_ln(void *ctx, float *out, float *x, const float *b, const float *res,
                                  int N, int C, size_t row, const mgt_dropout *d, float *ln,
                                  float *mean, float *rstd, const float *w, const float *lb,
                                  float eps) {
  const size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  cudaStream_t st = C_(ctx)->stream;
  const drop_args a = drop_args_of(d);
  cuda_ctx *c = C_(ctx);
  if (ln && !in_act16(c, ln, n))
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, ln, mean, rstd, x, b, res, w, lb, C, eps, row, a);
  else if (ln && c->precision == MGT_PREC_BF16)
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, (__nv_bfloat16 *)ln, mean, rstd, x, b, res, w, lb,
                                             C, eps, row, a);
  else if (ln)
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, (__half *)ln, mean, rstd, x, b, res, w, lb, C,
                                             eps, row, a);
  else
    k_bias_dropout_add<<<blocks_for(n, 256), 256, 0, st>>>(out, x, b, res, C, n, row, a);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_add(float *y, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }

mgt_status cu_add(void *ctx, float *y, const float *x, size_t n) {
  if (!n) return MGT_OK;
  k_add<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(y, x, n);
  LAUNCHED();
  return MGT_OK;
}

/* ---- vocabulary-parallel cross-entropy ---- */

__global__ void k_xent_max(float *rowmax, const float *logits, int Vl, int nv) {
  __shared__ float sh[32];
  const float *r = logits + (size_t)blockIdx.x * Vl;
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < nv; j += blockDim.x)
    m = fmaxf(m, r[j]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

mgt_status cu_xent_max(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv) {
  if (N == 0) return MGT_OK;
  k_xent_max<<<N, 256, 0, C_(ctx)->stream>>>(rowmax, logits, Vl, nv);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_xent_sumexp(float *sum, float *tgt, float *logits, const float *rowmax,
                              const int32_t *targets, int Vl, int nv, int v0, int keep_exp) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  float *r = logits + (size_t)n * Vl;
  const float m = rowmax[n];
  const int t = targets[n] - v0;
  if (threadIdx.x == 0) tgt[n] = (t >= 0 && t < nv) ? r[t] : 0.0f;
  __syncthreads(); /* the target logit is read before keep_exp overwrites it */
  float s = 0.0f;
  for (int j = threadIdx.x; j < nv; j += blockDim.x) {
    float e = __expf(r[j] - m);
    if (keep_exp) r[j] = e;
    s += e;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) sum[n] = s;
}

mgt_status cu_xent_sumexp(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                          const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp) {
  if (N == 0) return MGT_OK;
  k_xent_sumexp<<<N, 256, 0, C_(ctx)->stream>>>(sum, tgt, logits, rowmax, targets, Vl, nv, v0,
                                                keep_exp);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_xent_loss(float *losses, const float *rowmax, const float *sum, const float *tgt,
                            int N) {
  GRID_STRIDE(n, (size_t)N) losses[n] = logf(sum[n]) + rowmax[n] - tgt[n];
}

mgt_status cu_xent_loss(void *ctx, float *losses, const float *rowmax, const float *sum,
                        const float *tgt, int N, double *total) {
  cuda_ctx *c = C_(ctx);
  *total = 0.0;
  if (N == 0) return MGT_OK;
  k_xent_loss<<<blocks_for((size_t)N, 256), 256, 0, c->stream>>>(losses, rowmax, sum, tgt, N);
  LAUNCHED();
  /* summed on the host in double, in row order, as the CPU twin does */
  float *h = NULL;
  MGT_CHECK(host_buffer(c, (size_t)N, &h));
  MGT_CHECK(cu_download(ctx, h, losses, sizeof(float) * (size_t)N));
  double acc = 0.0;
  for (int n = 0; n < N; n++)
    acc += h[n];
  *total = acc;
  return MGT_OK;
}

__global__ void k_xent_backward(float *logits, const float *sum, const int32_t *targets, int N,
                                int Vl, int nv, int v0, float scale) {
  GRID_STRIDE(i, (size_t)N * Vl) {
    int n = (int)(i / Vl), j = (int)(i % Vl), t = targets[n] - v0;
    float g = j < nv ? logits[i] * (scale / sum[n]) : 0.0f;
    if (j == t && t < nv) g -= scale;
    logits[i] = g;
  }
}

mgt_status cu_xent_backward(void *ctx, float *logits, const float *sum, const int32_t *targets,
                            int N, int Vl, int nv, int v0, float scale) {
  size_t n = (size_t)N * Vl;
  if (!n) return MGT_OK;
  k_xent_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(logits, sum, targets, N, Vl, nv,
                                                                   v0, scale);
  LAUNCHED();
  return MGT_OK;
}

/* Row argmax, lowest index on ties: one block per row. out holds (value, index) pairs. */
__global__ void k_argmax(float *out, const float *logits, int Vl, int nv) {
  __shared__ float sv[256];
  __shared__ int si[256];
  const float *r = logits + (size_t)blockIdx.x * Vl;
  float best = -FLT_MAX;
  int at = -1;
  for (int j = threadIdx.x; j < nv; j += blockDim.x)
    if (at < 0 || r[j] > best) best = r[j], at = j; /* j ascends: ties keep the first */
  sv[threadIdx.x] = best;
  si[threadIdx.x] = at;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < (unsigned)o) {
      float v2 = sv[threadIdx.x + o];
      int i2 = si[threadIdx.x + o];
      bool take = i2 >= 0 && (si[threadIdx.x] < 0 || v2 > sv[threadIdx.x] ||
                              (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x]));
      if (take) sv[threadIdx.x] = v2, si[threadIdx.x] = i2;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = sv[0];
    out[2 * blockIdx.x + 1] = __int_as_float(si[0]);
  }
}

mgt_status cu_argmax(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                     int32_t *idx) {
  cuda_ctx *c = C_(ctx);
  if (N == 0) return MGT_OK;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * 2 * (size_t)N));
  k_argmax<<<N, 256, 0, c->stream>>>(c->fscratch, logits, Vl, nv);
  LAUNCHED();
  float *h = NULL;
  MGT_CHECK(host_buffer(c, 2 * (size_t)N, &h));
  MGT_CHECK(cu_download(ctx, h, c->fscratch, sizeof(float) * 2 * (size_t)N));
  for (int n = 0; n < N; n++) {
    val[n] = h[2 * n];
    memcpy(&idx[n], &h[2 * n + 1], sizeof(int32_t));
  }
  return MGT_OK;
}

/* ---- optimizer ---- */

/* The sum of squares in two passes of fixed order, so that the gradient norm is the same run
   to run (as on the CPU; no atomics): each block adds float partials of SUMSQ_CHUNK elements
   (its chunks in grid-stride order) in double and writes the total to part[blockIdx.x]; then
   one block adds every segment's partials in index order and a fixed tree. */
enum { SUMSQ_CHUNK = 4096, SUMSQ_BLOCKS = 1024, SUMSQ_FINISH = 256 };

__global__ void k_sumsq_partial(double *part, const float *x, size_t n) {
  __shared__ float sh[32];
  double acc = 0.0;
  /* float partials of bounded length, summed in double, as on the CPU */
  for (size_t base = (size_t)blockIdx.x * SUMSQ_CHUNK; base < n;
       base += (size_t)gridDim.x * SUMSQ_CHUNK) {
    float f = 0.0f;
    size_t end = base + SUMSQ_CHUNK < n ? base + SUMSQ_CHUNK : n;
    for (size_t i = base + threadIdx.x; i < end; i += blockDim.x)
      f += x[i] * x[i];
    f = block_sum(f, sh);
    acc += f;
  }
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* One block of SUMSQ_FINISH threads (a power of two): thread t adds part[t], part[t + 256],
   ... in order, then the threads' sums meet in a fixed tree. */
__global__ void k_sumsq_finish(double *out, const double *part, size_t n) {
  __shared__ double sh[SUMSQ_FINISH];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x)
    s += part[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

unsigned sumsq_blocks(size_t n) {
  size_t nb = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  return (unsigned)(nb < (size_t)SUMSQ_BLOCKS ? nb : (size_t)SUMSQ_BLOCKS);
}

mgt_status cu_sumsq(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out) {
  cuda_ctx *c = C_(ctx);
  size_t parts = 0;
  for (int k = 0; k < nseg; k++)
    if (segs[k].count_in_norm && segs[k].n > 0) parts += sumsq_blocks(segs[k].n);
  /* sized by the first call (the first step) and kept */
  MGT_CHECK(grow((void **)&c->dpart, &c->dpart_n, sizeof(double) * (parts > 0 ? parts : 1)));
  size_t at = 0;
  for (int k = 0; k < nseg; k++) {
    if (!segs[k].count_in_norm || segs[k].n == 0) continue;
    const unsigned nb = sumsq_blocks(segs[k].n);
    k_sumsq_partial<<<nb, 256, 0, c->stream>>>(c->dpart + at, x + segs[k].offset, segs[k].n);
    LAUNCHED();
    at += nb;
  }
  k_sumsq_finish<<<1, SUMSQ_FINISH, 0, c->stream>>>(c->dsum, c->dpart, parts);
  LAUNCHED();
  MGT_CHECK(cu_download(ctx, out, c->dsum, sizeof(double)));
  return MGT_OK;
}

/* One launch for every segment: blockIdx.y is the segment, x strides over its elements. */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, const mgt_segment *segs,
                        float b1, float b2, float lr, float eps, float gs, float ib1, float ib2) {
  const mgt_segment sg = segs[blockIdx.y];
  const float wd = sg.weight_decay;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < sg.n;
       j += (size_t)blockDim.x * gridDim.x) {
    const size_t i = sg.offset + j;
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi * ib1) / (sqrtf(vi * ib2) + eps) + wd * p[i]);
  }
}

mgt_status cu_adamw(void *ctx, float *p, const float *g, float *m, float *v,
                    const mgt_segment *segs, int nseg, const mgt_adamw_step *s) {
  cuda_ctx *c = C_(ctx);
  if (nseg <= 0) return MGT_OK;
  MGT_REQUIRE(nseg <= 65535, "AdamW over %d segments exceeds one launch's grid", nseg);
  /* the table changes only with the model: uploaded when it differs from the last one */
  const size_t bytes = sizeof(mgt_segment) * (size_t)nseg;
  if (c->hsegs_n != bytes || memcmp(c->hsegs, segs, bytes) != 0) {
    MGT_CHECK(grow((void **)&c->dsegs, &c->dsegs_n, bytes));
    CU(cudaMemcpy(c->dsegs, segs, bytes, cudaMemcpyHostToDevice));
    free(c->hsegs);
    c->hsegs = static_cast<mgt_segment *>(malloc(bytes));
    c->hsegs_n = c->hsegs ? bytes : 0;
    if (c->hsegs) memcpy(c->hsegs, segs, bytes);
  }
  size_t most = 0;
  for (int k = 0; k < nseg; k++)
    most = segs[k].n > most ? segs[k].n : most;
  if (!most) return MGT_OK;
  const dim3 grid(blocks_for(most, 256) < 1024u ? blocks_for(most, 256) : 1024u, (unsigned)nseg);
  k_adamw<<<grid, 256, 0, c->stream>>>(p, g, m, v, c->dsegs, s->beta1, s->beta2, s->lr, s->eps,
                                       s->grad_scale, 1.0f / s->bias_correction1,
                                       1.0f / s->bias_correction2);
  LAUNCHED();
  return MGT_OK;
}

} // namespace

/* ---- the table ---- */

extern "C" int mgt_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  int was = 0;
  if (cudaGetDevice(&was) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
      cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaSetDevice(was);
  return 1;
}

extern "C" int mgt_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver or no device: clear the sticky error */
    return 0;
  }
  return n;
}

extern "C" mgt_status mgt_backend_cuda_create(int device, mgt_backend **out) {
  return mgt_backend_cuda_create_on(device, NULL, NULL, out);
}

extern "C" mgt_status mgt_backend_cuda_create_on(int device, void *stream, void *blas,
                                                 mgt_backend **out) {
  *out = NULL;
  int n = mgt_cuda_device_count();
  MGT_REQUIRE(n > 0, "--device cuda: no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES)");
  MGT_REQUIRE(device >= 0 && device < n, "CUDA device %d does not exist (%d visible)", device, n);
  CU(cudaSetDevice(device));
  cuda_ctx *c = static_cast<cuda_ctx *>(calloc(1, sizeof(cuda_ctx)));
  mgt_backend *be = static_cast<mgt_backend *>(calloc(1, sizeof(mgt_backend)));
  if (!c || !be) {
    free(c);
    free(be);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the CUDA backend");
  }
  c->device = device;
  c->own_stream = stream == NULL;
  c->own_blas = blas == NULL;
  cudaError_t e = cudaSuccess;
  if (stream)
    c->stream = static_cast<cudaStream_t>(stream);
  else
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->dsum, sizeof(double));
  if (e != cudaSuccess) {
    if (c->own_stream && c->stream) cudaStreamDestroy(c->stream);
    free(c);
    free(be);
    return cuda_fail(e, __FILE__, __LINE__, "creating the CUDA stream");
  }
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  bool saved = false; /* the caller's handle's stream and math mode were read */
  if (blas) {
    c->blas = static_cast<cublasHandle_t>(blas);
    bs = cublasGetStream(c->blas, &c->blas_stream0);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasGetMathMode(c->blas, &c->blas_math0);
    saved = bs == CUBLAS_STATUS_SUCCESS;
  } else {
    bs = cublasCreate(&c->blas);
  }
  /* the handle works on the backend's stream while the backend lives (cu_destroy gives a
     caller's handle its own stream and math mode back) */
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->blas, c->stream);
  /* fp32 GEMMs stay fp32 (no TF32), so the CPU and GPU agree to float rounding */
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    if (c->own_blas && c->blas) cublasDestroy(c->blas);
    if (saved) {
      cublasSetStream(c->blas, c->blas_stream0);
      cublasSetMathMode(c->blas, c->blas_math0);
    }
    if (c->own_stream) cudaStreamDestroy(c->stream);
    cudaFree(c->dsum);
    free(c);
    free(be);
    MGT_FAIL(MGT_ERR_BACKEND, "cuBLAS initialization failed (status %d)", (int)bs);
  }
  be->name = "cuda";
  be->ctx = c;
  be->alloc = cu_alloc;
  be->free = cu_free;
  be->zero = cu_zero;
  be->upload = cu_upload;
  be->download = cu_download;
  be->copy = cu_copy;
  be->sync = cu_sync;
  be->destroy = cu_destroy;
  be->set_precision = cu_set_precision;
  be->set_weights = cu_set_weights;
  be->set_act16 = cu_set_act16;
  be->act16_bytes = 2;
  be->refresh_weights = cu_refresh_weights;
  be->init_normal = cu_init_normal;
  be->fill = cu_fill;
  be->gemm = cu_gemm;
  be->linear_bias_gelu = cu_linear_bias_gelu;
  be->linear_bias = cu_linear_bias;
  be->linear_param_grads = cu_linear_param_grads;
  be->linear_dgelu = cu_linear_dgelu;
  be->bias_dropout_add_ln = cu_bias_dropout_add_ln;
  be->add_bias = cu_add_bias;
  be->bias_backward = cu_bias_backward;
  be->layernorm_forward = cu_layernorm_forward;
  be->layernorm_backward = cu_layernorm_backward;
  be->bias_gelu_forward = cu_bias_gelu_forward;
  be->gelu_backward = cu_gelu_backward;
  be->attention_forward = cu_attention_forward;
  be->attention_backward = cu_attention_backward;
  be->flash_attention_forward = cu_flash_attention_forward;
  be->flash_attention_backward = cu_flash_attention_backward;
  be->embedding_forward = cu_embedding_forward;
  be->add_position = cu_add_position;
  be->embedding_backward = cu_embedding_backward;
  be->bias_act_forward = cu_bias_act_forward;
  be->act_backward = cu_act_backward;
  be->gather_rows = cu_gather_rows;
  be->scatter_add_rows = cu_scatter_add_rows;
  be->dropout_forward = cu_dropout_forward;
  be->dropout_backward = cu_dropout_backward;
  be->add = cu_add;
  be->xent_max = cu_xent_max;
  be->xent_sumexp = cu_xent_sumexp;
  be->xent_loss = cu_xent_loss;
  be->xent_backward = cu_xent_backward;
  be->argmax = cu_argmax;
  be->attention_decode = cu_attention_decode;
  be->sumsq = cu_sumsq;
  be->adamw = cu_adamw;
  *out = be;
  return MGT_OK;
}

extern "C" void *mgt_backend_cuda_stream(const mgt_backend *be) {
  return be && be->destroy == cu_destroy ? static_cast<cuda_ctx *>(be->ctx)->stream : NULL;
}

/* Whether the last linear_bias_gelu at the backend's current precision ran as one cuBLASLt
   call (the decision is made per precision). */
extern "C" int mgt_backend_cuda_fused_epilogue(const mgt_backend *be) {
  if (!be || be->destroy != cu_destroy) return 0;
  const cuda_ctx *c = static_cast<const cuda_ctx *>(be->ctx);
  return c->lt_last[LT_GELU][c->precision];
}

extern "C" int mgt_backend_cuda_fused(const mgt_backend *be, int epilogue) {
  if (!be || be->destroy != cu_destroy || epilogue < 0 || epilogue >= LT_KINDS) return 0;
  const cuda_ctx *c = static_cast<const cuda_ctx *>(be->ctx);
  return c->lt_last[epilogue][c->precision];
}

extern "C" mgt_status mgt_backend_cuda_info(const mgt_backend *be, char *name, size_t name_size,
                                            size_t *free_bytes, size_t *total_bytes) {
  MGT_REQUIRE(be && be->destroy == cu_destroy, "not a CUDA backend");
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, static_cast<cuda_ctx *>(be->ctx)->device));
  snprintf(name, name_size, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  CU(cudaMemGetInfo(free_bytes, total_bytes));
  return MGT_OK;
}
