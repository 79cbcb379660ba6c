/* The CUDA backend: LayerNorm and RMSNorm, forward and backward. */
#include "cuda_impl.h"

namespace mgt_cu {

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

/* RMSNorm (Llama's): no mean is removed and there is no bias. One block per row. */
template <typename TO>
__global__ void k_rmsnorm_forward(TO *out, float *rstd, const float *x, const float *w, int C,
                                  float eps) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  const float *xr = x + (size_t)n * C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    v += xr[c] * xr[c];
  const float r = rsqrtf(block_sum(v, sh) / C + eps);
  TO *o = out + (size_t)n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    put(&o[c], xr[c] * r * w[c]);
  if (threadIdx.x == 0) rstd[n] = r;
}

mgt_status cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                              int N, int C, float eps) {
  if (N == 0) return MGT_OK;
  cuda_ctx *c = C_(ctx);
  if (!in_act16(c, out, (size_t)N * C))
    k_rmsnorm_forward<<<N, 256, 0, c->stream>>>(out, rstd, x, w, C, eps);
  else if (c->precision == MGT_PREC_BF16)
    k_rmsnorm_forward<<<N, 256, 0, c->stream>>>((__nv_bfloat16 *)out, rstd, x, w, C, eps);
  else
    k_rmsnorm_forward<<<N, 256, 0, c->stream>>>((__half *)out, rstd, x, w, C, eps);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_rmsnorm_dx(float *dx, const float *dout, const float *x, const float *w,
                             const float *rstd, int C) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
  const float r = rstd[n];
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    s += dr[c] * w[c] * xr[c] * r;
  s = block_sum(s, sh) / C;
  float *dxr = dx + (size_t)n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dxr[c] += (dr[c] * w[c] - xr[c] * r * s) * r;
}

mgt_status cu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int C, int accumulate) {
  cudaStream_t s = C_(ctx)->stream;
  if (N > 0) k_rmsnorm_dx<<<N, 256, 0, s>>>(dx, dout, x, w, rstd, C);
  LAUNCHED();
  return column_sums(C_(ctx), dw, dout, x, NULL, rstd, N, C, accumulate);
}

/* RMSNorm over each head of strided rows (Qwen 3's q/k norm), in place: a warp per head; or
   over a part of each row's norm, its sum of squares given. */
__global__ void k_head_rmsnorm_forward(float *x, int ld, float *raw, float *rstd, const float *w,
                                       int S, int heads, int hd, float eps, const float *sums,
                                       int width) {
  const int s = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= S) return; /* the whole warp */
  float *v = x + (size_t)(s / heads) * ld + (size_t)(s % heads) * hd, *rv = raw + (size_t)s * hd;
  float q = 0.0f;
  for (int c = lane; c < hd; c += 32) {
    rv[c] = v[c];
    q += rv[c] * rv[c];
  }
  for (int o = 16; o > 0; o >>= 1)
    q += __shfl_xor_sync(0xffffffffu, q, o);
  const float r = sums ? rsqrtf(sums[s] / width + eps) : rsqrtf(q / hd + eps);
  for (int c = lane; c < hd; c += 32)
    v[c] = rv[c] * r * w[c];
  if (lane == 0) rstd[s] = r;
}

mgt_status cu_head_rmsnorm_forward(void *ctx, float *x, int ld, float *raw, float *rstd,
                                   const float *w, int N, int heads, int hd, float eps,
                                   const float *sums, int width) {
  const int S = N * heads;
  if (S == 0) return MGT_OK;
  k_head_rmsnorm_forward<<<(S + 7) / 8, 256, 0, C_(ctx)->stream>>>(x, ld, raw, rstd, w, S, heads,
                                                                   hd, eps, sums, width);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_head_rmsnorm_dx(float *dx, int ld, const float *raw, const float *rstd,
                                  const float *w, int S, int heads, int hd, const float *sums,
                                  int width) {
  const int s = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= S) return;
  float *dr = dx + (size_t)(s / heads) * ld + (size_t)(s % heads) * hd;
  const float *xr = raw + (size_t)s * hd;
  const float r = rstd[s];
  float m = 0.0f;
  if (sums)
    m = sums[s] * r / width;
  else {
    for (int c = lane; c < hd; c += 32)
      m += dr[c] * w[c] * xr[c] * r;
    for (int o = 16; o > 0; o >>= 1)
      m += __shfl_xor_sync(0xffffffffu, m, o);
    m /= hd;
  }
  for (int c = lane; c < hd; c += 32)
    dr[c] = (dr[c] * w[c] - xr[c] * r * m) * r;
}

/* dw from the output's gradient first, then dx over it. */
mgt_status cu_head_rmsnorm_backward(void *ctx, float *dx, int ld, float *dw, const float *raw,
                                    const float *rstd, const float *w, int N, int heads, int hd,
                                    int accumulate, const float *sums, int width) {
  const int S = N * heads;
  MGT_CHECK(column_sums_heads(C_(ctx), dw, dx, ld, heads, raw, rstd, N, hd, accumulate));
  if (S == 0) return MGT_OK;
  k_head_rmsnorm_dx<<<(S + 7) / 8, 256, 0, C_(ctx)->stream>>>(dx, ld, raw, rstd, w, S, heads, hd,
                                                              sums, width);
  LAUNCHED();
  return MGT_OK;
}

/* A warp per row. */
__global__ void k_row_dots(float *out, const float *a, int lda, const float *b, int ldb,
                           const float *w, int N, int n) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= N) return;
  const float *ar = a + (size_t)r * lda, *br = b + (size_t)r * ldb;
  float q = 0.0f;
  for (int c = lane; c < n; c += 32)
    q += ar[c] * br[c] * (w ? w[c] : 1.0f);
  for (int o = 16; o > 0; o >>= 1)
    q += __shfl_xor_sync(0xffffffffu, q, o);
  if (lane == 0) out[r] = q;
}

mgt_status cu_row_dots(void *ctx, float *out, const float *a, int lda, const float *b, int ldb,
                       const float *w, int N, int n) {
  if (N == 0) return MGT_OK;
  k_row_dots<<<(N + 7) / 8, 256, 0, C_(ctx)->stream>>>(out, a, lda, b, ldb, w, N, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
