/* The heads on the trunk: GPT's tied output layer and next-token loss (in chunks of rows),
   BERT's masked LM and sentence order, the fine-tuning classifiers; the entry points. */
#include "mgt/gpt_impl.h"

/* Stages tokens (B windows of T+1) as inputs and targets on the backend; with --sft their
   flags (include/mgt/data.h) mask targets and start documents. */
static mgt_status load_tokens(mgt_gpt *m, const int32_t *tokens) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(d->spec.input == MGT_INPUT_WINDOWS,
              "a BERT model takes BERT samples (mgt_bert_forward_backward)");
  const int N = d->B * d->T, flags = m->run.doc_flags;
  const int32_t id_mask = flags ? MGT_TOKEN_ID : -1;
  int32_t *in = m->host_tokens, *tg = m->host_tokens + N, *pos = m->host_tokens + 2 * (size_t)N;
  for (int b = 0; b < d->B; b++)
    for (int t = 0; t < d->T; t++) {
      const int32_t rx = tokens[(size_t)b * (d->T + 1) + t],
                    ry = tokens[(size_t)b * (d->T + 1) + t + 1];
      const int32_t x = rx & id_mask, y = ry & id_mask;
      MGT_REQUIRE(x >= 0 && x < d->V && y >= 0 && y < d->V,
                  "token id %d out of range [0, %d) in sample row %d", (x < 0 || x >= d->V) ? x : y,
                  d->V, b);
      in[b * d->T + t] = x;
      /* -1: no loss (--eod-mask-loss; a target masked or starting a document) */
      tg[b * d->T + t] = x == m->run.eod_mask || (flags && !mgt_token_trains(ry)) ? -1 : y;
    }
  MGT_CHECK(mgt_be_upload(m->be, m->inputs, in, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(m->be, m->targets, tg, sizeof(int32_t) * (size_t)N));
  const int by_eod = m->run.reset_positions >= 0 || m->run.reset_attention >= 0;
  if (!by_eod && !flags) return MGT_OK;
  /* each input's place in its document: 0 at a flagged document start and after each end of
     document (which belongs to the document it ends); the row's first key is its document's
     first row */
  const int32_t eod = m->run.reset_positions >= 0 ? m->run.reset_positions : m->run.reset_attention;
  for (int b = 0; b < d->B; b++)
    for (int t = 0, p = 0; t < d->T; t++) {
      const int32_t rx = tokens[(size_t)b * (d->T + 1) + t];
      if (flags && (rx & MGT_TOKEN_DOC_START)) p = 0;
      pos[b * d->T + t] = p;
      p = by_eod && in[b * d->T + t] == eod ? 0 : p + 1;
    }
  if (m->run.reset_positions >= 0 || flags)
    MGT_CHECK(mgt_be_upload(m->be, m->positions, pos, sizeof(int32_t) * (size_t)N));
  if (m->run.reset_attention < 0 && !flags) return MGT_OK;
  for (int i = 0; i < N; i++)
    pos[i] = i % d->T - pos[i];
  return mgt_be_upload(m->be, m->kfirst, pos, sizeof(int32_t) * (size_t)N);
}

/* What the GPT output layer does with each chunk of logits besides the loss. */
typedef struct head_job {
  int backward;     /* the gradient into m->dtmp and the word embeddings' */
  float grad_scale; /* of the loss */
  int accumulate;   /* into the word embeddings' gradient */
  float *val;       /* host (N): with pred, each row's largest local logit */
  int32_t *pred;    /* host (N): the vocabulary id of it */
} head_job;

/* GPT: the tied output layer, column-parallel over the vocabulary (logits never gathered),
   and the loss, over rows in chunks of m->d.logit_rows so that only one chunk of logits is
   ever held; with a backward each chunk's gradient is made at once (dx into m->dtmp, its sum
   over the vocabulary shards after the last chunk). */
static mgt_status output_layer(mgt_gpt *m, const head_job *job, double *loss_sum) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, Vl = d->Vl;
  const int o = gpt_output_param(&m->ix);
  const float *wte = m->w + m->params[o].offset;
  float *gwte = m->g + m->params[o].offset;
  *loss_sum = 0;
  for (int r0 = 0; r0 < N; r0 += d->logit_rows) {
    const int n = N - r0 < d->logit_rows ? N - r0 : d->logit_rows;
    const float *x = m->lnf + (size_t)r0 * C;
    /* this chunk's rows of the row statistics; sum and target side by side for n rows */
    const mgt_tp_xent xc = {m->xent.rowmax + r0, m->xent.sumtgt, m->xent.losses + r0};
    double part = 0;
    MGT_CHECK(mgt_tp_column_forward(&m->tp, m->logits, x, wte, NULL, n, C, Vl));
    if (job->pred)
      MGT_CHECK(mgt_be_argmax(m->be, m->logits, n, Vl, d->nv, job->val + r0, job->pred + r0));
    MGT_CHECK(mgt_tp_xent_forward(&m->tp, &xc, m->logits, m->targets + r0, n, Vl, d->nv, d->v0,
                                  job->backward, &part));
    *loss_sum += part;
    if (!job->backward) continue;
    MGT_CHECK(mgt_tp_xent_backward(&m->tp, &xc, m->logits, m->targets + r0, n, Vl, d->nv, d->v0,
                                   job->grad_scale));
    MGT_CHECK(mgt_tp_column_grads(&m->tp, m->dtmp + (size_t)r0 * C, gwte, NULL, m->logits, x, wte,
                                  n, C, Vl, job->accumulate || r0 > 0));
  }
  return MGT_OK;
}

/* GPT: the trunk, the output layer and the loss. */
static mgt_status forward(mgt_gpt *m, const step_ctx *s, const head_job *job, double *loss_sum) {
  MGT_CHECK(gpt_trunk_forward(m, s));
  return output_layer(m, job, loss_sum);
}

static const head_job loss_only = {0, 0, 0, NULL, NULL};

mgt_status mgt_gpt_forward(mgt_gpt *m, const int32_t *tokens, double *loss_sum) {
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {0, 0};
  MGT_CHECK(forward(m, &s, &loss_only, loss_sum));
  return MGT_OK;
}

mgt_status mgt_gpt_forward_losses(mgt_gpt *m, const int32_t *tokens, float *losses) {
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {0, 0};
  double sum = 0.0;
  MGT_CHECK(forward(m, &s, &loss_only, &sum));
  MGT_CHECK(
      mgt_be_download(m->be, losses, m->xent.losses, sizeof(float) * (size_t)m->d.B * m->d.T));
  return MGT_OK;
}

mgt_status gpt_gather_row(mgt_gpt *m, const float *row_local, float *host_shard, float *all,
                          float *logits) {
  const mgt_gpt_dims *d = &m->d;
  MGT_CHECK(mgt_be_download(m->be, host_shard, row_local, sizeof(float) * (size_t)d->Vl));
  MGT_CHECK(mgt_comm_allgather(m->comm, MGT_AXIS_TP, host_shard, all, (size_t)d->Vl));
  memcpy(logits, all, sizeof(float) * (size_t)d->V); /* shards in rank order; padding last */
  return MGT_OK;
}

mgt_status mgt_gpt_forward_predict(mgt_gpt *m, const int32_t *tokens, float *losses,
                                   int32_t *pred) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T;
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {0, 0};
  double sum = 0.0;
  float *val = malloc(sizeof(float) * (size_t)N);
  if (!val) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %d predictions", N);
  const head_job job = {0, 0, 0, val, pred}; /* the argmax of each chunk before its loss */
  mgt_status st = forward(m, &s, &job, &sum);
  if (st == MGT_OK) st = mgt_be_download(m->be, losses, m->xent.losses, sizeof(float) * (size_t)N);
  for (int n = 0; st == MGT_OK && n < N; n++)
    if (pred[n] >= 0) pred[n] += d->v0;
  if (st == MGT_OK) st = mgt_comm_allreduce_maxloc(m->comm, MGT_AXIS_TP, val, pred, (size_t)N);
  free(val);
  return st;
}

mgt_status mgt_gpt_forward_logits(mgt_gpt *m, const int32_t *tokens, int row, float *logits) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(row >= 0 && row < d->B * d->T, "row %d outside the batch", row);
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {0, 0};
  MGT_CHECK(gpt_trunk_forward(m, &s));
  const float *wte = m->w + m->params[gpt_output_param(&m->ix)].offset;
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->logits, m->lnf + (size_t)row * d->C, wte, NULL, 1,
                                  d->C, d->Vl)); /* that row only */
  float *shard = malloc(sizeof(float) * (size_t)d->Vl),
        *all = malloc(sizeof(float) * (size_t)d->Vp);
  mgt_status st = shard && all ? gpt_gather_row(m, m->logits, shard, all, logits) : MGT_ERR_NOMEM;
  free(shard);
  free(all);
  if (st == MGT_ERR_NOMEM) MGT_FAIL(st, "out of memory gathering logits");
  return st;
}

mgt_status mgt_gpt_forward_backward(mgt_gpt *m, const int32_t *tokens, uint64_t sample_base,
                                    float grad_scale, int accumulate, int sync_dp,
                                    double *loss_sum) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C;
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {sample_base, 1};
  const head_job job = {1, grad_scale, accumulate, NULL, NULL};
  MGT_CHECK(forward(m, &s, &job, loss_sum));
  /* the output layer's input gradient summed over the vocabulary shards: all-reduced, or
     reduce-scattered to this rank's rows */
  if (d->sp)
    MGT_CHECK(mgt_tp_sp_scatter(&m->tp, m->sp_loc, m->dtmp));
  else
    MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->dtmp, (size_t)N * C, MGT_SUM));
  return gpt_trunk_backward(m, &s, accumulate, sync_dp && m->grid->dp > 1, 1);
}

int64_t mgt_bert_count_masked(const int32_t *rows, int n, int T) {
  int64_t k = 0;
  for (int r = 0; r < n; r++) {
    const int32_t *lab = rows + (size_t)r * mgt_bert_row_ints(T) + MGT_BERT_LABELS * T;
    for (int t = 0; t < T; t++)
      k += lab[t] >= 0;
  }
  return k;
}

/* Checks and stages B packed sample rows: ids, types, lengths, the masked rows with their
   labels, and the order labels. */
static mgt_status load_bert(mgt_gpt *m, const int32_t *rows) {
  const mgt_gpt_dims *d = &m->d;
  const int T = d->T, B = d->B, N = B * T, W = mgt_bert_row_ints(T);
  MGT_REQUIRE(d->spec.input == MGT_INPUT_SAMPLES,
              "a GPT model takes windows of tokens, not BERT samples");
  int32_t *ids = m->host_tokens, *typ = m->host_tokens + N;
  int32_t *mrow = m->host_rows, *mlab = m->host_rows + (size_t)B * d->spec.max_predictions;
  int32_t *len = m->host_b, *sop = m->host_b + B;
  /* the order label, or a fine-tuning example's class (its rows' labels side by side) */
  const int classes = d->spec.classes;
  int M = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *r = rows + (size_t)b * W;
    len[b] = r[mgt_bert_length_at(T)];
    const int32_t label = r[mgt_bert_random_at(T)];
    MGT_REQUIRE(len[b] >= 1 && len[b] <= T && label >= 0 && label < classes,
                "BERT sample row %d: length %d or label %d out of range", b, len[b], label);
    if (b % d->spec.rows == 0) sop[b / d->spec.rows] = label;
    int in_sample = 0;
    for (int t = 0; t < T; t++) {
      const int32_t x = r[MGT_BERT_TOKENS * T + t], y = r[MGT_BERT_TYPES * T + t],
                    lab = r[MGT_BERT_LABELS * T + t];
      MGT_REQUIRE(x >= 0 && x < d->V, "token id %d out of range [0, %d) in sample row %d", x, d->V,
                  b);
      MGT_REQUIRE(y == 0 || y == 1, "token type %d (not 0 or 1) in sample row %d", y, b);
      MGT_REQUIRE(lab >= -1 && lab < d->V && !(d->spec.task && lab >= 0),
                  "label %d out of range in sample row %d (a task row has no masked positions)",
                  lab, b);
      ids[b * T + t] = x;
      typ[b * T + t] = y;
      if (lab < 0) continue;
      MGT_REQUIRE(t < len[b] && ++in_sample <= d->spec.max_predictions,
                  "sample row %d: a masked position in the padding, or more than the %d masked "
                  "positions --mask-prob allows",
                  b, d->spec.max_predictions);
      mrow[M] = b * T + t;
      mlab[M++] = lab;
    }
  }
  const mgt_backend *be = m->be;
  MGT_CHECK(mgt_be_upload(be, m->inputs, ids, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(be, m->types, typ, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(be, m->keylen, len, sizeof(int32_t) * (size_t)B));
  MGT_CHECK(mgt_be_upload(be, m->sop_tgt, sop, sizeof(int32_t) * (size_t)(B / d->spec.rows)));
  if (M > 0) {
    MGT_CHECK(mgt_be_upload(be, m->lm_rows, mrow, sizeof(int32_t) * (size_t)M));
    MGT_CHECK(mgt_be_upload(be, m->targets, mlab, sizeof(int32_t) * (size_t)M));
  }
  m->n_masked = M;
  return MGT_OK;
}

/* The trunk, the LM head on the masked rows (logits vocabulary-parallel and never gathered)
   and the sentence-order head on the [CLS] rows; with keep_exp both logits are left as
   exp(l - max) for backward. The heads' dense layers are replicated: the column-parallel
   forward and row-parallel backward, which communicate in neither of these directions. */
static mgt_status bert_forward(mgt_gpt *m, const step_ctx *s, int keep_exp, mgt_bert_losses *out) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, M = m->n_masked, B = d->B;
  const float eps = (float)m->d.spec.norm_eps;
  memset(out, 0, sizeof *out);
  MGT_CHECK(gpt_trunk_forward(m, s));
  float *h[H_LM];
  gpt_views(m, m->w, m->ix.lm, H_LM, h);
  const float *wte = m->w + m->params[m->ix.wte].offset;
  if (M > 0) {
    MGT_CHECK(mgt_be_gather_rows(be, m->lm_in, m->lnf, m->lm_rows, M, C));
    MGT_CHECK(mgt_tp_column_forward(&m->tp, m->lm_pre, m->lm_in, h[H_DENSE_W], NULL, M, C, C));
    MGT_CHECK(
        mgt_be_bias_act_forward(be, MGT_ACT_GELU_ERF, m->lm_act, m->lm_pre, h[H_DENSE_B], M, C));
    const float *gain;
    MGT_CHECK(gpt_norm_gain(m, h[H_LN_W], &gain));
    MGT_CHECK(mgt_be_layernorm_forward(be, m->lm_ln, m->lm_mean, m->lm_rstd, m->lm_act, gain,
                                       h[H_LN_B], M, C, eps));
    MGT_CHECK(mgt_tp_column_forward(&m->tp, m->logits, m->lm_ln, wte, h[H_BIAS], M, C, d->Vl));
    MGT_CHECK(mgt_tp_xent_forward(&m->tp, &m->xent, m->logits, m->targets, M, d->Vl, d->nv, d->v0,
                                  keep_exp, &out->lm_sum));
  }
  out->lm_count = M;
  if (d->spec.head != MGT_HEAD_MLM_SOP) return MGT_OK;
  float *q[Q_POOL];
  gpt_views(m, m->w, m->ix.pool, Q_POOL, q);
  MGT_CHECK(mgt_be_gather_rows(be, m->pool_in, m->lnf, m->cls_rows, B, C));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->pool_pre, m->pool_in, q[Q_POOL_W], NULL, B, C, C));
  MGT_CHECK(mgt_be_bias_act_forward(be, MGT_ACT_TANH, m->pooled, m->pool_pre, q[Q_POOL_B], B, C));
  MGT_CHECK(
      mgt_tp_column_forward(&m->tp, m->sop_logits, m->pooled, q[Q_BIN_W], q[Q_BIN_B], B, C, 2));
  /* two classes, replicated: the vocabulary cross-entropy's kernels without reductions */
  int32_t *pred = m->host_b, *tgt = m->host_b + B;
  float *val = (float *)(m->host_b + 2 * B);
  MGT_CHECK(mgt_be_argmax(be, m->sop_logits, B, 2, 2, val, pred));
  MGT_CHECK(mgt_be_download(be, tgt, m->sop_tgt, sizeof(int32_t) * (size_t)B));
  const mgt_tp_xent *x = &m->sop_xent;
  MGT_CHECK(mgt_be_xent_max(be, x->rowmax, m->sop_logits, B, 2, 2));
  MGT_CHECK(mgt_be_xent_sumexp(be, x->sumtgt, x->sumtgt + B, m->sop_logits, x->rowmax, m->sop_tgt,
                               B, 2, 2, 0, keep_exp));
  MGT_CHECK(mgt_be_xent_loss(be, x->losses, x->rowmax, x->sumtgt, x->sumtgt + B, m->sop_tgt, B,
                             &out->sop_sum));
  for (int b = 0; b < B; b++)
    out->sop_correct += pred[b] == tgt[b];
  out->sop_count = B;
  return MGT_OK;
}

mgt_status mgt_bert_forward(mgt_gpt *m, const int32_t *rows, mgt_bert_losses *out) {
  MGT_REQUIRE(!m->d.spec.task, "a fine-tuning model takes mgt_task_forward");
  MGT_CHECK(load_bert(m, rows));
  step_ctx s = {0, 0};
  return bert_forward(m, &s, 0, out);
}

mgt_status mgt_bert_forward_backward(mgt_gpt *m, const int32_t *rows, uint64_t sample_base,
                                     float lm_scale, float sop_scale, int accumulate, int sync_dp,
                                     mgt_bert_losses *out) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, B = d->B;
  MGT_REQUIRE(!d->spec.task, "a fine-tuning model takes mgt_task_forward_backward");
  MGT_CHECK(load_bert(m, rows));
  step_ctx s = {sample_base, 1};
  MGT_CHECK(bert_forward(m, &s, 1, out));
  const int M = m->n_masked;
  const int acc = accumulate;
  float *h[H_LM], *gh[H_LM];
  gpt_views(m, m->w, m->ix.lm, H_LM, h);
  gpt_views(m, m->g, m->ix.lm, H_LM, gh);
  const float *wte = m->w + m->params[m->ix.wte].offset;
  float *gwte = m->g + m->params[m->ix.wte].offset;
  float *dlnf = m->dtmp; /* the trunk's backward starts from here */
  MGT_CHECK(mgt_be_zero(be, dlnf, sizeof(float) * (size_t)N * C));
  if (M > 0) {
    MGT_CHECK(mgt_tp_xent_backward(&m->tp, &m->xent, m->logits, m->targets, M, d->Vl, d->nv, d->v0,
                                   lm_scale));
    MGT_CHECK(mgt_tp_column_backward(&m->tp, m->dlm, gwte, gh[H_BIAS], m->logits, m->lm_ln, wte, M,
                                     C, d->Vl, acc));
    MGT_CHECK(mgt_be_zero(be, m->dlm2, sizeof(float) * (size_t)M * C));
    const float *gain;
    MGT_CHECK(gpt_norm_gain(m, h[H_LN_W], &gain));
    MGT_CHECK(mgt_be_layernorm_backward(be, m->dlm2, gh[H_LN_W], gh[H_LN_B], m->dlm, m->lm_act,
                                        gain, m->lm_mean, m->lm_rstd, M, C, acc));
    MGT_CHECK(
        mgt_be_act_backward(be, MGT_ACT_GELU_ERF, m->dlm2, m->dlm2, m->lm_pre, (size_t)M * C));
    MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dlm, gh[H_DENSE_W], gh[H_DENSE_B], m->dlm2, m->lm_in,
                                  h[H_DENSE_W], M, C, C, acc));
    MGT_CHECK(mgt_be_scatter_add_rows(be, dlnf, m->dlm, m->lm_rows, M, C));
  } else if (!acc) { /* nothing masked: the head's gradients are zero, not stale */
    for (int k = 0; k < H_LM; k++)
      MGT_CHECK(mgt_be_zero(be, gh[k], sizeof(float) * m->params[m->ix.lm + k].numel));
    MGT_CHECK(mgt_be_zero(be, gwte, sizeof(float) * m->params[m->ix.wte].numel));
  }
  if (d->spec.head == MGT_HEAD_MLM_SOP) {
    float *q[Q_POOL], *gq[Q_POOL];
    gpt_views(m, m->w, m->ix.pool, Q_POOL, q);
    gpt_views(m, m->g, m->ix.pool, Q_POOL, gq);
    MGT_CHECK(mgt_be_xent_backward(be, m->sop_logits, m->sop_xent.sumtgt, m->sop_tgt, B, 2, 2, 0,
                                   sop_scale));
    MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool, gq[Q_BIN_W], gq[Q_BIN_B], m->sop_logits,
                                  m->pooled, q[Q_BIN_W], B, C, 2, acc));
    MGT_CHECK(
        mgt_be_act_backward(be, MGT_ACT_TANH, m->dpool, m->dpool, m->pool_pre, (size_t)B * C));
    MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool2, gq[Q_POOL_W], gq[Q_POOL_B], m->dpool,
                                  m->pool_in, q[Q_POOL_W], B, C, C, acc));
    MGT_CHECK(mgt_be_scatter_add_rows(be, dlnf, m->dpool2, m->cls_rows, B, C));
  }
  return gpt_trunk_backward(m, &s, acc, sync_dp && m->grid->dp > 1, 0);
}

static mgt_dropout head_dropout(const mgt_gpt *m, const step_ctx *s) {
  return gpt_dropout_site(m, s->train ? m->run.hidden_dropout : 0, s->sample_base, 0xFFFE,
                          MGT_DROPOUT_HEAD);
}

/* The trunk, the pooled [CLS] of every row (tanh, dropout) and the task head: logits (B, K)
   read as (examples, rows * K). The loss and predictions of the first n examples. */
static mgt_status task_forward(mgt_gpt *m, const step_ctx *s, int n, int keep_exp, int32_t *pred,
                               mgt_task_result *out) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, B = d->B, W = d->spec.rows * d->spec.logits;
  memset(out, 0, sizeof *out);
  MGT_CHECK(gpt_trunk_forward(m, s));
  float *q[Q_POOL];
  gpt_views(m, m->w, m->ix.pool, Q_POOL, q);
  MGT_CHECK(mgt_be_gather_rows(be, m->pool_in, m->lnf, m->cls_rows, B, C));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->pool_pre, m->pool_in, q[Q_POOL_W], NULL, B, C, C));
  MGT_CHECK(mgt_be_bias_act_forward(be, MGT_ACT_TANH, m->pooled, m->pool_pre, q[Q_POOL_B], B, C));
  const mgt_dropout dh = head_dropout(m, s);
  MGT_CHECK(mgt_be_dropout_forward(be, m->pooled, m->pooled, NULL, (size_t)B * C, (size_t)C, &dh));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->sop_logits, m->pooled, q[Q_BIN_W], q[Q_BIN_B], B, C,
                                  d->spec.logits));
  if (n == 0) return MGT_OK;
  int32_t *p = m->host_b, *tgt = m->host_b + B;
  float *val = (float *)(m->host_b + 2 * B);
  const mgt_tp_xent *x = &m->sop_xent;
  MGT_CHECK(mgt_be_argmax(be, m->sop_logits, n, W, W, val, p));
  MGT_CHECK(mgt_be_download(be, tgt, m->sop_tgt, sizeof(int32_t) * (size_t)n));
  MGT_CHECK(mgt_be_xent_max(be, x->rowmax, m->sop_logits, n, W, W));
  MGT_CHECK(mgt_be_xent_sumexp(be, x->sumtgt, x->sumtgt + n, m->sop_logits, x->rowmax, m->sop_tgt,
                               n, W, W, 0, keep_exp));
  MGT_CHECK(mgt_be_xent_loss(be, x->losses, x->rowmax, x->sumtgt, x->sumtgt + n, m->sop_tgt, n,
                             &out->loss_sum));
  for (int g = 0; g < n; g++) {
    out->correct += p[g] == tgt[g];
    if (pred) pred[g] = p[g];
  }
  out->count = n;
  return MGT_OK;
}

static mgt_status check_task(const mgt_gpt *m) {
  MGT_REQUIRE(m->d.spec.task, "the model has no fine-tuning head (--task)");
  return MGT_OK;
}

mgt_status mgt_task_forward(mgt_gpt *m, const int32_t *rows, int n, int32_t *pred,
                            mgt_task_result *out) {
  MGT_CHECK(check_task(m));
  MGT_REQUIRE(n >= 0 && n <= m->d.B / m->d.spec.rows, "%d examples in a micro-batch of %d", n,
              m->d.B / m->d.spec.rows);
  MGT_CHECK(load_bert(m, rows));
  step_ctx s = {0, 0};
  return task_forward(m, &s, n, 0, pred, out);
}

mgt_status mgt_task_forward_backward(mgt_gpt *m, const int32_t *rows, uint64_t example_base,
                                     float scale, int accumulate, int sync_dp,
                                     mgt_task_result *out) {
  MGT_CHECK(check_task(m));
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, B = d->B, G = d->B / d->spec.rows,
            W = d->spec.rows * d->spec.logits;
  MGT_CHECK(load_bert(m, rows));
  /* dropout streams by row, so that an example's masks do not depend on the micro-batch */
  step_ctx s = {example_base * (uint64_t)d->spec.rows, 1};
  MGT_CHECK(task_forward(m, &s, G, 1, NULL, out));
  float *q[Q_POOL], *gq[Q_POOL];
  gpt_views(m, m->w, m->ix.pool, Q_POOL, q);
  gpt_views(m, m->g, m->ix.pool, Q_POOL, gq);
  float *dlnf = m->dtmp;
  MGT_CHECK(mgt_be_zero(be, dlnf, sizeof(float) * (size_t)N * C));
  MGT_CHECK(
      mgt_be_xent_backward(be, m->sop_logits, m->sop_xent.sumtgt, m->sop_tgt, G, W, W, 0, scale));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool, gq[Q_BIN_W], gq[Q_BIN_B], m->sop_logits,
                                m->pooled, q[Q_BIN_W], B, C, d->spec.logits, accumulate));
  const mgt_dropout dh = head_dropout(m, &s);
  MGT_CHECK(mgt_be_dropout_backward(be, m->dpool, m->dpool, (size_t)B * C, (size_t)C, &dh));
  MGT_CHECK(mgt_be_act_backward(be, MGT_ACT_TANH, m->dpool, m->dpool, m->pool_pre, (size_t)B * C));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool2, gq[Q_POOL_W], gq[Q_POOL_B], m->dpool, m->pool_in,
                                q[Q_POOL_W], B, C, C, accumulate));
  MGT_CHECK(mgt_be_scatter_add_rows(be, dlnf, m->dpool2, m->cls_rows, B, C));
  return gpt_trunk_backward(m, &s, accumulate, sync_dp && m->grid->dp > 1, 0);
}

/* ---- the head interface ---- */

size_t mgt_gpt_example_ints(const mgt_gpt *m) {
  const mgt_gpt_dims *d = &m->d;
  return d->spec.input == MGT_INPUT_WINDOWS ? (size_t)d->T + 1
                                            : (size_t)d->spec.rows * mgt_bert_row_ints(d->T);
}

int mgt_gpt_head_sums(const mgt_gpt *m) {
  switch (m->d.spec.head) {
  case MGT_HEAD_CAUSAL_LM: return 1;
  case MGT_HEAD_MLM_SOP:
  case MGT_HEAD_MLM: return 3;
  case MGT_HEAD_CLASSIFY:
  case MGT_HEAD_MULTIPLE_CHOICE: break;
  }
  return 2;
}

void mgt_gpt_loss_units(const mgt_gpt *m, const int32_t *batch, int n, double units[2]) {
  const mgt_gpt_dims *d = &m->d;
  if (d->spec.head == MGT_HEAD_CAUSAL_LM) { /* the tokens with a loss */
    double k = (double)n * d->T;
    const int32_t id_mask = m->run.doc_flags ? MGT_TOKEN_ID : -1;
    for (int r = 0; r < n && (m->run.eod_mask >= 0 || m->run.doc_flags); r++)
      for (int t = 0; t < d->T; t++) {
        const int32_t *row = batch + (size_t)r * (d->T + 1);
        k -= (row[t] & id_mask) == m->run.eod_mask ||
             (m->run.doc_flags && !mgt_token_trains(row[t + 1]));
      }
    units[0] += k;
  } else if (d->spec.masked_lm) {
    units[0] += (double)mgt_bert_count_masked(batch, n, d->T);
    units[1] += n;
  } else {
    units[0] += n;
  }
}

mgt_status mgt_gpt_train_micro(mgt_gpt *m, const int32_t *batch, uint64_t first,
                               const double units[2], double loss_scale, int accumulate,
                               int sync_dp, double *sums) {
  const mgt_gpt_dims *d = &m->d;
  m->aux_loss_scale = loss_scale;
  if (d->spec.head == MGT_HEAD_CAUSAL_LM) {
    double ls = 0.0;
    MGT_CHECK(mgt_gpt_forward_backward(m, batch, first,
                                       units[0] > 0 ? (float)(loss_scale / units[0]) : 0.0f,
                                       accumulate, sync_dp, &ls));
    sums[0] += ls;
  } else if (d->spec.masked_lm) {
    mgt_bert_losses l;
    const float lm_scale = units[0] > 0 ? (float)(loss_scale / units[0]) : 0.0f,
                sop_scale = (float)(loss_scale / units[1]);
    MGT_CHECK(
        mgt_bert_forward_backward(m, batch, first, lm_scale, sop_scale, accumulate, sync_dp, &l));
    sums[0] += l.lm_sum, sums[1] += l.sop_sum, sums[2] += (double)l.sop_correct;
  } else {
    mgt_task_result r;
    MGT_CHECK(mgt_task_forward_backward(m, batch, first, (float)(loss_scale / units[0]), accumulate,
                                        sync_dp, &r));
    sums[0] += r.loss_sum, sums[1] += (double)r.correct;
  }
  return MGT_OK;
}

mgt_status mgt_gpt_eval_micro(mgt_gpt *m, const int32_t *batch, double *sums, double units[2]) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(mgt_model_has_lm(&d->spec), "a fine-tuning model is scored by mgt_task_forward");
  if (d->spec.head == MGT_HEAD_CAUSAL_LM) {
    double ls = 0.0;
    MGT_CHECK(mgt_gpt_forward(m, batch, &ls));
    sums[0] += ls;
    mgt_gpt_loss_units(m, batch, d->B, units);
    return MGT_OK;
  }
  mgt_bert_losses l;
  MGT_CHECK(mgt_bert_forward(m, batch, &l));
  sums[0] += l.lm_sum, sums[1] += l.sop_sum, sums[2] += (double)l.sop_correct;
  units[0] += (double)l.lm_count, units[1] += d->B;
  return MGT_OK;
}
