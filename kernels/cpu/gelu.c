#include "cpu.h"

mgt_status cpu_bias_gelu_forward(void *ctx, float *out, float *pre, const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *p = pre + (size_t)n * C, *o = out + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float x = b ? p[c] + b[c] : p[c]; /* no bias: --disable-bias-linear */
      p[c] = x;
      float u = MGT_GELU_K0 * (x + MGT_GELU_K1 * x * x * x);
      o[c] = 0.5f * x * (1.0f + mgt_fast_tanhf(u));
    }
  }
  return MGT_OK;
}

/* The same numbers stored as bf16 bits: what rounding out afterwards gives. */
mgt_status cpu_bias_gelu_forward16(void *ctx, uint16_t *out, float *pre, const float *b, int N,
                                   int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *p = pre + (size_t)n * C;
    uint16_t *o = out + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float x = b ? p[c] + b[c] : p[c];
      p[c] = x;
      float u = MGT_GELU_K0 * (x + MGT_GELU_K1 * x * x * x);
      o[c] = cpu_bf16_bits(0.5f * x * (1.0f + mgt_fast_tanhf(u)));
    }
  }
  return MGT_OK;
}

mgt_status cpu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre,
                             size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = pre[i];
    float u = MGT_GELU_K0 * (x + MGT_GELU_K1 * x * x * x);
    float t = mgt_fast_tanhf(u);
    float du = MGT_GELU_K0 * (1.0f + 3.0f * MGT_GELU_K1 * x * x);
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    dpre[i] = dout[i] * g;
  }
  return MGT_OK;
}

/* SwiGLU (Llama's MLP): silu(g) * u, with silu(g) = g * sigmoid(g); libm's expf. */
mgt_status cpu_swiglu_forward(void *ctx, float *out, const float *x, int N, int F) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *g = x + (size_t)n * 2 * F, *u = g + F;
    float *o = out + (size_t)n * F;
    for (int f = 0; f < F; f++)
      o[f] = g[f] / (1.0f + expf(-g[f])) * u[f];
  }
  return MGT_OK;
}

/* d/dg silu(g) = s (1 + g (1 - s)) with s = sigmoid(g); d/du = silu(g). */
mgt_status cpu_swiglu_backward(void *ctx, float *dx, const float *dout, const float *x, int N,
                               int F) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *g = x + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
    float *dg = dx + (size_t)n * 2 * F, *du = dg + F;
    for (int f = 0; f < F; f++) {
      const float s = 1.0f / (1.0f + expf(-g[f]));
      dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
      du[f] = d[f] * g[f] * s;
    }
  }
  return MGT_OK;
}

/* BERT's heads: the LM head's GeLU is the erf form, the pooler's activation tanh; both use
   libm's functions, not the fast approximations of the MLP. */
static float act_value(int act, float x) {
  switch (act) {
  case MGT_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case MGT_ACT_TANH: return tanhf(x);
  default: {
    float u = MGT_GELU_K0 * (x + MGT_GELU_K1 * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
  }
}

static float act_slope(int act, float x) {
  switch (act) {
  case MGT_ACT_GELU_ERF:
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
           x * 0.39894228040143268f * expf(-0.5f * x * x);
  case MGT_ACT_TANH: {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  default: {
    float u = MGT_GELU_K0 * (x + MGT_GELU_K1 * x * x * x), t = tanhf(u);
    float du = MGT_GELU_K0 * (1.0f + 3.0f * MGT_GELU_K1 * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
  }
  }
}

mgt_status cpu_bias_act_forward(void *ctx, int act, float *out, float *pre, const float *b, int N,
                                int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *p = pre + (size_t)n * C, *o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float x = p[c] + (b ? b[c] : 0.0f);
      p[c] = x;
      o[c] = act_value(act, x);
    }
  }
  return MGT_OK;
}

mgt_status cpu_act_backward(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                            size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    dpre[i] = dout[i] * act_slope(act, pre[i]);
  return MGT_OK;
}
