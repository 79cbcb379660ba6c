/* Vocabulary-parallel cross-entropy, in the steps between which the model reduces over
   the tensor-parallel group. Padding columns (>= nv) never enter the softmax. */
#include <float.h>

#include "cpu.h"

mgt_status cpu_xent_max(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *r = logits + (size_t)n * Vl;
    float m = -FLT_MAX;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < nv; j++)
      m = r[j] > m ? r[j] : m;
    rowmax[n] = m;
  }
  return MGT_OK;
}

mgt_status cpu_xent_sumexp(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                           const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *r = logits + (size_t)n * Vl;
    float m = rowmax[n], s = 0.0f;
    int t = targets[n] - v0;
    tgt[n] = (t >= 0 && t < nv) ? r[t] : 0.0f;
    if (keep_exp) {
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < nv; j++) {
        float e = mgt_fast_expf(r[j] - m);
        r[j] = e;
        s += e;
      }
    } else {
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < nv; j++)
        s += mgt_fast_expf(r[j] - m);
    }
    sum[n] = s;
  }
  return MGT_OK;
}

mgt_status cpu_xent_loss(void *ctx, float *losses, const float *rowmax, const float *sum,
                         const float *tgt, const int32_t *targets, int N, double *total) {
  double acc = 0.0;
  for (int n = 0; n < N; n++) {
    losses[n] = targets[n] < 0 ? 0.0f : logf(sum[n]) + rowmax[n] - tgt[n];
    acc += losses[n];
  }
  *total = acc;
  return MGT_OK;
}

mgt_status cpu_xent_backward(void *ctx, float *logits, const float *sum, const int32_t *targets,
                             int N, int Vl, int nv, int v0, float scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *r = logits + (size_t)n * Vl;
    float k = targets[n] < 0 ? 0.0f : scale / sum[n]; /* no loss, no gradient */
#pragma omp simd
    for (int j = 0; j < nv; j++)
      r[j] *= k;
    for (int j = nv; j < Vl; j++)
      r[j] = 0.0f;
    int t = targets[n] - v0;
    if (targets[n] >= 0 && t >= 0 && t < nv) r[t] -= scale;
  }
  return MGT_OK;
}

mgt_status cpu_argmax(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                      int32_t *idx) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *r = logits + (size_t)n * Vl;
    float best = -FLT_MAX;
    int32_t at = -1;
    for (int j = 0; j < nv; j++)
      if (r[j] > best || at < 0) best = r[j], at = j;
    val[n] = best;
    idx[n] = at;
  }
  return MGT_OK;
}
