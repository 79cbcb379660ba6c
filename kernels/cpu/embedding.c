#include <omp.h>

#include "cpu.h"

mgt_status cpu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                 int N, int C, int v0, int Vl) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    int t = tokens[n] - v0;
    float *o = out + (size_t)n * C;
    if (t >= 0 && t < Vl)
      memcpy(o, wte + (size_t)t * C, (size_t)C * sizeof(float));
    else
      memset(o, 0, (size_t)C * sizeof(float));
  }
  return MGT_OK;
}

mgt_status cpu_add_position(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C,
                            const int32_t *pos) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *r = x + (size_t)n * C;
    const float *p = wpe + (size_t)(pos ? pos[n] : (t0 + n) % T) * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      r[c] += p[c];
  }
  return MGT_OK;
}

mgt_status cpu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *pos, int B, int T, int C,
                                  int v0, int Vl, int accumulate) {
  /* Threads own column ranges: a token seen twice adds in row order, without races. */
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), th = omp_get_thread_num();
    int c0 = (int)((int64_t)C * th / nt), c1 = (int)((int64_t)C * (th + 1) / nt);
    for (int n = 0; n < B * T; n++) {
      int tk = tokens[n] - v0;
      if (tk < 0 || tk >= Vl) continue;
      float *w = dwte + (size_t)tk * C;
      const float *d = dout + (size_t)n * C;
#pragma omp simd
      for (int c = c0; c < c1; c++)
        w[c] += d[c];
    }
    if (dwpe && pos) { /* positions of their own (reset after each document): rows in order */
      for (int t = 0; t < T && !accumulate; t++)
        for (int c = c0; c < c1; c++)
          dwpe[(size_t)t * C + c] = 0.0f;
      for (int n = 0; n < B * T; n++) {
        float *w = dwpe + (size_t)pos[n] * C;
        const float *d = dout + (size_t)n * C;
#pragma omp simd
        for (int c = c0; c < c1; c++)
          w[c] += d[c];
      }
    } else if (dwpe) {
      for (int t = 0; t < T; t++) {
        float *w = dwpe + (size_t)t * C;
        if (!accumulate)
          for (int c = c0; c < c1; c++)
            w[c] = 0.0f;
        for (int b = 0; b < B; b++) {
          const float *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
          for (int c = c0; c < c1; c++)
            w[c] += d[c];
        }
      }
    }
  }
  return MGT_OK;
}

mgt_status cpu_gather_rows(void *ctx, float *out, const float *x, const int32_t *idx, int M,
                           int C) {
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; m++)
    memcpy(out + (size_t)m * C, x + (size_t)idx[m] * C, (size_t)C * sizeof(float));
  return MGT_OK;
}

mgt_status cpu_scatter_add_rows(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                                int C) {
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; m++) {
    float *d = dx + (size_t)idx[m] * C;
    const float *s = dy + (size_t)m * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      d[c] += s[c];
  }
  return MGT_OK;
}
