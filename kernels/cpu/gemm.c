#include <cblas.h>

#include "cpu.h"

mgt_status cpu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
  if (M == 0 || N == 0) return MGT_OK;
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return MGT_OK;
}

#ifdef MGT_HAVE_OPENBLAS
const char *mgt_cpu_blas_name(void) { return openblas_get_corename(); }
#else
const char *mgt_cpu_blas_name(void) { return "CBLAS"; }
#endif
