#include <omp.h>

#include "cpu.h"

mgt_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *x,
                                 const float *w, const float *b, int N, int C, float eps) {
  cpu_ctx *cx = ctx; /* kept in 16 bits (set_act16): rounded once, here */
  uint16_t *o16 = cpu_act16_bf16(cx, out, (size_t)N * C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float *o = out + (size_t)n * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++)
      s += xr[c];
    float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
      v += (xr[c] - m) * (xr[c] - m);
    float r = 1.0f / sqrtf(v / C + eps);
    if (o16) {
      uint16_t *q = o16 + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        q[c] = cpu_bf16_bits((xr[c] - m) * r * w[c] + b[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++)
        o[c] = (xr[c] - m) * r * w[c] + b[c];
    }
    mean[n] = m;
    rstd[n] = r;
  }
  if (!o16 && cpu_in_act16(cx, out, (size_t)N * C)) cpu_round16(cx, out, out, (size_t)N * C);
  return MGT_OK;
}

mgt_status cpu_layernorm_backward(void *ctx, float *dx, float *dw, float *db, const float *dout,
                                  const float *x, const float *w, const float *mean,
                                  const float *rstd, int N, int C, int accumulate) {
#pragma omp parallel
  {
    /* Input gradient: rows are independent. */
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
      float *dxr = dx + (size_t)n * C;
      float m = mean[n], r = rstd[n];
      float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
      for (int c = 0; c < C; c++) {
        float dn = dr[c] * w[c];
        s1 += dn;
        s2 += dn * (xr[c] - m) * r;
      }
      s1 /= C;
      s2 /= C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        float nrm = (xr[c] - m) * r;
        dxr[c] += (dr[c] * w[c] - s1 - nrm * s2) * r;
      }
    }
    /* Parameter gradients: each thread owns a column range, so sums have a fixed order. */
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int c0 = (int)((int64_t)C * t / nt), c1 = (int)((int64_t)C * (t + 1) / nt);
    if (!accumulate)
      for (int c = c0; c < c1; c++)
        dw[c] = db[c] = 0.0f;
    for (int n = 0; n < N; n++) {
      const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
      float m = mean[n], r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) {
        dw[c] += dr[c] * (xr[c] - m) * r;
        db[c] += dr[c];
      }
    }
  }
  return MGT_OK;
}

/* RMSNorm (Llama's): no mean is removed and there is no bias. */
mgt_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                               int N, int C, float eps) {
  cpu_ctx *cx = ctx; /* kept in 16 bits (set_act16): rounded once, here */
  uint16_t *o16 = cpu_act16_bf16(cx, out, (size_t)N * C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float *o = out + (size_t)n * C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
      v += xr[c] * xr[c];
    float r = 1.0f / sqrtf(v / C + eps);
    if (o16) {
      uint16_t *q = o16 + (size_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        q[c] = cpu_bf16_bits(xr[c] * r * w[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++)
        o[c] = xr[c] * r * w[c];
    }
    rstd[n] = r;
  }
  if (!o16 && cpu_in_act16(cx, out, (size_t)N * C)) cpu_round16(cx, out, out, (size_t)N * C);
  return MGT_OK;
}

/* With y = x r w and r = (mean x^2 + eps)^-1/2: dx = r (dy w - x r * mean(dy w x r)). */
mgt_status cpu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                                const float *w, const float *rstd, int N, int C, int accumulate) {
  (void)ctx;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
      float *dxr = dx + (size_t)n * C;
      const float r = rstd[n];
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int c = 0; c < C; c++)
        s += dr[c] * w[c] * xr[c] * r;
      s /= C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        dxr[c] += (dr[c] * w[c] - xr[c] * r * s) * r;
    }
    /* each thread owns a column range, so sums have a fixed order */
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int c0 = (int)((int64_t)C * t / nt), c1 = (int)((int64_t)C * (t + 1) / nt);
    if (!accumulate)
      for (int c = c0; c < c1; c++)
        dw[c] = 0.0f;
    for (int n = 0; n < N; n++) {
      const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
      const float r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++)
        dw[c] += dr[c] * xr[c] * r;
    }
  }
  return MGT_OK;
}

/* RMSNorm over each head of strided rows (Qwen 3's q/k norm), in place; or over a part of each
   row's norm, its sum of squares given. */
mgt_status cpu_head_rmsnorm_forward(void *ctx, float *x, int ld, float *raw, float *rstd,
                                    const float *w, int N, int heads, int hd, float eps,
                                    const float *sums, int width) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int j = 0; j < heads; j++) {
      const size_t s = (size_t)n * heads + j;
      float *v = x + (size_t)n * ld + (size_t)j * hd, *rv = raw + s * hd;
      float q = 0.0f;
#pragma omp simd reduction(+ : q)
      for (int c = 0; c < hd; c++) {
        rv[c] = v[c];
        q += v[c] * v[c];
      }
      const float r = sums ? 1.0f / sqrtf(sums[n] / width + eps) : 1.0f / sqrtf(q / hd + eps);
#pragma omp simd
      for (int c = 0; c < hd; c++)
        v[c] = rv[c] * r * w[c];
      rstd[s] = r;
    }
  return MGT_OK;
}

/* dw first (the gradient of the output is overwritten after), each thread a column range so that
   the sums have a fixed order; then dx = r (dy w - x r * mean(dy w x r)) per head, the mean over
   the whole norm when its sum is given. */
mgt_status cpu_head_rmsnorm_backward(void *ctx, float *dx, int ld, float *dw, const float *raw,
                                     const float *rstd, const float *w, int N, int heads, int hd,
                                     int accumulate, const float *sums, int width) {
  (void)ctx;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int c0 = (int)((int64_t)hd * t / nt), c1 = (int)((int64_t)hd * (t + 1) / nt);
    if (!accumulate)
      for (int c = c0; c < c1; c++)
        dw[c] = 0.0f;
    for (int n = 0; n < N; n++)
      for (int j = 0; j < heads; j++) {
        const size_t s = (size_t)n * heads + j;
        const float *dr = dx + (size_t)n * ld + (size_t)j * hd, *xr = raw + s * hd;
        const float r = rstd[s];
        for (int c = c0; c < c1; c++)
          dw[c] += dr[c] * xr[c] * r;
      }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++)
      for (int j = 0; j < heads; j++) {
        const size_t s = (size_t)n * heads + j;
        float *dr = dx + (size_t)n * ld + (size_t)j * hd;
        const float *xr = raw + s * hd;
        const float r = rstd[s];
        float m = 0.0f;
        if (sums)
          m = sums[n] * r / width;
        else {
#pragma omp simd reduction(+ : m)
          for (int c = 0; c < hd; c++)
            m += dr[c] * w[c] * xr[c] * r;
          m /= hd;
        }
#pragma omp simd
        for (int c = 0; c < hd; c++)
          dr[c] = (dr[c] * w[c] - xr[c] * r * m) * r;
      }
  }
  return MGT_OK;
}

mgt_status cpu_row_dots(void *ctx, float *out, const float *a, int lda, const float *b, int ldb,
                        const float *w, int N, int n) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    const float *ar = a + (size_t)r * lda, *br = b + (size_t)r * ldb;
    float q = 0.0f;
    if (w) {
#pragma omp simd reduction(+ : q)
      for (int c = 0; c < n; c++)
        q += ar[c] * br[c] * w[c];
    } else {
#pragma omp simd reduction(+ : q)
      for (int c = 0; c < n; c++)
        q += ar[c] * br[c];
    }
    out[r] = q;
  }
  return MGT_OK;
}
