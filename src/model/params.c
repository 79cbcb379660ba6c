/* The parameter table: dimensions, the tensors of a configuration in flat-buffer order with their
   shards and initialization, FLOPs and parameter counts, and the model as a state list. */
#include "mgt/gpt_impl.h"

void mgt_gpt_dims_of(const mgt_model_spec *spec, const mgt_model_layout *lay, int tp, int tp_rank,
                     mgt_gpt_dims *d) {
  memset(d, 0, sizeof *d);
  d->spec = *spec;
  d->L = spec->layers;
  d->C = spec->hidden;
  d->H = spec->heads;
  d->F = spec->ffn;
  d->T = lay->seq_length;
  d->maxpos = spec->positions;
  d->V = spec->vocab;
  d->Vp = (int)mgt_model_padded_vocab(spec, lay, tp);
  d->B = lay->micro_batch * d->spec.rows; /* rows: RACE encodes an example in 4 */
  d->tp = tp;
  d->tp_rank = tp_rank;
  d->hd = spec->head_size;
  d->Hl = d->H / tp;
  d->Cl = d->Hl * d->hd;
  d->Fl = d->F / tp;
  d->Vl = d->Vp / tp;
  d->G = d->spec.groups;
  d->Gl = d->G / tp;
  d->KVl = d->Gl * d->hd;
  d->QKVl = d->Cl + 2 * d->KVl;
  d->Fo = d->spec.mlp == MGT_MLP_SWIGLU ? 2 * d->Fl : d->Fl;
  d->E = spec->experts, d->K = spec->topk, d->Fe = spec->moe_ffn, d->Fel = d->Fe / tp;
  d->Foe = d->spec.mlp == MGT_MLP_SWIGLU ? 2 * d->Fel : d->Fel;
  d->Fs = spec->shared_ffn, d->Fsl = d->Fs / tp;
  d->Fso = d->spec.mlp == MGT_MLP_SWIGLU ? 2 * d->Fsl : d->Fsl;
  d->ep = lay->expert_parallel > 0 ? lay->expert_parallel : 1;
  d->El = d->E / d->ep, d->ep_rank = 0, d->e0 = 0; /* this rank's: gpt_dims_set_expert_rank */
  d->v0 = tp_rank * d->Vl;
  int nv = d->V - d->v0;
  d->nv = nv < 0 ? 0 : (nv > d->Vl ? d->Vl : nv);
  /* 64 MiB of logits at a time unless told: GPT-2's 50k vocabulary at B x T = 8 x 1024 would
     hold 1.6 GB of them */
  const int N = d->B * d->T, want = lay->logits_chunk_rows > 0
                                        ? lay->logits_chunk_rows
                                        : (int)((16u << 20) / (unsigned)d->Vl);
  d->logit_rows = want < 1 ? 1 : (want > N ? N : want);
  d->act16 = lay->bf16 || lay->fp16 ? (lay->device == MGT_DEVICE_CUDA ? 2 : (int)sizeof(float)) : 0;
  d->sp = lay->sequence_parallel && tp > 1;
  d->Nl = d->sp ? d->B * d->T / tp : d->B * d->T;
  d->r0 = d->sp ? tp_rank * d->Nl : 0;
}

void mgt_gpt_dims_from_config(const mgt_config *c, int tp, int tp_rank, mgt_gpt_dims *d) {
  const mgt_model_spec spec = mgt_model_of(c);
  const mgt_model_layout lay = mgt_model_layout_of(c);
  mgt_gpt_dims_of(&spec, &lay, tp, tp_rank, d);
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

/* pack: the next parameter follows this one without padding (the two halves of a pair the
   block multiplies as one matrix) */
static void add_param(mgt_param *out, int *n, size_t *off, uint32_t id, const param_spec *s,
                      const char *prefix, int pack) {
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
  *off += pack ? numel : round16(numel);
}

/* One tensor of a layer: the role the block uses it in (P_*), its name, shape, split and
   initialization, the code of its random stream, and whether the next tensor follows it
   without padding (the two halves of a pair the block multiplies as one matrix). */
typedef struct layer_row {
  int role;
  param_spec s;
  uint32_t code;
  int pack;
} layer_row;

/* The random stream of a layer's tensor. Codes 0..15 (GPT-2's twelve tensors, then Llama's
   four) are l * 16 + code, as every checkpoint so far was initialized; a code from 16 on, a
   tensor added since, is 2^30 + (code - 16) * 2^16 + l: a stream no other tensor has, for up
   to 65,535 layers (--num-layers' bound) and 16,384 more codes. */
uint32_t gpt_layer_stream(uint32_t code, int l) {
  return code < 16 ? (uint32_t)l * 16u + code : (1u << 30) + ((code - 16u) << 16) + (uint32_t)l;
}

/* The tensors of one layer of the description, in flat-buffer order: the one list that
   parameters, their counts, checkpoint names and Hugging Face names come from. rows holds
   P_SLOTS; returns the count. A Mixture-of-Experts layer (moe) has the router and the experts,
   [E, F, C] and [E, C, F] split on F over tp as the MLP, in place of the MLP. */
static int layer_list(const mgt_gpt_dims *d, int moe, layer_row *rows) {
  const float std = (float)d->spec.init_std;
  const float out_std = std / sqrtf(2.0f * (float)d->L); /* scaled output projections */
  const int64_t C = d->C, Cl = d->Cl, Fl = d->Fl, F = d->F, H = d->H, hd = d->hd, KVl = d->KVl;
  const int64_t KV = (int64_t)d->G * hd, A = H * hd, r = d->tp_rank; /* A: attention width */
  const int64_t E = d->E, El = d->El, Fe = d->Fe, Fel = d->Fel, Fs = d->Fs, Fsl = d->Fsl;
  const int grouped = d->G != d->H, swiglu = d->spec.mlp == MGT_MLP_SWIGLU, bias = d->spec.bias;
  const int ln = d->spec.norm == MGT_NORM_LAYERNORM;
  const float one = d->spec.norm_1p ? 0.0f : 1.0f; /* a gain of 1, as stored */
  const layer_row all[P_SLOTS] = {
      {P_LN1_W, {"input_layernorm.weight", 1, {C}, {C}, -1, 0, 0, one, 0}, 0, 0},
      {P_LN1_B, {"input_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0}, 1, 0},
      {P_QKV_W,
       grouped
           ? (param_spec){"attention.query.weight", 2, {Cl, C}, {A, C}, 0, r * Cl, std, 0, 1}
           : (param_spec){"attention.qkv.weight", 3, {3, Cl, C}, {3, A, C}, 1, r * Cl, std, 0, 1},
       2, grouped},
      {P_KV_W,
       {"attention.key_value.weight", 3, {2, KVl, C}, {2, KV, C}, 1, r * KVl, std, 0, 1},
       12,
       0},
      {P_QKV_B,
       grouped ? (param_spec){"attention.query.bias", 1, {Cl}, {A}, 0, r * Cl, 0, 0, 0}
               : (param_spec){"attention.qkv.bias", 2, {3, Cl}, {3, A}, 1, r * Cl, 0, 0, 0},
       3, grouped},
      {P_KV_B, {"attention.key_value.bias", 2, {2, KVl}, {2, KV}, 1, r * KVl, 0, 0, 0}, 13, 0},
      {P_QN_W,
       d->spec.qk_norm == 2 /* over all heads: each rank its heads' part */
           ? (param_spec){"attention.q_layernorm.weight", 1, {Cl}, {A}, 0, r * Cl, 0, one, 0}
           : (param_spec){"attention.q_layernorm.weight", 1, {hd}, {hd}, -1, 0, 0, one, 0},
       16, 0},
      {P_KN_W,
       d->spec.qk_norm == 2
           ? (param_spec){"attention.k_layernorm.weight", 1, {KVl}, {KV}, 0, r * KVl, 0, one, 0}
           : (param_spec){"attention.k_layernorm.weight", 1, {hd}, {hd}, -1, 0, 0, one, 0},
       17, 0},
      {P_PROJ_W, {"attention.dense.weight", 2, {C, Cl}, {C, A}, 1, r * Cl, out_std, 0, 1}, 4, 0},
      {P_PROJ_B, {"attention.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0}, 5, 0},
      {P_LN2_W, {"post_attention_layernorm.weight", 1, {C}, {C}, -1, 0, 0, one, 0}, 6, 0},
      {P_LN2_B, {"post_attention_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0}, 7, 0},
      /* SwiGLU: Megatron's fc1 split in its two halves, the gate and the up projection */
      {P_FC_W,
       {swiglu ? "mlp.gate.weight" : "mlp.dense_h_to_4h.weight",
        2,
        {Fl, C},
        {F, C},
        0,
        r * Fl,
        std,
        0,
        1},
       8,
       swiglu},
      {P_UP_W, {"mlp.up.weight", 2, {Fl, C}, {F, C}, 0, r * Fl, std, 0, 1}, 14, 0},
      {P_FC_B,
       {swiglu ? "mlp.gate.bias" : "mlp.dense_h_to_4h.bias", 1, {Fl}, {F}, 0, r * Fl, 0, 0, 0},
       9,
       swiglu},
      {P_UP_B, {"mlp.up.bias", 1, {Fl}, {F}, 0, r * Fl, 0, 0, 0}, 15, 0},
      {P_FCP_W, {"mlp.dense_4h_to_h.weight", 2, {C, Fl}, {C, F}, 1, r * Fl, out_std, 0, 1}, 10, 0},
      {P_FCP_B, {"mlp.dense_4h_to_h.bias", 1, {C}, {C}, -1, 0, 0, 0, 0}, 11, 0},
      {P_RT_W, {"mlp.router.weight", 2, {E, C}, {E, C}, -1, 0, std, 0, 1}, 18, 0},
      {P_EFC_W,
       {swiglu ? "mlp.experts.gate.weight" : "mlp.experts.dense_h_to_4h.weight",
        3,
        {El, Fel, C},
        {E, Fe, C},
        1,
        r * Fel,
        std,
        0,
        1},
       19,
       0},
      {P_EUP_W,
       {"mlp.experts.up.weight", 3, {El, Fel, C}, {E, Fe, C}, 1, r * Fel, std, 0, 1},
       20,
       0},
      {P_RT_B, {"mlp.router.expert_bias", 1, {E}, {E}, -1, 0, 0, 0, 0}, 22, 0},
      {P_EFCP_W,
       {"mlp.experts.dense_4h_to_h.weight", 3, {El, C, Fel}, {E, C, Fe}, 2, r * Fel, out_std, 0, 1},
       21,
       0},
      /* the shared expert: split over tp as the MLP; its gate replicated */
      {P_SFC_W,
       {swiglu ? "mlp.shared_expert.gate.weight" : "mlp.shared_expert.dense_h_to_4h.weight",
        2,
        {Fsl, C},
        {Fs, C},
        0,
        r * Fsl,
        std,
        0,
        1},
       23,
       0},
      {P_SUP_W,
       {"mlp.shared_expert.up.weight", 2, {Fsl, C}, {Fs, C}, 0, r * Fsl, std, 0, 1},
       24,
       0},
      {P_SFCP_W,
       {"mlp.shared_expert.dense_4h_to_h.weight", 2, {C, Fsl}, {C, Fs}, 1, r * Fsl, out_std, 0, 1},
       25,
       0},
      {P_SG_W, {"mlp.shared_expert_gate.weight", 2, {1, C}, {1, C}, -1, 0, std, 0, 1}, 26, 0},
  };
  const int qb = bias || d->spec.qkv_bias, qk = d->spec.qk_norm;
  const int mlp = !moe;
  const int present[P_SLOTS] = {[P_LN1_W] = 1,
                                [P_LN1_B] = ln,
                                [P_QKV_W] = 1,
                                [P_KV_W] = grouped,
                                [P_QKV_B] = qb,
                                [P_KV_B] = grouped && qb,
                                [P_QN_W] = qk,
                                [P_KN_W] = qk,
                                [P_PROJ_W] = 1,
                                [P_PROJ_B] = bias,
                                [P_LN2_W] = 1,
                                [P_LN2_B] = ln,
                                [P_FC_W] = mlp,
                                [P_UP_W] = mlp && swiglu,
                                [P_FC_B] = mlp && bias,
                                [P_UP_B] = mlp && swiglu && bias,
                                [P_FCP_W] = mlp,
                                [P_FCP_B] = mlp && bias,
                                [P_RT_W] = moe,
                                [P_EFC_W] = moe,
                                [P_EUP_W] = moe && swiglu,
                                [P_EFCP_W] = moe,
                                [P_RT_B] = moe && d->spec.expert_bias,
                                [P_SFC_W] = moe && d->Fs,
                                [P_SUP_W] = moe && d->Fs && swiglu,
                                [P_SFCP_W] = moe && d->Fs,
                                [P_SG_W] = moe && d->Fs && d->spec.shared_gate};
  int n = 0;
  for (int k = 0; k < P_SLOTS; k++)
    if (present[all[k].role]) rows[n++] = all[k];
  return n;
}

void gpt_build_params(const mgt_gpt_dims *d, mgt_param *out, int *n, size_t *total,
                      param_index *ix) {
  const float one = d->spec.norm_1p ? 0.0f : 1.0f; /* a gain of 1, as stored */
  *n = 0;
  param_index pi = {0, 1, -1, 2, -1, -1, -1, -1, {0, 0}, {{0}}};
  size_t off = 0;
  const float std = (float)d->spec.init_std;
  const int64_t C = d->C;
  param_spec wte = {
      "embedding.word_embeddings.weight", 2, {d->Vl, C}, {d->V, C}, 0, d->v0, std, 0, 1};
  param_spec wpe = {
      "embedding.position_embeddings.weight", 2, {d->maxpos, C}, {d->maxpos, C}, -1, 0, std, 0, 1};
  add_param(out, n, &off, 0xFFFF0000u, &wte, "", 0);
  pi.wpe = -1; /* rotary positions have no table */
  if (d->spec.pos == MGT_POS_LEARNED) {
    pi.wpe = *n;
    add_param(out, n, &off, 0xFFFF0001u, &wpe, "", 0);
  }
  if (d->spec.token_types) {
    param_spec tte = {"embedding.tokentype_embeddings.weight", 2, {2, C}, {2, C}, -1, 0, std, 0, 1};
    pi.tte = *n;
    add_param(out, n, &off, 0xFFFF0004u, &tte, "", 0);
  }
  pi.first_layer = *n;
  layer_row rows[2][P_SLOTS];
  for (int moe = 0; moe < 2; moe++) { /* a dense layer's list, and an MoE layer's */
    const int nr = layer_list(d, moe, rows[moe]);
    pi.per_layer[moe] = nr;
    for (int k = 0; k < P_SLOTS; k++)
      pi.at[moe][k] = -1;
    for (int i = 0; i < nr; i++)
      pi.at[moe][rows[moe][i].role] = (int8_t)i;
  }
  for (int l = 0; l < d->L; l++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "layers.%d.", l);
    const int moe = mgt_model_is_moe_layer(&d->spec, l);
    for (int i = 0; i < pi.per_layer[moe]; i++) {
      const int role = rows[moe][i].role;
      add_param(out, n, &off, gpt_layer_stream(rows[moe][i].code, l), &rows[moe][i].s, prefix,
                rows[moe][i].pack);
      if (out && (role == P_EFC_W || role == P_EUP_W || role == P_EFCP_W))
        out[*n - 1].expert = 1, out[*n - 1].shard.lead = d->e0; /* this rank's experts */
    }
  }
  param_spec lnw = {"final_layernorm.weight", 1, {C}, {C}, -1, 0, 0, one, 0};
  param_spec lnb = {"final_layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0};
  pi.lnf = *n;
  add_param(out, n, &off, 0xFFFF0002u, &lnw, "", 0);
  if (d->spec.norm == MGT_NORM_LAYERNORM) add_param(out, n, &off, 0xFFFF0003u, &lnb, "", 0);
  if (d->spec.untied) { /* vocabulary-parallel as the word embeddings (Megatron's name) */
    param_spec o = {"output_layer.weight", 2, {d->Vl, C}, {d->V, C}, 0, d->v0, std, 0, 1};
    pi.out = *n;
    add_param(out, n, &off, 0xFFFF0030u, &o, "", 0);
  }
  if (d->spec.masked_lm) {
    param_spec lm[H_LM] = {
        {"lm_head.dense.weight", 2, {C, C}, {C, C}, -1, 0, std, 0, 1},
        {"lm_head.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"lm_head.layernorm.weight", 1, {C}, {C}, -1, 0, 0, one, 0},
        {"lm_head.layernorm.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {"lm_head.bias", 1, {d->Vl}, {d->V}, 0, d->v0, 0, 0, 0}, /* split like the vocabulary */
    };
    pi.lm = *n;
    for (int k = 0; k < H_LM; k++)
      add_param(out, n, &off, 0xFFFF0010u + (uint32_t)k, &lm[k], "", 0);
  }
  if (d->spec.pooler) { /* a task head replaces the SOP head (Megatron's names) */
    const char *head = d->spec.head == MGT_HEAD_MULTIPLE_CHOICE ? "multichoice_head"
                       : d->spec.head == MGT_HEAD_CLASSIFY      ? "classification_head"
                                                                : "binary_head";
    char hw[48], hb[48];
    snprintf(hw, sizeof hw, "%s.weight", head);
    snprintf(hb, sizeof hb, "%s.bias", head);
    const int64_t K = d->spec.logits;
    param_spec q[Q_POOL] = {
        {"pooler.dense.weight", 2, {C, C}, {C, C}, -1, 0, std, 0, 1},
        {"pooler.dense.bias", 1, {C}, {C}, -1, 0, 0, 0, 0},
        {hw, 2, {K, C}, {K, C}, -1, 0, std, 0, 1},
        {hb, 1, {K}, {K}, -1, 0, 0, 0, 0},
    };
    pi.pool = *n;
    for (int k = 0; k < Q_POOL; k++)
      add_param(out, n, &off, 0xFFFF0020u + (uint32_t)k, &q[k], "", 0);
  }
  *total = off;
  if (ix) *ix = pi;
}

int gpt_replica_of(const mgt_param *p, int tp_rank, int dp_rank, int ep) {
  if (p->expert) return dp_rank / ep; /* a copy is an expert-parallel group's experts */
  return p->replicated && tp_rank != 0 ? MGT_REPLICA_DUPLICATE : dp_rank;
}

void gpt_dims_set_expert_rank(mgt_gpt_dims *d, int ep_rank) {
  d->ep_rank = ep_rank, d->e0 = ep_rank * d->El;
}

/* Parameters of the LM head (without the tied output) and of the pooler with the SOP head. */
static int64_t lm_head_params(const mgt_model_spec *s) {
  const int64_t C = s->hidden;
  return s->masked_lm ? C * C + 3 * C + s->vocab : 0;
}

static int64_t pool_params(const mgt_model_spec *s) {
  const int64_t C = s->hidden, K = s->logits;
  return s->pooler ? C * C + C + K * C + K : 0;
}

/* Parameters of one LayerNorm or RMSNorm. */
static int64_t norm_params(const mgt_model_spec *s) {
  return s->norm == MGT_NORM_RMSNORM ? s->hidden : 2 * (int64_t)s->hidden;
}

/* Parameters of one layer (moe: an MoE layer's): its list's tensors at their full shapes; with
   active, an MoE layer's experts count topk of experts (those a token passes through). */
static double layer_params(const mgt_model_spec *s, int moe, int active) {
  const mgt_model_layout one = {.micro_batch = 1, .seq_length = 1, .vocab_multiple = 1};
  mgt_gpt_dims d;
  mgt_gpt_dims_of(s, &one, 1, 0, &d);
  layer_row rows[P_SLOTS];
  double total = 0;
  for (int i = 0, n = layer_list(&d, moe, rows); i < n; i++) {
    double numel = 1;
    for (int k = 0; k < rows[i].s.ndim; k++)
      numel *= (double)rows[i].s.full[k];
    const int expert =
        rows[i].role == P_EFC_W || rows[i].role == P_EUP_W || rows[i].role == P_EFCP_W;
    total += expert && active ? numel / s->experts * s->topk : numel;
  }
  return total;
}

/* The parameters of all the layers (with active: those a token passes through). */
static double layers_params(const mgt_model_spec *s, int active) {
  int moe = 0;
  for (int l = 0; l < s->layers; l++)
    moe += mgt_model_is_moe_layer(s, l);
  return (s->layers - moe) * layer_params(s, 0, 0) + (moe ? moe * layer_params(s, 1, active) : 0);
}

int64_t mgt_gpt_spec_params(const mgt_model_spec *s) {
  const int64_t C = s->hidden, P = s->pos == MGT_POS_LEARNED ? s->positions : 0;
  const int64_t tte = s->token_types ? 2 * C : 0;
  const int64_t out = s->untied ? (int64_t)s->vocab * C : 0;
  return (int64_t)s->vocab * C + P * C + tte + (int64_t)layers_params(s, 0) + norm_params(s) + out +
         lm_head_params(s) + pool_params(s);
}

int64_t mgt_gpt_spec_active_params(const mgt_model_spec *s) {
  return mgt_gpt_spec_params(s) - (int64_t)(layers_params(s, 0) - layers_params(s, 1));
}

int64_t mgt_gpt_logical_params(const mgt_config *cfg) {
  const mgt_model_spec s = mgt_model_of(cfg);
  return mgt_gpt_spec_params(&s);
}

void mgt_gpt_rope_frequencies(const mgt_model_spec *s, float *out) {
  const double pi = 3.14159265358979323846, old = 8192, low = 1, high = 4;
  const int hd = s->head_size;
  const double factor = s->rope_scaling ? s->rope_factor : 1;
  for (int i = 0; i < hd / 2; i++) {
    double f = 1.0 / pow(s->rope_base, 2.0 * i / hd);
    const double wavelen = 2 * pi / f;
    if (s->rope_scaling && wavelen > old / low)
      f /= factor; /* longer than the original context: slowed down */
    else if (s->rope_scaling && wavelen >= old / high) {
      const double smooth = (old / wavelen - low) / (high - low);
      f = (1 - smooth) * f / factor + smooth * f;
    }
    out[i] = (float)f;
  }
}

double mgt_gpt_flops_per_iteration(const mgt_config *cfg) {
  const mgt_model_spec d = mgt_model_of(cfg);
  const double C = d.hidden, L = d.layers, T = cfg->seq_length, V = d.vocab;
  const double rows = d.rows;
  const double samples = cfg->global_batch_size * rows, tokens = samples * T;
  const double layers = layers_params(&d, 1), norm = (double)norm_params(&d); /* active */
  const double A = (double)d.heads * d.head_size; /* the attention's width */
  const double attention = 12.0 * L * A * T * tokens;
  if (d.head == MGT_HEAD_CAUSAL_LM) {
    double n = layers + norm + V * C; /* the output layer, tied or not */
    return 6.0 * n * tokens + attention;
  }
  const double masked = d.masked_lm ? cfg->mask_prob * tokens : 0; /* the LM head's rows */
  return 6.0 * (layers + norm) * tokens + attention + 6.0 * (C * C + V * C) * masked +
         6.0 * (double)pool_params(&d) * samples;
}

int gpt_layer_first(const mgt_gpt *m, int l, int *count) {
  int first = m->ix.first_layer;
  for (int i = 0; i < l; i++)
    first += m->ix.per_layer[mgt_model_is_moe_layer(&m->d.spec, i)];
  *count = m->ix.per_layer[mgt_model_is_moe_layer(&m->d.spec, l)];
  return first;
}

void gpt_layer_views(const mgt_gpt *m, float *base, int l, float *v[P_SLOTS]) {
  int n;
  const int first = gpt_layer_first(m, l, &n);
  const int8_t *at = m->ix.at[mgt_model_is_moe_layer(&m->d.spec, l)];
  for (int k = 0; k < P_SLOTS; k++)
    v[k] = at[k] < 0 ? NULL : base + m->params[first + at[k]].offset;
}

void gpt_views(const mgt_gpt *m, float *base, int first, int count, float **v) {
  for (int k = 0; k < count; k++)
    v[k] = first < 0 ? NULL : base + m->params[first + k].offset;
}

mgt_status gpt_init_params(mgt_gpt *m, uint64_t seed) {
  const mgt_backend *be = m->be;
  for (int i = 0; i < m->n_params; i++) {
    const mgt_param *p = &m->params[i];
    float *dst = m->w + p->offset;
    if (p->init_std > 0.0f)
      MGT_CHECK(
          mgt_be_init_normal(be, dst, &p->shard, seed, mgt_rng_init_stream(p->id), p->init_std));
    else
      MGT_CHECK(mgt_be_fill(be, dst, p->numel, p->init_value));
  }
  return MGT_OK;
}

static mgt_status list_params(const mgt_param *params, int n, int tp_rank, int dp_rank, int ep,
                              float *flat, const mgt_backend *mem, mgt_state *out) {
  for (int i = 0; i < n; i++) {
    mgt_state_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "model/%s", params[i].name);
    t.dtype = MGT_DTYPE_F32;
    t.shard = params[i].shard;
    t.replica = gpt_replica_of(&params[i], tp_rank, dp_rank, ep);
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
  gpt_dims_set_expert_rank(&d, dp_rank % d.ep);
  int n = 0;
  size_t total = 0;
  gpt_build_params(&d, NULL, &n, &total, NULL);
  mgt_param *params = calloc((size_t)n, sizeof *params);
  if (!params) MGT_FAIL(MGT_ERR_NOMEM, "out of memory describing the model");
  gpt_build_params(&d, params, &n, &total, NULL);
  mgt_status st = list_params(params, n, tp_rank, dp_rank, d.ep, NULL, NULL, out);
  free(params);
  return st;
}

mgt_status mgt_gpt_state(mgt_gpt *m, mgt_state *out) {
  MGT_CHECK(mgt_ddp_params_ready(m->ddp, -1)); /* a checkpoint reads every parameter */
  mgt_gpt_weights_changed(m);                  /* and a load writes them */
  return list_params(m->params, m->n_params, m->grid->tp_rank, m->grid->dp_rank, m->d.ep, m->w,
                     m->be, out);
}
