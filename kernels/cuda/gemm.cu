/* The CUDA backend: GEMMs through cuBLAS (fp32, or 16-bit inputs with fp32 accumulation), the
   16-bit copies they read (weights, activations, rounded inputs) and their registration. */
#include "cuda_impl.h"

namespace mgt_cu {

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

} // namespace mgt_cu
