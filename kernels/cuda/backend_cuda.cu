/* The CUDA backend's table and its creation: cuBLAS for GEMMs (fp32, or bf16/fp16 inputs with
   fp32 accumulation), hand-written kernels for the rest, all on one stream; the operations are
   in the files of this folder by concern (cuda_impl.h). */
#include "cuda_impl.h"

using namespace mgt_cu;

/* ---- the table ---- */

extern "C" int mgt_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  int was = 0;
  if (cudaGetDevice(&was) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
      cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaSetDevice(was);
  return 1;
}

extern "C" int mgt_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver or no device: clear the sticky error */
    return 0;
  }
  return n;
}

extern "C" mgt_status mgt_backend_cuda_create(int device, mgt_backend **out) {
  return mgt_backend_cuda_create_on(device, NULL, NULL, out);
}

extern "C" mgt_status mgt_backend_cuda_create_on(int device, void *stream, void *blas,
                                                 mgt_backend **out) {
  *out = NULL;
  int n = mgt_cuda_device_count();
  MGT_REQUIRE(n > 0, "--device cuda: no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES)");
  MGT_REQUIRE(device >= 0 && device < n, "CUDA device %d does not exist (%d visible)", device, n);
  CU(cudaSetDevice(device));
  cuda_ctx *c = static_cast<cuda_ctx *>(calloc(1, sizeof(cuda_ctx)));
  mgt_backend *be = static_cast<mgt_backend *>(calloc(1, sizeof(mgt_backend)));
  if (!c || !be) {
    free(c);
    free(be);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the CUDA backend");
  }
  c->device = device;
  c->own_stream = stream == NULL;
  c->own_blas = blas == NULL;
  cudaError_t e = cudaSuccess;
  if (stream)
    c->stream = static_cast<cudaStream_t>(stream);
  else
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->dsum, sizeof(double));
  if (e != cudaSuccess) {
    if (c->own_stream && c->stream) cudaStreamDestroy(c->stream);
    free(c);
    free(be);
    return cuda_fail(e, __FILE__, __LINE__, "creating the CUDA stream");
  }
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  bool saved = false; /* the caller's handle's stream and math mode were read */
  if (blas) {
    c->blas = static_cast<cublasHandle_t>(blas);
    bs = cublasGetStream(c->blas, &c->blas_stream0);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasGetMathMode(c->blas, &c->blas_math0);
    saved = bs == CUBLAS_STATUS_SUCCESS;
  } else {
    bs = cublasCreate(&c->blas);
  }
  /* the handle works on the backend's stream while the backend lives (cu_destroy gives a
     caller's handle its own stream and math mode back) */
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->blas, c->stream);
  /* fp32 GEMMs stay fp32 (no TF32), so the CPU and GPU agree to float rounding */
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    if (c->own_blas && c->blas) cublasDestroy(c->blas);
    if (saved) {
      cublasSetStream(c->blas, c->blas_stream0);
      cublasSetMathMode(c->blas, c->blas_math0);
    }
    if (c->own_stream) cudaStreamDestroy(c->stream);
    cudaFree(c->dsum);
    free(c);
    free(be);
    MGT_FAIL(MGT_ERR_BACKEND, "cuBLAS initialization failed (status %d)", (int)bs);
  }
  be->name = "cuda";
  be->ctx = c;
  be->act16_bytes = 2;
  be->free = cu_free;
  be->sync = cu_sync;
  be->destroy = cu_destroy;
#define MGT_BE_PREFIXED(name) cu_##name
  MGT_BE_OPERATIONS(MGT_BE_FILL_SLOT)
#undef MGT_BE_PREFIXED
  *out = be;
  return MGT_OK;
}

extern "C" void *mgt_backend_cuda_stream(const mgt_backend *be) {
  return be && be->destroy == cu_destroy ? static_cast<cuda_ctx *>(be->ctx)->stream : NULL;
}

/* Whether the last linear_bias_gelu at the backend's current precision ran as one cuBLASLt
   call (the decision is made per precision). */
extern "C" int mgt_backend_cuda_fused_epilogue(const mgt_backend *be) {
  if (!be || be->destroy != cu_destroy) return 0;
  const cuda_ctx *c = static_cast<const cuda_ctx *>(be->ctx);
  return c->lt_last[LT_GELU][c->precision];
}

extern "C" int mgt_backend_cuda_fused(const mgt_backend *be, int epilogue) {
  if (!be || be->destroy != cu_destroy || epilogue < 0 || epilogue >= LT_KINDS) return 0;
  const cuda_ctx *c = static_cast<const cuda_ctx *>(be->ctx);
  return c->lt_last[epilogue][c->precision];
}

extern "C" mgt_status mgt_backend_cuda_info(const mgt_backend *be, char *name, size_t name_size,
                                            size_t *free_bytes, size_t *total_bytes) {
  MGT_REQUIRE(be && be->destroy == cu_destroy, "not a CUDA backend");
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, static_cast<cuda_ctx *>(be->ctx)->device));
  snprintf(name, name_size, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  CU(cudaMemGetInfo(free_bytes, total_bytes));
  return MGT_OK;
}
