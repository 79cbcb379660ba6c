/* Activations: which sets a layer keeps (recomputation), where every buffer sits in the one
   arena, and the per-rank memory plan computed from the same placement. */
#include "mgt/gpt_impl.h"

rplan gpt_recompute_plan(const mgt_model_layout *c, int L) {
  rplan p = {0, 0, 0, 0, L, c->flash};
  p.selective = c->recompute == MGT_RECOMPUTE_SELECTIVE;
  p.full = c->recompute == MGT_RECOMPUTE_FULL;
  if (!p.full) return p;
  p.block = c->recompute_method == MGT_RECOMPUTE_BLOCK;
  p.k = c->recompute_layers < L ? c->recompute_layers : L;
  if (!p.block && p.k < 1) p.k = 1;
  p.nsets = p.block ? (p.k > 0) + (L - p.k) : p.k;
  return p;
}

/* The activation set of layer l. */
static int set_of(const rplan *p, int l) {
  if (!p->full) return l;
  if (!p->block) return l % p->k;
  return l < p->k ? 0 : (p->k > 0) + l - p->k;
}

int gpt_chunk_ending_at(const rplan *p, int l, int L, int *first) {
  if (!p->full) return 0;
  if (p->block) {
    *first = l;
    return l < p->k;
  }
  *first = l / p->k * p->k;
  const int last = *first + p->k < L ? *first + p->k - 1 : L - 1;
  return l == last;
}

/* Whether the LayerNorm outputs are kept in 16 bits too: where only GEMMs read them, i.e. not
   as post-LN residuals, nor gathered over tp_comm into m->lnf under sequence parallelism. */
static int ln16(const mgt_gpt_dims *d) {
  return d->act16 && !d->spec.post_ln && !d->sp && !d->E; /* the experts gather rows of floats */
}

/* Whether the MLP's activation output is kept in 16 bits: GeLU's (the fused GEMM epilogue
   writes it so); SwiGLU's stays in floats. */
static int act16_mlp(const mgt_gpt_dims *d) {
  return d->act16 && d->spec.mlp == MGT_MLP_GELU && !d->E;
}

void gpt_take_layer(arena *a, const mgt_gpt_dims *d, size_t N, size_t Nl, int keep16, int attn,
                    float *P, layer_acts *la) {
  const int l16 = keep16 && ln16(d), a16 = keep16 && act16_mlp(d);
  la->ln1 = l16 ? NULL : take(a, Nl * d->C); /* else in the 16-bit region */
  la->ln1_mean = take(a, Nl);
  la->ln1_rstd = take(a, Nl);
  la->qkv = take(a, N * d->QKVl);
  if (d->spec.qk_norm) {
    la->qn_raw = take(a, N * d->Cl);
    la->qn_rstd = take(a, N * d->Hl);
    la->kn_raw = take(a, N * d->KVl);
    la->kn_rstd = take(a, N * d->Gl);
  }
  const size_t probs = (size_t)d->B * d->Hl * d->T;
  la->P = attn == GPT_ATTN_PROBS ? take(a, probs * d->T) : (attn == GPT_ATTN_SHARED ? P : NULL);
  la->lse = attn == GPT_ATTN_LSE ? take(a, probs) : NULL;
  la->atty = take(a, N * d->Cl);
  la->res_mid = take(a, Nl * d->C);
  la->ln2 = l16 ? NULL : take(a, Nl * d->C);
  la->ln2_mean = take(a, Nl);
  la->ln2_rstd = take(a, Nl);
  /* an MoE layer's rows for the experts, at most: every token's K, from each of ep ranks */
  const size_t M = N * (size_t)d->K * (size_t)(d->ep > 0 ? d->ep : 1);
  la->fch = take(a, d->E && M * d->Foe > N * d->Fo ? M * d->Foe : N * d->Fo);
  la->fch_gelu = a16 ? NULL : take(a, d->E && M * d->Fel > N * d->Fl ? M * d->Fel : N * d->Fl);
  la->logits = la->probs = la->rlse = la->rw = la->mout = NULL;
  la->ridx = la->rpos = la->rperm = NULL;
  la->xin = d->E && d->ep > 1 ? take(a, M * d->C) : NULL;
  if (d->E) {
    la->logits = take(a, N * d->E);
    la->probs = take(a, N * d->E);
    la->rlse = take(a, N);
    la->rw = take(a, N * d->K);
    la->ridx = (int32_t *)take(a, N * d->K);
    la->rpos = (int32_t *)take(a, N * d->K);
    la->rperm = (int32_t *)take(a, N * d->K);
    la->mout = take(a, N * d->K * d->C);
  }
  la->sfch = la->sact = la->sout = la->glogit = la->gw = la->gprobs = la->glse = NULL;
  la->gidx = NULL;
  if (d->E && d->Fs) {
    la->sfch = take(a, N * d->Fso);
    la->sact = take(a, N * d->Fsl);
  }
  if (d->E && d->Fs && d->spec.shared_gate) {
    la->sout = take(a, N * d->C);
    la->glogit = take(a, N);
    la->gw = take(a, N);
    la->gprobs = take(a, N);
    la->glse = take(a, N);
    la->gidx = (int32_t *)take(a, N);
  }
}

size_t gpt_layout_activations(mgt_gpt *m, const mgt_gpt_dims *d, const rplan *rp) {
  arena a = {(float *)m->arena, 0};
  size_t N = (size_t)d->B * d->T, Nl = (size_t)d->Nl;
  for (int l = 0; l <= d->L; l++) {
    float *p = take(&a, Nl * d->C);
    if (m->res) m->res[l] = p;
  }
  /* flash attention keeps no probabilities (selective recomputation has nothing to share) and
     needs no T x T scratch */
  const size_t probs = rp->flash ? 0 : (size_t)d->B * d->Hl * d->T * d->T;
  float *shared_P = rp->selective && !rp->flash ? take(&a, probs) : NULL;
  for (int l = 0; l < rp->nsets; l++) {
    layer_acts la;
    const int attn = rp->flash ? GPT_ATTN_LSE : (rp->selective ? GPT_ATTN_SHARED : GPT_ATTN_PROBS);
    gpt_take_layer(&a, d, N, Nl, 1, attn, shared_P, &la);
    if (m->acts) m->acts[l] = la;
  }
  /* the GEMM inputs kept in 16 bits (GeLU outputs; LayerNorm outputs where ln16), one region
     (set_act16) after the sets */
  m->act16 = a.base ? a.base + a.used : NULL;
  const size_t bytes16 = (size_t)d->act16, ln_floats = (Nl * d->C * bytes16 + 3) / 4;
  for (int l = 0; d->act16 && l < rp->nsets; l++) {
    float *p = act16_mlp(d) ? take(&a, (N * d->Fl * bytes16 + 3) / 4) : NULL;
    float *l1 = ln16(d) ? take(&a, ln_floats) : NULL, *l2 = ln16(d) ? take(&a, ln_floats) : NULL;
    if (m->acts) {
      if (p) m->acts[l].fch_gelu = p;
      if (l1) m->acts[l].ln1 = l1, m->acts[l].ln2 = l2;
    }
  }
  m->act16_bytes = a.base ? (size_t)((char *)(a.base + a.used) - (char *)m->act16) : 0;
  m->lnf = take(&a, N * d->C);
  m->lnf_mean = take(&a, Nl);
  m->lnf_rstd = take(&a, Nl);
  /* BERT's LM head sees only the masked rows: B * P of them at most; GPT's one chunk */
  const size_t R = d->spec.input == MGT_INPUT_SAMPLES ? (size_t)d->B * d->spec.max_predictions
                                                      : (size_t)d->logit_rows;
  m->logits = take(&a, R * d->Vl);
  m->xent.rowmax = take(&a, N);
  m->xent.sumtgt = take(&a, 2 * N);
  m->xent.losses = take(&a, N);
  m->inputs = (int32_t *)take(&a, N);
  m->targets = (int32_t *)take(&a, N);
  m->positions = (int32_t *)take(&a, N);
  m->kfirst = (int32_t *)take(&a, N);
  m->dres = take(&a, Nl * d->C);
  m->dtmp = take(&a, N * d->C);
  if (d->sp) {
    m->sp_loc = take(&a, Nl * d->C);
    m->lng = take(&a, 2 * (size_t)d->C);
  }
  m->qkg = d->spec.qk_norm == 1 && d->tp > 1 ? take(&a, 2 * (size_t)d->hd) : NULL;
  m->qks = d->spec.qk_norm == 2 && d->tp > 1 ? take(&a, N) : NULL;
  m->dqkv = take(&a, N * 3 * d->Cl);
  m->datty = take(&a, N * d->Cl);
  m->dfch = take(&a, N * d->Fo);
  /* grouped-query attention: the groups repeated for the heads, one layer at a time (and the
     groups' gradient); SwiGLU: the gradient of its output */
  m->qkvx = d->G != d->H ? take(&a, N * 3 * (size_t)d->Cl) : NULL;
  m->dact = d->spec.mlp == MGT_MLP_SWIGLU ? take(&a, N * d->Fl) : NULL;
  m->att_scratch = rp->flash ? NULL : take(&a, probs);
  if (d->E) {
    const size_t M = N * (size_t)d->K, Rm = M * (size_t)d->ep; /* sent, received at most */
    m->moe_xp = take(&a, M * d->C);
    m->moe_dout = take(&a, M * d->C);
    m->moe_dfch = take(&a, Rm * d->Foe);
    m->moe_dact = take(&a, Rm * d->Fel);
    m->moe_recv = d->ep > 1 ? take(&a, Rm * d->C) : NULL;
    m->moe_eout = d->ep > 1 ? take(&a, Rm * d->C) : NULL;
    m->moe_order = d->ep > 1 ? (int32_t *)take(&a, Rm) : NULL;
    m->moe_unorder = d->ep > 1 ? (int32_t *)take(&a, Rm) : NULL;
    m->moe_dx = take(&a, N * d->C);
    m->moe_dlogits = take(&a, N * d->E);
    m->moe_dw = take(&a, N * d->K);
    m->moe_aux = take(&a, (size_t)d->B * d->E); /* per sequence with seq_aux_loss */
  }
  const int gate = d->E && d->Fs && d->spec.shared_gate;
  m->sh_dfch = d->E && d->Fs ? take(&a, N * d->Fso) : NULL;
  m->sh_dact = d->E && d->Fs ? take(&a, N * d->Fsl) : NULL;
  m->sh_ds = gate ? take(&a, N * d->C) : NULL;
  m->sh_dg = gate ? take(&a, N) : NULL;
  m->sh_dglogit = gate ? take(&a, N) : NULL;
  m->sh_pos = gate ? (int32_t *)take(&a, N) : NULL;
  m->inv_freq = d->spec.pos == MGT_POS_ROPE ? take(&a, (size_t)d->hd / 2) : NULL;
  if (d->spec.input == MGT_INPUT_SAMPLES) {
    const size_t B = (size_t)d->B;
    m->types = (int32_t *)take(&a, N);
    m->keylen = (int32_t *)take(&a, B);
    m->lm_rows = (int32_t *)take(&a, R);
    m->cls_rows = (int32_t *)take(&a, B);
    m->sop_tgt = (int32_t *)take(&a, B);
    m->lm_in = take(&a, R * d->C);
    m->lm_pre = take(&a, R * d->C);
    m->lm_act = take(&a, R * d->C);
    m->lm_ln = take(&a, R * d->C);
    m->lm_mean = take(&a, R);
    m->lm_rstd = take(&a, R);
    m->dlm = take(&a, R * d->C);
    m->dlm2 = take(&a, R * d->C);
    m->pool_in = take(&a, B * d->C);
    m->pool_pre = take(&a, B * d->C);
    m->pooled = take(&a, B * d->C);
    m->sop_logits = take(&a, B * (size_t)d->spec.logits);
    m->dpool = take(&a, B * d->C);
    m->dpool2 = take(&a, B * d->C);
    m->sop_xent.rowmax = take(&a, B);
    m->sop_xent.sumtgt = take(&a, 2 * B);
    m->sop_xent.losses = take(&a, B);
  }
  return a.used;
}

void mgt_gpt_memory_plan(const mgt_config *cfg, int tp, mgt_gpt_memory *mem) {
  mgt_gpt_memory_plan_grid(cfg, tp, 1, mem);
}

void mgt_gpt_memory_plan_grid(const mgt_config *cfg, int tp, int dp, mgt_gpt_memory *mem) {
  const mgt_model_spec spec = mgt_model_of(cfg);
  const mgt_model_layout lay = mgt_model_layout_of(cfg);
  mgt_gpt_dims d;
  mgt_gpt_dims_of(&spec, &lay, tp, 0, &d);
  int n;
  size_t floats, experts = 0;
  gpt_build_params(&d, NULL, &n, &floats, NULL);
  mgt_param *params = NULL;
  if (d.ep > 1 && mgt_calloc(sizeof *params * (size_t)n, "memory plan", (void **)&params) == MGT_OK)
    gpt_build_params(&d, params, &n, &floats, NULL);
  for (int i = 0; params && i < n; i++)
    experts += params[i].expert ? params[i].numel : 0;
  mgt_free(params);
  mgt_gpt probe;
  memset(&probe, 0, sizeof probe);
  memset(mem, 0, sizeof *mem);
  mem->params = floats * sizeof(float);
  mem->grads = mem->params;
  mem->optimizer = 2 * mem->params;
  if (cfg->use_distributed_optimizer && dp > 1) { /* the largest shard, and its gradient: the
                                                     rest's over dp, the experts' over dp / ep */
    const size_t rest = floats - experts, edp = (size_t)dp / (size_t)d.ep,
                 shard = ((rest + (size_t)dp - 1) / (size_t)dp + (experts + edp - 1) / edp) *
                         sizeof(float);
    mem->optimizer = 2 * shard;
    mem->grads += shard;
  }
  /* native bf16 on CPUs keeps the 16-bit activations and set_weights' copy in 2 bytes, as GPUs;
     emulated, in floats */
  const int native = lay.device == MGT_DEVICE_CPU && lay.bf16 &&
                     lay.cpu_gemm != MGT_CPU_GEMM_EMULATED && mgt_cpu_bf16_units(NULL, 0);
  if (native && d.act16) d.act16 = 2;
  mgt_model_layout alt = lay;
  alt.recompute_method = MGT_RECOMPUTE_UNIFORM;
  alt.recompute_layers = 1;
  const int gran[3] = {MGT_RECOMPUTE_NONE, MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_SELECTIVE};
  size_t *out[3] = {&mem->activations_full, &mem->activations_recompute,
                    &mem->activations_selective};
  for (int k = 0; k < 3; k++) {
    alt.recompute = gran[k];
    const rplan rp = gpt_recompute_plan(&alt, d.L);
    *out[k] = gpt_layout_activations(&probe, &d, &rp) * sizeof(float);
  }
  const rplan rp = gpt_recompute_plan(&lay, d.L);
  mem->activations = gpt_layout_activations(&probe, &d, &rp) * sizeof(float);
  if (lay.weight_copies)
    mem->weight_copies = floats * (lay.device == MGT_DEVICE_CUDA || native ? 2 : sizeof(float));
  mem->total = mem->params + mem->weight_copies + mem->grads + mem->optimizer + mem->activations;
}

layer_acts *gpt_acts_of(mgt_gpt *m, int l) { return &m->acts[set_of(&m->rp, l)]; }
