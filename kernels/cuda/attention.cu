/* The CUDA backend: materialized attention: the causal or padding-masked softmax, dropout on the
   probabilities, strided-batched GEMMs per head. */
#include "cuda_impl.h"

namespace mgt_cu {

/* Softmax of one row over its keys [lo, lim), in place, zeros outside them. One block per
   row. */
__global__ void k_masked_softmax(float *P, const int32_t *keylen, const int32_t *kfirst, int Hl,
                                 int T) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x; /* (b*Hl + h)*T + i */
  const int lim = key_limit(keylen, row, Hl, T), lo = key_first(kfirst, row, Hl, T);
  float *r = P + row * T;
  float mx = -FLT_MAX;
  for (int j = lo + threadIdx.x; j < lim; j += blockDim.x)
    mx = fmaxf(mx, r[j]);
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int j = lo + threadIdx.x; j < lim; j += blockDim.x) {
    float e = __expf(r[j] - mx);
    r[j] = e;
    s += e;
  }
  const float inv = 1.0f / block_sum(s, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    r[j] = j >= lo && j < lim ? r[j] * inv : 0.0f;
}

/* out = dropout(x) on the probabilities (or gradients) of B*Hl*T rows, within their keys. */
__global__ void k_attn_dropout(float *out, const float *x, size_t n, const int32_t *keylen,
                               const int32_t *kfirst, mask_args a) {
  GRID_STRIDE(k, n) {
    size_t row = k / a.T;
    int j = (int)(k % a.T);
    out[k] = (j >= key_first(kfirst, row, a.Hl, a.T) && j < key_limit(keylen, row, a.Hl, a.T) &&
              attn_keep(a, row, j))
                 ? x[k] * a.dscale
                 : 0.0f;
  }
}

/* dS from dP (in s) and P: r = P * (dP - sum(P dP)) * scale within the row's keys. One
   block per row. */
__global__ void k_softmax_backward(float *s, const float *P, const int32_t *keylen,
                                   const int32_t *kfirst, int Hl, int T, float scale) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  const int lim = key_limit(keylen, row, Hl, T), lo = key_first(kfirst, row, Hl, T);
  float *r = s + row * T;
  const float *pr = P + row * T;
  float dot = 0.0f;
  for (int j = lo + threadIdx.x; j < lim; j += blockDim.x)
    dot += pr[j] * r[j];
  dot = block_sum(dot, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    r[j] = j >= lo && j < lim ? pr[j] * (r[j] - dot) * scale : 0.0f;
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
                                const int32_t *kfirst, const mgt_dropout *d, float *scratch) {
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
  k_masked_softmax<<<(unsigned)rows, 128, 0, c->stream>>>(P, keylen, kfirst, Hl, T);
  LAUNCHED();
  const float *probs = P;
  if (d->p > 0.0f) {
    k_attn_dropout<<<blocks_for(rows * T, 256), 256, 0, c->stream>>>(
        scratch, P, rows * T, keylen, kfirst, mask_of(d, head_offset, Hl, T));
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
                                 int H, const int32_t *keylen, const int32_t *kfirst,
                                 const mgt_dropout *d, float *scratch) {
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
                                                                     kfirst, ma);
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
                                                                     keylen, kfirst, ma);
    LAUNCHED();
  }
  k_softmax_backward<<<(unsigned)rows, 128, 0, c->stream>>>(scratch, P, keylen, kfirst, Hl, T,
                                                            scale);
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
__global__ void k_rope(float *x, int T, int pos0, const int32_t *pos, int heads, int hd, int ld,
                       const float *inv_freq, float sign, size_t n) {
  const int half = hd / 2;
  GRID_STRIDE(k, n) {
    const size_t row = k / ((size_t)heads * half);
    const int h = (int)(k / half % heads), i = (int)(k % half);
    float *v = x + row * ld + (size_t)h * hd;
    const float a = (float)(pos ? pos[row] : pos0 + (int)(row % T)) * inv_freq[i];
    const float c = cosf(a), s = sign * sinf(a), x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

/* Grouped key/value heads: one thread per element of a full (reduce 0) or grouped (reduce 1)
   row; a group's gradient summed over its heads in head order, as the CPU twin. */
__global__ void k_kv_group(float *dst, const float *src, int Hl, int Gl, int hd, int reduce,
                           size_t n) {
  const int per = Hl / Gl;
  const size_t q = (size_t)Hl * hd, kv = (size_t)Gl * hd, full = 3 * q, grouped = q + 2 * kv;
  const size_t drow = reduce ? grouped : full, srow = reduce ? full : grouped;
  GRID_STRIDE(k, n) {
    const size_t row = k / drow, c = k % drow;
    const float *s = src + row * srow;
    float v;
    if (c < q)
      v = s[c];
    else if (!reduce) { /* c in k or v of head h: its group's column */
      const size_t part = (c - q) / q, h = (c - q) % q / hd, e = (c - q) % hd;
      v = s[q + part * kv + h / per * hd + e];
    } else { /* c in k or v of group g: the sum over its heads */
      const size_t part = (c - q) / kv, g = (c - q) % kv / hd, e = (c - q) % hd;
      const float *from = s + q + part * q + g * per * hd + e;
      v = from[0];
      for (int j = 1; j < per; j++)
        v += from[(size_t)j * hd];
    }
    dst[k] = v;
  }
}

mgt_status cu_kv_group(void *ctx, float *dst, const float *src, int N, int Hl, int Gl, int hd,
                       int reduce) {
  const size_t q = (size_t)Hl * hd, n = (size_t)N * (reduce ? q + 2 * (size_t)Gl * hd : 3 * q);
  if (n == 0) return MGT_OK;
  k_kv_group<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dst, src, Hl, Gl, hd, reduce, n);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_rope(void *ctx, float *x, int N, int T, int pos0, const int32_t *pos, int heads,
                   int hd, int ld, const float *inv_freq, int inverse) {
  const size_t n = (size_t)N * heads * (hd / 2);
  if (n == 0) return MGT_OK;
  k_rope<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(x, T, pos0, pos, heads, hd, ld, inv_freq,
                                                          inverse ? -1.0f : 1.0f, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
