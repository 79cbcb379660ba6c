/* The CUDA backend: BERT's head activations (erf GeLU, tanh), its row gather and scatter, and
   SwiGLU (Llama's MLP). */
#include "cuda_impl.h"

namespace mgt_cu {

__device__ float act_value(int act, float x) {
  if (act == MGT_ACT_GELU_ERF) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if (act == MGT_ACT_TANH) return tanhf(x);
  return gelu_tanh(x);
}

__device__ float act_slope(int act, float x) {
  if (act == MGT_ACT_GELU_ERF)
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
           x * 0.39894228040143268f * expf(-0.5f * x * x);
  if (act == MGT_ACT_TANH) {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  float t = tanhf(k0 * (x + k1 * x * x * x)), du = k0 * (1.0f + 3.0f * k1 * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ void k_bias_act(int act, float *out, float *pre, const float *b, int C, size_t n) {
  GRID_STRIDE(i, n) {
    float x = pre[i] + (b ? b[i % C] : 0.0f);
    pre[i] = x;
    out[i] = act_value(act, x);
  }
}

mgt_status cu_bias_act_forward(void *ctx, int act, float *out, float *pre, const float *b, int N,
                               int C) {
  const size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  k_bias_act<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(act, out, pre, b, C, n);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_act_backward(int act, float *dpre, const float *dout, const float *pre,
                               size_t n) {
  GRID_STRIDE(i, n) dpre[i] = dout[i] * act_slope(act, pre[i]);
}

mgt_status cu_act_backward(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                           size_t n) {
  if (!n) return MGT_OK;
  k_act_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(act, dpre, dout, pre, n);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_gather_rows(float *out, const float *x, const int32_t *idx, int C, size_t n) {
  GRID_STRIDE(i, n) out[i] = x[(size_t)idx[i / C] * C + i % C];
}

mgt_status cu_gather_rows(void *ctx, float *out, const float *x, const int32_t *idx, int M, int C) {
  const size_t n = (size_t)M * C;
  if (!n) return MGT_OK;
  k_gather_rows<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(out, x, idx, C, n);
  LAUNCHED();
  return MGT_OK;
}

/* distinct rows: no two threads write one element */
__global__ void k_scatter_add_rows(float *dx, const float *dy, const int32_t *idx, int C,
                                   size_t n) {
  GRID_STRIDE(i, n) dx[(size_t)idx[i / C] * C + i % C] += dy[i];
}

mgt_status cu_scatter_add_rows(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                               int C) {
  const size_t n = (size_t)M * C;
  if (!n) return MGT_OK;
  k_scatter_add_rows<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dx, dy, idx, C, n);
  LAUNCHED();
  return MGT_OK;
}

/* SwiGLU (Llama's MLP): silu(g) * u over x(N, 2F) = [gate | up]. */
__global__ void k_swiglu(float *out, const float *x, int F, size_t n) {
  GRID_STRIDE(i, n) {
    const size_t r = i / F, f = i % F;
    const float g = x[r * 2 * F + f], u = x[r * 2 * F + F + f];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void k_swiglu_backward(float *dx, const float *dout, const float *x, int F, size_t n) {
  GRID_STRIDE(i, n) {
    const size_t r = i / F, f = i % F;
    const float g = x[r * 2 * F + f], u = x[r * 2 * F + F + f], d = dout[i];
    const float s = 1.0f / (1.0f + expf(-g));
    dx[r * 2 * F + f] = d * u * s * (1.0f + g * (1.0f - s));
    dx[r * 2 * F + F + f] = d * g * s;
  }
}

mgt_status cu_swiglu_forward(void *ctx, float *out, const float *x, int N, int F) {
  const size_t n = (size_t)N * F;
  if (n == 0) return MGT_OK;
  k_swiglu<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(out, x, F, n);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_swiglu_backward(void *ctx, float *dx, const float *dout, const float *x, int N,
                              int F) {
  const size_t n = (size_t)N * F;
  if (n == 0) return MGT_OK;
  k_swiglu_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dx, dout, x, F, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
