/* The checked wrappers of the backend table (include/mgt/backend.h): the one place that calls
   through its function pointers, made from the list of operations. */
#include "backend_impl.h"

static mgt_status lacks(const mgt_backend *be, const char *op) {
  MGT_FAIL(MGT_ERR_BACKEND, "backend %s lacks operation %s", be->name, op);
}

const char *mgt_be_name(const mgt_backend *be) { return be->name; }

int mgt_be_act16_bytes(const mgt_backend *be) { return be->act16_bytes; }

int mgt_be_has(const mgt_backend *be, mgt_be_op op) {
  switch (op) {
#define HAS(name, NAME, params, args, kind)                                                        \
  case MGT_BE_##NAME: return be->name != NULL;
    MGT_BE_OPERATIONS(HAS)
#undef HAS
  default: return 0;
  }
}

const char *mgt_be_op_name(mgt_be_op op) {
  static const char *const names[] = {
#define NAME_OF(name, NAME, params, args, kind) #name,
      MGT_BE_OPERATIONS(NAME_OF)
#undef NAME_OF
  };
  return (unsigned)op < MGT_BE_N_OPS ? names[op] : NULL;
}

void mgt_backend_destroy(mgt_backend **be) {
  if (!*be) return;
  if ((*be)->destroy) (*be)->destroy((*be)->ctx);
  mgt_free(*be);
  *be = NULL;
}

void mgt_be_free(const mgt_backend *be, void *p) {
  if (be->free) be->free(be->ctx, p);
}

mgt_status mgt_be_sync(const mgt_backend *be) {
  if (!be->sync) return lacks(be, "sync");
  return be->sync(be->ctx);
}

/* The arguments of the GUARDED operations, checked before any backend sees them. */
static mgt_status guard_rope(float *x, int N, int T, int pos0, const int32_t *pos, int heads,
                             int hd, int ld, const float *inv_freq, int inverse) {
  (void)x, (void)N, (void)pos0, (void)pos, (void)heads, (void)ld, (void)inv_freq, (void)inverse;
  MGT_REQUIRE(hd % 2 == 0 && T > 0, "rope: head size %d is odd or T %d is not positive", hd, T);
  return MGT_OK;
}

static mgt_status guard_gemm_grouped(int transa, int transb, int count, const int *M, const int *N,
                                     const int *K, float alpha, const float *const *A, int lda,
                                     const float *const *B, int ldb, float beta, float *const *C,
                                     int ldc) {
  (void)alpha, (void)beta, (void)A, (void)B, (void)C;
  MGT_REQUIRE(count >= 0, "gemm_grouped: %d GEMMs", count);
  for (int g = 0; g < count; g++) {
    const int ka = transa ? M[g] : K[g], kb = transb ? K[g] : N[g];
    MGT_REQUIRE(M[g] >= 0 && N[g] >= 0 && K[g] >= 0 && lda >= ka && ldb >= kb && ldc >= N[g],
                "gemm_grouped: GEMM %d of %d x %d x %d does not fit leading dimensions %d, %d, %d",
                g, M[g], N[g], K[g], lda, ldb, ldc);
  }
  return MGT_OK;
}

/* sums make the vectors parts of wider norms: one vector per row, narrower than the norm. */
static mgt_status check_head_rmsnorm(int ld, int heads, int hd, const float *sums, int width) {
  MGT_REQUIRE(hd > 0 && heads >= 0 && ld >= heads * hd,
              "head_rmsnorm: %d heads of %d floats do not fit rows of %d", heads, hd, ld);
  MGT_REQUIRE(!sums || (heads == 1 && width >= hd),
              "head_rmsnorm: sums over norms %d wide for %d heads of %d floats (want 1 head, "
              "at most that wide)",
              width, heads, hd);
  return MGT_OK;
}

static mgt_status guard_head_rmsnorm_forward(float *x, int ld, float *raw, float *rstd,
                                             const float *w, int N, int heads, int hd, float eps,
                                             const float *sums, int width) {
  (void)x, (void)raw, (void)rstd, (void)w, (void)N, (void)eps;
  return check_head_rmsnorm(ld, heads, hd, sums, width);
}

static mgt_status guard_head_rmsnorm_backward(float *dx, int ld, float *dw, const float *raw,
                                              const float *rstd, const float *w, int N, int heads,
                                              int hd, int accumulate, const float *sums,
                                              int width) {
  (void)dx, (void)dw, (void)raw, (void)rstd, (void)w, (void)N, (void)accumulate;
  return check_head_rmsnorm(ld, heads, hd, sums, width);
}

static mgt_status guard_row_dots(float *out, const float *a, int lda, const float *b, int ldb,
                                 const float *w, int N, int n) {
  (void)out, (void)a, (void)b, (void)w;
  MGT_REQUIRE(N >= 0 && n >= 0 && lda >= n && ldb >= n,
              "row_dots: %d rows of %d floats do not fit strides %d and %d", N, n, lda, ldb);
  return MGT_OK;
}

static mgt_status guard_moe_route(const float *logits, int N, int E, int k, int score, int pre,
                                  float scale, const float *bias, int32_t *idx, float *w,
                                  float *probs, float *lse) {
  (void)logits, (void)N, (void)pre, (void)scale, (void)bias, (void)idx, (void)w, (void)probs,
      (void)lse;
  MGT_REQUIRE(E >= 1 && k >= 1 && k <= E, "moe_route: top-%d of %d experts", k, E);
  MGT_REQUIRE(score == MGT_MOE_SOFTMAX || score == MGT_MOE_SIGMOID, "moe_route: score function %d",
              score);
  MGT_REQUIRE(!bias || score == MGT_MOE_SIGMOID, "moe_route: an expert bias with softmax scores");
  return MGT_OK;
}

static mgt_status guard_moe_route_backward(float *dlogits, const float *dw, const float *logits,
                                           const int32_t *idx, const float *w, const float *probs,
                                           const float *lse, int N, int E, int k, int score,
                                           int pre, float scale, const float *aux, int aux_rows,
                                           float zc) {
  (void)dlogits, (void)dw, (void)aux, (void)aux_rows, (void)zc;
  return guard_moe_route(logits, N, E, k, score, pre, scale, NULL, (int32_t *)idx, (float *)w,
                         (float *)probs, (float *)lse);
}

static mgt_status guard_kv_group(float *dst, const float *src, int N, int Hl, int Gl, int hd,
                                 int reduce) {
  (void)dst, (void)src, (void)N, (void)hd, (void)reduce;
  MGT_REQUIRE(Gl > 0 && Hl % Gl == 0, "kv_group: %d heads are not groups of %d", Hl, Gl);
  return MGT_OK;
}

static mgt_status guard_attention_decode(float *out, const float *q, const float *kc,
                                         const float *vc, int len, int Hl, int Gl, int hd) {
  (void)out, (void)q, (void)kc, (void)vc, (void)len, (void)hd;
  MGT_REQUIRE(Gl > 0 && Hl % Gl == 0, "attention_decode: %d heads are not groups of %d", Hl, Gl);
  return MGT_OK;
}

#define WRAPPER_PLAIN(name, params, args)                                                          \
  mgt_status mgt_be_##name(const mgt_backend *be, MGT_BE_UNPACK params) {                          \
    if (!be->name) return lacks(be, #name);                                                        \
    return be->name(be->ctx, MGT_BE_UNPACK args);                                                  \
  }
#define WRAPPER_GUARDED(name, params, args)                                                        \
  mgt_status mgt_be_##name(const mgt_backend *be, MGT_BE_UNPACK params) {                          \
    if (!be->name) return lacks(be, #name);                                                        \
    MGT_CHECK(guard_##name(MGT_BE_UNPACK args));                                                   \
    return be->name(be->ctx, MGT_BE_UNPACK args);                                                  \
  }
#define WRAPPER(name, NAME, params, args, kind) WRAPPER_##kind(name, params, args)
MGT_BE_OPERATIONS(WRAPPER)
#undef WRAPPER
