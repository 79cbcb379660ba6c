/* The transformer block, forward and backward, and the trunk around it: embeddings, the
   layers (with recomputation), the final LayerNorm; tensor and sequence parallelism inside. */
#include "mgt/gpt_impl.h"

mgt_dropout gpt_dropout_site(const mgt_gpt *m, double p, uint64_t sample_base, int layer,
                             int site) {
  mgt_dropout d = {(float)p, m->run.seed, sample_base, layer, site, 0};
  return d;
}

static layer_sites sites_of(const mgt_gpt *m, int l, const step_ctx *s) {
  double ph = s->train ? m->run.hidden_dropout : 0, pa = s->train ? m->run.attention_dropout : 0;
  layer_sites ls = {gpt_dropout_site(m, pa, s->sample_base, l, MGT_DROPOUT_ATTN),
                    gpt_dropout_site(m, ph, s->sample_base, l, MGT_DROPOUT_PROJ),
                    gpt_dropout_site(m, ph, s->sample_base, l, MGT_DROPOUT_MLP)};
  ls.proj.first = ls.mlp.first = (uint64_t)m->d.r0 * m->d.C; /* on this rank's rows */
  return ls;
}

layer_rows gpt_batch_rows(const mgt_gpt *m) {
  const layer_rows r = {m->d.B * m->d.T, m->d.Nl, m->d.sp, NULL, NULL, NULL, NULL, 0};
  return r;
}

/* The input of a column-parallel layer: this rank's rows of a LayerNorm's output, or under
   sequence parallelism every rank's, gathered into m->lnf. */
static mgt_status full_rows(mgt_gpt *m, int sp, const float *local, const float **full) {
  *full = local;
  if (!sp) return MGT_OK;
  MGT_CHECK(mgt_tp_sp_gather(&m->tp, m->lnf, local));
  *full = m->lnf;
  return MGT_OK;
}

/* A row-parallel layer's output on this rank's rows, without its bias (added by
   bias_dropout_add_ln): all-reduced into m->dtmp, or reduce-scattered into m->sp_loc. */
static mgt_status row_out(mgt_gpt *m, const layer_rows *r, float **y, const float *x,
                          const float *W, int in_l) {
  const mgt_gpt_dims *d = &m->d;
  *y = r->sp ? m->sp_loc : m->dtmp;
  if (r->sp) return mgt_tp_row_forward_sp(&m->tp, *y, m->lnf, x, W, NULL, r->N, in_l, d->C);
  return mgt_tp_row_forward(&m->tp, *y, x, W, NULL, r->N, in_l, d->C);
}

mgt_status gpt_norm_gain_n(const mgt_gpt *m, const float *w, int n, const float **gain) {
  *gain = w;
  if (!m->d.spec.norm_1p) return MGT_OK;
  MGT_CHECK(mgt_be_fill(m->be, m->gain, (size_t)n, 1.0f));
  MGT_CHECK(mgt_be_add(m->be, m->gain, w, (size_t)n)); /* 1 + w, rounded once */
  *gain = m->gain;
  return MGT_OK;
}

mgt_status gpt_norm_gain(const mgt_gpt *m, const float *w, const float **gain) {
  return gpt_norm_gain_n(m, w, m->d.C, gain);
}

/* Each row's first key, its document's first row (--reset-attention-mask), else NULL: 0. */
static const int32_t *key_first(const mgt_gpt *m) {
  return m->run.reset_attention >= 0 || m->run.doc_flags ? m->kfirst : NULL;
}

/* Each input's position when they restart after each document (--reset-position-ids), else
   NULL: row % T. */
static const int32_t *positions(const mgt_gpt *m) {
  return m->run.reset_positions >= 0 || m->run.doc_flags ? m->positions : NULL;
}

/* --qk-layernorm-full at tp > 1: each of the N rows' sums over the whole norm, of a * b (* w)
   over this rank's n columns summed over tp, into m->qks; else NULL (each norm on one rank). */
static mgt_status qk_sums(mgt_gpt *m, const float *a, int lda, const float *b, int ldb,
                          const float *w, int N, int n, const float **sums) {
  *sums = m->qks;
  if (!m->qks) return MGT_OK;
  MGT_CHECK(mgt_be_row_dots(m->be, m->qks, a, lda, b, ldb, w, N, n));
  return mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->qks, (size_t)N, MGT_SUM);
}

/* --qk-layernorm: RMSNorm over each local head's query and key of the N rows of the QKV
   projection, in place, keeping their inputs in a; --qk-layernorm-full: over all heads' queries
   and all heads' keys, each rank's heads a part of the norm. */
static mgt_status qk_norm_forward(mgt_gpt *m, float *qkv, int N, layer_acts *a, float *const *w) {
  const mgt_gpt_dims *d = &m->d;
  const float eps = (float)d->spec.norm_eps;
  const int full = d->spec.qk_norm == 2, qn = d->H * d->hd, kn = d->G * d->hd;
  const int qh = full ? 1 : d->Hl, qw = full ? d->Cl : d->hd;
  const int kh = full ? 1 : d->Gl, kw = full ? d->KVl : d->hd;
  const float *g, *sums;
  float *k = qkv + d->Cl;
  MGT_CHECK(gpt_norm_gain_n(m, w[P_QN_W], qw, &g));
  MGT_CHECK(qk_sums(m, qkv, d->QKVl, qkv, d->QKVl, NULL, N, qw, &sums));
  MGT_CHECK(mgt_be_head_rmsnorm_forward(m->be, qkv, d->QKVl, a->qn_raw, a->qn_rstd, g, N, qh, qw,
                                        eps, sums, qn));
  MGT_CHECK(gpt_norm_gain_n(m, w[P_KN_W], kw, &g));
  MGT_CHECK(qk_sums(m, k, d->QKVl, k, d->QKVl, NULL, N, kw, &sums));
  return mgt_be_head_rmsnorm_forward(m->be, k, d->QKVl, a->kn_raw, a->kn_rstd, g, N, kh, kw, eps,
                                     sums, kn);
}

/* Its backward in place on the gradient of the projection's rows. Per-head norms: the weights'
   gradients are sums over the local heads, summed over tp (each rank holds other heads) before
   they are added in, so that every rank holds the same (replicated) gradient. Full-width ones:
   each rank's weights and gradients are its heads' part. */
static mgt_status qk_norm_backward(mgt_gpt *m, float *dqkv, const layer_acts *a, float *const *w,
                                   float *const *g, int acc) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, hd = d->hd;
  float *gq = m->qkg ? m->qkg : g[P_QN_W], *gk = m->qkg ? m->qkg + hd : g[P_KN_W];
  const int a1 = m->qkg ? 0 : acc;
  const int full = d->spec.qk_norm == 2, qn = d->H * hd, kn = d->G * hd;
  const int qh = full ? 1 : d->Hl, qw = full ? d->Cl : hd;
  const int kh = full ? 1 : d->Gl, kw = full ? d->KVl : hd;
  const float *gain, *sums;
  float *dk = dqkv + d->Cl;
  MGT_CHECK(gpt_norm_gain_n(m, w[P_QN_W], qw, &gain));
  MGT_CHECK(qk_sums(m, dqkv, d->QKVl, a->qn_raw, qw, gain, N, qw, &sums));
  MGT_CHECK(mgt_be_head_rmsnorm_backward(m->be, dqkv, d->QKVl, gq, a->qn_raw, a->qn_rstd, gain, N,
                                         qh, qw, a1, sums, qn));
  MGT_CHECK(gpt_norm_gain_n(m, w[P_KN_W], kw, &gain));
  MGT_CHECK(qk_sums(m, dk, d->QKVl, a->kn_raw, kw, gain, N, kw, &sums));
  MGT_CHECK(mgt_be_head_rmsnorm_backward(m->be, dk, d->QKVl, gk, a->kn_raw, a->kn_rstd, gain, N, kh,
                                         kw, a1, sums, kn));
  if (!m->qkg) return MGT_OK;
  MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->qkg, 2 * (size_t)hd, MGT_SUM));
  for (int k = 0; k < 2; k++) {
    float *dst = g[k ? P_KN_W : P_QN_W];
    if (acc)
      MGT_CHECK(mgt_be_add(m->be, dst, m->qkg + (size_t)k * hd, (size_t)hd));
    else
      MGT_CHECK(mgt_be_copy(m->be, dst, m->qkg + (size_t)k * hd, sizeof(float) * (size_t)hd));
  }
  return MGT_OK;
}

mgt_status gpt_norm_forward(const mgt_gpt *m, float *out, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int N) {
  const float eps = (float)m->d.spec.norm_eps;
  MGT_CHECK(gpt_norm_gain(m, w, &w));
  if (m->d.spec.norm == MGT_NORM_RMSNORM)
    return mgt_be_rmsnorm_forward(m->be, out, rstd, x, w, N, m->d.C, eps);
  return mgt_be_layernorm_forward(m->be, out, mean, rstd, x, w, b, N, m->d.C, eps);
}

void gpt_final_norm(const mgt_gpt *m, float *base, float **w, float **b) {
  const mgt_param *p = &m->params[m->ix.lnf];
  *w = base + p[0].offset;
  *b = m->d.spec.norm == MGT_NORM_LAYERNORM ? base + p[1].offset : NULL;
}

/* The end of a row-parallel layer (bias_dropout_add_ln) with the next LayerNorm or RMSNorm fused
   in (one kernel per row on GPUs). */
static mgt_status residual_norm(mgt_gpt *m, float *out, float *x, const float *b, const float *res,
                                int N, size_t row, const mgt_dropout *d, float *ln, float *mean,
                                float *rstd, const float *w, const float *lb) {
  const int rms = m->d.spec.norm == MGT_NORM_RMSNORM; /* no mean: RMSNorm */
  MGT_CHECK(gpt_norm_gain(m, w, &w));
  return mgt_be_bias_dropout_add_ln(m->be, out, x, b, res, N, m->d.C, row, d, ln, rms ? NULL : mean,
                                    rstd, w, rms ? NULL : lb, (float)m->d.spec.norm_eps);
}

/* The rows of q, k and v of every local head that the attention kernels read: the kept
   projection itself, or with fewer groups than heads its groups repeated into m->qkvx. */
static mgt_status heads_qkv(mgt_gpt *m, const layer_acts *a, const float **qkv) {
  const mgt_gpt_dims *d = &m->d;
  *qkv = a->qkv;
  if (!m->qkvx) return MGT_OK;
  *qkv = m->qkvx;
  return mgt_be_kv_group(m->be, m->qkvx, a->qkv, d->B * d->T, d->Hl, d->Gl, d->hd, 0);
}

mgt_status gpt_layer_forward(mgt_gpt *m, int l, const layer_rows *r, const float *x, float *y,
                             layer_acts *a, const step_ctx *s) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = r->N, C = d->C, Cl = d->Cl, Fl = d->Fl, Nl = r->Nl, KVl = d->KVl;
  const size_t row = (size_t)d->T * C;
  float *w[P_SLOTS];
  gpt_layer_views(m, m->w, l, w);
  float *tmp; /* m->dtmp or m->sp_loc: free during forward and before backward uses it */
  const float *in;
  /* post-LN (the original BERT): the residual starts from the LayerNorm's output */
  const float *res1 = d->spec.post_ln ? a->ln1 : x;
  const layer_sites ds = sites_of(m, l, s);

  /* attention: QKV column-parallel by heads, heads local, output row-parallel; the
     LayerNorm, dropout and residual on this rank's rows (all of them without sequence
     parallelism) */
  MGT_CHECK(gpt_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w[P_LN1_W], w[P_LN1_B], Nl));
  MGT_CHECK(full_rows(m, r->sp, a->ln1, &in));
  /* the projection's rows [q | k | v] hold Gl key/value groups, kept so; with fewer groups than
     heads the attention reads them repeated for their heads (m->qkvx), decoding reads them */
  float *qg = a->qkv;
  MGT_CHECK(mgt_tp_column_forward(&m->tp, qg, in, w[P_QKV_W], w[P_QKV_B], N, C, d->QKVl));
  if (d->spec.qk_norm) MGT_CHECK(qk_norm_forward(m, qg, N, a, w));
  if (m->inv_freq && !r->kc) /* q and k of every local head turned by their position */
    MGT_CHECK(mgt_be_rope(be, qg, N, d->T, 0, positions(m), d->Hl + d->Gl, d->hd, d->QKVl,
                          m->inv_freq, 0));
  if (r->kc) { /* decoding: each row's key and value join its cache, which its query reads */
    const size_t bytes = sizeof(float) * (size_t)KVl;
    for (int i = 0; i < N; i++) {
      float *qi = qg + (size_t)i * d->QKVl;
      const size_t base = r->slot ? (size_t)r->slot[i] * r->slot_stride : 0;
      float *kc = r->kc + base, *vc = r->vc + base;
      const size_t at = (size_t)r->pos[i] * KVl;
      if (m->inv_freq)
        MGT_CHECK(mgt_be_rope(be, qi, 1, 1, r->pos[i], NULL, d->Hl + d->Gl, d->hd, d->QKVl,
                              m->inv_freq, 0));
      MGT_CHECK(mgt_be_copy(be, kc + at, qi + Cl, bytes));
      MGT_CHECK(mgt_be_copy(be, vc + at, qi + Cl + KVl, bytes));
      MGT_CHECK(mgt_be_attention_decode(be, a->atty + (size_t)i * Cl, qi, kc, vc, r->pos[i] + 1,
                                        d->Hl, d->Gl, d->hd));
    }
  } else {
    const float *qkv;
    MGT_CHECK(heads_qkv(m, a, &qkv));
    if (m->rp.flash)
      MGT_CHECK(mgt_be_flash_attention_forward(be, a->atty, a->lse, qkv, d->B, d->T, d->Hl, d->hd,
                                               d->tp_rank * d->Hl, m->keylen, key_first(m),
                                               &ds.attn));
    else
      MGT_CHECK(mgt_be_attention_forward(be, a->atty, a->P, qkv, d->B, d->T, d->Hl, d->hd,
                                         d->tp_rank * d->Hl, d->H, m->keylen, key_first(m),
                                         &ds.attn, m->att_scratch));
  }
  /* the projection's bias, dropout, residual and the MLP's LayerNorm in one pass */
  MGT_CHECK(row_out(m, r, &tmp, a->atty, w[P_PROJ_W], Cl));
  MGT_CHECK(residual_norm(m, a->res_mid, tmp, w[P_PROJ_B], res1, Nl, row, &ds.proj, a->ln2,
                          a->ln2_mean, a->ln2_rstd, w[P_LN2_W], w[P_LN2_B]));

  /* MLP: first linear column-parallel with GeLU or SwiGLU local, second row-parallel; or the
     Mixture-of-Experts, its output reduced as the row-parallel layer's */
  MGT_CHECK(full_rows(m, r->sp, a->ln2, &in));
  if (mgt_model_is_moe_layer(&d->spec, l)) {
    /* rows that join a cache are decoded: no capacity, so that a sequence's experts never
       depend on the others beside it (as Hugging Face's and vLLM's inference) */
    MGT_CHECK(gpt_moe_forward(m, l, N, in, a, m->dtmp, r->kc != NULL));
    tmp = m->dtmp;
    if (r->sp)
      MGT_CHECK(mgt_tp_sp_scatter(&m->tp, tmp = m->sp_loc, m->dtmp));
    else if (d->tp > 1)
      MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->dtmp, (size_t)N * C, MGT_SUM));
  } else if (d->spec.mlp == MGT_MLP_SWIGLU) { /* outputs [gate | up] of this rank's Fl columns */
    MGT_CHECK(mgt_tp_column_forward(&m->tp, a->fch, in, w[P_FC_W], w[P_FC_B], N, C, d->Fo));
    MGT_CHECK(mgt_be_swiglu_forward(be, a->fch_gelu, a->fch, N, Fl));
  } else
    MGT_CHECK(mgt_tp_column_forward_gelu(&m->tp, a->fch, a->fch_gelu, in, w[P_FC_W], w[P_FC_B], N,
                                         C, Fl));
  if (!mgt_model_is_moe_layer(&d->spec, l))
    MGT_CHECK(row_out(m, r, &tmp, a->fch_gelu, w[P_FCP_W], Fl));
  MGT_CHECK(mgt_be_bias_dropout_add_ln(be, y, tmp, w[P_FCP_B],
                                       d->spec.post_ln ? a->ln2 : a->res_mid, Nl, C, row, &ds.mlp,
                                       NULL, NULL, NULL, NULL, NULL, 0.0f));
  return MGT_OK;
}

mgt_status gpt_trunk_forward(mgt_gpt *m, const step_ctx *s) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, Nl = d->Nl;
  const float *wte = m->w + m->params[m->ix.wte].offset;

  MGT_CHECK(mgt_ddp_weights_ready(
      m->ddp, d->L + 1)); /* buckets: 0 final LayerNorm and heads, L - l layer l */
  if (d->sp) /* the lookup's sum over the vocabulary shards, reduce-scattered to the rows */
    MGT_CHECK(
        mgt_tp_embedding_forward_sp(&m->tp, m->res[0], m->lnf, m->inputs, wte, N, C, d->v0, d->Vl));
  else
    MGT_CHECK(mgt_tp_embedding_forward(&m->tp, m->res[0], m->inputs, wte, N, C, d->v0, d->Vl));
  if (m->ix.wpe >= 0) /* a table of positions; rotary ones turn q and k in each layer */
    MGT_CHECK(mgt_be_add_position(be, m->res[0], m->w + m->params[m->ix.wpe].offset, Nl,
                                  d->r0 % d->T, d->T, C,
                                  positions(m) ? m->positions + d->r0 : NULL));
  if (m->ix.tte >= 0) { /* two rows, replicated: a local lookup added in */
    const float *tte = m->w + m->params[m->ix.tte].offset;
    MGT_CHECK(mgt_be_embedding_forward(be, m->dtmp, m->types + d->r0, tte, Nl, C, 0, 2));
    MGT_CHECK(mgt_be_add(be, m->res[0], m->dtmp, (size_t)Nl * C));
  }
  mgt_dropout de = gpt_dropout_site(m, s->train ? m->run.hidden_dropout : 0, s->sample_base, 0xFFFF,
                                    MGT_DROPOUT_EMBED);
  de.first = (uint64_t)d->r0 * C;
  MGT_CHECK(mgt_be_dropout_forward(be, m->res[0], m->res[0], NULL, (size_t)Nl * C, (size_t)d->T * C,
                                   &de));

  const layer_rows rows = gpt_batch_rows(m);
  for (int l = 0; l < d->L; l++) {
    MGT_CHECK(mgt_ddp_weights_ready(m->ddp, d->L - l));
    MGT_CHECK(gpt_layer_forward(m, l, &rows, m->res[l], m->res[l + 1], gpt_acts_of(m, l), s));
  }
  MGT_CHECK(mgt_ddp_weights_ready(m->ddp, 0));
  float *lnw, *lnb;
  gpt_final_norm(m, m->w, &lnw, &lnb);
  /* the heads see every row: under sequence parallelism they are gathered into m->lnf */
  MGT_CHECK(gpt_norm_forward(m, d->sp ? m->sp_loc : m->lnf, m->lnf_mean, m->lnf_rstd, m->res[d->L],
                             lnw, lnb, Nl));
  if (d->sp) MGT_CHECK(mgt_tp_sp_gather(&m->tp, m->lnf, m->sp_loc));
  return MGT_OK;
}

/* Post-LN: the residual gradient belongs to the LayerNorm's output, not its input; dres is
   then rebuilt by the LayerNorm backward alone. */
static mgt_status post_ln_residual(mgt_gpt *m, float *dln, float *dres) {
  if (!m->d.spec.post_ln) return MGT_OK;
  const size_t n = (size_t)m->d.Nl * m->d.C;
  MGT_CHECK(mgt_be_add(m->be, dln, dres, n));
  return mgt_be_zero(m->be, dres, n * sizeof(float));
}

/* A LayerNorm's or RMSNorm's backward on this rank's rows (db: LayerNorm's). Under sequence
   parallelism its weight and bias gradients are partial sums over the rows, summed over tp_comm
   before they are added in, so that every rank holds the same (replicated) gradient at all
   times. */
static mgt_status ln_backward(mgt_gpt *m, float *dx, float *dw, float *db, const float *dout,
                              const float *x, const float *w, const float *mean, const float *rstd,
                              int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, rms = d->spec.norm == MGT_NORM_RMSNORM;
  float *gw = d->sp ? m->lng : dw, *gb = d->sp ? m->lng + C : db;
  const int a = d->sp ? 0 : acc;
  MGT_CHECK(gpt_norm_gain(m, w, &w)); /* d/dw of (1 + w) is d/dgain: the kernels' output */
  if (rms)
    MGT_CHECK(mgt_be_rmsnorm_backward(be, dx, gw, dout, x, w, rstd, d->Nl, C, a));
  else
    MGT_CHECK(mgt_be_layernorm_backward(be, dx, gw, gb, dout, x, w, mean, rstd, d->Nl, C, a));
  if (!d->sp) return MGT_OK;
  const int n = rms ? 1 : 2; /* the weight's and the bias's sums */
  MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->lng, (size_t)n * C, MGT_SUM));
  for (int k = 0; k < n; k++) {
    float *dst = k ? db : dw;
    if (acc)
      MGT_CHECK(mgt_be_add(be, dst, m->lng + (size_t)k * C, (size_t)C));
    else
      MGT_CHECK(mgt_be_copy(be, dst, m->lng + (size_t)k * C, sizeof(float) * (size_t)C));
  }
  return MGT_OK;
}

/* The gradient of a row-parallel layer's output for every row: dy itself, or under sequence
   parallelism every rank's rows of it gathered into m->dtmp. */
static mgt_status full_grad(mgt_gpt *m, const float *dy, const float **full) {
  *full = dy;
  if (!m->d.sp) return MGT_OK;
  MGT_CHECK(mgt_tp_sp_gather(&m->tp, m->dtmp, dy));
  *full = m->dtmp;
  return MGT_OK;
}

/* A column-parallel layer's backward whose input gradient lands on this rank's rows (*dx:
   m->dtmp all-reduced, or m->sp_loc reduce-scattered); x_local is this rank's rows of its
   input, gathered again under sequence parallelism (m->lnf). */
static mgt_status column_back(mgt_gpt *m, float **dx, float *dW, float *db, const float *dy,
                              const float *x_local, const float *W, int out_l, int acc) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T;
  const float *x;
  MGT_CHECK(full_rows(m, d->sp, x_local, &x));
  *dx = d->sp ? m->sp_loc : m->dtmp;
  if (d->sp)
    return mgt_tp_column_backward_sp(&m->tp, *dx, m->dtmp, dW, db, dy, x, W, N, d->C, out_l, acc);
  return mgt_tp_column_backward(&m->tp, *dx, dW, db, dy, x, W, N, d->C, out_l, acc);
}

static mgt_status layer_backward(mgt_gpt *m, int l, const step_ctx *s, int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, Cl = d->Cl, Fl = d->Fl;
  const size_t nl = (size_t)d->Nl * C, row = (size_t)d->T * C;
  float *w[P_SLOTS], *g[P_SLOTS];
  gpt_layer_views(m, m->w, l, w);
  gpt_layer_views(m, m->g, l, g);
  layer_acts *a = gpt_acts_of(m, l);
  const float *x = m->res[l];
  int first;
  if (gpt_chunk_ending_at(&m->rp, l, d->L, &first)) { /* its chunk's forward, from its input */
    const layer_rows rows = gpt_batch_rows(m);
    for (int k = first; k <= l; k++)
      MGT_CHECK(gpt_layer_forward(m, k, &rows, m->res[k], m->res[k + 1], gpt_acts_of(m, k), s));
  }
  const layer_sites ds = sites_of(m, l, s);
  float *dres = m->dres, *dloc = d->sp ? m->sp_loc : m->dtmp, *dln;
  const float *dy;

  /* MLP: y = res_mid + dropout(row(gelu(column(ln2(res_mid))))); the row-parallel bias
     gradient comes from every row, as without sequence parallelism */
  MGT_CHECK(mgt_be_dropout_backward(be, dloc, dres, nl, row, &ds.mlp));
  MGT_CHECK(full_grad(m, dloc, &dy));
  if (mgt_model_is_moe_layer(&d->spec, l)) { /* its input's gradient reduced as a column's */
    const float *in;
    MGT_CHECK(full_rows(m, d->sp, a->ln2, &in));
    MGT_CHECK(gpt_moe_backward(m, l, in, dy, a, m->moe_dx, acc));
    dln = m->moe_dx;
    if (d->sp)
      MGT_CHECK(mgt_tp_sp_scatter(&m->tp, dln = m->sp_loc, m->moe_dx));
    else if (d->tp > 1)
      MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->moe_dx, (size_t)N * C, MGT_SUM));
  } else if (d->spec.mlp == MGT_MLP_SWIGLU) {
    MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dact, g[P_FCP_W], g[P_FCP_B], dy, a->fch_gelu,
                                  w[P_FCP_W], N, Fl, C, acc));
    MGT_CHECK(mgt_be_swiglu_backward(be, m->dfch, m->dact, a->fch, N, Fl));
    MGT_CHECK(column_back(m, &dln, g[P_FC_W], g[P_FC_B], m->dfch, a->ln2, w[P_FC_W], d->Fo, acc));
  } else {
    /* the GeLU's gradient and the first layer's bias gradient fused into the dx GEMM */
    MGT_CHECK(mgt_tp_row_backward_gelu(&m->tp, m->dfch, g[P_FCP_W], g[P_FCP_B], g[P_FC_B], dy,
                                       a->fch_gelu, w[P_FCP_W], a->fch, N, Fl, C, acc));
    MGT_CHECK(column_back(m, &dln, g[P_FC_W], NULL, m->dfch, a->ln2, w[P_FC_W], Fl, acc));
  }
  MGT_CHECK(post_ln_residual(m, dln, dres));
  MGT_CHECK(ln_backward(m, dres, g[P_LN2_W], g[P_LN2_B], dln, a->res_mid, w[P_LN2_W], a->ln2_mean,
                        a->ln2_rstd, acc));

  /* attention: res_mid = x + dropout(row(attention(column(ln1(x))))) */
  MGT_CHECK(mgt_be_dropout_backward(be, dloc, dres, nl, row, &ds.proj));
  MGT_CHECK(full_grad(m, dloc, &dy));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->datty, g[P_PROJ_W], g[P_PROJ_B], dy, a->atty,
                                w[P_PROJ_W], N, Cl, C, acc));
  const float *qkv; /* repeated again for the heads: other layers used m->qkvx since */
  MGT_CHECK(heads_qkv(m, a, &qkv));
  if (m->rp.flash) /* the probabilities rebuilt tile by tile inside */
    MGT_CHECK(mgt_be_flash_attention_backward(be, m->dqkv, m->datty, qkv, a->atty, a->lse, d->B,
                                              d->T, d->Hl, d->hd, d->tp_rank * d->Hl, m->keylen,
                                              key_first(m), &ds.attn));
  else {
    if (m->rp.selective) /* the probabilities again; atty is rewritten with the same values */
      MGT_CHECK(mgt_be_attention_forward(be, a->atty, a->P, qkv, d->B, d->T, d->Hl, d->hd,
                                         d->tp_rank * d->Hl, d->H, m->keylen, key_first(m),
                                         &ds.attn, m->att_scratch));
    MGT_CHECK(mgt_be_attention_backward(be, m->dqkv, m->datty, qkv, a->P, d->B, d->T, d->Hl, d->hd,
                                        d->tp_rank * d->Hl, d->H, m->keylen, key_first(m), &ds.attn,
                                        m->att_scratch));
  }
  float *dqg = m->dqkv;
  if (m->qkvx) { /* each group's gradient the sum of its heads', into the free m->qkvx */
    MGT_CHECK(mgt_be_kv_group(be, m->qkvx, m->dqkv, N, d->Hl, d->Gl, d->hd, 1));
    dqg = m->qkvx;
  }
  if (m->inv_freq) /* the rotation's transpose: back to the gradient of the projections */
    MGT_CHECK(mgt_be_rope(be, dqg, N, d->T, 0, positions(m), d->Hl + d->Gl, d->hd, d->QKVl,
                          m->inv_freq, 1));
  if (d->spec.qk_norm) MGT_CHECK(qk_norm_backward(m, dqg, a, w, g, acc));
  MGT_CHECK(column_back(m, &dln, g[P_QKV_W], g[P_QKV_B], dqg, a->ln1, w[P_QKV_W], d->QKVl, acc));
  MGT_CHECK(post_ln_residual(m, dln, dres));
  MGT_CHECK(ln_backward(m, dres, g[P_LN1_W], g[P_LN1_B], dln, x, w[P_LN1_W], a->ln1_mean,
                        a->ln1_rstd, acc));
  return MGT_OK;
}

mgt_status gpt_trunk_backward(mgt_gpt *m, const step_ctx *s, int accumulate, int dp_sync,
                              int local_ready) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C;
  const size_t nl = (size_t)d->Nl * C;
  float *gwte = m->g + m->params[m->ix.wte].offset,
        *gwpe = m->ix.wpe >= 0 ? m->g + m->params[m->ix.wpe].offset : NULL;
  float *lnw, *lnb, *glnw, *glnb;
  gpt_final_norm(m, m->w, &lnw, &lnb);
  gpt_final_norm(m, m->g, &glnw, &glnb);
  const float *dlnf = m->dtmp;
  if (d->sp) {
    if (!local_ready)
      MGT_CHECK(mgt_be_copy(be, m->sp_loc, m->dtmp + (size_t)d->r0 * C, sizeof(float) * nl));
    dlnf = m->sp_loc;
  }
  MGT_CHECK(mgt_be_zero(be, m->dres, sizeof(float) * nl));
  MGT_CHECK(ln_backward(m, m->dres, glnw, glnb, dlnf, m->res[d->L], lnw, m->lnf_mean, m->lnf_rstd,
                        accumulate));
  mgt_ddp_begin(m->ddp);
  if (dp_sync) MGT_CHECK(mgt_ddp_start_bucket(m->ddp, 0));

  for (int l = d->L - 1; l >= 0; l--) {
    MGT_CHECK(layer_backward(m, l, s, accumulate));
    if (dp_sync) {
      MGT_CHECK(mgt_ddp_progress(m->ddp));
      MGT_CHECK(mgt_ddp_start_bucket(m->ddp, d->L - l));
    }
  }
  mgt_dropout de =
      gpt_dropout_site(m, m->run.hidden_dropout, s->sample_base, 0xFFFF, MGT_DROPOUT_EMBED);
  de.first = (uint64_t)d->r0 * C;
  MGT_CHECK(mgt_be_dropout_backward(be, m->dres, m->dres, nl, (size_t)d->T * C, &de));
  /* every row's gradient (gathered under sequence parallelism): the embedding gradients are
     then complete on each rank, as without it */
  const float *demb;
  MGT_CHECK(full_grad(m, m->dres, &demb));
  /* the tied LM head writes the word-embedding gradient first; a task model has no LM head, an
     untied one writes its own */
  if ((d->spec.task || d->spec.untied) && !accumulate)
    MGT_CHECK(mgt_be_zero(be, gwte, sizeof(float) * m->params[m->ix.wte].numel));
  MGT_CHECK(mgt_be_embedding_backward(be, gwte, gwpe, demb, m->inputs, positions(m), d->B, d->T, C,
                                      d->v0, d->Vl, accumulate));
  if (m->ix.tte >= 0) {
    float *gtte = m->g + m->params[m->ix.tte].offset;
    if (!accumulate) MGT_CHECK(mgt_be_zero(be, gtte, sizeof(float) * 2 * (size_t)C));
    MGT_CHECK(mgt_be_embedding_backward(be, gtte, NULL, demb, m->types, NULL, d->B, d->T, C, 0, 2,
                                        accumulate));
  }
  if (dp_sync) {
    MGT_CHECK(mgt_ddp_start_bucket(m->ddp, d->L + 1));
    MGT_CHECK(mgt_ddp_finish(m->ddp));
  }
  return MGT_OK;
}
