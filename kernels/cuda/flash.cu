/* The CUDA backend: flash attention in fp32, and one-query attention against a key/value cache. */
#include "cuda_impl.h"

namespace mgt_cu {

/* ---- flash attention (--use-flash-attn) ----
   The twin of kernels/cpu/flash.c, written for correctness first: one block per query row
   (forward, dQ) or key row (dK, dV), keys or queries in tiles of the block's 128 threads with
   an online softmax, nothing of T x T in memory and no atomics (each block owns its outputs).
   The same mask words as the materialized kernels (attn_keep). Documents kept apart
   (kfirst): a query row starts at its document's first key; a key row skips the queries of later
   documents. */

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
                                float scale, const int32_t *keylen, const int32_t *kfirst,
                                mask_args a, int drop) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  float *sq = sm, *so = sm + hd, *sp = sm + 2 * hd;
  const size_t row = blockIdx.x;
  const flash_row r = flash_row_of(row, T, Hl, hd);
  const int Cl = Hl * hd, ld = 3 * Cl, lim = key_limit(keylen, row, Hl, T);
  const int lo = key_first(kfirst, row, Hl, T); /* the keys before it, tiles and all, skipped */
  const float *k = qkv + r.base + Cl, *v = qkv + r.base + 2 * Cl;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    sq[e] = qkv[r.base + (size_t)r.i * ld + e];
    so[e] = 0.0f;
  }
  __syncthreads();
  float m = -FLT_MAX, l = 0.0f;
  for (int j0 = lo; j0 < lim; j0 += FLASH_TILE) {
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
                           const int32_t *keylen, const int32_t *kfirst, mask_args a, int drop) {
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
  for (int j0 = key_first(kfirst, row, Hl, T); j0 < lim; j0 += FLASH_TILE) {
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
                            const int32_t *keylen, const int32_t *kfirst, mask_args a, int drop) {
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
    /* a query of a later document does not see key j */
    if (i < i_hi && (!kfirst || kfirst[(size_t)r.b * T + i] <= j)) {
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
                                      const int32_t *kfirst, const mgt_dropout *d) {
  cuda_ctx *c = C_(ctx);
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  /* the tensor-core tiles do not keep documents apart yet: these fp32 tiles do */
  if (c->precision != MGT_PREC_FP32 && flash16_supported(hd) && !kfirst)
    return flash16_forward(c->stream, c->precision == MGT_PREC_BF16, out, lse, qkv, B, T, Hl, hd,
                           head_offset, keylen, d);
  const int drop = d->p > 0.0f;
  const mask_args a = drop ? mask_of(d, head_offset, Hl, T) : mask_args();
  const size_t shared = sizeof(float) * (2 * (size_t)hd + FLASH_TILE);
  k_flash_forward<<<(unsigned)rows, FLASH_TILE, shared, c->stream>>>(
      out, lse, qkv, T, Hl, hd, 1.0f / sqrtf((float)hd), keylen, kfirst, a, drop);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int Hl,
                                       int hd, int head_offset, const int32_t *keylen,
                                       const int32_t *kfirst, const mgt_dropout *d) {
  cuda_ctx *c = C_(ctx);
  const size_t rows = (size_t)B * Hl * T;
  if (rows == 0) return MGT_OK;
  const int drop = d->p > 0.0f;
  const mask_args a = drop ? mask_of(d, head_offset, Hl, T) : mask_args();
  const float scale = 1.0f / sqrtf((float)hd);
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * rows));
  if (c->precision != MGT_PREC_FP32 && flash16_supported(hd) && !kfirst)
    return flash16_backward(c->stream, c->precision == MGT_PREC_BF16, dqkv, c->fscratch, dout, qkv,
                            out, lse, B, T, Hl, hd, head_offset, keylen, d);
  k_flash_dq<<<(unsigned)rows, FLASH_TILE, sizeof(float) * (3 * (size_t)hd + FLASH_TILE),
               c->stream>>>(dqkv, c->fscratch, dout, qkv, out, lse, T, Hl, hd, scale, keylen,
                            kfirst, a, drop);
  LAUNCHED();
  k_flash_dkv<<<(unsigned)rows, FLASH_TILE, sizeof(float) * (4 * (size_t)hd + 2 * FLASH_TILE),
                c->stream>>>(dqkv, c->fscratch, dout, qkv, lse, T, Hl, hd, scale, keylen, kfirst, a,
                             drop);
  LAUNCHED();
  return MGT_OK;
}

/* One block per head: scores over the cache of Gl key/value heads, softmax, weighted sum of
   values. w holds Hl * len floats. */
__global__ void k_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                                   float *w, int len, int Hl, int Gl, int hd, float scale) {
  __shared__ float sh[32];
  const int h = blockIdx.x, Cl = Gl * hd, g = h / (Hl / Gl);
  const float *qh = q + (size_t)h * hd;
  float *wh = w + (size_t)h * len;
  float mx = -FLT_MAX;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    const float *k = kc + (size_t)t * Cl + (size_t)g * hd;
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
      acc += wh[t] * vc[(size_t)t * Cl + (size_t)g * hd + e];
    out[(size_t)h * hd + e] = acc * inv;
  }
}

mgt_status cu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                               const float *vc, int len, int Hl, int Gl, int hd) {
  cuda_ctx *c = C_(ctx);
  if (Hl == 0 || len == 0) return MGT_OK;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * (size_t)Hl * len));
  k_attention_decode<<<Hl, 128, 0, c->stream>>>(out, q, kc, vc, c->fscratch, len, Hl, Gl, hd,
                                                1.0f / sqrtf((float)hd));
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
