/* Optimizer kernels over the flat parameter, gradient and moment buffers. */
#include <omp.h>

#include "cpu.h"

/* Threads take equal shares of the total element count across segments. */
static size_t seg_total(const mgt_segment *segs, int nseg) {
  size_t n = 0;
  for (int i = 0; i < nseg; i++)
    n += segs[i].n;
  return n;
}

mgt_status cpu_sumsq(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out) {
  double part[MGT_CPU_MAX_THREADS] = {0};
  size_t total = seg_total(segs, nseg);
  int nt_used = 1;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    if (nt > MGT_CPU_MAX_THREADS) nt = MGT_CPU_MAX_THREADS;
#pragma omp single
    nt_used = nt;
    if (t < nt) {
      size_t lo = total * (size_t)t / (size_t)nt, hi = total * (size_t)(t + 1) / (size_t)nt;
      size_t pos = 0;
      double acc = 0.0;
      for (int s = 0; s < nseg && pos < hi; s++) {
        size_t a = pos, b = pos + segs[s].n;
        pos = b;
        if (b <= lo || !segs[s].count_in_norm) continue;
        size_t i0 = (a > lo ? a : lo) - a, i1 = (b < hi ? b : hi) - a;
        const float *p = x + segs[s].offset;
        float f = 0.0f;
        /* float partials of bounded length keep precision and vectorize */
        for (size_t i = i0; i < i1; i += 4096) {
          size_t e = i + 4096 < i1 ? i + 4096 : i1;
          f = 0.0f;
#pragma omp simd reduction(+ : f)
          for (size_t j = i; j < e; j++)
            f += p[j] * p[j];
          acc += f;
        }
      }
      part[t] = acc;
    }
  }
  double s = 0.0;
  for (int t = 0; t < nt_used; t++)
    s += part[t];
  *out = s;
  return MGT_OK;
}

/* One element's update: the same arithmetic in each of cpu_adamw's loops. */
#define ADAMW_ELEMENT(i)                                                                           \
  do {                                                                                             \
    float gi = gg[i] * gs;                                                                         \
    float mi = b1 * mm[i] + (1.0f - b1) * gi;                                                      \
    float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;                                                 \
    mm[i] = mi;                                                                                    \
    vv[i] = vi;                                                                                    \
    float upd = (mi * ib1) / (sqrtf(vi * ib2) + eps);                                              \
    pp[i] -= lr * (upd + wd * pp[i]);                                                              \
  } while (0)

mgt_status cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v,
                     const mgt_segment *segs, int nseg, const mgt_adamw_step *s) {
  cpu_ctx *c = ctx;
  const int copies = s->copies && c && (c->w16 || c->wcopy);
  MGT_REQUIRE(!copies || p == c->wbase, "AdamW writing the weights' copies: not the weights");
  /* the copy in the same pass: bf16 bits (native), rounded bf16 floats; fp16 after each range */
  uint16_t *w16 = copies ? c->w16 : NULL;
  float *wc = copies ? c->wcopy : NULL;
  const int half = wc && c->precision == MGT_PREC_FP16;
  size_t total = seg_total(segs, nseg);
  const float b1 = s->beta1, b2 = s->beta2, lr = s->lr, eps = s->eps, gs = s->grad_scale;
  const float ib1 = 1.0f / s->bias_correction1, ib2 = 1.0f / s->bias_correction2;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    size_t lo = total * (size_t)t / (size_t)nt, hi = total * (size_t)(t + 1) / (size_t)nt;
    size_t pos = 0;
    for (int k = 0; k < nseg && pos < hi; k++) {
      size_t a = pos, b = pos + segs[k].n;
      pos = b;
      if (b <= lo) continue;
      size_t i0 = (a > lo ? a : lo) - a, i1 = (b < hi ? b : hi) - a;
      size_t off = segs[k].offset;
      float *pp = p + off, *mm = m + off, *vv = v + off;
      const float *gg = g + off;
      const float wd = segs[k].weight_decay;
      if (w16) {
        uint16_t *cc = w16 + off;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
          ADAMW_ELEMENT(i);
          cc[i] = cpu_bf16_bits(pp[i]);
        }
      } else if (wc && !half) {
        float *cc = wc + off;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
          ADAMW_ELEMENT(i);
          cc[i] = cpu_round_bf16(pp[i]);
        }
      } else {
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
          ADAMW_ELEMENT(i);
        }
        for (size_t i = i0; half && i < i1; i++)
          wc[off + i] = mgt_round_fp16(pp[i]);
      }
    }
  }
  return MGT_OK;
}
