/* The CUDA backend: the vocabulary-parallel cross-entropy's steps and the row argmax. */
#include "cuda_impl.h"

namespace mgt_cu {

__global__ void k_xent_max(float *rowmax, const float *logits, int Vl, int nv) {
  __shared__ float sh[32];
  const float *r = logits + (size_t)blockIdx.x * Vl;
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < nv; j += blockDim.x)
    m = fmaxf(m, r[j]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

mgt_status cu_xent_max(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv) {
  if (N == 0) return MGT_OK;
  k_xent_max<<<N, 256, 0, C_(ctx)->stream>>>(rowmax, logits, Vl, nv);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_xent_sumexp(float *sum, float *tgt, float *logits, const float *rowmax,
                              const int32_t *targets, int Vl, int nv, int v0, int keep_exp) {
  __shared__ float sh[32];
  const int n = blockIdx.x;
  float *r = logits + (size_t)n * Vl;
  const float m = rowmax[n];
  const int t = targets[n] - v0;
  if (threadIdx.x == 0) tgt[n] = (t >= 0 && t < nv) ? r[t] : 0.0f;
  __syncthreads(); /* the target logit is read before keep_exp overwrites it */
  float s = 0.0f;
  for (int j = threadIdx.x; j < nv; j += blockDim.x) {
    float e = __expf(r[j] - m);
    if (keep_exp) r[j] = e;
    s += e;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) sum[n] = s;
}

mgt_status cu_xent_sumexp(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                          const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp) {
  if (N == 0) return MGT_OK;
  k_xent_sumexp<<<N, 256, 0, C_(ctx)->stream>>>(sum, tgt, logits, rowmax, targets, Vl, nv, v0,
                                                keep_exp);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_xent_loss(float *losses, const float *rowmax, const float *sum, const float *tgt,
                            const int32_t *targets, int N) {
  GRID_STRIDE(n, (size_t)N) losses[n] = targets[n] < 0 ? 0.0f : logf(sum[n]) + rowmax[n] - tgt[n];
}

mgt_status cu_xent_loss(void *ctx, float *losses, const float *rowmax, const float *sum,
                        const float *tgt, const int32_t *targets, int N, double *total) {
  cuda_ctx *c = C_(ctx);
  *total = 0.0;
  if (N == 0) return MGT_OK;
  k_xent_loss<<<blocks_for((size_t)N, 256), 256, 0, c->stream>>>(losses, rowmax, sum, tgt, targets,
                                                                 N);
  LAUNCHED();
  /* summed on the host in double, in row order, as the CPU twin does */
  float *h = NULL;
  MGT_CHECK(host_buffer(c, (size_t)N, &h));
  MGT_CHECK(cu_download(ctx, h, losses, sizeof(float) * (size_t)N));
  double acc = 0.0;
  for (int n = 0; n < N; n++)
    acc += h[n];
  *total = acc;
  return MGT_OK;
}

__global__ void k_xent_backward(float *logits, const float *sum, const int32_t *targets, int N,
                                int Vl, int nv, int v0, float scale) {
  GRID_STRIDE(i, (size_t)N * Vl) {
    int n = (int)(i / Vl), j = (int)(i % Vl), t = targets[n] - v0;
    float g = j < nv && targets[n] >= 0 ? logits[i] * (scale / sum[n]) : 0.0f;
    if (j == t && t < nv && targets[n] >= 0) g -= scale;
    logits[i] = g;
  }
}

mgt_status cu_xent_backward(void *ctx, float *logits, const float *sum, const int32_t *targets,
                            int N, int Vl, int nv, int v0, float scale) {
  size_t n = (size_t)N * Vl;
  if (!n) return MGT_OK;
  k_xent_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(logits, sum, targets, N, Vl, nv,
                                                                   v0, scale);
  LAUNCHED();
  return MGT_OK;
}

/* Row argmax, lowest index on ties: one block per row. out holds (value, index) pairs. */
__global__ void k_argmax(float *out, const float *logits, int Vl, int nv) {
  __shared__ float sv[256];
  __shared__ int si[256];
  const float *r = logits + (size_t)blockIdx.x * Vl;
  float best = -FLT_MAX;
  int at = -1;
  for (int j = threadIdx.x; j < nv; j += blockDim.x)
    if (at < 0 || r[j] > best) best = r[j], at = j; /* j ascends: ties keep the first */
  sv[threadIdx.x] = best;
  si[threadIdx.x] = at;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < (unsigned)o) {
      float v2 = sv[threadIdx.x + o];
      int i2 = si[threadIdx.x + o];
      bool take = i2 >= 0 && (si[threadIdx.x] < 0 || v2 > sv[threadIdx.x] ||
                              (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x]));
      if (take) sv[threadIdx.x] = v2, si[threadIdx.x] = i2;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = sv[0];
    out[2 * blockIdx.x + 1] = __int_as_float(si[0]);
  }
}

mgt_status cu_argmax(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                     int32_t *idx) {
  cuda_ctx *c = C_(ctx);
  if (N == 0) return MGT_OK;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * 2 * (size_t)N));
  k_argmax<<<N, 256, 0, c->stream>>>(c->fscratch, logits, Vl, nv);
  LAUNCHED();
  float *h = NULL;
  MGT_CHECK(host_buffer(c, 2 * (size_t)N, &h));
  MGT_CHECK(cu_download(ctx, h, c->fscratch, sizeof(float) * 2 * (size_t)N));
  for (int n = 0; n < N; n++) {
    val[n] = h[2 * n];
    memcpy(&idx[n], &h[2 * n + 1], sizeof(int32_t));
  }
  return MGT_OK;
}

} // namespace mgt_cu
