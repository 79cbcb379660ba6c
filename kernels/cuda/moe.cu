/* The CUDA backend: Mixture-of-Experts' router GEMM in fp32, the routing and its backward (a
   thread per token, the experts being few: kernels/moe_route.h, shared with the CPU twins of
   kernels/cpu/moe.c), and the combination of the experts' rows. */
#include "cuda_impl.h"
#include "moe_route.h"

namespace mgt_cu {

mgt_status cu_gemm32(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                     int ldc) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  CUBLAS(cublasSgemm(c->blas, transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                     transa ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda, &beta, Cm,
                     ldc));
  return MGT_OK;
}

__global__ void k_moe_route(const float *logits, int N, int E, int k, int score, int pre,
                            float scale, const float *bias, int32_t *idx, float *w, float *probs,
                            float *lse) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < N)
    mgt_moe_route_row(logits + (size_t)t * E, E, k, score, pre, scale, bias, idx + (size_t)t * k,
                      w + (size_t)t * k, probs + (size_t)t * E, &lse[t]);
}

mgt_status cu_moe_route(void *ctx, const float *logits, int N, int E, int k, int score, int pre,
                        float scale, const float *bias, int32_t *idx, float *w, float *probs,
                        float *lse) {
  if (N == 0) return MGT_OK;
  k_moe_route<<<(N + 127) / 128, 128, 0, C_(ctx)->stream>>>(logits, N, E, k, score, pre, scale,
                                                            bias, idx, w, probs, lse);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_moe_route_backward(float *dlogits, const float *dw, const float *logits,
                                     const int32_t *idx, const float *w, const float *probs,
                                     const float *lse, int N, int E, int k, int score, int pre,
                                     float scale, const float *aux, int aux_rows, float zc) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < N)
    mgt_moe_route_backward_row(dlogits + (size_t)t * E, dw ? dw + (size_t)t * k : NULL,
                               logits + (size_t)t * E, idx + (size_t)t * k, w + (size_t)t * k,
                               probs + (size_t)t * E, lse[t], E, k, score, pre, scale,
                               aux && aux_rows > 0 ? aux + (size_t)(t / aux_rows) * E : aux, zc);
}

mgt_status cu_moe_route_backward(void *ctx, float *dlogits, const float *dw, const float *logits,
                                 const int32_t *idx, const float *w, const float *probs,
                                 const float *lse, int N, int E, int k, int score, int pre,
                                 float scale, const float *aux, int aux_rows, float zc) {
  if (N == 0) return MGT_OK;
  k_moe_route_backward<<<(N + 127) / 128, 128, 0, C_(ctx)->stream>>>(
      dlogits, dw, logits, idx, w, probs, lse, N, E, k, score, pre, scale, aux, aux_rows, zc);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_moe_combine(float *y, const float *src, const int32_t *pos, const float *w, int N,
                              int k, int C, int accumulate) {
  GRID_STRIDE(i, (size_t)N * C) {
    const size_t t = i / C, c = i % C;
    float v = accumulate ? y[i] : 0.0f;
    for (int s = 0; s < k; s++) {
      const int32_t p = pos[t * k + s];
      if (p >= 0) v += (w ? w[t * k + s] : 1.0f) * src[(size_t)p * C + c];
    }
    y[i] = v;
  }
}

mgt_status cu_moe_combine(void *ctx, float *y, const float *src, const int32_t *pos, const float *w,
                          int N, int k, int C, int accumulate) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_moe_combine<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(y, src, pos, w, N, k,
                                                                             C, accumulate);
  LAUNCHED();
  return MGT_OK;
}

/* A warp per (token, slot): the slot's row of dsrc, and its weight's gradient. */
__global__ void k_moe_combine_backward(float *dsrc, float *dw, const float *dy, const float *src,
                                       const int32_t *pos, const float *w, int N, int k, int C) {
  const size_t ts = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (ts >= (size_t)N * k) return;
  const int32_t p = pos[ts];
  const float *g = dy + ts / k * C;
  float dot = 0.0f;
  if (p >= 0) {
    const float a = w[ts], *r = src + (size_t)p * C;
    float *d = dsrc + (size_t)p * C;
    for (int c = lane; c < C; c += 32) {
      d[c] = a * g[c];
      dot += g[c] * r[c];
    }
  }
  for (int o = 16; o > 0; o >>= 1)
    dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (dw && lane == 0) dw[ts] = dot;
}

mgt_status cu_moe_combine_backward(void *ctx, float *dsrc, float *dw, const float *dy,
                                   const float *src, const int32_t *pos, const float *w, int N,
                                   int k, int C) {
  const size_t S = (size_t)N * k;
  if (S == 0) return MGT_OK;
  k_moe_combine_backward<<<(unsigned)((S + 7) / 8), 256, 0, C_(ctx)->stream>>>(dsrc, dw, dy, src,
                                                                               pos, w, N, k, C);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
