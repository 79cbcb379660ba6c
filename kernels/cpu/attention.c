/* Multi-head attention, one (batch, head) pair per task, BLAS for the products. Row i of
   sample b attends to keys [0, lim): i + 1 for the causal mask, the sample's real length
   for BERT's padding mask. */
#include "cblas_any.h"
#include <float.h>

#include "cpu.h"
#include "mgt/rng.h"
#include "philox.h"
#ifdef MGT_HAVE_ONEDNN
#include "native.h"
#endif

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
                          const int32_t *kfirst, int b, int hg, int T, uint32_t thr, float dscale) {
  uint8_t keep[T];
  for (int i = 0; i < T; i++) {
    const int lim = key_limit(keylen, b, T, i), lo = cpu_key_first(kfirst, b, T, i);
    row_mask(keep, d, b, hg, T, i, lim, thr);
    const float *r = p + (size_t)i * T;
    float *o = w + (size_t)i * T;
    for (int j = 0; j < lo; j++)
      o[j] = 0.0f;
    for (int j = lo; j < lim; j++)
      o[j] = keep[j] ? r[j] * dscale : 0.0f;
    for (int j = lim; j < T; j++)
      o[j] = 0.0f;
  }
}

/* Softmax of one row of scores over its keys [lo, lim), zeros elsewhere. */
static void softmax_row(float *r, int lo, int lim, int T) {
  float mx = -FLT_MAX;
  for (int j = lo; j < lim; j++)
    mx = r[j] > mx ? r[j] : mx;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = lo; j < lim; j++) {
    r[j] = mgt_fast_expf(r[j] - mx);
    s += r[j];
  }
  float inv = 1.0f / s;
#pragma omp simd
  for (int j = lo; j < lim; j++)
    r[j] *= inv;
  for (int j = 0; j < lo; j++)
    r[j] = 0.0f;
  for (int j = lim; j < T; j++)
    r[j] = 0.0f;
}

/* Row i of one (batch, head): r holds dPd = dO V^T; becomes dS = P (dP - <P, dP>) scale, with
   dP = dPd through the dropout mask. */
static void softmax_backward_row(float *r, const float *pr, const mgt_dropout *d, int b, int hg,
                                 int T, int i, int lo, int lim, const cpu_att *A) {
  if (A->drop) {
    uint8_t keep[T];
    row_mask(keep, d, b, hg, T, i, lim, A->thr);
    for (int j = lo; j < lim; j++)
      r[j] = keep[j] ? r[j] * A->dscale : 0.0f;
  }
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int j = lo; j < lim; j++)
    dot += pr[j] * r[j];
  const float scale = A->scale;
#pragma omp simd
  for (int j = lo; j < lim; j++)
    r[j] = pr[j] * (r[j] - dot) * scale;
  for (int j = 0; j < lo; j++)
    r[j] = 0.0f;
  for (int j = lim; j < T; j++)
    r[j] = 0.0f;
}

#ifdef MGT_HAVE_ONEDNN
/* The attention's products as batched bf16 matmuls over (batch, head) (native.c), with the
   rows' softmax and dropout in fp32 between them, as every other element-wise step. Their bf16
   operands are stored head-major, each (batch, head)'s T x hd block contiguous: oneDNN's AMX
   kernels take those (a transposed one through its strides), while read in place from the
   token-major qkv it falls back to a kernel several times slower. */
static cpu_mm att_mm(int B, int Hl, int M, int N, int K, float alpha) {
  cpu_mm m;
  memset(&m, 0, sizeof m);
  m.nb = B, m.nh = Hl, m.M = M, m.N = N, m.K = K, m.alpha = alpha;
  return m;
}
/* One thread's block of a parallel loop in bf16 bits. */
static void block_to_bf16(uint16_t *dst, const float *src, long long n) {
#pragma omp simd
  for (long long i = 0; i < n; i++)
    dst[i] = cpu_bf16_bits(src[i]);
}
#define STRIDES(s, a, b, c, d) ((s)[0] = (a), (s)[1] = (b), (s)[2] = (c), (s)[3] = (d))

/* The nw blocks of Hl heads of each token row of src (row stride ld), in bf16, head-major:
   block w of (b, h) at dst + ((w B + b) Hl + h) T hd. */
static void heads_to_bf16(uint16_t *dst, const float *src, int B, int T, int Hl, int hd, int nw,
                          int ld) {
  const size_t blk = (size_t)T * hd;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *s = src + ((size_t)b * T + t) * ld;
      for (int w = 0; w < nw; w++)
        for (int h = 0; h < Hl; h++)
          block_to_bf16(dst + (((size_t)w * B + b) * Hl + h) * blk + (size_t)t * hd,
                        s + ((size_t)w * Hl + h) * hd, hd);
    }
}
/* Block w (0 q, 1 k, 2 v) of each of the rows of dqkv = the row of g (Cl wide). */
static void grads_into(float *dqkv, const float *g, int rows, int Cl, int w) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    memcpy(dqkv + (size_t)r * 3 * Cl + (size_t)w * Cl, g + (size_t)r * Cl, (size_t)Cl * sizeof *g);
}
/* Strides of block w of heads_to_bf16's layout, read as rows x hd (or transposed: hd x rows). */
static void head_strides(long long *s, int Hl, int T, int hd, int transposed) {
  const long long blk = (long long)T * hd;
  STRIDES(s, Hl * blk, blk, transposed ? 1 : hd, transposed ? hd : 1);
}

static mgt_status attention_forward_native(cpu_ctx *c, float *out, float *P, const float *qkv,
                                           int B, int T, int Hl, int hd, int head_offset,
                                           const int32_t *keylen, const int32_t *kfirst,
                                           const mgt_dropout *d, float *scratch) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const long long TT = (long long)T * T, Cl = A.Cl, blk = (long long)B * Hl * T * hd;
  uint16_t *q16, *p16;
  MGT_CHECK(cpu_bf16_scratch(c, 0, (size_t)B * T * A.ld, &q16));
  MGT_CHECK(cpu_bf16_scratch(c, 1, (size_t)B * Hl * TT, &p16));
  heads_to_bf16(q16, qkv, B, T, Hl, hd, 3, A.ld);
  cpu_mm s = att_mm(B, Hl, T, T, hd, A.scale); /* S = scale Q K^T */
  head_strides(s.sa, Hl, T, hd, 0), head_strides(s.sb, Hl, T, hd, 1);
  STRIDES(s.sc, Hl * TT, TT, T, 1);
  MGT_CHECK(cpu_native_matmul(c->nat, &s, q16, q16 + blk, P));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hl; h++) {
      float *p = P + ((size_t)b * Hl + h) * TT;
      uint16_t *p16b = p16 + ((size_t)b * Hl + h) * TT;
      for (int i = 0; i < T; i++) {
        softmax_row(p + (size_t)i * T, cpu_key_first(kfirst, b, T, i), key_limit(keylen, b, T, i),
                    T);
        if (!A.drop) block_to_bf16(p16b + (size_t)i * T, p + (size_t)i * T, T); /* while in cache */
      }
      if (A.drop) {
        float *pd = scratch + ((size_t)b * Hl + h) * TT;
        dropped_probs(pd, p, d, keylen, kfirst, b, head_offset + h, T, A.thr, A.dscale);
        block_to_bf16(p16b, pd, TT);
      }
    }
  cpu_mm o = att_mm(B, Hl, T, hd, T, 1.0f); /* out = Pd V */
  STRIDES(o.sa, Hl * TT, TT, T, 1), head_strides(o.sb, Hl, T, hd, 0);
  STRIDES(o.sc, T * Cl, hd, Cl, 1);
  return cpu_native_matmul(c->nat, &o, p16, q16 + 2 * blk, out);
}

static mgt_status attention_backward_native(cpu_ctx *c, float *dqkv, const float *dout,
                                            const float *qkv, const float *P, int B, int T, int Hl,
                                            int hd, int head_offset, const int32_t *keylen,
                                            const int32_t *kfirst, const mgt_dropout *d,
                                            float *scratch) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const long long TT = (long long)T * T, blk = (long long)B * Hl * T * hd;
  uint16_t *q16, *o16, *p16;
  MGT_CHECK(cpu_bf16_scratch(c, 0, (size_t)B * T * A.ld, &q16));
  MGT_CHECK(cpu_bf16_scratch(c, 1, (size_t)B * T * A.Cl, &o16));
  MGT_CHECK(cpu_bf16_scratch(c, 2, (size_t)B * Hl * TT, &p16));
  heads_to_bf16(q16, qkv, B, T, Hl, hd, 3, A.ld);
  heads_to_bf16(o16, dout, B, T, Hl, hd, 1, A.Cl);
  if (A.drop) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < Hl; h++) {
        const size_t o = ((size_t)b * Hl + h) * TT;
        dropped_probs(scratch + o, P + o, d, keylen, kfirst, b, head_offset + h, T, A.thr,
                      A.dscale);
        block_to_bf16(p16 + o, scratch + o, TT);
      }
  } else {
    cpu_to_bf16(p16, P, B * Hl * T, T, T);
  }
  /* dQ, dK, dV each into g, token-major without gaps (written into dqkv's gaps, oneDNN left its
     AMX kernels), then copied into their columns of dqkv */
  float *g;
  MGT_CHECK(cpu_f32_scratch(c, 1, (size_t)B * T * A.Cl, &g));
  cpu_mm m = att_mm(B, Hl, T, hd, T, 1.0f); /* dV = Pd^T dO */
  STRIDES(m.sa, Hl * TT, TT, 1, T), head_strides(m.sb, Hl, T, hd, 0);
  STRIDES(m.sc, T * A.Cl, hd, A.Cl, 1);
  MGT_CHECK(cpu_native_matmul(c->nat, &m, p16, o16, g));
  grads_into(dqkv, g, B * T, A.Cl, 2);
  m = att_mm(B, Hl, T, T, hd, 1.0f); /* dPd = dO V^T */
  head_strides(m.sa, Hl, T, hd, 0), head_strides(m.sb, Hl, T, hd, 1);
  STRIDES(m.sc, Hl * TT, TT, T, 1);
  MGT_CHECK(cpu_native_matmul(c->nat, &m, o16, q16 + 2 * blk, scratch));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hl; h++) {
      float *s = scratch + ((size_t)b * Hl + h) * TT;
      const float *p = P + ((size_t)b * Hl + h) * TT;
      uint16_t *s16 = p16 + ((size_t)b * Hl + h) * TT;
      for (int i = 0; i < T; i++) {
        softmax_backward_row(s + (size_t)i * T, p + (size_t)i * T, d, b, head_offset + h, T, i,
                             cpu_key_first(kfirst, b, T, i), key_limit(keylen, b, T, i), &A);
        block_to_bf16(s16 + (size_t)i * T, s + (size_t)i * T, T); /* dS, while in cache */
      }
    }
  m = att_mm(B, Hl, T, hd, T, 1.0f); /* dQ = dS K */
  STRIDES(m.sa, Hl * TT, TT, T, 1), head_strides(m.sb, Hl, T, hd, 0);
  STRIDES(m.sc, T * A.Cl, hd, A.Cl, 1);
  MGT_CHECK(cpu_native_matmul(c->nat, &m, p16, q16 + blk, g));
  grads_into(dqkv, g, B * T, A.Cl, 0);
  STRIDES(m.sa, Hl * TT, TT, 1, T); /* dK = dS^T Q */
  MGT_CHECK(cpu_native_matmul(c->nat, &m, p16, q16, g));
  grads_into(dqkv, g, B * T, A.Cl, 1);
  return MGT_OK;
}
#endif

mgt_status cpu_attention_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                 int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                 const int32_t *kfirst, const mgt_dropout *d, float *scratch) {
#ifdef MGT_HAVE_ONEDNN
  if (cpu_native_on(ctx))
    return attention_forward_native(ctx, out, P, qkv, B, T, Hl, hd, head_offset, keylen, kfirst, d,
                                    scratch);
#endif
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
      for (int i = 0; i < T; i++)
        softmax_row(p + (size_t)i * T, cpu_key_first(kfirst, b, T, i), key_limit(keylen, b, T, i),
                    T);
      const float *pd = p;
      if (drop) {
        float *sd = scratch + ((size_t)b * Hl + h) * T * T;
        dropped_probs(sd, p, d, keylen, kfirst, b, head_offset + h, T, thr, dscale);
        pd = sd;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, pd, T, v, ld, 0.0f, o,
                  Cl);
    }
  return MGT_OK;
}

mgt_status cpu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                  const float *P, int B, int T, int Hl, int hd, int head_offset,
                                  int H, const int32_t *keylen, const int32_t *kfirst,
                                  const mgt_dropout *d, float *scratch) {
#ifdef MGT_HAVE_ONEDNN
  if (cpu_native_on(ctx))
    return attention_backward_native(ctx, dqkv, dout, qkv, P, B, T, Hl, hd, head_offset, keylen,
                                     kfirst, d, scratch);
#endif
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const int Cl = A.Cl, ld = A.ld, drop = A.drop;
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
      /* dV = Pd^T dO, with Pd the dropped probabilities rebuilt from the mask. */
      const float *pd = p;
      if (drop) {
        dropped_probs(s, p, d, keylen, kfirst, b, head_offset + h, T, A.thr, A.dscale);
        pd = s;
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, pd, T, o, Cl, 0.0f, dv,
                  ld);
      /* dPd = dO V^T, then through the mask and the softmax. */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, o, Cl, v, ld, 0.0f, s,
                  T);
      for (int i = 0; i < T; i++)
        softmax_backward_row(s + (size_t)i * T, p + (size_t)i * T, d, b, head_offset + h, T, i,
                             cpu_key_first(kfirst, b, T, i), key_limit(keylen, b, T, i), &A);
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
mgt_status cpu_rope(void *ctx, float *x, int N, int T, int pos0, const int32_t *pos, int heads,
                    int hd, int ld, const float *inv_freq, int inverse) {
  (void)ctx;
  const int half = hd / 2;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float at = (float)(pos ? pos[n] : pos0 + n % T);
    for (int h = 0; h < heads; h++) {
      float *v = x + (size_t)n * ld + (size_t)h * hd;
      for (int i = 0; i < half; i++) {
        const float a = at * inv_freq[i], c = cosf(a), s = sign * sinf(a);
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
