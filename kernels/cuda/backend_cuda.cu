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
  be->alloc = cu_alloc;
  be->free = cu_free;
  be->zero = cu_zero;
  be->upload = cu_upload;
  be->download = cu_download;
  be->copy = cu_copy;
  be->sync = cu_sync;
  be->destroy = cu_destroy;
  be->set_precision = cu_set_precision;
  be->set_weights = cu_set_weights;
  be->set_act16 = cu_set_act16;
  be->act16_bytes = 2;
  be->refresh_weights = cu_refresh_weights;
  be->init_normal = cu_init_normal;
  be->fill = cu_fill;
  be->gemm = cu_gemm;
  be->linear_bias_gelu = cu_linear_bias_gelu;
  be->linear_bias = cu_linear_bias;
  be->linear_param_grads = cu_linear_param_grads;
  be->linear_dgelu = cu_linear_dgelu;
  be->bias_dropout_add_ln = cu_bias_dropout_add_ln;
  be->add_bias = cu_add_bias;
  be->bias_backward = cu_bias_backward;
  be->layernorm_forward = cu_layernorm_forward;
  be->layernorm_backward = cu_layernorm_backward;
  be->rmsnorm_forward = cu_rmsnorm_forward;
  be->rmsnorm_backward = cu_rmsnorm_backward;
  be->swiglu_forward = cu_swiglu_forward;
  be->swiglu_backward = cu_swiglu_backward;
  be->rope = cu_rope;
  be->kv_group = cu_kv_group;
  be->bias_gelu_forward = cu_bias_gelu_forward;
  be->gelu_backward = cu_gelu_backward;
  be->attention_forward = cu_attention_forward;
  be->attention_backward = cu_attention_backward;
  be->flash_attention_forward = cu_flash_attention_forward;
  be->flash_attention_backward = cu_flash_attention_backward;
  be->embedding_forward = cu_embedding_forward;
  be->add_position = cu_add_position;
  be->embedding_backward = cu_embedding_backward;
  be->bias_act_forward = cu_bias_act_forward;
  be->act_backward = cu_act_backward;
  be->gather_rows = cu_gather_rows;
  be->scatter_add_rows = cu_scatter_add_rows;
  be->dropout_forward = cu_dropout_forward;
  be->dropout_backward = cu_dropout_backward;
  be->add = cu_add;
  be->xent_max = cu_xent_max;
  be->xent_sumexp = cu_xent_sumexp;
  be->xent_loss = cu_xent_loss;
  be->xent_backward = cu_xent_backward;
  be->argmax = cu_argmax;
  be->attention_decode = cu_attention_decode;
  be->sumsq = cu_sumsq;
  be->adamw = cu_adamw;
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
