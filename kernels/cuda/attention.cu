/* The CUDA backend: materialized attention: the causal or padding-masked softmax, dropout on the
   probabilities, strided-batched GEMMs per head. */
#include "cuda_impl.h"

namespace mgt_cu {

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

/* Rotary positions (Llama's), Hugging Face's half-split pairs: one thread per pair. */
__global__ void k_rope(float *x, int T, int pos0, int heads, int hd, int ld, const float *inv_freq,
                       float sign, size_t n) {
  const int half = hd / 2;
  GRID_STRIDE(k, n) {
    const size_t row = k / ((size_t)heads * half);
    const int h = (int)(k / half % heads), i = (int)(k % half);
    float *v = x + row * ld + (size_t)h * hd;
    const float a = (float)(pos0 + (int)(row % T)) * inv_freq[i];
    const float c = cosf(a), s = sign * sinf(a), x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

mgt_status cu_rope(void *ctx, float *x, int N, int T, int pos0, int heads, int hd, int ld,
                   const float *inv_freq, int inverse) {
  const size_t n = (size_t)N * heads * (hd / 2);
  if (n == 0) return MGT_OK;
  k_rope<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(x, T, pos0, heads, hd, ld, inv_freq,
                                                          inverse ? -1.0f : 1.0f, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
