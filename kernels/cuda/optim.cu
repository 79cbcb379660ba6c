/* The CUDA backend: the sum of squares of the gradient norm and AdamW. */
#include "cuda_impl.h"

namespace mgt_cu {

/* The sum of squares in two passes of fixed order, so that the gradient norm is the same run
   to run (as on the CPU; no atomics): each block adds float partials of SUMSQ_CHUNK elements
   (its chunks in grid-stride order) in double and writes the total to part[blockIdx.x]; then
   one block adds every segment's partials in index order and a fixed tree. */
enum { SUMSQ_CHUNK = 4096, SUMSQ_BLOCKS = 1024, SUMSQ_FINISH = 256 };

__global__ void k_sumsq_partial(double *part, const float *x, size_t n) {
  __shared__ float sh[32];
  double acc = 0.0;
  /* float partials of bounded length, summed in double, as on the CPU */
  for (size_t base = (size_t)blockIdx.x * SUMSQ_CHUNK; base < n;
       base += (size_t)gridDim.x * SUMSQ_CHUNK) {
    float f = 0.0f;
    size_t end = base + SUMSQ_CHUNK < n ? base + SUMSQ_CHUNK : n;
    for (size_t i = base + threadIdx.x; i < end; i += blockDim.x)
      f += x[i] * x[i];
    f = block_sum(f, sh);
    acc += f;
  }
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* One block of SUMSQ_FINISH threads (a power of two): thread t adds part[t], part[t + 256],
   ... in order, then the threads' sums meet in a fixed tree. */
__global__ void k_sumsq_finish(double *out, const double *part, size_t n) {
  __shared__ double sh[SUMSQ_FINISH];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x)
    s += part[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

unsigned sumsq_blocks(size_t n) {
  size_t nb = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  return (unsigned)(nb < (size_t)SUMSQ_BLOCKS ? nb : (size_t)SUMSQ_BLOCKS);
}

mgt_status cu_sumsq(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out) {
  cuda_ctx *c = C_(ctx);
  size_t parts = 0;
  for (int k = 0; k < nseg; k++)
    if (segs[k].count_in_norm && segs[k].n > 0) parts += sumsq_blocks(segs[k].n);
  /* sized by the first call (the first step) and kept */
  MGT_CHECK(grow((void **)&c->dpart, &c->dpart_n, sizeof(double) * (parts > 0 ? parts : 1)));
  size_t at = 0;
  for (int k = 0; k < nseg; k++) {
    if (!segs[k].count_in_norm || segs[k].n == 0) continue;
    const unsigned nb = sumsq_blocks(segs[k].n);
    k_sumsq_partial<<<nb, 256, 0, c->stream>>>(c->dpart + at, x + segs[k].offset, segs[k].n);
    LAUNCHED();
    at += nb;
  }
  k_sumsq_finish<<<1, SUMSQ_FINISH, 0, c->stream>>>(c->dsum, c->dpart, parts);
  LAUNCHED();
  MGT_CHECK(cu_download(ctx, out, c->dsum, sizeof(double)));
  return MGT_OK;
}

/* One launch for every segment: blockIdx.y is the segment, x strides over its elements; the
   weights' 16-bit copy (T) written in the same pass where copy is not NULL. */
template <typename T>
__global__ void k_adamw(float *p, const float *g, float *m, float *v, const mgt_segment *segs,
                        float b1, float b2, float lr, float eps, float gs, float ib1, float ib2,
                        T *copy) {
  const mgt_segment sg = segs[blockIdx.y];
  const float wd = sg.weight_decay;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < sg.n;
       j += (size_t)blockDim.x * gridDim.x) {
    const size_t i = sg.offset + j;
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi * ib1) / (sqrtf(vi * ib2) + eps) + wd * p[i]);
    if (copy) store16(&copy[i], p[i]);
  }
}

mgt_status cu_adamw(void *ctx, float *p, const float *g, float *m, float *v,
                    const mgt_segment *segs, int nseg, const mgt_adamw_step *s) {
  cuda_ctx *c = C_(ctx);
  if (nseg <= 0) return MGT_OK;
  const bool copies = s->copies && c->wcopy;
  MGT_REQUIRE(!copies || p == c->wbase, "AdamW writing the weights' copies: not the weights");
  MGT_REQUIRE(nseg <= 65535, "AdamW over %d segments exceeds one launch's grid", nseg);
  /* the table changes with the model, and between the groups of --decoupled-lr: uploaded when
     it differs from the last one, once the kernels that read that one are done, on the stream
     (non-blocking: a plain copy from pageable memory may return before its DMA lands, and is
     not ordered before the kernel) */
  const size_t bytes = sizeof(mgt_segment) * (size_t)nseg;
  if (c->hsegs_n != bytes || memcmp(c->hsegs, segs, bytes) != 0) {
    CU(cudaStreamSynchronize(c->stream));
    MGT_CHECK(grow((void **)&c->dsegs, &c->dsegs_n, bytes));
    CU(cudaMemcpyAsync(c->dsegs, segs, bytes, cudaMemcpyHostToDevice, c->stream));
    free(c->hsegs);
    c->hsegs = static_cast<mgt_segment *>(malloc(bytes));
    c->hsegs_n = c->hsegs ? bytes : 0;
    if (c->hsegs) memcpy(c->hsegs, segs, bytes);
  }
  size_t most = 0;
  for (int k = 0; k < nseg; k++)
    most = segs[k].n > most ? segs[k].n : most;
  if (!most) return MGT_OK;
  const dim3 grid(blocks_for(most, 256) < 1024u ? blocks_for(most, 256) : 1024u, (unsigned)nseg);
  const float ib1 = 1.0f / s->bias_correction1, ib2 = 1.0f / s->bias_correction2;
  if (copies && c->precision == MGT_PREC_FP16)
    k_adamw<<<grid, 256, 0, c->stream>>>(p, g, m, v, c->dsegs, s->beta1, s->beta2, s->lr, s->eps,
                                         s->grad_scale, ib1, ib2, (__half *)c->wcopy);
  else
    k_adamw<<<grid, 256, 0, c->stream>>>(p, g, m, v, c->dsegs, s->beta1, s->beta2, s->lr, s->eps,
                                         s->grad_scale, ib1, ib2,
                                         copies ? (__nv_bfloat16 *)c->wcopy : nullptr);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
