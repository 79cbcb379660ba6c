/* The CUDA backend: GEMMs through cuBLAS (fp32, or 16-bit inputs with fp32 accumulation), the
   16-bit copies they read (weights, activations, rounded inputs) and their registration. */
#include "cuda_impl.h"

namespace mgt_cu {

template <typename T>
__global__ void k_round(T *dst, const float *src, int rows, int cols, int ld) {
  GRID_STRIDE(i, (size_t)rows * cols) {
    size_t r = i / cols, c = i % cols;
    store16(&dst[r * ld + c], src[r * ld + c]);
  }
}

template <typename T> __global__ void k_round_flat(T *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) store16(&dst[i], src[i]);
}

mgt_status cu_set_weights(void *ctx, const float *w, size_t n) {
  cuda_ctx *c = C_(ctx);
  if (!n && w != c->wbase) return MGT_OK; /* another owner's registration stays */
  if (c->wcopy) {
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaFree(c->wcopy));
  }
  c->wcopy = NULL, c->wbase = w, c->wn = n;
  if (n && c->precision != MGT_PREC_FP32) CU(cudaMalloc(&c->wcopy, n * 2));
  return MGT_OK;
}

mgt_status cu_refresh_weights(void *ctx, size_t offset, size_t n) {
  cuda_ctx *c = C_(ctx);
  if (!c->wcopy || n == 0) return MGT_OK;
  MGT_REQUIRE(offset <= c->wn && n <= c->wn - offset,
              "refresh of weights [%zu, %zu) outside the %zu registered", offset, offset + n,
              c->wn);
  if (c->precision == MGT_PREC_BF16)
    k_round_flat<<<blocks_for(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)c->wcopy + offset,
                                                            c->wbase + offset, n);
  else
    k_round_flat<<<blocks_for(n, 256), 256, 0, c->stream>>>((__half *)c->wcopy + offset,
                                                            c->wbase + offset, n);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_set_act16(void *ctx, void *p, size_t bytes) {
  cuda_ctx *c = C_(ctx);
  if (!bytes) {
    if (p == (const void *)c->a16) c->a16 = NULL, c->a16n = 0;
    return MGT_OK;
  }
  MGT_REQUIRE(c->precision != MGT_PREC_FP32, "16-bit activations need a 16-bit precision");
  c->a16 = (const char *)p, c->a16n = bytes;
  return MGT_OK;
}

/* Whether a matrix of n elements starting at p is a 16-bit activation. */
bool in_act16(const cuda_ctx *c, const void *p, size_t n) {
  const char *q = (const char *)p;
  return c->a16 && q >= c->a16 && q < c->a16 + c->a16n && 2 * n <= (size_t)(c->a16 + c->a16n - q);
}

/* A matrix of n elements at src that needs no rounding: a 16-bit activation as it is, or its
   part of the weights' copy when it lies inside the registered weights. */
static bool half_direct(const cuda_ctx *c, const float *src, size_t n, const void **out) {
  if (in_act16(c, src, n)) {
    *out = src;
    return true;
  }
  if (c->wcopy && src >= c->wbase && src < c->wbase + c->wn &&
      n <= (size_t)(c->wbase + c->wn - src)) {
    *out = (const uint16_t *)c->wcopy + (src - c->wbase);
    return true;
  }
  return false;
}

static void round_into(cuda_ctx *c, void *dst, const float *src, int rows, int cols, int ld) {
  if (c->precision == MGT_PREC_BF16)
    k_round<__nv_bfloat16><<<blocks_for((size_t)rows * cols, 256), 256, 0, c->stream>>>(
        (__nv_bfloat16 *)dst, src, rows, cols, ld);
  else
    k_round<__half><<<blocks_for((size_t)rows * cols, 256), 256, 0, c->stream>>>((__half *)dst, src,
                                                                                 rows, cols, ld);
}

mgt_status cu_hold(void *ctx, const float *p, size_t n) {
  cuda_ctx *c = C_(ctx);
  c->held = p, c->held_n = p ? n : 0, c->held_in = false;
  return MGT_OK;
}

/* A 16-bit copy of a rows x cols row-major matrix (leading dimension ld): as it is when
   half_direct finds one, the held operand's copy still in slot 0, else rounded into slot k. */
mgt_status half_copy(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                     const void **out) {
  size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  if (half_direct(c, src, n, out)) return MGT_OK;
  if (k == 0 && c->held_in && src == c->held && rows == c->held_rows && cols == c->held_cols &&
      ld == c->held_ld) {
    *out = c->half[0];
    return MGT_OK;
  }
  if (k == 0) c->held_in = false;
  MGT_CHECK(grow(&c->half[k], &c->half_n[k], n * 2));
  round_into(c, c->half[k], src, rows, cols, ld);
  LAUNCHED();
  if (k == 0 && c->held && src == c->held && n <= c->held_n)
    c->held_in = true, c->held_rows = rows, c->held_cols = cols, c->held_ld = ld;
  *out = c->half[k];
  return MGT_OK;
}

mgt_status cu_gemm(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                   int ldc) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  const cublasOperation_t ob = transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          oa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (c->precision == MGT_PREC_FP32 || K == 0) {
    CUBLAS(cublasSgemm(c->blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, Cm, ldc));
    return MGT_OK;
  }
  const void *a16, *b16;
  MGT_CHECK(half_copy(c, 0, A, transa ? K : M, transa ? M : K, lda, &a16));
  MGT_CHECK(half_copy(c, 1, B, transb ? N : K, transb ? K : N, ldb, &b16));
  const cudaDataType_t t = c->precision == MGT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS(cublasGemmEx(c->blas, ob, oa, N, M, K, &alpha, b16, t, ldb, a16, t, lda, &beta, Cm,
                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MGT_OK;
}

/* half_copy for count matrices (rows[g] x cols[g], the same ld): those that need rounding one
   after another in slot k. */
static mgt_status half_copies(cuda_ctx *c, int k, int count, const float *const *src,
                              const int *rows, const int *cols, int ld, const void **out) {
  size_t total = 0, at = 0;
  for (int g = 0; g < count; g++) {
    const size_t n = rows[g] && cols[g] ? (size_t)(rows[g] - 1) * ld + cols[g] : 0;
    if (!n)
      out[g] = src[g];
    else if (!half_direct(c, src[g], n, &out[g]))
      total += n, out[g] = NULL;
  }
  if (!total) return MGT_OK;
  if (k == 0) c->held_in = false;
  MGT_CHECK(grow(&c->half[k], &c->half_n[k], total * 2));
  for (int g = 0; g < count; g++) {
    if (out[g]) continue;
    const size_t n = (size_t)(rows[g] - 1) * ld + cols[g];
    void *dst = (uint16_t *)c->half[k] + at;
    round_into(c, dst, src[g], rows[g], cols[g], ld);
    LAUNCHED();
    out[g] = dst, at += n;
  }
  return MGT_OK;
}

/* The host staging of a grouped GEMM of n kept GEMMs (cuBLAS's column-major view: m, n, k of
   C^T = op(B)^T op(A)^T, as cu_gemm's), in one allocation. */
typedef struct grouped_args {
  int *m, *n, *k, *ones, *lds, *rows, *cols; /* lds: ldb, lda, ldc for each; rows, cols: A's, B's */
  cublasOperation_t *ops;                    /* op(B), op(A) for each */
  float *alpha, *beta;
  const float **fa, **fb; /* the fp32 operands */
  const void **p;         /* B's, A's and C's operands, 3 n */
} grouped_args;

/* Lays g out over the context's host staging (grown, kept across calls: the experts' GEMMs run
   several times a layer). */
static mgt_status grouped_alloc(cuda_ctx *c, int n, grouped_args *g) {
  const size_t ints = 11 * (size_t)n, ops = 2 * (size_t)n, fl = 2 * (size_t)n, ptrs = 5 * (size_t)n;
  const size_t bytes = sizeof(void *) * ptrs + sizeof(int) * ints +
                       sizeof(cublasOperation_t) * ops + sizeof(float) * fl;
  if (bytes > c->gargs_n) {
    void *p = realloc(c->gargs, bytes);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a grouped GEMM of %d", n);
    c->gargs = p, c->gargs_n = bytes;
  }
  g->p = (const void **)c->gargs;
  g->fa = (const float **)(g->p + 3 * n), g->fb = g->fa + n;
  g->m = (int *)(g->fb + n), g->n = g->m + n, g->k = g->n + n, g->ones = g->k + n;
  g->lds = g->ones + n, g->rows = g->lds + 3 * n, g->cols = g->rows + 2 * n;
  g->ops = (cublasOperation_t *)(g->cols + 2 * n);
  g->alpha = (float *)(g->ops + 2 * n), g->beta = g->alpha + n;
  return MGT_OK;
}

/* The experts' GEMMs: one cublasGemmGroupedBatchedEx of one GEMM a group (cuBLAS 12.5 on), with
   16-bit inputs and fp32 outputs where this cuBLAS takes them; else (and before 12.5) a
   cublasGemmEx each, as cu_gemm. */
mgt_status cu_gemm_grouped(void *ctx, int transa, int transb, int count, const int *M, const int *N,
                           const int *K, float alpha, const float *const *A, int lda,
                           const float *const *B, int ldb, float beta, float *const *C, int ldc) {
  cuda_ctx *c = C_(ctx);
  int n = 0; /* the GEMMs with an output */
  for (int i = 0; i < count; i++)
    n += M[i] > 0 && N[i] > 0;
  if (!n) return MGT_OK;
  mgt_status st = MGT_OK;
  grouped_args g;
  MGT_CHECK(grouped_alloc(c, n, &g));
  const cublasOperation_t ob = transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          oa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool f32 = c->precision == MGT_PREC_FP32;
  const cudaDataType_t t = f32                             ? CUDA_R_32F
                           : c->precision == MGT_PREC_BF16 ? CUDA_R_16BF
                                                           : CUDA_R_16F;
  const void **pb = g.p, **pa = g.p + n, **pc = g.p + 2 * n;
  bool done = false;
  for (int i = 0, j = 0; i < count; i++) {
    if (M[i] <= 0 || N[i] <= 0) continue;
    g.m[j] = N[i], g.n[j] = M[i], g.k[j] = K[i], g.ones[j] = 1;
    g.alpha[j] = alpha, g.beta[j] = beta, g.ops[j] = ob, g.ops[n + j] = oa;
    g.lds[j] = ldb, g.lds[n + j] = lda, g.lds[2 * n + j] = ldc;
    g.rows[j] = transa ? K[i] : M[i], g.cols[j] = transa ? M[i] : K[i];
    g.rows[n + j] = transb ? N[i] : K[i], g.cols[n + j] = transb ? K[i] : N[i];
    g.fa[j] = A[i], g.fb[j] = B[i], pc[j] = C[i], pa[j] = A[i], pb[j] = B[i];
    j++;
  }
  if (!f32) {
    MGT_TRY(half_copies(c, 0, n, g.fa, g.rows, g.cols, lda, pa));
    MGT_TRY(half_copies(c, 1, n, g.fb, g.rows + n, g.cols + n, ldb, pb));
  }
#if CUBLAS_VERSION >= 120500
  if (c->grouped[c->precision] >= 0) {
    MGT_TRY(grow(&c->gptr, &c->gptr_n, sizeof(void *) * 3 * n));
    const void **dp = (const void **)c->gptr;
    /* from pageable memory: staged before the call returns, so the next call may reuse g */
    const cudaError_t e =
        cudaMemcpyAsync(dp, g.p, sizeof(void *) * 3 * n, cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) {
      st = cuda_fail(e, __FILE__, __LINE__, "the grouped GEMM's operands");
      goto done;
    }
    const cublasStatus_t bs =
        cublasGemmGroupedBatchedEx(c->blas, g.ops, g.ops + n, g.m, g.n, g.k, g.alpha, dp, t, g.lds,
                                   dp + n, t, g.lds + n, g.beta, (void *const *)(dp + 2 * n),
                                   CUDA_R_32F, g.lds + 2 * n, n, g.ones, CUBLAS_COMPUTE_32F);
    if (bs == CUBLAS_STATUS_SUCCESS)
      done = true, c->grouped[c->precision] = 1;
    else if (bs == CUBLAS_STATUS_NOT_SUPPORTED || bs == CUBLAS_STATUS_INVALID_VALUE)
      c->grouped[c->precision] = -1; /* not these types in this cuBLAS: one by one from now on */
    else
      MGT_GOTO_FAIL(MGT_ERR_BACKEND, "cuBLAS grouped GEMM of %d: status %d", n, (int)bs);
  }
#endif
  for (int j = 0; !done && j < n; j++) {
    const cublasStatus_t bs =
        f32 ? cublasSgemm(c->blas, ob, oa, g.m[j], g.n[j], g.k[j], &alpha, (const float *)pb[j],
                          ldb, (const float *)pa[j], lda, &beta, (float *)pc[j], ldc)
            : cublasGemmEx(c->blas, ob, oa, g.m[j], g.n[j], g.k[j], &alpha, pb[j], t, ldb, pa[j], t,
                           lda, &beta, (void *)pc[j], CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS)
      MGT_GOTO_FAIL(MGT_ERR_BACKEND, "cuBLAS GEMM %d of a group: status %d", j, (int)bs);
  }
done:
  return st;
}

/* Row-major strided-batched fp32 GEMM (attention's per-head products). */
mgt_status gemm_batched(cuda_ctx *c, int transa, int transb, int M, int N, int K, float alpha,
                        const float *A, int lda, long long sa, const float *B, int ldb,
                        long long sb, float beta, float *Cm, int ldc, long long sc, int batch) {
  CUBLAS(cublasSgemmStridedBatched(c->blas, transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   transa ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, sb,
                                   A, lda, sa, &beta, Cm, ldc, sc, batch));
  return MGT_OK;
}

} // namespace mgt_cu
