/* The CUDA backend: dropout, residual adds, and bias + dropout + residual + LayerNorm in one pass.
 */
#include "cuda_impl.h"

namespace mgt_cu {

__global__ void k_dropout(float *out, const float *x, const float *res, size_t n, size_t row,
                          uint64_t first, uint64_t seed, uint64_t sample_base, int layer, int site,
                          uint32_t thr, float scale, int drop) {
  GRID_STRIDE(i, n) {
    float v = x[i];
    if (drop) {
      uint64_t b = (first + i) / row, e = (first + i) % row;
      uint64_t stream = mgt_philox_dropout_stream(sample_base + b, layer, site);
      v = keep_word(seed, stream, e, thr) ? v * scale : 0.0f;
    }
    out[i] = (res ? res[i] : 0.0f) + v;
  }
}

mgt_status cu_dropout_forward(void *ctx, float *out, const float *x, const float *res, size_t n,
                              size_t row, const mgt_dropout *d) {
  if (!n) return MGT_OK;
  const int drop = d->p > 0.0f;
  k_dropout<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(
      out, x, res, n, row, d->first, d->seed, d->sample_base, d->layer, d->site,
      drop ? mgt_dropout_threshold(d->p) : 0u, drop ? 1.0f / (1.0f - d->p) : 1.0f, drop);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_dropout_backward(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                               const mgt_dropout *d) {
  if (d->p <= 0.0f && dx == dout) return MGT_OK;
  return cu_dropout_forward(ctx, dx, dout, NULL, n, row, d);
}

/* A dropout site's parameters as the kernels take them. */
struct drop_args {
  uint64_t first, seed, sample_base;
  int layer, site, drop;
  uint32_t thr;
  float scale;
};

drop_args drop_args_of(const mgt_dropout *d) {
  drop_args a;
  a.first = d->first, a.seed = d->seed, a.sample_base = d->sample_base;
  a.layer = d->layer, a.site = d->site, a.drop = d->p > 0.0f;
  a.thr = a.drop ? mgt_dropout_threshold(d->p) : 0u;
  a.scale = a.drop ? 1.0f / (1.0f - d->p) : 1.0f;
  return a;
}

/* res + dropout(x + b) for element i of the buffer, the CPU's operations in its order. */
__device__ float bias_dropout_add_at(const float *x, const float *b, const float *res, int C,
                                     size_t i, size_t row, const drop_args &a) {
  float v = b ? x[i] + b[i % C] : x[i];
  if (a.drop) {
    uint64_t s = (a.first + i) / row, e = (a.first + i) % row;
    v = keep_word(a.seed, mgt_philox_dropout_stream(a.sample_base + s, a.layer, a.site), e, a.thr)
            ? v * a.scale
            : 0.0f;
  }
  return (res ? res[i] : 0.0f) + v;
}

__global__ void k_bias_dropout_add(float *out, const float *x, const float *b, const float *res,
                                   int C, size_t n, size_t row, drop_args a) {
  GRID_STRIDE(i, n) out[i] = bias_dropout_add_at(x, b, res, C, i, row, a);
}

/* One row per block: the sum, then the LayerNorm of it with k_layernorm_forward's arithmetic. */
template <typename TO>
__global__ void k_bias_dropout_add_ln(float *out, TO *ln, float *mean, float *rstd, const float *x,
                                      const float *b, const float *res, const float *w,
                                      const float *lb, int C, float eps, size_t row, drop_args a) {
  __shared__ float sh[32];
  const size_t base = (size_t)blockIdx.x * C;
  float *o = out + base;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = bias_dropout_add_at(x, b, res, C, base + c, row, a);
    o[c] = y;
    s += y;
  }
  const float m = block_sum(s, sh) / C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) /* each thread rereads what it wrote */
    v += (o[c] - m) * (o[c] - m);
  const float r = rsqrtf(block_sum(v, sh) / C + eps);
  TO *l = ln + base;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    put(&l[c], (o[c] - m) * r * w[c] + lb[c]);
  if (threadIdx.x == 0) mean[blockIdx.x] = m, rstd[blockIdx.x] = r;
}

/* The same with RMSNorm: the sum, then k_rmsnorm_forward's arithmetic on it. */
template <typename TO>
__global__ void k_bias_dropout_add_rms(float *out, TO *ln, float *rstd, const float *x,
                                       const float *b, const float *res, const float *w, int C,
                                       float eps, size_t row, drop_args a) {
  __shared__ float sh[32];
  const size_t base = (size_t)blockIdx.x * C;
  float *o = out + base;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = bias_dropout_add_at(x, b, res, C, base + c, row, a);
    o[c] = y;
    v += y * y;
  }
  const float r = rsqrtf(block_sum(v, sh) / C + eps);
  TO *l = ln + base;
  for (int c = threadIdx.x; c < C; c += blockDim.x) /* each thread rereads what it wrote */
    put(&l[c], o[c] * r * w[c]);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

mgt_status cu_bias_dropout_add_ln(void *ctx, float *out, float *x, const float *b, const float *res,
                                  int N, int C, size_t row, const mgt_dropout *d, float *ln,
                                  float *mean, float *rstd, const float *w, const float *lb,
                                  float eps) {
  const size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  cudaStream_t st = C_(ctx)->stream;
  const drop_args a = drop_args_of(d);
  cuda_ctx *c = C_(ctx);
  if (ln && !mean && !in_act16(c, ln, n))
    k_bias_dropout_add_rms<<<N, 256, 0, st>>>(out, ln, rstd, x, b, res, w, C, eps, row, a);
  else if (ln && !mean && c->precision == MGT_PREC_BF16)
    k_bias_dropout_add_rms<<<N, 256, 0, st>>>(out, (__nv_bfloat16 *)ln, rstd, x, b, res, w, C, eps,
                                              row, a);
  else if (ln && !mean)
    k_bias_dropout_add_rms<<<N, 256, 0, st>>>(out, (__half *)ln, rstd, x, b, res, w, C, eps, row,
                                              a);
  else if (ln && !in_act16(c, ln, n))
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, ln, mean, rstd, x, b, res, w, lb, C, eps, row, a);
  else if (ln && c->precision == MGT_PREC_BF16)
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, (__nv_bfloat16 *)ln, mean, rstd, x, b, res, w, lb,
                                             C, eps, row, a);
  else if (ln)
    k_bias_dropout_add_ln<<<N, 256, 0, st>>>(out, (__half *)ln, mean, rstd, x, b, res, w, lb, C,
                                             eps, row, a);
  else
    k_bias_dropout_add<<<blocks_for(n, 256), 256, 0, st>>>(out, x, b, res, C, n, row, a);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_add(float *y, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }

mgt_status cu_add(void *ctx, float *y, const float *x, size_t n) {
  if (!n) return MGT_OK;
  k_add<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(y, x, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
