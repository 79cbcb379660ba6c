#include "mgt/tp.h"

static mgt_status allreduce(const mgt_tp *tp, float *buf, size_t n, mgt_redop op) {
  return mgt_comm_allreduce(tp->comm, MGT_AXIS_TP, buf, n, op);
}

mgt_status mgt_tp_column_forward(const mgt_tp *tp, float *y, const float *x, const float *W,
                                 const float *b, int N, int in, int out_l) {
  const mgt_backend *be = tp->be;
  return mgt_be_linear_bias(be, N, out_l, in, x, in, W, in, b, y);
}

mgt_status mgt_tp_column_forward_gelu(const mgt_tp *tp, float *pre, float *y, const float *x,
                                      const float *W, const float *b, int N, int in, int out_l) {
  const mgt_backend *be = tp->be;
  return mgt_be_linear_bias_gelu(be, N, out_l, in, x, in, W, in, b, pre, y);
}

/* Ends a hold on a layer's output gradient, which its two GEMMs read in between (converted to
   16 bits once), keeping the first failure. */
static mgt_status unhold(const mgt_backend *be, mgt_status s) {
  const mgt_status r = mgt_be_hold(be, NULL, 0);
  return s != MGT_OK ? s : r;
}

mgt_status mgt_tp_column_grads(const mgt_tp *tp, float *dx, float *dW, float *db, const float *dy,
                               const float *x, const float *W, int N, int in, int out_l,
                               int accumulate) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(mgt_be_hold(be, dy, (size_t)N * out_l));
  mgt_status s =
      mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, in, out_l, 1.0f, dy, out_l, W, in, 0.0f, dx, in);
  if (s == MGT_OK) s = mgt_be_linear_param_grads(be, N, out_l, in, dy, x, dW, db, accumulate);
  return unhold(be, s);
}

mgt_status mgt_tp_column_backward(const mgt_tp *tp, float *dx, float *dW, float *db,
                                  const float *dy, const float *x, const float *W, int N, int in,
                                  int out_l, int accumulate) {
  MGT_CHECK(mgt_tp_column_grads(tp, dx, dW, db, dy, x, W, N, in, out_l, accumulate));
  return allreduce(tp, dx, (size_t)N * in, MGT_SUM);
}

mgt_status mgt_tp_row_forward(const mgt_tp *tp, float *y, const float *x, const float *W,
                              const float *b, int N, int in_l, int out) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(
      mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, N, out, in_l, 1.0f, x, in_l, W, in_l, 0.0f, y, out));
  MGT_CHECK(allreduce(tp, y, (size_t)N * out, MGT_SUM));
  if (b) MGT_CHECK(mgt_be_add_bias(be, y, b, N, out));
  return MGT_OK;
}

mgt_status mgt_tp_row_backward(const mgt_tp *tp, float *dx, float *dW, float *db, const float *dy,
                               const float *x, const float *W, int N, int in_l, int out,
                               int accumulate) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(mgt_be_hold(be, dy, (size_t)N * out));
  mgt_status s = mgt_be_linear_param_grads(be, N, out, in_l, dy, x, dW, db, accumulate);
  if (s == MGT_OK)
    s = mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, in_l, out, 1.0f, dy, out, W, in_l, 0.0f, dx,
                    in_l);
  return unhold(be, s);
}

mgt_status mgt_tp_row_backward_gelu(const mgt_tp *tp, float *dpre, float *dW, float *db,
                                    float *db_in, const float *dy, const float *x, const float *W,
                                    const float *pre, int N, int in_l, int out, int accumulate) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(mgt_be_hold(be, dy, (size_t)N * out));
  mgt_status s = mgt_be_linear_param_grads(be, N, out, in_l, dy, x, dW, db, accumulate);
  if (s == MGT_OK) s = mgt_be_linear_dgelu(be, N, in_l, out, dy, W, pre, dpre, db_in, accumulate);
  return unhold(be, s);
}

mgt_status mgt_tp_embedding_forward(const mgt_tp *tp, float *out, const int32_t *tokens,
                                    const float *wte, int N, int C, int v0, int Vl) {
  MGT_CHECK(mgt_be_embedding_forward(tp->be, out, tokens, wte, N, C, v0, Vl));
  MGT_CHECK(allreduce(tp, out, (size_t)N * C, MGT_SUM));
  return MGT_OK;
}

mgt_status mgt_tp_sp_gather(const mgt_tp *tp, float *full, const float *local) {
  return mgt_comm_allgather(tp->comm, MGT_AXIS_TP, local, full,
                            (size_t)tp->sp_counts[tp->grid->tp_rank]);
}

mgt_status mgt_tp_sp_scatter(const mgt_tp *tp, float *local, const float *full) {
  return mgt_comm_reduce_scatter(tp->comm, MGT_AXIS_TP, full, local, tp->sp_counts, NULL);
}

mgt_status mgt_tp_row_forward_sp(const mgt_tp *tp, float *y, float *full, const float *x,
                                 const float *W, const float *b, int N, int in_l, int out) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, N, out, in_l, 1.0f, x, in_l, W, in_l, 0.0f,
                        full, out));
  MGT_CHECK(mgt_tp_sp_scatter(tp, y, full));
  if (b) MGT_CHECK(mgt_be_add_bias(be, y, b, N / tp->grid->tp, out));
  return MGT_OK;
}

mgt_status mgt_tp_column_backward_sp(const mgt_tp *tp, float *dx, float *full, float *dW, float *db,
                                     const float *dy, const float *x, const float *W, int N, int in,
                                     int out_l, int accumulate) {
  MGT_CHECK(mgt_tp_column_grads(tp, full, dW, db, dy, x, W, N, in, out_l, accumulate));
  return mgt_tp_sp_scatter(tp, dx, full);
}

mgt_status mgt_tp_embedding_forward_sp(const mgt_tp *tp, float *out, float *full,
                                       const int32_t *tokens, const float *wte, int N, int C,
                                       int v0, int Vl) {
  MGT_CHECK(mgt_be_embedding_forward(tp->be, full, tokens, wte, N, C, v0, Vl));
  return mgt_tp_sp_scatter(tp, out, full);
}

mgt_status mgt_tp_xent_forward(const mgt_tp *tp, const mgt_tp_xent *x, float *logits,
                               const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp,
                               double *loss_sum) {
  const mgt_backend *be = tp->be;
  MGT_CHECK(mgt_be_xent_max(be, x->rowmax, logits, N, Vl, nv));
  MGT_CHECK(allreduce(tp, x->rowmax, (size_t)N, MGT_MAX));
  MGT_CHECK(mgt_be_xent_sumexp(be, x->sumtgt, x->sumtgt + N, logits, x->rowmax, targets, N, Vl, nv,
                               v0, keep_exp));
  MGT_CHECK(allreduce(tp, x->sumtgt, 2 * (size_t)N, MGT_SUM));
  MGT_CHECK(
      mgt_be_xent_loss(be, x->losses, x->rowmax, x->sumtgt, x->sumtgt + N, targets, N, loss_sum));
  return MGT_OK;
}

mgt_status mgt_tp_xent_backward(const mgt_tp *tp, const mgt_tp_xent *x, float *logits,
                                const int32_t *targets, int N, int Vl, int nv, int v0,
                                float scale) {
  return mgt_be_xent_backward(tp->be, logits, x->sumtgt, targets, N, Vl, nv, v0, scale);
}
