/* Tensor-parallel layers (Megatron-LM, Section 3): each rank of tp_comm holds a shard and
   the conjugate operators f (identity forward, all-reduce backward) and g (all-reduce
   forward, identity backward) keep activations consistent. Linear weights are (out, in)
   row-major: y = x W^T + b. Every function is collective over tp_comm. */
#pragma once

#include "mgt/backend.h"
#include "mgt/comm.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_tp {
  const mgt_backend *be;
  const mgt_comm *comm;
  const mgt_grid *grid;
  const int *sp_counts; /* sequence parallelism: floats of each rank's rows (tp entries) */
} mgt_tp;

/* Column-parallel: W (out_l, in) holds this rank's output rows; x (N, in) is replicated;
   y (N, out_l) = x W^T + b stays split. */
/* Column-parallel linear layer with its bias and GeLU fused (the MLP's first layer):
   pre = x W^T + b, y = gelu(pre). */
MGT_NODISCARD mgt_status mgt_tp_column_forward_gelu(const mgt_tp *tp, float *pre, float *y,
                                                    const float *x, const float *W, const float *b,
                                                    int N, int in, int out_l);
MGT_NODISCARD mgt_status mgt_tp_column_forward(const mgt_tp *tp, float *y, const float *x,
                                               const float *W, const float *b, int N, int in,
                                               int out_l);
/* dx (N, in) = this rank's part dy W of the input gradient (not yet summed over the group);
   dW, db = [dW, db +] local gradients. */
MGT_NODISCARD mgt_status mgt_tp_column_grads(const mgt_tp *tp, float *dx, float *dW, float *db,
                                             const float *dy, const float *x, const float *W, int N,
                                             int in, int out_l, int accumulate);
/* dx (N, in) = all-reduce of dy W over the group (f); dW, db = [dW, db +] local gradients. */
MGT_NODISCARD mgt_status mgt_tp_column_backward(const mgt_tp *tp, float *dx, float *dW, float *db,
                                                const float *dy, const float *x, const float *W,
                                                int N, int in, int out_l, int accumulate);

/* Row-parallel: W (out, in_l) holds this rank's input columns; x (N, in_l) is split;
   y (N, out) = all-reduce of x W^T (g), then + b once. */
MGT_NODISCARD mgt_status mgt_tp_row_forward(const mgt_tp *tp, float *y, const float *x,
                                            const float *W, const float *b, int N, int in_l,
                                            int out);
/* dx (N, in_l) = dy W; dW = [dW +] dy^T x; db = [db +] column sums of dy (replicated). */
MGT_NODISCARD mgt_status mgt_tp_row_backward(const mgt_tp *tp, float *dx, float *dW, float *db,
                                             const float *dy, const float *x, const float *W, int N,
                                             int in_l, int out, int accumulate);
/* The same where x = gelu(pre) (the MLP's second layer): dW, db as above, and dpre (N, in_l)
   = (dy W) * gelu'(pre) with db_in = [db_in +] its column sums, the first layer's bias
   gradient (one fused GEMM on GPUs). */
MGT_NODISCARD mgt_status mgt_tp_row_backward_gelu(const mgt_tp *tp, float *dpre, float *dW,
                                                  float *db, float *db_in, const float *dy,
                                                  const float *x, const float *W, const float *pre,
                                                  int N, int in_l, int out, int accumulate);

/* Vocabulary-parallel embedding: wte (Vl, C) holds rows [v0, v0 + Vl); out (N, C) is the
   full lookup after an all-reduce. */
MGT_NODISCARD mgt_status mgt_tp_embedding_forward(const mgt_tp *tp, float *out,
                                                  const int32_t *tokens, const float *wte, int N,
                                                  int C, int v0, int Vl);

/* Sequence parallelism (Korthikanti et al. 2022): outside the tensor-parallel regions each
   rank holds a contiguous block of rows, sp_counts[rank] floats of them. gather: the blocks of
   every rank, in rank order, into full (the forward's g-bar, the backward's f-bar). */
MGT_NODISCARD mgt_status mgt_tp_sp_gather(const mgt_tp *tp, float *full, const float *local);
/* local = this rank's block of the sum over the group of full (reduce-scatter). */
MGT_NODISCARD mgt_status mgt_tp_sp_scatter(const mgt_tp *tp, float *local, const float *full);
/* The row-parallel layer ending in a reduce-scatter: x W^T into full (N, out), summed into
   this rank's rows y (N/tp, out), then + b. */
MGT_NODISCARD mgt_status mgt_tp_row_forward_sp(const mgt_tp *tp, float *y, float *full,
                                               const float *x, const float *W, const float *b,
                                               int N, int in_l, int out);
/* The column-parallel backward ending in a reduce-scatter: dy W into full (N, in), this rank's
   rows of its sum into dx (N/tp, in); x (N, in) is the gathered input. */
MGT_NODISCARD mgt_status mgt_tp_column_backward_sp(const mgt_tp *tp, float *dx, float *full,
                                                   float *dW, float *db, const float *dy,
                                                   const float *x, const float *W, int N, int in,
                                                   int out_l, int accumulate);
/* The embedding lookup into full (N, C), reduce-scattered into this rank's rows of out. */
MGT_NODISCARD mgt_status mgt_tp_embedding_forward_sp(const mgt_tp *tp, float *out, float *full,
                                                     const int32_t *tokens, const float *wte, int N,
                                                     int C, int v0, int Vl);

/* Buffers of the vocabulary-parallel cross-entropy, each of N floats except sumtgt (2N). */
typedef struct mgt_tp_xent {
  float *rowmax, *sumtgt, *losses;
} mgt_tp_xent;

/* Loss of logits (N, Vl), of which the first nv columns are vocabulary ids from v0, against
   targets; the logits are never gathered: the max, the sum of exponentials and the target
   logit are reduced (3N floats). With keep_exp the logits become exp(l - max) for
   mgt_tp_xent_backward. *loss_sum (host) is the summed token loss. */
MGT_NODISCARD mgt_status mgt_tp_xent_forward(const mgt_tp *tp, const mgt_tp_xent *x, float *logits,
                                             const int32_t *targets, int N, int Vl, int nv, int v0,
                                             int keep_exp, double *loss_sum);
/* logits (holding exp values) become scale * (softmax - onehot). Local, no communication. */
MGT_NODISCARD mgt_status mgt_tp_xent_backward(const mgt_tp *tp, const mgt_tp_xent *x, float *logits,
                                              const int32_t *targets, int N, int Vl, int nv, int v0,
                                              float scale);

#ifdef __cplusplus
}
#endif
