/* The parameter table: dimensions, the tensors of a configuration in flat-buffer order with their
   shards and initialization, FLOPs and parameter counts, and the model as a state list. */
#include "mgt/gpt_impl.h"

void mgt_gpt_dims_from_config(const mgt_config *c, int tp, int tp_rank, mgt_gpt_dims *d) {
  memset(d, 0, sizeof *d);
  d->desc = mgt_model_of(c);
  d->L = c->num_layers;
  d->C = c->hidden_size;
  d->H = c->num_attention_heads;
  d->F = c->ffn_hidden_size;
  d->T = c->seq_length;
  d->maxpos = c->max_position_embeddings;
  d->V = c->vocab_size;
  d->Vp = (int)mgt_config_padded_vocab(c, tp);
  d->B = c->micro_batch_size * d->desc.rows; /* rows: RACE encodes an example in 4 */
  d->tp = tp;
  d->tp_rank = tp_rank;
  d->hd = d->C / d->H;
  d->Hl = d->H / tp;
  d->Cl = d->Hl * d->hd;
  d->Fl = d->F / tp;
  d->Vl = d->Vp / tp;
  d->v0 = tp_rank * d->Vl;
  int nv = d->V - d->v0;
  d->nv = nv < 0 ? 0 : (nv > d->Vl ? d->Vl : nv);
  /* 64 MiB of logits at a time unless told: GPT-2's 50k vocabulary at B x T = 8 x 1024 would
     hold 1.6 GB of them */
  const int N = d->B * d->T, want = c->logits_chunk_rows > 0 ? c->logits_chunk_rows
                                                             : (int)((16u << 20) / (unsigned)d->Vl);
  d->logit_rows = want < 1 ? 1 : (want > N ? N : want);
  d->act16 = c->bf16 || c->fp16 ? (c->device == MGT_DEVICE_CUDA ? 2 : (int)sizeof(float)) : 0;
  d->sp = c->sequence_parallel && tp > 1;
  d->Nl = d->sp ? d->B * d->T / tp : d->B * d->T;
  d->r0 = d->sp ? tp_rank * d->Nl : 0;
}

typedef struct param_spec {
  const char *name;
  int ndim;
  int64_t local[3], full[3];
  int split_dim;
  int64_t offset;
  float std, value;
  int decay;
} param_spec;

static void add_param(mgt_param *out, int *n, size_t *off, uint32_t id, const param_spec *s,
                      const char *prefix) {
  mgt_param p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "%s%s", prefix, s->name);
  p.shard.ndim = s->ndim;
  size_t numel = 1;
  for (int i = 0; i < s->ndim; i++) {
    p.shard.shape[i] = s->local[i];
    p.shard.full[i] = s->full[i];
    numel *= (size_t)s->local[i];
  }
  p.shard.split_dim = s->split_dim;
  p.shard.offset = s->offset;
  p.numel = numel;
  p.offset = *off;
  p.id = id;
  p.init_std = s->std;
  p.init_value = s->value;
  p.decay = s->decay;
  p.replicated = s->split_dim < 0;
  if (out) out[*n] = p;
  (*n)++;
  *off += round16(numel);
}

void gpt_build_params(const mgt_config *c, const mgt_gpt_dims *d, mgt_param *out, int *n,
                      size_t *total, param_index *ix) {
  *n = 0;
  param_index pi = {0, 1, -1, 2, -1, -1, -1, -1};
  size_t off = 0;
  const float std = (float)c->init_method_std;
  const float out_std = std / sqrtf(2.0f * (float)d->L); /* scaled output projections */
  const int64_t C = d->C, Cl = d->Cl, Fl = d->Fl, F = d->F;
  const int r = d->tp_rank;
  param_spec wte = {
      "embedding.word_embeddings.weight", 2, {d->Vl, C}, {d->V, C}, 0, d->v0, std, 0, 1};
  param_spec wpe = {
      "embedding.position_embeddings.weight", 2, {d->maxpos, C}, {d->maxpos, C}, -1, 0, std, 0, 1};
  add_param(out, n, &off, 0xFFFF0000u, &wte, "");
  pi.wpe = -1; /* rotary positions have no table */
  if (d->desc.pos == MGT_POS_LEARNED) {
    pi.wpe = *n;
    add_param(out, n, &off, 0xFFFF0001u, &wpe, "");
  }
  if (d->desc.token_types) {
    param_spec tte = {"embedding.tokentype_embeddings.weight", 2, {2, C}, {2, C}, -1, 0, std, 0, 1};
    pi.tte = *n;
    add_param(out, n, &off, 0xFFFF0004u, &tte, "");
  }
  pi.first_layer = *n;
  for (int l = 0; l < d->L; l++) {
    param_spec s[P_PER_LAYER] = {
        {"input_layernorm.weight", 1, {C}, {C}, -1, 0, 0, 1, 0},
        {"input_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"attention.qkv.weight", 3, {3, Cl, C}, {3, C, C}, 1, r * Cl, std, 0, 1},
        {"attention.qkv.bias", 2, {3, Cl}, {3, C}, 1, r * Cl, 0, 0, 0},
        {"attention.dense.weight", 2, {C, Cl}, {C, C}, 1, r * Cl, out_std, 0, 1},
        {"attention.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"post_attention_layernorm.weight", 1, {C}, {C}, -1, 0, 0, 1, 0},
        {"post_attention_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"mlp.dense_h_to_4h.weight", 2, {Fl, C}, {F, C}, 0, r * Fl, std, 0, 1},
        {"mlp.dense_h_to_4h.bias", 1, {Fl}, {F}, 0, r * Fl, 0, 0, 0},
        {"mlp.dense_4h_to_h.weight", 2, {C, Fl}, {C, F}, 1, r * Fl, out_std, 0, 1},
        {"mlp.dense_4h_to_h.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
    };
    char prefix[32];
    snprintf(prefix, sizeof prefix, "layers.%d.", l);
    for (int k = 0; k < P_PER_LAYER; k++)
      add_param(out, n, &off, (uint32_t)l * 16u + (uint32_t)k, &s[k], prefix);
  }
  param_spec lnw = {"final_layernorm.weight", 1, {C}, {C}, -1, 0, 0, 1, 0};
  param_spec lnb = {"final_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0};
  pi.lnf = *n;
  add_param(out, n, &off, 0xFFFF0002u, &lnw, "");
  add_param(out, n, &off, 0xFFFF0003u, &lnb, "");
  if (d->desc.untied) { /* vocabulary-parallel as the word embeddings (Megatron's name) */
    param_spec o = {"output_layer.weight", 2, {d->Vl, C}, {d->V, C}, 0, d->v0, std, 0, 1};
    pi.out = *n;
    add_param(out, n, &off, 0xFFFF0030u, &o, "");
  }
  if (d->desc.masked_lm) {
    param_spec lm[H_LM] = {
        {"lm_head.dense.weight", 2, {C, C}, {C, C}, -1, 0, std, 0, 1},
        {"lm_head.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"lm_head.layernorm.weight", 1, {C}, {C}, -1, 0, 0, 1, 0},
        {"lm_head.layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"lm_head.bias", 1, {d->Vl}, {d->V}, 0, d->v0, 0, 0, 0}, /* split like the vocabulary */
    };
    pi.lm = *n;
    for (int k = 0; k < H_LM; k++)
      add_param(out, n, &off, 0xFFFF0010u + (uint32_t)k, &lm[k], "");
  }
  if (d->desc.pooler) { /* a task head replaces the SOP head (Megatron's names) */
    const char *head = d->desc.head == MGT_HEAD_MULTIPLE_CHOICE ? "multichoice_head"
                       : d->desc.head == MGT_HEAD_CLASSIFY      ? "classification_head"
                                                                : "binary_head";
    char hw[48], hb[48];
    snprintf(hw, sizeof hw, "%s.weight", head);
    snprintf(hb, sizeof hb, "%s.bias", head);
    const int64_t K = d->desc.logits;
    param_spec q[Q_POOL] = {
        {"pooler.dense.weight", 2, {C, C}, {C, C}, -1, 0, std, 0, 1},
        {"pooler.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {hw, 2, {K, C}, {K, C}, -1, 0, std, 0, 1},
        {hb, 1, {K}, {K}, -1, 0, 0, 0, 0},
    };
    pi.pool = *n;
    for (int k = 0; k < Q_POOL; k++)
      add_param(out, n, &off, 0xFFFF0020u + (uint32_t)k, &q[k], "");
  }
  *total = off;
  if (ix) *ix = pi;
}

int gpt_replica_of(const mgt_param *p, int tp_rank, int dp_rank) {
  return p->replicated && tp_rank != 0 ? MGT_REPLICA_DUPLICATE : dp_rank;
}

/* Parameters of the LM head (without the tied output) and of the pooler with the SOP head. */
static int64_t lm_head_params(const mgt_config *c) {
  const mgt_model_desc d = mgt_model_of(c);
  int64_t C = c->hidden_size;
  return d.masked_lm ? C * C + 3 * C + c->vocab_size : 0;
}

static int64_t pool_params(const mgt_config *c) {
  const mgt_model_desc d = mgt_model_of(c);
  const int64_t C = c->hidden_size, K = d.logits;
  return d.pooler ? C * C + C + K * C + K : 0;
}

int64_t mgt_gpt_logical_params(const mgt_config *cfg) {
  int64_t C = cfg->hidden_size, F = cfg->ffn_hidden_size,
          P = cfg->position_embedding_type == MGT_POS_LEARNED ? cfg->max_position_embeddings : 0;
  int64_t layer = 4 * C + 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C;
  int64_t tte = pool_params(cfg) ? 2 * C : 0;
  const int64_t out = cfg->untie_embeddings_and_output_weights ? (int64_t)cfg->vocab_size * C : 0;
  return (int64_t)cfg->vocab_size * C + P * C + tte + cfg->num_layers * layer + 2 * C + out +
         lm_head_params(cfg) + pool_params(cfg);
}

void mgt_gpt_rope_frequencies(const mgt_config *cfg, int hd, float *out) {
  const double pi = 3.14159265358979323846, old = 8192, low = 1, high = 4;
  const double factor = cfg->use_rope_scaling ? cfg->rope_scaling_factor : 1;
  for (int i = 0; i < hd / 2; i++) {
    double f = 1.0 / pow(cfg->rotary_base, 2.0 * i / hd);
    const double wavelen = 2 * pi / f;
    if (cfg->use_rope_scaling && wavelen > old / low)
      f /= factor; /* longer than the original context: slowed down */
    else if (cfg->use_rope_scaling && wavelen >= old / high) {
      const double smooth = (old / wavelen - low) / (high - low);
      f = (1 - smooth) * f / factor + smooth * f;
    }
    out[i] = (float)f;
  }
}

double mgt_gpt_flops_per_iteration(const mgt_config *cfg) {
  const double C = cfg->hidden_size, L = cfg->num_layers, T = cfg->seq_length;
  const mgt_model_desc d = mgt_model_of(cfg);
  const double rows = d.rows;
  const double samples = cfg->global_batch_size * rows, tokens = samples * T;
  const double F = cfg->ffn_hidden_size, layer = 4 * C + 4 * C * C + 4 * C + 2 * F * C + F + C;
  const double attention = 12.0 * L * C * T * tokens;
  if (d.head == MGT_HEAD_CAUSAL_LM) {
    double n = L * layer + 2 * C + (double)cfg->vocab_size * C; /* the output layer, tied or not */
    return 6.0 * n * tokens + attention;
  }
  const double masked = d.masked_lm ? cfg->mask_prob * tokens : 0; /* the LM head's rows */
  return 6.0 * (L * layer + 2 * C) * tokens + attention +
         6.0 * (C * C + (double)cfg->vocab_size * C) * masked +
         6.0 * (double)pool_params(cfg) * samples;
}

void gpt_layer_views(const mgt_gpt *m, float *base, int l, float *v[P_PER_LAYER]) {
  for (int k = 0; k < P_PER_LAYER; k++)
    v[k] = base + m->params[m->ix.first_layer + l * P_PER_LAYER + k].offset;
}

void gpt_views(const mgt_gpt *m, float *base, int first, int count, float **v) {
  for (int k = 0; k < count; k++)
    v[k] = first < 0 ? NULL : base + m->params[first + k].offset;
}

mgt_status gpt_init_params(mgt_gpt *m) {
  const mgt_backend *be = m->be;
  for (int i = 0; i < m->n_params; i++) {
    const mgt_param *p = &m->params[i];
    float *dst = m->w + p->offset;
    if (p->init_std > 0.0f)
      MGT_CHECK(mgt_be_init_normal(be, dst, &p->shard, m->cfg.seed, mgt_rng_init_stream(p->id),
                                   p->init_std));
    else
      MGT_CHECK(mgt_be_fill(be, dst, p->numel, p->init_value));
  }
  return MGT_OK;
}

static mgt_status list_params(const mgt_param *params, int n, int tp_rank, int dp_rank, float *flat,
                              const mgt_backend *mem, mgt_state *out) {
  for (int i = 0; i < n; i++) {
    mgt_state_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "model/%s", params[i].name);
    t.dtype = MGT_DTYPE_F32;
    t.shard = params[i].shard;
    t.replica = gpt_replica_of(&params[i], tp_rank, dp_rank);
    t.data = flat ? flat + params[i].offset : NULL;
    t.mem = flat ? mem : NULL;
    MGT_CHECK(mgt_state_add(out, &t));
  }
  return MGT_OK;
}

mgt_status mgt_gpt_describe(const mgt_config *cfg, int tp, int tp_rank, int dp_rank,
                            mgt_state *out) {
  mgt_gpt_dims d;
  mgt_gpt_dims_from_config(cfg, tp, tp_rank, &d);
  int n = 0;
  size_t total = 0;
  gpt_build_params(cfg, &d, NULL, &n, &total, NULL);
  mgt_param *params = calloc((size_t)n, sizeof *params);
  if (!params) MGT_FAIL(MGT_ERR_NOMEM, "out of memory describing the model");
  gpt_build_params(cfg, &d, params, &n, &total, NULL);
  mgt_status st = list_params(params, n, tp_rank, dp_rank, NULL, NULL, out);
  free(params);
  return st;
}

mgt_status mgt_gpt_state(mgt_gpt *m, mgt_state *out) {
  MGT_CHECK(mgt_ddp_params_ready(m->ddp, -1)); /* a checkpoint reads every parameter */
  mgt_gpt_weights_changed(m);                  /* and a load writes them */
  return list_params(m->params, m->n_params, m->grid->tp_rank, m->grid->dp_rank, m->w, m->be, out);
}
