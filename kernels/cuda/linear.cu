/* The CUDA backend: bias, GeLU and the linear layers fused with them through cuBLASLt epilogues. */
#include "cuda_impl.h"

namespace mgt_cu {

__global__ void k_add_bias(float *y, const float *b, int N, int C) {
  GRID_STRIDE(i, (size_t)N * C) y[i] += b[i % C];
}

mgt_status cu_add_bias(void *ctx, float *y, const float *b, int N, int C) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_add_bias<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(y, b, N, C);
  LAUNCHED();
  return MGT_OK;
}

/* Column sums of (N, C) in two passes with a fixed order (deterministic run to run): chunks
   of rows give partial sums part[chunk][c], then one thread per column adds the chunks in
   order. With x given, the summand is dy * (x - mean) * rstd (LayerNorm's weight gradient). */
enum { COLSUM_CHUNKS = 64 };

__global__ void k_colsum_partial(float *part, const float *dy, const float *x, const float *mean,
                                 const float *rstd, int N, int C, int rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * rows;
  if (c >= C) return;
  const int r1 = min(N, r0 + rows);
  float s = 0.0f;
  for (int n = r0; n < r1; n++) {
    float d = dy[(size_t)n * C + c];
    s += x ? d * (x[(size_t)n * C + c] - (mean ? mean[n] : 0.0f)) * rstd[n]
           : d; /* RMSNorm: no mean */
  }
  part[(size_t)blockIdx.y * C + c] = s;
}

__global__ void k_colsum_finish(float *out, const float *part, int chunks, int C, int acc) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = acc ? out[c] : 0.0f;
  for (int k = 0; k < chunks; k++)
    s += part[(size_t)k * C + c];
  out[c] = s;
}

mgt_status column_sums(cuda_ctx *c, float *out, const float *dy, const float *x, const float *mean,
                       const float *rstd, int N, int C, int acc) {
  if (C == 0) return MGT_OK;
  const int chunks = N < COLSUM_CHUNKS ? (N > 0 ? N : 1) : COLSUM_CHUNKS;
  const int rows = (N + chunks - 1) / chunks;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * (size_t)chunks * C));
  dim3 grid((unsigned)((C + 127) / 128), (unsigned)chunks);
  k_colsum_partial<<<grid, 128, 0, c->stream>>>(c->fscratch, dy, x, mean, rstd, N, C, rows);
  LAUNCHED();
  k_colsum_finish<<<(C + 127) / 128, 128, 0, c->stream>>>(out, c->fscratch, chunks, C, acc);
  LAUNCHED();
  return MGT_OK;
}

/* The same for the vectors of hd floats that head_rmsnorm normalizes: vector s of N*heads at
   dy + (s / heads) * ld + (s % heads) * hd, summand dy * raw * rstd[s]. */
__global__ void k_colsum_heads_partial(float *part, const float *dy, int ld, int heads,
                                       const float *raw, const float *rstd, int S, int hd,
                                       int rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, s0 = blockIdx.y * rows;
  if (c >= hd) return;
  const int s1 = min(S, s0 + rows);
  float sum = 0.0f;
  for (int s = s0; s < s1; s++)
    sum += dy[(size_t)(s / heads) * ld + (size_t)(s % heads) * hd + c] * raw[(size_t)s * hd + c] *
           rstd[s];
  part[(size_t)blockIdx.y * hd + c] = sum;
}

mgt_status column_sums_heads(cuda_ctx *c, float *out, const float *dy, int ld, int heads,
                             const float *raw, const float *rstd, int N, int hd, int acc) {
  const int S = N * heads;
  const int chunks = S < COLSUM_CHUNKS ? (S > 0 ? S : 1) : COLSUM_CHUNKS;
  const int rows = (S + chunks - 1) / chunks;
  MGT_CHECK(grow((void **)&c->fscratch, &c->fscratch_n, sizeof(float) * (size_t)chunks * hd));
  dim3 grid((unsigned)((hd + 127) / 128), (unsigned)chunks);
  k_colsum_heads_partial<<<grid, 128, 0, c->stream>>>(c->fscratch, dy, ld, heads, raw, rstd, S, hd,
                                                      rows);
  LAUNCHED();
  k_colsum_finish<<<(hd + 127) / 128, 128, 0, c->stream>>>(out, c->fscratch, chunks, hd, acc);
  LAUNCHED();
  return MGT_OK;
}

mgt_status cu_bias_backward(void *ctx, float *db, const float *dy, int N, int C, int accumulate) {
  return column_sums(C_(ctx), db, dy, NULL, NULL, NULL, N, C, accumulate);
}

__global__ void k_bias_gelu(float *out, float *pre, const float *b, int N, int C) {
  GRID_STRIDE(i, (size_t)N * C) {
    float x = b ? pre[i] + b[i % C] : pre[i]; /* no bias: --disable-bias-linear */
    pre[i] = x;
    out[i] = gelu_tanh(x);
  }
}

template <typename T>
__global__ void k_bias_gelu16(T *out, float *pre, const float *b, int C, size_t n) {
  GRID_STRIDE(i, n) {
    float x = b ? pre[i] + b[i % C] : pre[i]; /* no bias: --disable-bias-linear */
    pre[i] = x;
    store16(&out[i], gelu_tanh(x));
  }
}

mgt_status cu_bias_gelu_forward(void *ctx, float *out, float *pre, const float *b, int N, int C) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_bias_gelu<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(out, pre, b, N, C);
  LAUNCHED();
  return MGT_OK;
}

const size_t LT_WORK = 32u << 20;

/* The largest power of two, at most 256, that divides the address (256 for NULL). */
uint32_t ptr_align(const void *p) {
  const uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al != 0)
    al >>= 1;
  return al;
}

mgt_status cu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n);
mgt_status cu_add(void *ctx, float *y, const float *x, size_t n);

/* Builds the plan of one shape (p->sh) with its epilogue. The heuristic is told the operands'
   alignments (p->align: minimum-alignment preferences for A, B, C and D; the bias and aux
   pointers themselves, from which it reads theirs), so the algorithm suits every call whose
   pointers are at least as aligned. Returns false when a cuBLASLt call fails; p->found says
   whether an algorithm was offered. */
bool lt_plan_make(cuda_ctx *c, lt_plan *p, const void *bias, const void *aux) {
  const lt_shape *q = &p->sh;
  const cublasOperation_t ta = q->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = q->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  static const cublasLtEpilogue_t epis[LT_KINDS] = {
      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB,
      CUBLASLT_EPILOGUE_DGELU_BGRAD};
  const cublasLtEpilogue_t epi = epis[q->kind];
  const bool has_aux = q->kind == LT_GELU || q->kind == LT_DGELU;
  const int64_t aux_ld = q->ldd;
  const uint64_t work = LT_WORK;
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                       sizeof aux_ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->la, q->type, q->ta ? q->k : q->m, q->ta ? q->m : q->k,
                                   q->lda);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->lb, q->type, q->tb ? q->n : q->k, q->tb ? q->k : q->n,
                                   q->ldb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, q->m, q->n, q->ldd);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&pref);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &work,
                                             sizeof work);
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    int ptr;
  } aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, LT_A},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, LT_B},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, LT_D},
                {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, LT_D}};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0] && s == CUBLAS_STATUS_SUCCESS; i++)
    s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &p->align[aligns[i].ptr],
                                             sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &h,
                                       &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) s = CUBLAS_STATUS_SUCCESS, found = 0; /* no algorithm */
  if (s != CUBLAS_STATUS_SUCCESS) {
    lt_plan_free(p);
    return false;
  }
  p->used = true;
  p->found = found > 0;
  if (p->found) p->algo = h.algo;
  return true;
}

bool lt_shape_equal(const lt_shape *a, const lt_shape *b) {
  return a->kind == b->kind && a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n &&
         a->k == b->k && a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd &&
         a->beta == b->beta && a->type == b->type;
}

/* Whether plan q serves a call of this shape whose operands have alignments al: a plan with an
   algorithm when every operand is at least as aligned as it was made for; one without when
   none is more aligned (an algorithm for weaker alignment would work for stronger). */
bool lt_plan_fits(const lt_plan *q, const lt_shape *sh, const uint32_t *al) {
  if (!q->used || !lt_shape_equal(&q->sh, sh)) return false;
  for (int i = 0; i < LT_NPTR; i++)
    if (q->found ? al[i] < q->align[i] : al[i] > q->align[i]) return false;
  return true;
}

/* One fused matmul. *fused is set to false, with MGT_OK, when cuBLASLt offers no algorithm
   for the case (the caller then runs the unfused path for this call); an error is a failure
   of cuBLASLt itself. */
mgt_status lt_matmul(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                     const void *bias, const void *aux, bool *fused) {
  *fused = false;
  if (!c->lt && cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS)
    MGT_FAIL(MGT_ERR_BACKEND, "cublasLtCreate failed");
  MGT_CHECK(grow(&c->lt_work, &c->lt_work_n, LT_WORK));
  uint32_t al[LT_NPTR];
  al[LT_A] = ptr_align(A), al[LT_B] = ptr_align(B), al[LT_D] = ptr_align(D);
  al[LT_BIAS] = ptr_align(bias), al[LT_AUX] = ptr_align(aux);
  lt_plan *p = NULL;
  for (int i = 0; i < LT_PLANS && !p; i++)
    if (lt_plan_fits(&c->plans[i], sh, al)) p = &c->plans[i];
  if (!p) {
    p = &c->plans[c->next_plan];
    c->next_plan = (c->next_plan + 1) % LT_PLANS;
    lt_plan_free(p);
    p->sh = *sh;
    memcpy(p->align, al, sizeof al);
    if (!lt_plan_make(c, p, bias, aux)) MGT_FAIL(MGT_ERR_BACKEND, "cuBLASLt matmul setup failed");
  }
  if (!p->found) return MGT_OK;
  const bool has_aux = sh->kind == LT_GELU || sh->kind == LT_DGELU;
  cublasStatus_t s =
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (s == CUBLAS_STATUS_SUCCESS && has_aux)
    s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
  const float one = 1.0f, beta = sh->beta ? 1.0f : 0.0f;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmul(c->lt, p->op, &one, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld, &p->algo,
                       c->lt_work, LT_WORK, c->stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    MGT_FAIL(MGT_ERR_BACKEND, "cublasLtMatmul (epilogue %d): cuBLAS status %d", sh->kind, (int)s);
  *fused = true;
  return MGT_OK;
}

cudaDataType_t gemm_type(const cuda_ctx *c) {
  return c->precision == MGT_PREC_FP32 ? CUDA_R_32F
                                       : (c->precision == MGT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F);
}

/* A row-major (rows, cols) operand as the GEMMs multiply it: itself at fp32, else its 16-bit
   copy (the weights' own, or one made in slot k). */
mgt_status gemm_operand(cuda_ctx *c, int k, const float *src, int rows, int cols, int ld,
                        const void **out) {
  if (c->precision == MGT_PREC_FP32) {
    *out = src;
    return MGT_OK;
  }
  return half_copy(c, k, src, rows, cols, ld, out);
}

/* Whether the fused path of `kind` is to be tried at the current precision (and clears the
   record of the last call). */
bool lt_wanted(cuda_ctx *c, int kind) {
  c->lt_last[kind][c->precision] = false;
  return c->lt_state[kind][c->precision] >= 0;
}

/* Runs a fused matmul; *done tells whether it ran, false sending the caller to its unfused
   path. A failure of cuBLASLt itself turns that epilogue off for good at this precision. */
mgt_status lt_fused(cuda_ctx *c, const lt_shape *sh, const void *A, const void *B, float *D,
                    const void *bias, const void *aux, bool *done) {
  const int pr = (int)c->precision;
  *done = false;
  if (lt_matmul(c, sh, A, B, D, bias, aux, done) != MGT_OK) {
    c->lt_state[sh->kind][pr] = -1;
    mgt_error_clear();
    *done = false;
    return MGT_OK;
  }
  if (*done) c->lt_state[sh->kind][pr] = 1, c->lt_last[sh->kind][pr] = true;
  return MGT_OK;
}

lt_shape lt_shape_of(const cuda_ctx *c, int kind, int ta, int tb, int m, int n, int k, int lda,
                     int ldb, int ldd, int beta) {
  lt_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.kind = kind, sh.ta = ta, sh.tb = tb, sh.m = m, sh.n = n, sh.k = k;
  sh.lda = lda, sh.ldb = ldb, sh.ldd = ldd, sh.beta = beta, sh.type = gemm_type(c);
  return sh;
}

/* A forward linear layer out (M,N) = A (M,K) W (N,K)^T with a bias epilogue (aux: GeLU's
   pre-activation). Column-major: D (N x M, ld N) = op_T(W: K x N) * (A: K x M). */
mgt_status lt_linear(cuda_ctx *c, int kind, int M, int N, int K, const float *A, int lda,
                     const float *W, int ldw, const float *b, float *aux, float *out, bool *done) {
  const void *a, *w;
  MGT_CHECK(gemm_operand(c, 0, A, M, K, lda, &a));
  MGT_CHECK(gemm_operand(c, 1, W, N, K, ldw, &w));
  const lt_shape sh = lt_shape_of(c, kind, 1, 0, N, M, K, ldw, lda, N, 0);
  return lt_fused(c, &sh, w, a, out, b, aux, done);
}

/* pre = A W^T + b and out = gelu(pre) in one cuBLASLt matmul where it has an algorithm (and N
   is a multiple of 8, which the aux matrix's leading dimension must be), else a GEMM and the
   bias + GeLU kernel. */
mgt_status cu_linear_bias_gelu(void *ctx, int M, int N, int K, const float *A, int lda,
                               const float *W, int ldw, const float *b, float *pre, float *out) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  if (in_act16(c, out, (size_t)M * N)) { /* out kept in 16 bits: GEMM, then bias + GeLU */
    /* not fused: what the layout line reports */
    c->lt_last[LT_GELU][c->precision] = false;
    MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, pre, N));
    const size_t n = (size_t)M * N;
    if (c->precision == MGT_PREC_BF16)
      k_bias_gelu16<<<blocks_for(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)out, pre, b, N, n);
    else
      k_bias_gelu16<<<blocks_for(n, 256), 256, 0, c->stream>>>((__half *)out, pre, b, N, n);
    LAUNCHED();
    return MGT_OK;
  }
  if (b && lt_wanted(c, LT_GELU) && K > 0 && N % 8 == 0) {
    bool done;
    MGT_CHECK(lt_linear(c, LT_GELU, M, N, K, A, lda, W, ldw, b, pre, out, &done));
    if (done) return MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, pre, N));
  return cu_bias_gelu_forward(ctx, out, pre, b, M, N);
}

/* out = A W^T + b: the BIAS epilogue. */
mgt_status cu_linear_bias(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                          int ldw, const float *b, float *out) {
  cuda_ctx *c = C_(ctx);
  if (M == 0 || N == 0) return MGT_OK;
  if (b && lt_wanted(c, LT_BIAS_ONLY) && K > 0) {
    bool done;
    MGT_CHECK(lt_linear(c, LT_BIAS_ONLY, M, N, K, A, lda, W, ldw, b, NULL, out, &done));
    if (done) return MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 1, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, out, N));
  return b ? cu_add_bias(ctx, out, b, M, N) : MGT_OK;
}

/* Where an epilogue writes a bias gradient of n: db itself, or scratch to be added to an
   accumulated db. */
mgt_status bias_target(cuda_ctx *c, float *db, int n, int accumulate, float **out) {
  *out = db;
  if (!accumulate) return MGT_OK;
  MGT_CHECK(grow((void **)&c->bgrad, &c->bgrad_n, sizeof(float) * (size_t)n));
  *out = c->bgrad;
  return MGT_OK;
}

__global__ void k_round_f32(float *dst, const float *src, size_t n, int bf16) {
  GRID_STRIDE(i, n) {
    dst[i] = bf16 ? __bfloat162float(__float2bfloat16_rn(src[i]))
                  : __half2float(__float2half_rn(src[i]));
  }
}

/* dW (N,K) = [dW +] dy^T x with db = [db +] column sums of dy (as multiplied: rounded under
   16 bits). Column-major: D = dW^T (K x N, ld K) = (x: K x M) * op_T(dy: N x M); BGRADB sums
   B = op_T(dy) over the GEMM's k (the rows M), one value per column of D. An accumulated db
   takes the epilogue's sums from scratch. */
mgt_status cu_linear_param_grads(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                 float *dW, float *db, int accumulate) {
  cuda_ctx *c = C_(ctx);
  if (N == 0) return MGT_OK;
  if (db && M > 0 && K > 0 && lt_wanted(c, LT_BGRAD)) {
    const void *g, *a;
    MGT_CHECK(gemm_operand(c, 0, dy, M, N, N, &g));
    MGT_CHECK(gemm_operand(c, 1, x, M, K, K, &a));
    float *bias;
    MGT_CHECK(bias_target(c, db, N, accumulate, &bias));
    const lt_shape sh = lt_shape_of(c, LT_BGRAD, 0, 1, K, N, M, K, N, K, accumulate);
    bool done;
    MGT_CHECK(lt_fused(c, &sh, a, g, dW, bias, NULL, &done));
    if (done) return accumulate ? cu_add(ctx, db, c->bgrad, (size_t)N) : MGT_OK;
  }
  if (db) {
    const float *src = dy;
    if (c->precision != MGT_PREC_FP32 && M > 0) {
      const size_t n = (size_t)M * N;
      MGT_CHECK(grow((void **)&c->rscratch, &c->rscratch_n, sizeof(float) * n));
      k_round_f32<<<blocks_for(n, 256), 256, 0, c->stream>>>(c->rscratch, dy, n,
                                                             c->precision == MGT_PREC_BF16);
      LAUNCHED();
      src = c->rscratch;
    }
    MGT_CHECK(cu_bias_backward(ctx, db, src, M, N, accumulate));
  }
  return K > 0 ? cu_gemm(ctx, 1, 0, N, K, M, 1.0f, dy, N, x, K, accumulate ? 1.0f : 0.0f, dW, K)
               : MGT_OK; /* db as the CPU's: written even with no inputs */
}

/* dpre (M,N) = (dy (M,K) W (K,N)) * gelu'(pre), db = [db +] its column sums. Column-major: D
   = dpre^T (N x M, ld N) = (W: N x K) * (dy: K x M); DGELU_BGRAD takes pre as its aux input
   (ld N, a multiple of 8) and sums D along its rows, one value per row of D. */
mgt_status cu_linear_dgelu(void *ctx, int M, int N, int K, const float *dy, const float *W,
                           const float *pre, float *dpre, float *db, int accumulate) {
  cuda_ctx *c = C_(ctx);
  if (N == 0) return MGT_OK;
  if (M == 0) return db ? cu_bias_backward(ctx, db, dpre, 0, N, accumulate) : MGT_OK; /* zeros */
  if (db && K > 0 && N % 8 == 0 && lt_wanted(c, LT_DGELU)) {
    const void *g, *w;
    MGT_CHECK(gemm_operand(c, 0, dy, M, K, K, &g));
    MGT_CHECK(gemm_operand(c, 1, W, K, N, N, &w));
    float *bias;
    MGT_CHECK(bias_target(c, db, N, accumulate, &bias));
    const lt_shape sh = lt_shape_of(c, LT_DGELU, 0, 0, N, M, K, N, K, N, 0);
    bool done;
    MGT_CHECK(lt_fused(c, &sh, w, g, dpre, bias, pre, &done));
    if (done) return accumulate ? cu_add(ctx, db, c->bgrad, (size_t)N) : MGT_OK;
  }
  MGT_CHECK(cu_gemm(ctx, 0, 0, M, N, K, 1.0f, dy, K, W, N, 0.0f, dpre, N));
  MGT_CHECK(cu_gelu_backward(ctx, dpre, dpre, pre, (size_t)M * N));
  return db ? cu_bias_backward(ctx, db, dpre, M, N, accumulate) : MGT_OK;
}

__global__ void k_gelu_backward(float *dpre, const float *dout, const float *pre, size_t n) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  GRID_STRIDE(i, n) {
    float x = pre[i];
    float t = tanhf(k0 * (x + k1 * x * x * x));
    float du = k0 * (1.0f + 3.0f * k1 * x * x);
    dpre[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

mgt_status cu_gelu_backward(void *ctx, float *dpre, const float *dout, const float *pre, size_t n) {
  if (!n) return MGT_OK;
  k_gelu_backward<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(dpre, dout, pre, n);
  LAUNCHED();
  return MGT_OK;
}

} // namespace mgt_cu
