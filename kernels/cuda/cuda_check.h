/* Private to the CUDA backend's files and the device collectives (src/parallel/comm_cuda.c):
   CUDA runtime errors as mgt_status with the traceback
   (STYLE.md: check cudaGetLastError after each launch). */
#pragma once

#include <cuda_runtime.h>

#include "mgt/common.h"

static inline mgt_status cuda_fail(cudaError_t e, const char *file, int line, const char *what) {
  mgt_error_set(e == cudaErrorMemoryAllocation ? MGT_ERR_NOMEM : MGT_ERR_BACKEND, file, line,
                "cuda", "%s: %s", what, cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? MGT_ERR_NOMEM : MGT_ERR_BACKEND;
}

#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return cuda_fail(e_, __FILE__, __LINE__, #call);                        \
  } while (0)

/* Kernel launches report configuration errors at once and execution errors at the next sync. */
#define LAUNCHED() CU(cudaGetLastError())
