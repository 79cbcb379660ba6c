/* Private to the CPU backend: bf16 GEMMs on the CPU's bf16 units through oneDNN (native.c,
   built when oneDNN is found; MGT_HAVE_ONEDNN). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/backend.h"

typedef struct cpu_native cpu_native;

/* C[b][h] = alpha A[b][h] B[b][h] + beta C[b][h] over nb x nh products of M x K by K x N;
   strides in elements of A (b, h, M, K), B (b, h, K, N) and C (b, h, M, N). */
typedef struct cpu_mm {
  int nb, nh, M, N, K;
  long long sa[4], sb[4], sc[4];
  float alpha, beta;
  int f32; /* A and B in fp32 (cpu_native_gemm_f32), not bf16 */
} cpu_mm;

mgt_status cpu_native_create(cpu_native **out);
void cpu_native_destroy(cpu_native *nat);
/* C = alpha op(A) op(B) + beta C with A, B in bf16 (the upper halves of floats), row-major as
   cblas_sgemm; fp32 accumulation and output. */
mgt_status cpu_native_gemm(cpu_native *nat, int ta, int tb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc);
/* The same with A and B in fp32: oneDNN's fp32 matmul (--cpu-gemm-fp32 onednn). */
mgt_status cpu_native_gemm_f32(cpu_native *nat, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc);
/* The batched product of `mm`, A and B in bf16, C in fp32. */
mgt_status cpu_native_matmul(cpu_native *nat, const cpu_mm *mm, const uint16_t *A,
                             const uint16_t *B, float *C);
