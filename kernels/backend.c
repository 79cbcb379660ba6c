/* The checked wrappers of the backend table (include/mgt/backend.h): the one place that calls
   through its function pointers. */
#include "backend_impl.h"

static mgt_status lacks(const mgt_backend *be, const char *op) {
  MGT_FAIL(MGT_ERR_BACKEND, "backend %s lacks operation %s", be->name, op);
}

const char *mgt_be_name(const mgt_backend *be) { return be->name; }

int mgt_be_act16_bytes(const mgt_backend *be) { return be->act16_bytes; }

int mgt_be_has(const mgt_backend *be, mgt_be_op op) {
  switch (op) {
  case MGT_BE_ALLOC: return be->alloc != NULL;
  case MGT_BE_FREE: return be->free != NULL;
  case MGT_BE_ZERO: return be->zero != NULL;
  case MGT_BE_UPLOAD: return be->upload != NULL;
  case MGT_BE_COPY: return be->copy != NULL;
  case MGT_BE_DOWNLOAD: return be->download != NULL;
  case MGT_BE_SYNC: return be->sync != NULL;
  case MGT_BE_SET_PRECISION: return be->set_precision != NULL;
  case MGT_BE_SET_WEIGHTS: return be->set_weights != NULL;
  case MGT_BE_REFRESH_WEIGHTS: return be->refresh_weights != NULL;
  case MGT_BE_SET_ACT16: return be->set_act16 != NULL;
  case MGT_BE_INIT_NORMAL: return be->init_normal != NULL;
  case MGT_BE_FILL: return be->fill != NULL;
  case MGT_BE_GEMM: return be->gemm != NULL;
  case MGT_BE_LINEAR_BIAS_GELU: return be->linear_bias_gelu != NULL;
  case MGT_BE_LINEAR_BIAS: return be->linear_bias != NULL;
  case MGT_BE_LINEAR_PARAM_GRADS: return be->linear_param_grads != NULL;
  case MGT_BE_LINEAR_DGELU: return be->linear_dgelu != NULL;
  case MGT_BE_BIAS_DROPOUT_ADD_LN: return be->bias_dropout_add_ln != NULL;
  case MGT_BE_ADD_BIAS: return be->add_bias != NULL;
  case MGT_BE_BIAS_BACKWARD: return be->bias_backward != NULL;
  case MGT_BE_LAYERNORM_FORWARD: return be->layernorm_forward != NULL;
  case MGT_BE_LAYERNORM_BACKWARD: return be->layernorm_backward != NULL;
  case MGT_BE_RMSNORM_FORWARD: return be->rmsnorm_forward != NULL;
  case MGT_BE_RMSNORM_BACKWARD: return be->rmsnorm_backward != NULL;
  case MGT_BE_SWIGLU_FORWARD: return be->swiglu_forward != NULL;
  case MGT_BE_SWIGLU_BACKWARD: return be->swiglu_backward != NULL;
  case MGT_BE_ROPE: return be->rope != NULL;
  case MGT_BE_KV_GROUP: return be->kv_group != NULL;
  case MGT_BE_BIAS_GELU_FORWARD: return be->bias_gelu_forward != NULL;
  case MGT_BE_GELU_BACKWARD: return be->gelu_backward != NULL;
  case MGT_BE_ATTENTION_FORWARD: return be->attention_forward != NULL;
  case MGT_BE_ATTENTION_BACKWARD: return be->attention_backward != NULL;
  case MGT_BE_FLASH_ATTENTION_FORWARD: return be->flash_attention_forward != NULL;
  case MGT_BE_FLASH_ATTENTION_BACKWARD: return be->flash_attention_backward != NULL;
  case MGT_BE_BIAS_ACT_FORWARD: return be->bias_act_forward != NULL;
  case MGT_BE_ACT_BACKWARD: return be->act_backward != NULL;
  case MGT_BE_GATHER_ROWS: return be->gather_rows != NULL;
  case MGT_BE_SCATTER_ADD_ROWS: return be->scatter_add_rows != NULL;
  case MGT_BE_EMBEDDING_FORWARD: return be->embedding_forward != NULL;
  case MGT_BE_ADD_POSITION: return be->add_position != NULL;
  case MGT_BE_EMBEDDING_BACKWARD: return be->embedding_backward != NULL;
  case MGT_BE_DROPOUT_FORWARD: return be->dropout_forward != NULL;
  case MGT_BE_DROPOUT_BACKWARD: return be->dropout_backward != NULL;
  case MGT_BE_ADD: return be->add != NULL;
  case MGT_BE_XENT_MAX: return be->xent_max != NULL;
  case MGT_BE_XENT_SUMEXP: return be->xent_sumexp != NULL;
  case MGT_BE_XENT_LOSS: return be->xent_loss != NULL;
  case MGT_BE_XENT_BACKWARD: return be->xent_backward != NULL;
  case MGT_BE_ARGMAX: return be->argmax != NULL;
  case MGT_BE_ATTENTION_DECODE: return be->attention_decode != NULL;
  case MGT_BE_SUMSQ: return be->sumsq != NULL;
  case MGT_BE_ADAMW: return be->adamw != NULL;
  default: return 0;
  }
}

void mgt_backend_destroy(mgt_backend **be) {
  if (!*be) return;
  if ((*be)->destroy) (*be)->destroy((*be)->ctx);
  mgt_free(*be);
  *be = NULL;
}

mgt_status mgt_be_alloc(const mgt_backend *be, size_t bytes, const char *what, void **out) {
  if (!be->alloc) return lacks(be, "alloc");
  return be->alloc(be->ctx, bytes, what, out);
}

void mgt_be_free(const mgt_backend *be, void *p) {
  if (be->free) be->free(be->ctx, p);
}

mgt_status mgt_be_zero(const mgt_backend *be, void *p, size_t bytes) {
  if (!be->zero) return lacks(be, "zero");
  return be->zero(be->ctx, p, bytes);
}

mgt_status mgt_be_upload(const mgt_backend *be, void *dst, const void *host_src, size_t bytes) {
  if (!be->upload) return lacks(be, "upload");
  return be->upload(be->ctx, dst, host_src, bytes);
}

mgt_status mgt_be_copy(const mgt_backend *be, void *dst, const void *src, size_t bytes) {
  if (!be->copy) return lacks(be, "copy");
  return be->copy(be->ctx, dst, src, bytes);
}

mgt_status mgt_be_download(const mgt_backend *be, void *host_dst, const void *src, size_t bytes) {
  if (!be->download) return lacks(be, "download");
  return be->download(be->ctx, host_dst, src, bytes);
}

mgt_status mgt_be_sync(const mgt_backend *be) {
  if (!be->sync) return lacks(be, "sync");
  return be->sync(be->ctx);
}

mgt_status mgt_be_set_precision(const mgt_backend *be, mgt_precision prec) {
  if (!be->set_precision) return lacks(be, "set_precision");
  return be->set_precision(be->ctx, prec);
}

mgt_status mgt_be_set_weights(const mgt_backend *be, const float *w, size_t n) {
  if (!be->set_weights) return lacks(be, "set_weights");
  return be->set_weights(be->ctx, w, n);
}

mgt_status mgt_be_refresh_weights(const mgt_backend *be, size_t offset, size_t n) {
  if (!be->refresh_weights) return lacks(be, "refresh_weights");
  return be->refresh_weights(be->ctx, offset, n);
}

mgt_status mgt_be_set_act16(const mgt_backend *be, void *p, size_t bytes) {
  if (!be->set_act16) return lacks(be, "set_act16");
  return be->set_act16(be->ctx, p, bytes);
}

mgt_status mgt_be_init_normal(const mgt_backend *be, float *p, const mgt_shard *sh, uint64_t seed,
                              uint64_t stream, float std) {
  if (!be->init_normal) return lacks(be, "init_normal");
  return be->init_normal(be->ctx, p, sh, seed, stream, std);
}

mgt_status mgt_be_fill(const mgt_backend *be, float *p, size_t n, float value) {
  if (!be->fill) return lacks(be, "fill");
  return be->fill(be->ctx, p, n, value);
}

mgt_status mgt_be_gemm(const mgt_backend *be, int transa, int transb, int M, int N, int K,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc) {
  if (!be->gemm) return lacks(be, "gemm");
  return be->gemm(be->ctx, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

mgt_status mgt_be_linear_bias_gelu(const mgt_backend *be, int M, int N, int K, const float *A,
                                   int lda, const float *W, int ldw, const float *b, float *pre,
                                   float *out) {
  if (!be->linear_bias_gelu) return lacks(be, "linear_bias_gelu");
  return be->linear_bias_gelu(be->ctx, M, N, K, A, lda, W, ldw, b, pre, out);
}

mgt_status mgt_be_linear_bias(const mgt_backend *be, int M, int N, int K, const float *A, int lda,
                              const float *W, int ldw, const float *b, float *out) {
  if (!be->linear_bias) return lacks(be, "linear_bias");
  return be->linear_bias(be->ctx, M, N, K, A, lda, W, ldw, b, out);
}

mgt_status mgt_be_linear_param_grads(const mgt_backend *be, int M, int N, int K, const float *dy,
                                     const float *x, float *dW, float *db, int accumulate) {
  if (!be->linear_param_grads) return lacks(be, "linear_param_grads");
  return be->linear_param_grads(be->ctx, M, N, K, dy, x, dW, db, accumulate);
}

mgt_status mgt_be_linear_dgelu(const mgt_backend *be, int M, int N, int K, const float *dy,
                               const float *W, const float *pre, float *dpre, float *db,
                               int accumulate) {
  if (!be->linear_dgelu) return lacks(be, "linear_dgelu");
  return be->linear_dgelu(be->ctx, M, N, K, dy, W, pre, dpre, db, accumulate);
}

mgt_status mgt_be_bias_dropout_add_ln(const mgt_backend *be, float *out, float *x, const float *b,
                                      const float *res, int N, int C, size_t row,
                                      const mgt_dropout *d, float *ln, float *mean, float *rstd,
                                      const float *w, const float *lb, float eps) {
  if (!be->bias_dropout_add_ln) return lacks(be, "bias_dropout_add_ln");
  return be->bias_dropout_add_ln(be->ctx, out, x, b, res, N, C, row, d, ln, mean, rstd, w, lb, eps);
}

mgt_status mgt_be_add_bias(const mgt_backend *be, float *y, const float *b, int N, int C) {
  if (!be->add_bias) return lacks(be, "add_bias");
  return be->add_bias(be->ctx, y, b, N, C);
}

mgt_status mgt_be_bias_backward(const mgt_backend *be, float *db, const float *dy, int N, int C,
                                int accumulate) {
  if (!be->bias_backward) return lacks(be, "bias_backward");
  return be->bias_backward(be->ctx, db, dy, N, C, accumulate);
}

mgt_status mgt_be_layernorm_forward(const mgt_backend *be, float *out, float *mean, float *rstd,
                                    const float *x, const float *w, const float *b, int N, int C,
                                    float eps) {
  if (!be->layernorm_forward) return lacks(be, "layernorm_forward");
  return be->layernorm_forward(be->ctx, out, mean, rstd, x, w, b, N, C, eps);
}

mgt_status mgt_be_layernorm_backward(const mgt_backend *be, float *dx, float *dw, float *db,
                                     const float *dout, const float *x, const float *w,
                                     const float *mean, const float *rstd, int N, int C,
                                     int accumulate) {
  if (!be->layernorm_backward) return lacks(be, "layernorm_backward");
  return be->layernorm_backward(be->ctx, dx, dw, db, dout, x, w, mean, rstd, N, C, accumulate);
}

mgt_status mgt_be_rmsnorm_forward(const mgt_backend *be, float *out, float *rstd, const float *x,
                                  const float *w, int N, int C, float eps) {
  if (!be->rmsnorm_forward) return lacks(be, "rmsnorm_forward");
  return be->rmsnorm_forward(be->ctx, out, rstd, x, w, N, C, eps);
}

mgt_status mgt_be_rmsnorm_backward(const mgt_backend *be, float *dx, float *dw, const float *dout,
                                   const float *x, const float *w, const float *rstd, int N, int C,
                                   int accumulate) {
  if (!be->rmsnorm_backward) return lacks(be, "rmsnorm_backward");
  return be->rmsnorm_backward(be->ctx, dx, dw, dout, x, w, rstd, N, C, accumulate);
}

mgt_status mgt_be_swiglu_forward(const mgt_backend *be, float *out, const float *x, int N, int F) {
  if (!be->swiglu_forward) return lacks(be, "swiglu_forward");
  return be->swiglu_forward(be->ctx, out, x, N, F);
}

mgt_status mgt_be_swiglu_backward(const mgt_backend *be, float *dx, const float *dout,
                                  const float *x, int N, int F) {
  if (!be->swiglu_backward) return lacks(be, "swiglu_backward");
  return be->swiglu_backward(be->ctx, dx, dout, x, N, F);
}

mgt_status mgt_be_rope(const mgt_backend *be, float *x, int N, int T, int pos0, int heads, int hd,
                       int ld, const float *inv_freq, int inverse) {
  if (!be->rope) return lacks(be, "rope");
  MGT_REQUIRE(hd % 2 == 0 && T > 0, "rope: head size %d is odd or T %d is not positive", hd, T);
  return be->rope(be->ctx, x, N, T, pos0, heads, hd, ld, inv_freq, inverse);
}

mgt_status mgt_be_kv_group(const mgt_backend *be, float *dst, const float *src, int N, int Hl,
                           int Gl, int hd, int reduce) {
  if (!be->kv_group) return lacks(be, "kv_group");
  MGT_REQUIRE(Gl > 0 && Hl % Gl == 0, "kv_group: %d heads are not groups of %d", Hl, Gl);
  return be->kv_group(be->ctx, dst, src, N, Hl, Gl, hd, reduce);
}

mgt_status mgt_be_bias_gelu_forward(const mgt_backend *be, float *out, float *pre, const float *b,
                                    int N, int C) {
  if (!be->bias_gelu_forward) return lacks(be, "bias_gelu_forward");
  return be->bias_gelu_forward(be->ctx, out, pre, b, N, C);
}

mgt_status mgt_be_gelu_backward(const mgt_backend *be, float *dpre, const float *dout,
                                const float *pre, size_t n) {
  if (!be->gelu_backward) return lacks(be, "gelu_backward");
  return be->gelu_backward(be->ctx, dpre, dout, pre, n);
}

mgt_status mgt_be_attention_forward(const mgt_backend *be, float *out, float *P, const float *qkv,
                                    int B, int T, int Hl, int hd, int head_offset, int H,
                                    const int32_t *keylen, const mgt_dropout *d, float *scratch) {
  if (!be->attention_forward) return lacks(be, "attention_forward");
  return be->attention_forward(be->ctx, out, P, qkv, B, T, Hl, hd, head_offset, H, keylen, d,
                               scratch);
}

mgt_status mgt_be_attention_backward(const mgt_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *P, int B, int T, int Hl, int hd,
                                     int head_offset, int H, const int32_t *keylen,
                                     const mgt_dropout *d, float *scratch) {
  if (!be->attention_backward) return lacks(be, "attention_backward");
  return be->attention_backward(be->ctx, dqkv, dout, qkv, P, B, T, Hl, hd, head_offset, H, keylen,
                                d, scratch);
}

mgt_status mgt_be_flash_attention_forward(const mgt_backend *be, float *out, float *lse,
                                          const float *qkv, int B, int T, int Hl, int hd,
                                          int head_offset, const int32_t *keylen,
                                          const mgt_dropout *d) {
  if (!be->flash_attention_forward) return lacks(be, "flash_attention_forward");
  return be->flash_attention_forward(be->ctx, out, lse, qkv, B, T, Hl, hd, head_offset, keylen, d);
}

mgt_status mgt_be_flash_attention_backward(const mgt_backend *be, float *dqkv, const float *dout,
                                           const float *qkv, const float *out, const float *lse,
                                           int B, int T, int Hl, int hd, int head_offset,
                                           const int32_t *keylen, const mgt_dropout *d) {
  if (!be->flash_attention_backward) return lacks(be, "flash_attention_backward");
  return be->flash_attention_backward(be->ctx, dqkv, dout, qkv, out, lse, B, T, Hl, hd, head_offset,
                                      keylen, d);
}

mgt_status mgt_be_bias_act_forward(const mgt_backend *be, int act, float *out, float *pre,
                                   const float *b, int N, int C) {
  if (!be->bias_act_forward) return lacks(be, "bias_act_forward");
  return be->bias_act_forward(be->ctx, act, out, pre, b, N, C);
}

mgt_status mgt_be_act_backward(const mgt_backend *be, int act, float *dpre, const float *dout,
                               const float *pre, size_t n) {
  if (!be->act_backward) return lacks(be, "act_backward");
  return be->act_backward(be->ctx, act, dpre, dout, pre, n);
}

mgt_status mgt_be_gather_rows(const mgt_backend *be, float *out, const float *x, const int32_t *idx,
                              int M, int C) {
  if (!be->gather_rows) return lacks(be, "gather_rows");
  return be->gather_rows(be->ctx, out, x, idx, M, C);
}

mgt_status mgt_be_scatter_add_rows(const mgt_backend *be, float *dx, const float *dy,
                                   const int32_t *idx, int M, int C) {
  if (!be->scatter_add_rows) return lacks(be, "scatter_add_rows");
  return be->scatter_add_rows(be->ctx, dx, dy, idx, M, C);
}

mgt_status mgt_be_embedding_forward(const mgt_backend *be, float *out, const int32_t *tokens,
                                    const float *wte, int N, int C, int v0, int Vl) {
  if (!be->embedding_forward) return lacks(be, "embedding_forward");
  return be->embedding_forward(be->ctx, out, tokens, wte, N, C, v0, Vl);
}

mgt_status mgt_be_add_position(const mgt_backend *be, float *x, const float *wpe, int N, int t0,
                               int T, int C) {
  if (!be->add_position) return lacks(be, "add_position");
  return be->add_position(be->ctx, x, wpe, N, t0, T, C);
}

mgt_status mgt_be_embedding_backward(const mgt_backend *be, float *dwte, float *dwpe,
                                     const float *dout, const int32_t *tokens, int B, int T, int C,
                                     int v0, int Vl, int accumulate) {
  if (!be->embedding_backward) return lacks(be, "embedding_backward");
  return be->embedding_backward(be->ctx, dwte, dwpe, dout, tokens, B, T, C, v0, Vl, accumulate);
}

mgt_status mgt_be_dropout_forward(const mgt_backend *be, float *out, const float *x,
                                  const float *res, size_t n, size_t row, const mgt_dropout *d) {
  if (!be->dropout_forward) return lacks(be, "dropout_forward");
  return be->dropout_forward(be->ctx, out, x, res, n, row, d);
}

mgt_status mgt_be_dropout_backward(const mgt_backend *be, float *dx, const float *dout, size_t n,
                                   size_t row, const mgt_dropout *d) {
  if (!be->dropout_backward) return lacks(be, "dropout_backward");
  return be->dropout_backward(be->ctx, dx, dout, n, row, d);
}

mgt_status mgt_be_add(const mgt_backend *be, float *y, const float *x, size_t n) {
  if (!be->add) return lacks(be, "add");
  return be->add(be->ctx, y, x, n);
}

mgt_status mgt_be_xent_max(const mgt_backend *be, float *rowmax, const float *logits, int N, int Vl,
                           int nv) {
  if (!be->xent_max) return lacks(be, "xent_max");
  return be->xent_max(be->ctx, rowmax, logits, N, Vl, nv);
}

mgt_status mgt_be_xent_sumexp(const mgt_backend *be, float *sum, float *tgt, float *logits,
                              const float *rowmax, const int32_t *targets, int N, int Vl, int nv,
                              int v0, int keep_exp) {
  if (!be->xent_sumexp) return lacks(be, "xent_sumexp");
  return be->xent_sumexp(be->ctx, sum, tgt, logits, rowmax, targets, N, Vl, nv, v0, keep_exp);
}

mgt_status mgt_be_xent_loss(const mgt_backend *be, float *losses, const float *rowmax,
                            const float *sum, const float *tgt, int N, double *total) {
  if (!be->xent_loss) return lacks(be, "xent_loss");
  return be->xent_loss(be->ctx, losses, rowmax, sum, tgt, N, total);
}

mgt_status mgt_be_xent_backward(const mgt_backend *be, float *logits, const float *sum,
                                const int32_t *targets, int N, int Vl, int nv, int v0,
                                float scale) {
  if (!be->xent_backward) return lacks(be, "xent_backward");
  return be->xent_backward(be->ctx, logits, sum, targets, N, Vl, nv, v0, scale);
}

mgt_status mgt_be_argmax(const mgt_backend *be, const float *logits, int N, int Vl, int nv,
                         float *val, int32_t *idx) {
  if (!be->argmax) return lacks(be, "argmax");
  return be->argmax(be->ctx, logits, N, Vl, nv, val, idx);
}

mgt_status mgt_be_attention_decode(const mgt_backend *be, float *out, const float *q,
                                   const float *kc, const float *vc, int len, int Hl, int Gl,
                                   int hd) {
  if (!be->attention_decode) return lacks(be, "attention_decode");
  MGT_REQUIRE(Gl > 0 && Hl % Gl == 0, "attention_decode: %d heads are not groups of %d", Hl, Gl);
  return be->attention_decode(be->ctx, out, q, kc, vc, len, Hl, Gl, hd);
}

mgt_status mgt_be_sumsq(const mgt_backend *be, const float *x, const mgt_segment *segs, int nseg,
                        double *out) {
  if (!be->sumsq) return lacks(be, "sumsq");
  return be->sumsq(be->ctx, x, segs, nseg, out);
}

mgt_status mgt_be_adamw(const mgt_backend *be, float *p, const float *g, float *m, float *v,
                        const mgt_segment *segs, int nseg, const mgt_adamw_step *s) {
  if (!be->adamw) return lacks(be, "adamw");
  return be->adamw(be->ctx, p, g, m, v, segs, nseg, s);
}
