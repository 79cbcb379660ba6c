/* The CUDA backend: memory, streams and precision; initialization drawn by the CPU twin's code. */
#include "cuda_impl.h"

namespace mgt_cu {

mgt_status cu_alloc(void *ctx, size_t bytes, const char *what, void **out) {
  *out = NULL;
  if (bytes == 0) bytes = 1;
  cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess) {
    *out = NULL;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    MGT_FAIL(MGT_ERR_NOMEM, "GPU memory for %s: %.1f MiB requested, %.1f MiB free of %.1f MiB (%s)",
             what, bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0, cudaGetErrorString(e));
  }
  CU(cudaMemsetAsync(*out, 0, bytes, C_(ctx)->stream));
  return MGT_OK;
}

void cu_free(void *ctx, void *p) {
  if (p) cudaFree(p);
}

mgt_status cu_zero(void *ctx, void *p, size_t bytes) {
  if (bytes) CU(cudaMemsetAsync(p, 0, bytes, C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
  if (!bytes) return MGT_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, C_(ctx)->stream));
  CU(cudaStreamSynchronize(C_(ctx)->stream)); /* the host buffer may be reused at once */
  return MGT_OK;
}

mgt_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
  if (!bytes) return MGT_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, C_(ctx)->stream));
  CU(cudaStreamSynchronize(C_(ctx)->stream));
  return MGT_OK;
}

mgt_status cu_sync(void *ctx) {
  CU(cudaStreamSynchronize(C_(ctx)->stream));
  return MGT_OK;
}

void cu_destroy(void *ctx) {
  cuda_ctx *c = C_(ctx);
  cudaStreamSynchronize(c->stream);
  cudaFree(c->half[0]);
  cudaFree(c->half[1]);
  cudaFree(c->gptr);
  free(c->gargs);
  cudaFree(c->wcopy);
  cudaFree(c->dsum);
  cudaFree(c->dpart);
  cudaFree(c->dsegs);
  free(c->hsegs);
  cudaFree(c->fscratch);
  cudaFree(c->rscratch);
  cudaFree(c->bgrad);
  cudaFreeHost(c->host);
  for (int i = 0; i < LT_PLANS; i++)
    lt_plan_free(&c->plans[i]);
  if (c->lt) cublasLtDestroy(c->lt);
  cudaFree(c->lt_work);
  if (c->own_blas) {
    cublasDestroy(c->blas);
  } else { /* the caller's handle goes back as it came, before the stream it was bound to ends */
    cublasSetStream(c->blas, c->blas_stream0);
    cublasSetMathMode(c->blas, c->blas_math0);
  }
  if (c->own_stream) cudaStreamDestroy(c->stream);
  free(c);
}

mgt_status cu_set_precision(void *ctx, mgt_precision prec) {
  MGT_REQUIRE(prec == MGT_PREC_FP32 || prec == MGT_PREC_BF16 || prec == MGT_PREC_FP16,
              "unknown precision %d", (int)prec);
  cuda_ctx *c = C_(ctx);
  MGT_REQUIRE(prec == c->precision || !c->a16,
              "the precision cannot change while 16-bit activations are held");
  if (prec != c->precision && c->wcopy) { /* the copies hold the old format's values */
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaFree(c->wcopy));
    c->wcopy = NULL;
  }
  if (prec != c->precision) c->held_in = false;
  c->precision = prec;
  return MGT_OK;
}

mgt_status grow(void **p, size_t *have, size_t bytes) {
  if (bytes <= *have) return MGT_OK;
  cudaFree(*p);
  *p = NULL;
  *have = 0;
  CU(cudaMalloc(p, bytes));
  *have = bytes;
  return MGT_OK;
}

/* Pinned host memory of at least n floats, kept for reuse. */
mgt_status host_buffer(cuda_ctx *c, size_t n, float **out) {
  if (c->host_n < n) {
    cudaFreeHost(c->host);
    c->host = NULL;
    c->host_n = 0;
    CU(cudaMallocHost((void **)&c->host, sizeof(float) * n));
    c->host_n = n;
  }
  *out = c->host;
  return MGT_OK;
}

/* ---- initialization ---- */

/* Drawn on the host by the CPU twin (once per run) and uploaded: the same numbers by
   construction. */
mgt_status cu_init_normal(void *ctx, float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream,
                          float std) {
  size_t n = 1;
  for (int i = 0; i < sh->ndim; i++)
    n *= (size_t)sh->shape[i];
  float *h = NULL;
  MGT_CHECK(mgt_calloc(n * sizeof(float), "initial values", (void **)&h));
  mgt_status st = cpu_init_normal(NULL, h, sh, seed, stream, std);
  if (st == MGT_OK) st = cu_upload(ctx, p, h, n * sizeof(float));
  mgt_free(h);
  return st;
}

__global__ void k_fill(float *p, size_t n, float v) { GRID_STRIDE(i, n) p[i] = v; }

mgt_status cu_fill(void *ctx, float *p, size_t n, float value) {
  if (!n) return MGT_OK;
  k_fill<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(p, n, value);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
