/* Mixture-of-Experts on the CPU: the router's fp32 GEMM, the routing (top-k with Megatron-LM's
   score functions) and its backward with the load-balancing and z-losses, and the combination of
   the experts' rows back into tokens. */
#include "cblas_any.h"
#include <math.h>
#include <string.h>

#include "backend_impl.h"
#include "cpu.h"
#include "moe_route.h"

mgt_status cpu_gemm32(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
  (void)ctx;
  if (M == 0 || N == 0) return MGT_OK;
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return MGT_OK;
}

mgt_status cpu_moe_route(void *ctx, const float *logits, int N, int E, int k, int score, int pre,
                         float scale, const float *bias, int32_t *idx, float *w, float *probs,
                         float *lse) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; t++)
    mgt_moe_route_row(logits + (size_t)t * E, E, k, score, pre, scale, bias, idx + (size_t)t * k,
                      w + (size_t)t * k, probs + (size_t)t * E, &lse[t]);
  return MGT_OK;
}

mgt_status cpu_moe_route_backward(void *ctx, float *dlogits, const float *dw, const float *logits,
                                  const int32_t *idx, const float *w, const float *probs,
                                  const float *lse, int N, int E, int k, int score, int pre,
                                  float scale, const float *aux, int aux_rows, float zc) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; t++)
    mgt_moe_route_backward_row(dlogits + (size_t)t * E, dw ? dw + (size_t)t * k : NULL,
                               logits + (size_t)t * E, idx + (size_t)t * k, w + (size_t)t * k,
                               probs + (size_t)t * E, lse[t], E, k, score, pre, scale,
                               aux && aux_rows > 0 ? aux + (size_t)(t / aux_rows) * E : aux, zc);
  return MGT_OK;
}

mgt_status cpu_moe_combine(void *ctx, float *y, const float *src, const int32_t *pos,
                           const float *w, int N, int k, int C, int accumulate) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; t++) {
    float *yt = y + (size_t)t * C;
    if (!accumulate) memset(yt, 0, sizeof(float) * (size_t)C);
    for (int s = 0; s < k; s++) {
      const int32_t p = pos[(size_t)t * k + s];
      if (p < 0) continue;
      const float a = w ? w[(size_t)t * k + s] : 1.0f, *r = src + (size_t)p * C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        yt[c] += a * r[c];
    }
  }
  return MGT_OK;
}

mgt_status cpu_moe_combine_backward(void *ctx, float *dsrc, float *dw, const float *dy,
                                    const float *src, const int32_t *pos, const float *w, int N,
                                    int k, int C) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; t++) {
    const float *g = dy + (size_t)t * C;
    for (int s = 0; s < k; s++) {
      const int32_t p = pos[(size_t)t * k + s];
      float dot = 0.0f;
      if (p >= 0) {
        const float a = w[(size_t)t * k + s], *r = src + (size_t)p * C;
        float *d = dsrc + (size_t)p * C;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) {
          d[c] = a * g[c];
          dot += g[c] * r[c];
        }
      }
      if (dw) dw[(size_t)t * k + s] = dot;
    }
  }
  return MGT_OK;
}
