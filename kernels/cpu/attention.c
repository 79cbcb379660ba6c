/* Multi-head attention, one (batch, head) pair per task, BLAS for the products. Row i of
   sample b attends to keys [0, lim): i + 1 for the causal mask, the sample's real length
   for BERT's padding mask. */
#include "cblas_any.h"
#include <float.h>

#include "cpu.h"
#include "mgt/rng.h"
#include "philox.h"

#define key_limit cpu_key_limit

void cpu_attn_mask(uint8_t *keep, const mgt_dropout *d, int b, int hg, int T, int i, int j0, int n,
                   uint32_t thr) {
  uint64_t stream = mgt_rng_dropout_stream(d->sample_base + (uint64_t)b, d->layer, d->site);
  uint64_t e0 = ((uint64_t)hg * T + (uint64_t)i) * (uint64_t)T + (uint64_t)j0;
  cpu_dropout_mask(keep, d->seed, stream, e0, (size_t)n, thr);
}

cpu_att cpu_att_of(int Hl, int hd, const mgt_dropout *d) {
  cpu_att a;
  a.Cl = Hl * hd, a.ld = 3 * a.Cl;
  a.scale = 1.0f / sqrtf((float)hd);
  a.drop = d->p > 0.0f;
  a.thr = a.drop ? mgt_dropout_threshold(d->p) : 0;
  a.dscale = a.drop ? 1.0f / (1.0f - d->p) : 1.0f;
  return a;
}

/* Dropout mask of attention row i of head hg, keys j < lim. */
static void row_mask(uint8_t *keep, const mgt_dropout *d, int b, int hg, int T, int i, int lim,
                     uint32_t thr) {
  cpu_attn_mask(keep, d, b, hg, T, i, 0, lim, thr);
}

/* Writes the dropped, rescaled probabilities Pd of one (batch, head) into w (T, T). */
static void dropped_probs(float *w, const float *p, const mgt_dropout *d, const int32_t *keylen,
                          int b, int hg, int T, uint32_t thr, float dscale) {
  uint8_t keep[T];
  for (int i = 0; i < T; i++) {
    const int lim = key_limit(keylen, b, T, i);
    row_mask(keep, d, b, hg, T, i, lim, thr);
    const float *r = p + (size_t)i * T;
    float *o = w + (size_t)i * T;
    for (int j = 0; j < lim; j++)
      o[j] = keep[j] ? r[j] * dscale : 0.0f;
    for (int j = lim; j < T; j++)
      o[j] = 0.0f;
  }
}

mgt_status cpu_attention_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                 int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                 const mgt_dropout *d, float *scratch) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const int Cl = A.Cl, ld = A.ld, drop = A.drop;
  const float scale = A.scale, dscale = A.dscale;
  const uint32_t thr = A.thr;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hl; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hd;
      const float *k = q + Cl, *v = q + 2 * Cl;
      float *p = P + ((size_t)b * Hl + h) * T * T;
      float *o = out + (size_t)b * T * Cl + (size_t)h * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, ld, k, ld, 0.0f, p,
                  T);
      for (int i = 0; i < T; i++) {
        const int lim = key_limit(keylen, b, T, i);
        float *r = p + (size_t)i * T;
        float mx = -FLT_MAX;
        for (int j = 0; j < lim; j++)
          mx = r[j] > mx ? r[j] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < lim; j++) {
          r[j] = mgt_fast_expf(r[j] - mx);
          s += r[j];
        }
        float inv = 1.0f / s;
#pragma omp simd
        for (int j = 0; j < lim; j++)
          r[j] *= inv;
        for (int j = lim; j < T; j++)
          r[j] = 0.0f;
      }
      const float *pd = p;
      if (drop) {
        float *sd = scratch + ((size_t)b * Hl + h) * T * T;
        dropped_probs(sd, p, d, keylen, b, head_offset + h, T, thr, dscale);
        pd = sd;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, pd, T, v, ld, 0.0f, o,
                  Cl);
    }
  return MGT_OK;
}

mgt_status cpu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                  const float *P, int B, int T, int Hl, int hd, int head_offset,
                                  int H, const int32_t *keylen, const mgt_dropout *d,
                                  float *scratch) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const int Cl = A.Cl, ld = A.ld, drop = A.drop;
  const float scale = A.scale, dscale = A.dscale;
  const uint32_t thr = A.thr;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hl; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hd;
      const float *k = q + Cl, *v = q + 2 * Cl;
      float *dq = dqkv + (size_t)b * T * ld + (size_t)h * hd;
      float *dk = dq + Cl, *dv = dq + 2 * Cl;
      const float *p = P + ((size_t)b * Hl + h) * T * T;
      const float *o = dout + (size_t)b * T * Cl + (size_t)h * hd;
      float *s = scratch + ((size_t)b * Hl + h) * T * T;
      uint8_t keep[T];
      /* dV = Pd^T dO, with Pd the dropped probabilities rebuilt from the mask. */
      const float *pd = p;
      if (drop) {
        dropped_probs(s, p, d, keylen, b, head_offset + h, T, thr, dscale);
        pd = s;
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, pd, T, o, Cl, 0.0f, dv,
                  ld);
      /* dPd = dO V^T, then through the mask and the softmax. */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, o, Cl, v, ld, 0.0f, s,
                  T);
      for (int i = 0; i < T; i++) {
        const int lim = key_limit(keylen, b, T, i);
        float *r = s + (size_t)i * T;
        const float *pr = p + (size_t)i * T;
        if (drop) {
          row_mask(keep, d, b, head_offset + h, T, i, lim, thr);
          for (int j = 0; j < lim; j++)
            r[j] = keep[j] ? r[j] * dscale : 0.0f;
        }
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < lim; j++)
          dot += pr[j] * r[j];
#pragma omp simd
        for (int j = 0; j < lim; j++)
          r[j] = pr[j] * (r[j] - dot) * scale;
        for (int j = lim; j < T; j++)
          r[j] = 0.0f;
      }
      /* dQ = dS K, dK = dS^T Q */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, s, T, k, ld, 0.0f, dq,
                  ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, s, T, q, ld, 0.0f, dk,
                  ld);
    }
  return MGT_OK;
}

mgt_status cpu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                                const float *vc, int len, int Hl, int Gl, int hd) {
  const int Cl = Gl * hd, per = Hl / Gl; /* the cache holds the key/value heads only */
  const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static)
  for (int h = 0; h < Hl; h++) {
    const float *qh = q + (size_t)h * hd;
    const size_t kv = (size_t)(h / per) * hd;
    float *oh = out + (size_t)h * hd;
    float mx = -FLT_MAX, sum = 0.0f;
    float w[len];
    for (int t = 0; t < len; t++) {
      const float *k = kc + (size_t)t * Cl + kv;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int e = 0; e < hd; e++)
        dot += qh[e] * k[e];
      w[t] = dot * scale;
      mx = w[t] > mx ? w[t] : mx;
    }
    for (int t = 0; t < len; t++)
      sum += (w[t] = mgt_fast_expf(w[t] - mx));
    for (int e = 0; e < hd; e++)
      oh[e] = 0.0f;
    for (int t = 0; t < len; t++) {
      const float *v = vc + (size_t)t * Cl + kv;
      float p = w[t] / sum;
#pragma omp simd
      for (int e = 0; e < hd; e++)
        oh[e] += p * v[e];
    }
  }
  return MGT_OK;
}

/* Rotary positions (Llama's), Hugging Face's half-split pairs; the angle in float32 as there. */
mgt_status cpu_rope(void *ctx, float *x, int N, int T, int pos0, int heads, int hd, int ld,
                    const float *inv_freq, int inverse) {
  (void)ctx;
  const int half = hd / 2;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float pos = (float)(pos0 + n % T);
    for (int h = 0; h < heads; h++) {
      float *v = x + (size_t)n * ld + (size_t)h * hd;
      for (int i = 0; i < half; i++) {
        const float a = pos * inv_freq[i], c = cosf(a), s = sign * sinf(a);
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }
  return MGT_OK;
}

/* Grouped-query attention over the multi-head kernels: k and v of group g repeated for heads
   g*per ... (g+1)*per - 1, or their gradients summed back in head order. */
mgt_status cpu_kv_group(void *ctx, float *dst, const float *src, int N, int Hl, int Gl, int hd,
                        int reduce) {
  (void)ctx;
  const int per = Hl / Gl;
  const size_t q = (size_t)Hl * hd, kv = (size_t)Gl * hd, full = 3 * q, grouped = q + 2 * kv;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *s = src + (size_t)n * (reduce ? full : grouped);
    float *d = dst + (size_t)n * (reduce ? grouped : full);
    memcpy(d, s, q * sizeof(float));
    for (int part = 0; part < 2; part++) /* k, then v */
      for (int g = 0; g < Gl; g++) {
        if (!reduce) {
          const float *from = s + q + part * kv + (size_t)g * hd;
          for (int h = g * per; h < (g + 1) * per; h++)
            memcpy(d + q + part * q + (size_t)h * hd, from, (size_t)hd * sizeof(float));
          continue;
        }
        float *to = d + q + part * kv + (size_t)g * hd;
        const float *from = s + q + part * q + (size_t)g * per * hd;
        memcpy(to, from, (size_t)hd * sizeof(float));
        for (int j = 1; j < per; j++)
          for (int e = 0; e < hd; e++)
            to[e] += from[(size_t)j * hd + e];
      }
  }
  return MGT_OK;
}
