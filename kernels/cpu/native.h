/* Private to the CPU backend: bf16 GEMMs on the CPU's bf16 units through oneDNN (native.c,
   built when oneDNN is found; MGT_HAVE_ONEDNN). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/backend.h"

typedef struct cpu_native cpu_native;

mgt_status cpu_native_create(cpu_native **out);
void cpu_native_destroy(cpu_native *nat);
/* C = alpha op(A) op(B) + beta C with A, B in bf16 (the upper halves of floats), row-major as
   cblas_sgemm; fp32 accumulation and output. */
mgt_status cpu_native_gemm(cpu_native *nat, int ta, int tb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc);
