/* The fused operations of the linear layers and of a row-parallel layer's end, on the CPU:
   the same steps the unfused operations take, in the same order, so the CPU model is the same
   with or without fusion; they define what the GPU's single kernels (cuBLASLt epilogues, one
   block per row) compute. */
#include "cblas_any.h"

#include "cpu.h"

mgt_status cpu_linear_bias(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                           int ldw, const float *b, float *out) {
  MGT_CHECK(cpu_gemm(ctx, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, out, N));
  return b ? cpu_add_bias(ctx, out, b, M, N) : MGT_OK;
}

mgt_status cpu_linear_param_grads(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                  float *dW, float *db, int accumulate) {
  cpu_ctx *c = ctx;
  if (!c || c->precision == MGT_PREC_FP32 || M == 0) {
    if (db) MGT_CHECK(cpu_bias_backward(ctx, db, dy, M, N, accumulate));
    return cpu_gemm(ctx, MGT_TRANS, MGT_NOTRANS, N, K, M, 1.0f, dy, N, x, K,
                    accumulate ? 1.0f : 0.0f, dW, K);
  }
  /* under 16 bits dy is rounded once: the bias sums are of the dy the GEMM multiplies */
  const float *g, *a;
#ifdef MGT_HAVE_ONEDNN
  if (cpu_native_on(c)) return cpu_native_param_grads(c, M, N, K, dy, x, dW, db, accumulate);
#endif
  MGT_CHECK(cpu_operand(c, 0, dy, M, N, N, &g));
  MGT_CHECK(cpu_operand(c, 1, x, M, K, K, &a));
  if (db) MGT_CHECK(cpu_bias_backward(ctx, db, g, M, N, accumulate));
  if (N > 0 && K > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, g, N, a, K,
                accumulate ? 1.0f : 0.0f, dW, K);
  return MGT_OK;
}

mgt_status cpu_linear_dgelu(void *ctx, int M, int N, int K, const float *dy, const float *W,
                            const float *pre, float *dpre, float *db, int accumulate) {
  MGT_CHECK(cpu_gemm(ctx, MGT_NOTRANS, MGT_NOTRANS, M, N, K, 1.0f, dy, K, W, N, 0.0f, dpre, N));
  MGT_CHECK(cpu_gelu_backward(ctx, dpre, dpre, pre, (size_t)M * N));
  return db ? cpu_bias_backward(ctx, db, dpre, M, N, accumulate) : MGT_OK;
}

mgt_status cpu_bias_dropout_add_ln(void *ctx, float *out, float *x, const float *b,
                                   const float *res, int N, int C, size_t row, const mgt_dropout *d,
                                   float *ln, float *mean, float *rstd, const float *w,
                                   const float *lb, float eps) {
  if (b) MGT_CHECK(cpu_add_bias(ctx, x, b, N, C));
  MGT_CHECK(cpu_dropout_forward(ctx, out, x, res, (size_t)N * C, row, d));
  if (ln && !mean) return cpu_rmsnorm_forward(ctx, ln, rstd, out, w, N, C, eps);
  return ln ? cpu_layernorm_forward(ctx, ln, mean, rstd, out, w, lb, N, C, eps) : MGT_OK;
}
