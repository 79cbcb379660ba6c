/* GPT and BERT forward and backward, written layer by layer over the backend table, with the
   tensor-parallel collectives of Megatron-LM (Shoeybi et al. 2019, Section 3). */
#include "mgt/gpt.h"

#include "mgt/data.h"
#include "mgt/tasks.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgt/rng.h"
#include "mgt/tp.h"

/* Parameters of one layer, in flat-buffer order. */
enum {
  P_LN1_W,
  P_LN1_B,
  P_QKV_W,
  P_QKV_B,
  P_PROJ_W,
  P_PROJ_B,
  P_LN2_W,
  P_LN2_B,
  P_FC_W,
  P_FC_B,
  P_FCP_W,
  P_FCP_B,
  P_PER_LAYER
};
/* BERT's heads, in flat-buffer order after the final LayerNorm: the LM head, then the pooler
   and the sentence-order (binary) head. */
enum { H_DENSE_W, H_DENSE_B, H_LN_W, H_LN_B, H_BIAS, H_LM };
enum { Q_POOL_W, Q_POOL_B, Q_BIN_W, Q_BIN_B, Q_POOL };

/* Where the model-wide parameters sit in the descriptor array (-1: absent). */
typedef struct param_index {
  int wte, wpe, tte, first_layer, lnf, lm, pool;
} param_index;

/* Activations one layer keeps for its backward pass. */
typedef struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
  float *qkv;                       /* (N, 3*Cl) */
  float *P;                         /* (B, Hl, T, T); NULL with --use-flash-attn */
  float *lse;                       /* (B, Hl, T) row log-sum-exp, with --use-flash-attn */
  float *atty;                      /* (N, Cl) */
  float *res_mid;                   /* (N,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu; /* (N, Fl) pre- and post-GeLU */
} layer_acts;

typedef struct rplan {
  int full, selective, block, k, nsets;
  int flash; /* --use-flash-attn: no probabilities kept */
} rplan;

struct mgt_gpt {
  mgt_config cfg;
  mgt_gpt_dims d;
  const mgt_grid *grid;
  const mgt_backend *be;
  const mgt_comm *comm;
  mgt_tp tp;

  mgt_param *params;
  int n_params;
  param_index ix;
  mgt_segment *segs;
  size_t n_floats;
  float *w, *g; /* flat parameter and gradient buffers */
  rplan rp;     /* which activations are kept and recomputed */

  void *arena;
  float **res;      /* L+1 residual stream buffers (N,C) */
  layer_acts *acts; /* L sets, or 1 shared set with recomputation */
  float *lnf, *lnf_mean, *lnf_rstd, *logits;
  mgt_tp_xent xent;
  int32_t *inputs, *targets;
  float *dres, *dtmp, *dqkv, *datty, *dfch, *att_scratch;
  /* --sequence-parallel: a block of this rank's rows (N/tp, C), the LayerNorm gradients' sum
     over tp (2C) and the floats of each rank's rows; m->lnf (N, C) is also the buffer rows are
     gathered into inside the layers */
  float *sp_loc, *lng;
  int *sp_counts;
  /* BERT: token types, lengths (the padding mask), masked rows and their labels, [CLS] rows
     and the order labels; the LM head on the masked rows, the pooler and SOP head on [CLS] */
  int32_t *types, *keylen, *lm_rows, *cls_rows, *sop_tgt;
  float *lm_in, *lm_pre, *lm_act, *lm_ln, *lm_mean, *lm_rstd, *dlm, *dlm2;
  float *pool_in, *pool_pre, *pooled, *sop_logits, *dpool, *dpool2;
  mgt_tp_xent sop_xent;
  int n_masked;       /* masked rows of the staged micro-batch */
  int32_t *host_rows; /* (B*P) staging of masked rows, then labels */
  int32_t *host_b;    /* (4B) per-sample staging: lengths, order labels, predictions */

  int32_t *host_tokens; /* (N) staging of inputs and targets */
  /* Data-parallel gradient buckets (lnf, layers last to first, embeddings), each cut into
     pieces of at most --ddp-bucket-size elements, one all-reduce per piece. */
  int n_buckets;
  int *bucket_first; /* n_buckets + 1 indices into pieces */
  size_t *piece_off, *piece_n;
  mgt_comm_req *reqs;
  int n_pieces, n_started, n_done;
  /* --use-distributed-optimizer: data-parallel rank q owns [shard[q], shard[q + 1]) of the flat
     buffers, cut at any element; a piece's reduce-scatter gives each rank its part
     (piece_counts, dp per piece) in gshard, the owned gradient (m->g itself at dp = 1). */
  size_t *shard;
  int *piece_counts, *piece_displs;
  float *gshard;
  /* --overlap-param-gather: each bucket's all-gathers in flight (gathering[b]) until the
     forward needs the bucket's parameters */
  mgt_comm_req *greqs;
  char *gathering;
  /* --bf16/--fp16: the backend keeps a 16-bit copy of the weights (set_weights), which bucket
     b's GEMMs may read only after its refresh: stale[b] is set whenever its parameters may
     have changed (NULL: no copies) */
  char *stale;
  /* the region of the 16-bit activations (dims act16) and its bytes */
  float *act16;
  size_t act16_bytes;
};

/* ---- parameter layout ---- */

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

void mgt_gpt_dims_from_config(const mgt_config *c, int tp, int tp_rank, mgt_gpt_dims *d) {
  memset(d, 0, sizeof *d);
  d->bert = c->model == MGT_MODEL_BERT;
  d->task = d->bert ? c->task : 0;
  d->binary = d->bert && !c->bert_no_binary_head && !d->task;
  d->rows = d->task ? mgt_task_rows(d->task) : 1;
  d->K = d->task ? mgt_task_row_logits(d->task) : 2;
  d->post_ln = d->bert && c->apply_residual_connection_post_layernorm;
  d->P = d->bert && !d->task ? mgt_bert_max_predictions(c->seq_length, c->mask_prob) : 0;
  d->L = c->num_layers;
  d->C = c->hidden_size;
  d->H = c->num_attention_heads;
  d->F = c->ffn_hidden_size;
  d->T = c->seq_length;
  d->maxpos = c->max_position_embeddings;
  d->V = c->vocab_size;
  d->Vp = (int)mgt_config_padded_vocab(c, tp);
  d->B = c->micro_batch_size * d->rows; /* rows: RACE encodes an example in 4 */
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

/* Lists the parameters in flat-buffer order; with out == NULL only counts them. */
static void build_params(const mgt_config *c, const mgt_gpt_dims *d, mgt_param *out, int *n,
                         size_t *total, param_index *ix) {
  *n = 0;
  param_index pi = {0, 1, -1, 2, -1, -1, -1};
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
  add_param(out, n, &off, 0xFFFF0001u, &wpe, "");
  if (d->binary || d->task) { /* Megatron has token types only with the binary head */
    param_spec tte = {"embedding.tokentype_embeddings.weight", 2, {2, C}, {2, C}, -1, 0, std, 0, 1};
    pi.tte = *n;
    pi.first_layer = *n + 1;
    add_param(out, n, &off, 0xFFFF0004u, &tte, "");
  }
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
  if (d->bert && !d->task) {
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
  if (d->binary || d->task) { /* a task head replaces the SOP head (Megatron's names) */
    const char *head = d->task == MGT_TASK_RACE ? "multichoice_head" : "classification_head";
    char hw[48], hb[48];
    snprintf(hw, sizeof hw, "%s.weight", d->task ? head : "binary_head");
    snprintf(hb, sizeof hb, "%s.bias", d->task ? head : "binary_head");
    const int64_t K = d->K;
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

/* The one decision of who holds the saved copy: data-parallel replica d holds copy d; a
   replicated tensor's copy is tensor-parallel rank 0's, the others are duplicates. */
static int replica_of(const mgt_param *p, int tp_rank, int dp_rank) {
  return p->replicated && tp_rank != 0 ? MGT_REPLICA_DUPLICATE : dp_rank;
}

/* ---- activation layout ---- */

typedef struct arena {
  float *base;
  size_t used; /* floats */
} arena;

static float *take(arena *a, size_t n) {
  float *p = a->base ? a->base + a->used : NULL;
  a->used += round16(n);
  return p;
}

/* Which activations a layer keeps: --recompute-granularity full recomputes whole layers from
   their inputs (the residual stream is always kept), in chunks of k layers (uniform: one chunk
   live at a time, k sets) or for the first k layers only (block: one shared set, the others
   their own); selective keeps every layer's set but one shared buffer of attention
   probabilities, recomputed before each attention backward. */
static rplan recompute_plan(const mgt_config *c, int L) {
  rplan p = {0, 0, 0, 0, L, c->use_flash_attn};
  p.selective = c->recompute_granularity == MGT_RECOMPUTE_SELECTIVE;
  p.full =
      !p.selective && (c->recompute_granularity == MGT_RECOMPUTE_FULL || c->recompute_activations);
  if (!p.full) return p;
  p.block = c->recompute_method == MGT_RECOMPUTE_BLOCK;
  p.k = c->recompute_num_layers < L ? c->recompute_num_layers : L;
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

/* The recomputed chunk whose last layer is l ([*first, l]), or 0 when l starts none. */
static int chunk_ending_at(const rplan *p, int l, int L, int *first) {
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
static int ln16(const mgt_gpt_dims *d) { return d->act16 && !d->post_ln && !d->sp; }

/* One layer's set; with share_P its attention probabilities are the buffer P (selective).
   The LayerNorms and the residual hold this rank's rows only under sequence parallelism. */
static void take_layer(arena *a, const mgt_gpt_dims *d, layer_acts *la, int share_P, float *P,
                       int flash) {
  size_t N = (size_t)d->B * d->T, Nl = (size_t)d->Nl;
  la->ln1 = ln16(d) ? NULL : take(a, Nl * d->C); /* else in the 16-bit region */
  la->ln1_mean = take(a, Nl);
  la->ln1_rstd = take(a, Nl);
  la->qkv = take(a, N * 3 * d->Cl);
  const size_t probs = (size_t)d->B * d->Hl * d->T;
  la->P = flash ? NULL : (share_P ? P : take(a, probs * d->T));
  la->lse = flash ? take(a, probs) : NULL;
  la->atty = take(a, N * d->Cl);
  la->res_mid = take(a, Nl * d->C);
  la->ln2 = ln16(d) ? NULL : take(a, Nl * d->C);
  la->ln2_mean = take(a, Nl);
  la->ln2_rstd = take(a, Nl);
  la->fch = take(a, N * d->Fl);
  la->fch_gelu = d->act16 ? NULL : take(a, N * d->Fl); /* else in the 16-bit region */
}

/* Places every activation buffer; with m->arena == NULL it only counts floats. */
static size_t layout_activations(mgt_gpt *m, const mgt_gpt_dims *d, const rplan *rp) {
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
    take_layer(&a, d, &la, rp->selective, shared_P, rp->flash);
    if (m->acts) m->acts[l] = la;
  }
  /* the GEMM inputs kept in 16 bits (GeLU outputs; LayerNorm outputs where ln16), one region
     (set_act16) after the sets */
  m->act16 = a.base ? a.base + a.used : NULL;
  const size_t bytes16 = (size_t)d->act16, ln_floats = (Nl * d->C * bytes16 + 3) / 4;
  for (int l = 0; d->act16 && l < rp->nsets; l++) {
    float *p = take(&a, (N * d->Fl * bytes16 + 3) / 4);
    float *l1 = ln16(d) ? take(&a, ln_floats) : NULL, *l2 = ln16(d) ? take(&a, ln_floats) : NULL;
    if (m->acts) {
      m->acts[l].fch_gelu = p;
      if (l1) m->acts[l].ln1 = l1, m->acts[l].ln2 = l2;
    }
  }
  m->act16_bytes = a.base ? (size_t)((char *)(a.base + a.used) - (char *)m->act16) : 0;
  m->lnf = take(&a, N * d->C);
  m->lnf_mean = take(&a, Nl);
  m->lnf_rstd = take(&a, Nl);
  /* BERT's LM head sees only the masked rows: B * P of them at most; GPT's one chunk */
  const size_t R = d->bert ? (size_t)d->B * d->P : (size_t)d->logit_rows;
  m->logits = take(&a, R * d->Vl);
  m->xent.rowmax = take(&a, N);
  m->xent.sumtgt = take(&a, 2 * N);
  m->xent.losses = take(&a, N);
  m->inputs = (int32_t *)take(&a, N);
  m->targets = (int32_t *)take(&a, N);
  m->dres = take(&a, Nl * d->C);
  m->dtmp = take(&a, N * d->C);
  if (d->sp) {
    m->sp_loc = take(&a, Nl * d->C);
    m->lng = take(&a, 2 * (size_t)d->C);
  }
  m->dqkv = take(&a, N * 3 * d->Cl);
  m->datty = take(&a, N * d->Cl);
  m->dfch = take(&a, N * d->Fl);
  m->att_scratch = rp->flash ? NULL : take(&a, probs);
  if (d->bert) {
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
    m->sop_logits = take(&a, B * (size_t)d->K);
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
  mgt_gpt_dims d;
  mgt_gpt_dims_from_config(cfg, tp, 0, &d);
  int n;
  size_t floats;
  build_params(cfg, &d, NULL, &n, &floats, NULL);
  mgt_gpt probe;
  memset(&probe, 0, sizeof probe);
  memset(mem, 0, sizeof *mem);
  mem->params = floats * sizeof(float);
  mem->grads = mem->params;
  mem->optimizer = 2 * mem->params;
  if (cfg->use_distributed_optimizer && dp > 1) { /* the largest shard, and its gradient */
    const size_t shard = (floats + (size_t)dp - 1) / (size_t)dp * sizeof(float);
    mem->optimizer = 2 * shard;
    mem->grads += shard;
  }
  mgt_config alt = *cfg;
  alt.recompute_activations = 0, alt.recompute_method = MGT_RECOMPUTE_UNIFORM;
  alt.recompute_num_layers = 1;
  const int gran[3] = {MGT_RECOMPUTE_NONE, MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_SELECTIVE};
  size_t *out[3] = {&mem->activations_full, &mem->activations_recompute,
                    &mem->activations_selective};
  for (int k = 0; k < 3; k++) {
    alt.recompute_granularity = gran[k];
    const rplan rp = recompute_plan(&alt, d.L);
    *out[k] = layout_activations(&probe, &d, &rp) * sizeof(float);
  }
  const rplan rp = recompute_plan(cfg, d.L);
  mem->activations = layout_activations(&probe, &d, &rp) * sizeof(float);
  if ((cfg->bf16 || cfg->fp16) && !cfg->no_weight_copies) /* set_weights' copy */
    mem->weight_copies = floats * (cfg->device == MGT_DEVICE_CUDA ? 2 : sizeof(float));
  mem->total = mem->params + mem->weight_copies + mem->grads + mem->optimizer + mem->activations;
}

/* Parameters of the LM head (without the tied output) and of the pooler with the SOP head. */
static int64_t lm_head_params(const mgt_config *c) {
  int64_t C = c->hidden_size;
  return c->model == MGT_MODEL_BERT && !c->task ? C * C + 3 * C + c->vocab_size : 0;
}
static int64_t pool_params(const mgt_config *c) {
  const int64_t C = c->hidden_size, K = c->task ? mgt_task_row_logits(c->task) : 2;
  const int pooled = c->model == MGT_MODEL_BERT && (c->task || !c->bert_no_binary_head);
  return pooled ? C * C + C + K * C + K : 0;
}

int64_t mgt_gpt_logical_params(const mgt_config *cfg) {
  int64_t C = cfg->hidden_size, F = cfg->ffn_hidden_size, P = cfg->max_position_embeddings;
  int64_t layer = 4 * C + 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C;
  int64_t tte = pool_params(cfg) ? 2 * C : 0;
  return (int64_t)cfg->vocab_size * C + P * C + tte + cfg->num_layers * layer + 2 * C +
         lm_head_params(cfg) + pool_params(cfg);
}

double mgt_gpt_flops_per_iteration(const mgt_config *cfg) {
  const double C = cfg->hidden_size, L = cfg->num_layers, T = cfg->seq_length;
  const double rows = cfg->task ? mgt_task_rows(cfg->task) : 1;
  const double samples = cfg->global_batch_size * rows, tokens = samples * T;
  const double F = cfg->ffn_hidden_size, layer = 4 * C + 4 * C * C + 4 * C + 2 * F * C + F + C;
  const double attention = 12.0 * L * C * T * tokens;
  if (cfg->model != MGT_MODEL_BERT) {
    double n = L * layer + 2 * C + (double)cfg->vocab_size * C; /* the output layer is wte */
    return 6.0 * n * tokens + attention;
  }
  const double masked = cfg->task ? 0 : cfg->mask_prob * tokens; /* the LM head's rows */
  return 6.0 * (L * layer + 2 * C) * tokens + attention +
         6.0 * (C * C + (double)cfg->vocab_size * C) * masked +
         6.0 * (double)pool_params(cfg) * samples;
}

/* ---- creation ---- */

static void layer_views(const mgt_gpt *m, float *base, int l, float *v[P_PER_LAYER]) {
  for (int k = 0; k < P_PER_LAYER; k++)
    v[k] = base + m->params[m->ix.first_layer + l * P_PER_LAYER + k].offset;
}

/* Views of `count` consecutive parameters from index first (-1: none). */
static void views(const mgt_gpt *m, float *base, int first, int count, float **v) {
  for (int k = 0; k < count; k++)
    v[k] = first < 0 ? NULL : base + m->params[first + k].offset;
}

static mgt_status init_params(mgt_gpt *m) {
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

/* Parameter index range [first, last) of bucket b, in the order backward completes them. */
static void bucket_params(const mgt_gpt *m, int b, int *first, int *last) {
  const int L = m->d.L;
  if (b == 0) { /* final LayerNorm and BERT's heads */
    *first = m->ix.lnf, *last = m->n_params;
  } else if (b <= L) { /* layer L - b */
    *first = m->ix.first_layer + (L - b) * P_PER_LAYER, *last = *first + P_PER_LAYER;
  } else { /* embeddings: complete only after the embedding backward */
    *first = m->ix.wte, *last = m->ix.first_layer;
  }
}

static mgt_status plan_buckets(mgt_gpt *m) {
  const size_t cap = (size_t)m->cfg.ddp_bucket_size;
  m->n_buckets = m->d.L + 2;
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)(m->n_buckets + 1), "bucket index",
                       (void **)&m->bucket_first));
  for (int pass = 0; pass < 2; pass++) {
    int np = 0;
    for (int b = 0; b < m->n_buckets; b++) {
      int first, last;
      bucket_params(m, b, &first, &last);
      size_t lo = m->params[first].offset;
      size_t hi = m->params[last - 1].offset + m->params[last - 1].numel;
      if (pass) m->bucket_first[b] = np;
      for (size_t o = lo; o < hi; o += cap, np++)
        if (pass) {
          m->piece_off[np] = o;
          m->piece_n[np] = hi - o < cap ? hi - o : cap;
        }
    }
    if (!pass) {
      m->n_pieces = np;
      MGT_CHECK(mgt_calloc(sizeof(size_t) * (size_t)np, "bucket pieces", (void **)&m->piece_off));
      MGT_CHECK(mgt_calloc(sizeof(size_t) * (size_t)np, "bucket pieces", (void **)&m->piece_n));
      MGT_CHECK(
          mgt_calloc(sizeof(mgt_comm_req) * (size_t)np, "bucket requests", (void **)&m->reqs));
    } else {
      m->bucket_first[m->n_buckets] = np;
    }
  }
  return MGT_OK;
}

/* --use-distributed-optimizer: rank q of dp owns the q-th of dp even cuts of the flat buffers
   (at any element: a tensor may span two ranks); each piece's reduce-scatter gives every rank
   the part of the piece it owns. */
static mgt_status plan_shards(mgt_gpt *m) {
  const int dp = m->grid->dp, r = m->grid->dp_rank;
  MGT_CHECK(mgt_calloc(sizeof(size_t) * (size_t)(dp + 1), "optimizer shards", (void **)&m->shard));
  for (int q = 0; q <= dp; q++)
    m->shard[q] = (size_t)((uint64_t)m->n_floats * (uint64_t)q / (uint64_t)dp);
  if (dp == 1) {
    m->gshard = m->g; /* nothing to reduce: the shard is everything */
    return MGT_OK;
  }
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)m->n_pieces * (size_t)dp, "shard counts",
                       (void **)&m->piece_counts));
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)m->n_pieces * (size_t)dp, "shard offsets",
                       (void **)&m->piece_displs));
  MGT_CHECK(mgt_calloc(sizeof(mgt_comm_req) * (size_t)m->n_pieces, "gather requests",
                       (void **)&m->greqs));
  MGT_CHECK(mgt_calloc((size_t)m->n_buckets, "gather flags", (void **)&m->gathering));
  for (int p = 0; p < m->n_pieces; p++) {
    const size_t a = m->piece_off[p], b = a + m->piece_n[p];
    MGT_REQUIRE(m->piece_n[p] <= INT_MAX, "--ddp-bucket-size: pieces above 2^31 elements");
    for (int q = 0; q < dp; q++) {
      const size_t lo = a > m->shard[q] ? a : m->shard[q],
                   hi = b < m->shard[q + 1] ? b : m->shard[q + 1];
      m->piece_counts[(size_t)p * dp + q] = hi > lo ? (int)(hi - lo) : 0;
      m->piece_displs[(size_t)p * dp + q] = hi > lo ? (int)(lo - a) : (int)(b - a);
    }
  }
  const size_t n = m->shard[r + 1] - m->shard[r];
  return mgt_be_alloc(m->be, sizeof(float) * (n ? n : 1), "gradient shard", (void **)&m->gshard);
}

/* Sequence parallelism: every rank's block of rows, of C floats each. */
static mgt_status plan_rows(mgt_gpt *m) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE((size_t)d->Nl * d->C <= INT_MAX,
              "--sequence-parallel: %d rows of %d floats exceed MPI's count limit", d->Nl, d->C);
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)d->tp, "row blocks", (void **)&m->sp_counts));
  for (int q = 0; q < d->tp; q++)
    m->sp_counts[q] = d->Nl * d->C;
  m->tp.sp_counts = m->sp_counts;
  return MGT_OK;
}

mgt_status mgt_gpt_create(const mgt_config *cfg, const mgt_grid *grid, const mgt_backend *be,
                          const mgt_comm *comm, mgt_gpt **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_gpt *m = NULL;
  MGT_CHECK(mgt_calloc(sizeof *m, "model", (void **)&m));
  m->cfg = *cfg;
  m->grid = grid;
  m->be = be;
  m->comm = comm;
  m->tp.be = be;
  m->tp.comm = comm;
  m->tp.grid = grid;
  mgt_gpt_dims_from_config(cfg, grid->tp, grid->tp_rank, &m->d);
  const mgt_gpt_dims *d = &m->d;
  if (cfg->use_flash_attn && !mgt_be_has(be, MGT_BE_FLASH_ATTENTION_FORWARD))
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--use-flash-attn: this backend has no flash attention");

  build_params(cfg, d, NULL, &m->n_params, &m->n_floats, NULL);
  MGT_TRY(
      mgt_calloc(sizeof *m->params * (size_t)m->n_params, "parameter table", (void **)&m->params));
  build_params(cfg, d, m->params, &m->n_params, &m->n_floats, &m->ix);
  MGT_TRY(
      mgt_calloc(sizeof *m->segs * (size_t)m->n_params, "optimizer segments", (void **)&m->segs));
  for (int i = 0; i < m->n_params; i++) {
    const mgt_param *p = &m->params[i];
    m->segs[i].offset = p->offset;
    m->segs[i].n = p->numel;
    m->segs[i].weight_decay = p->decay ? (float)cfg->weight_decay : 0.0f;
    m->segs[i].count_in_norm = replica_of(p, grid->tp_rank, 0) != MGT_REPLICA_DUPLICATE;
  }
  size_t bytes = m->n_floats * sizeof(float);
  MGT_TRY(mgt_be_alloc(be, bytes, "parameters", (void **)&m->w));
  MGT_TRY(mgt_be_alloc(be, bytes, "gradients", (void **)&m->g));

  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)(d->L + 1), "residual views", (void **)&m->res));
  m->rp = recompute_plan(cfg, d->L);
  MGT_TRY(mgt_calloc(sizeof(layer_acts) * (size_t)(m->rp.nsets ? m->rp.nsets : 1),
                     "activation views", (void **)&m->acts));
  {
    mgt_gpt probe;
    memset(&probe, 0, sizeof probe);
    size_t floats = layout_activations(&probe, d, &m->rp);
    MGT_TRY(mgt_be_alloc(be, floats * sizeof(float), "activations", &m->arena));
    layout_activations(m, d, &m->rp);
  }
  if (d->act16) {
    if (!mgt_be_has(be, MGT_BE_SET_ACT16) || mgt_be_act16_bytes(be) != d->act16)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--bf16/--fp16: backend %s keeps 16-bit activations in %d bytes, --device %s "
                    "in %d: create the model on the backend of its --device",
                    mgt_be_name(be), mgt_be_act16_bytes(be), mgt_device_names[cfg->device],
                    d->act16);
    MGT_TRY(mgt_be_set_act16(be, m->act16, m->act16_bytes));
  }
  MGT_TRY(mgt_calloc(sizeof(int32_t) * 2 * (size_t)d->B * d->T, "token staging",
                     (void **)&m->host_tokens));
  if (d->bert) {
    MGT_TRY(mgt_calloc(sizeof(int32_t) * (2 * (size_t)d->B * d->P + 1), "masked-row staging",
                       (void **)&m->host_rows));
    MGT_TRY(mgt_calloc(sizeof(int32_t) * 4 * (size_t)d->B, "sample staging", (void **)&m->host_b));
    for (int b = 0; b < d->B; b++) /* [CLS] is position 0 of every sample */
      m->host_b[b] = b * d->T;
    MGT_TRY(mgt_be_upload(be, m->cls_rows, m->host_b, sizeof(int32_t) * (size_t)d->B));
  }
  if (d->sp) MGT_TRY(plan_rows(m));
  MGT_TRY(plan_buckets(m));
  if (cfg->use_distributed_optimizer) MGT_TRY(plan_shards(m));
  if ((cfg->bf16 || cfg->fp16) && !cfg->no_weight_copies && mgt_be_has(be, MGT_BE_SET_WEIGHTS)) {
    MGT_TRY(mgt_calloc((size_t)m->n_buckets, "weight copy flags", (void **)&m->stale));
    MGT_TRY(mgt_be_set_weights(be, m->w, m->n_floats));
  }
  MGT_TRY(init_params(m));
  mgt_gpt_weights_changed(m);
  *out = m;
  return MGT_OK;
done:
  mgt_gpt_destroy(&m);
  return st;
}

static mgt_status params_ready(mgt_gpt *m, int b);

void mgt_gpt_destroy(mgt_gpt **model) {
  mgt_gpt *m = *model;
  if (!m) return;
  (void)params_ready(m, -1);                     /* no all-gather left writing into freed memory */
  for (int p = m->n_done; p < m->n_started; p++) /* nor a gradient reduction (a failed step) */
    (void)m->comm->wait(m->comm->ctx, &m->reqs[p]);
  if (m->be) (void)!mgt_be_sync(m->be);
  if (m->stale) (void)!mgt_be_set_weights(m->be, m->w, 0);
  if (m->act16_bytes && mgt_be_has(m->be, MGT_BE_SET_ACT16))
    (void)!mgt_be_set_act16(m->be, m->act16, 0);
  if (m->be) {
    if (m->gshard && m->gshard != m->g) mgt_be_free(m->be, m->gshard);
    if (m->w) mgt_be_free(m->be, m->w);
    if (m->g) mgt_be_free(m->be, m->g);
    if (m->arena) mgt_be_free(m->be, m->arena);
  }
  mgt_free(m->params);
  mgt_free(m->segs);
  mgt_free(m->res);
  mgt_free(m->acts);
  mgt_free(m->host_tokens);
  mgt_free(m->host_rows);
  mgt_free(m->host_b);
  mgt_free(m->reqs);
  mgt_free(m->bucket_first);
  mgt_free(m->piece_off);
  mgt_free(m->piece_n);
  mgt_free(m->shard);
  mgt_free(m->piece_counts);
  mgt_free(m->piece_displs);
  mgt_free(m->greqs);
  mgt_free(m->sp_counts);
  mgt_free(m->gathering);
  mgt_free(m->stale);
  mgt_free(m);
  *model = NULL;
}

/* ---- forward ---- */

static mgt_dropout dropout_site(const mgt_gpt *m, double p, uint64_t sample_base, int layer,
                                int site) {
  mgt_dropout d = {(float)p, m->cfg.seed, sample_base, layer, site, 0};
  return d;
}

typedef struct step_ctx {
  uint64_t sample_base;
  int train; /* dropout on */
} step_ctx;

/* The three dropout sites of layer l for this micro-batch. */
typedef struct layer_sites {
  mgt_dropout attn, proj, mlp;
} layer_sites;

static layer_sites sites_of(const mgt_gpt *m, int l, const step_ctx *s) {
  double ph = s->train ? m->cfg.hidden_dropout : 0, pa = s->train ? m->cfg.attention_dropout : 0;
  layer_sites ls = {dropout_site(m, pa, s->sample_base, l, MGT_DROPOUT_ATTN),
                    dropout_site(m, ph, s->sample_base, l, MGT_DROPOUT_PROJ),
                    dropout_site(m, ph, s->sample_base, l, MGT_DROPOUT_MLP)};
  ls.proj.first = ls.mlp.first = (uint64_t)m->d.r0 * m->d.C; /* on this rank's rows */
  return ls;
}

/* The input of a column-parallel layer: this rank's rows of a LayerNorm's output, or under
   sequence parallelism every rank's, gathered into m->lnf. */
static mgt_status full_rows(mgt_gpt *m, const float *local, const float **full) {
  *full = local;
  if (!m->d.sp) return MGT_OK;
  MGT_CHECK(mgt_tp_sp_gather(&m->tp, m->lnf, local));
  *full = m->lnf;
  return MGT_OK;
}

/* A row-parallel layer's output on this rank's rows, without its bias (added by
   bias_dropout_add_ln): all-reduced into m->dtmp, or reduce-scattered into m->sp_loc. */
static mgt_status row_out(mgt_gpt *m, float **y, const float *x, const float *W, int in_l) {
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T;
  *y = d->sp ? m->sp_loc : m->dtmp;
  if (d->sp) return mgt_tp_row_forward_sp(&m->tp, *y, m->lnf, x, W, NULL, N, in_l, d->C);
  return mgt_tp_row_forward(&m->tp, *y, x, W, NULL, N, in_l, d->C);
}

static mgt_status layer_forward(mgt_gpt *m, int l, const float *x, float *y, layer_acts *a,
                                const step_ctx *s) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, Cl = d->Cl, Fl = d->Fl, Nl = d->Nl;
  const size_t row = (size_t)d->T * C;
  float *w[P_PER_LAYER];
  layer_views(m, m->w, l, w);
  const float eps = (float)m->cfg.layernorm_epsilon;
  float *tmp; /* m->dtmp or m->sp_loc: free during forward and before backward uses it */
  const float *in;
  /* post-LN (the original BERT): the residual starts from the LayerNorm's output */
  const float *res1 = d->post_ln ? a->ln1 : x;
  const layer_sites ds = sites_of(m, l, s);

  /* attention: QKV column-parallel by heads, heads local, output row-parallel; the
     LayerNorm, dropout and residual on this rank's rows (all of them without sequence
     parallelism) */
  MGT_CHECK(mgt_be_layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, w[P_LN1_W],
                                     w[P_LN1_B], Nl, C, eps));
  MGT_CHECK(full_rows(m, a->ln1, &in));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, a->qkv, in, w[P_QKV_W], w[P_QKV_B], N, C, 3 * Cl));
  if (m->rp.flash)
    MGT_CHECK(mgt_be_flash_attention_forward(be, a->atty, a->lse, a->qkv, d->B, d->T, d->Hl, d->hd,
                                             d->tp_rank * d->Hl, m->keylen, &ds.attn));
  else
    MGT_CHECK(mgt_be_attention_forward(be, a->atty, a->P, a->qkv, d->B, d->T, d->Hl, d->hd,
                                       d->tp_rank * d->Hl, d->H, m->keylen, &ds.attn,
                                       m->att_scratch));
  /* the projection's bias, dropout, residual and the MLP's LayerNorm in one pass */
  MGT_CHECK(row_out(m, &tmp, a->atty, w[P_PROJ_W], Cl));
  MGT_CHECK(mgt_be_bias_dropout_add_ln(be, a->res_mid, tmp, w[P_PROJ_B], res1, Nl, C, row, &ds.proj,
                                       a->ln2, a->ln2_mean, a->ln2_rstd, w[P_LN2_W], w[P_LN2_B],
                                       eps));

  /* MLP: first linear column-parallel with GeLU local, second row-parallel */
  MGT_CHECK(full_rows(m, a->ln2, &in));
  MGT_CHECK(
      mgt_tp_column_forward_gelu(&m->tp, a->fch, a->fch_gelu, in, w[P_FC_W], w[P_FC_B], N, C, Fl));
  MGT_CHECK(row_out(m, &tmp, a->fch_gelu, w[P_FCP_W], Fl));
  MGT_CHECK(mgt_be_bias_dropout_add_ln(be, y, tmp, w[P_FCP_B], d->post_ln ? a->ln2 : a->res_mid, Nl,
                                       C, row, &ds.mlp, NULL, NULL, NULL, NULL, NULL, 0.0f));
  return MGT_OK;
}

static layer_acts *acts_of(mgt_gpt *m, int l) { return &m->acts[set_of(&m->rp, l)]; }

/* Stages tokens (B windows of T+1) as inputs and targets on the backend. */
static mgt_status load_tokens(mgt_gpt *m, const int32_t *tokens) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(!d->bert, "a BERT model takes BERT samples (mgt_bert_forward_backward)");
  const int N = d->B * d->T;
  int32_t *in = m->host_tokens, *tg = m->host_tokens + N;
  for (int b = 0; b < d->B; b++)
    for (int t = 0; t < d->T; t++) {
      int32_t x = tokens[(size_t)b * (d->T + 1) + t], y = tokens[(size_t)b * (d->T + 1) + t + 1];
      MGT_REQUIRE(x >= 0 && x < d->V && y >= 0 && y < d->V,
                  "token id %d out of range [0, %d) in sample row %d", (x < 0 || x >= d->V) ? x : y,
                  d->V, b);
      in[b * d->T + t] = x;
      tg[b * d->T + t] = y;
    }
  MGT_CHECK(mgt_be_upload(m->be, m->inputs, in, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(m->be, m->targets, tg, sizeof(int32_t) * (size_t)N));
  return MGT_OK;
}

/* Embeddings (word, position and, for BERT, token type), the layers and the final LayerNorm
   into m->lnf. */
/* --overlap-param-gather: waits for bucket b's parameter all-gathers (b = -1: every bucket);
   the later buckets' are driven on (MPI progresses them only inside MPI calls). */
static mgt_status params_ready(mgt_gpt *m, int b) {
  if (!m->gathering) return MGT_OK;
  for (int k = 0; k < m->n_buckets; k++) {
    if (!m->gathering[k] || (b >= 0 && k != b)) continue;
    for (int p = m->bucket_first[k]; p < m->bucket_first[k + 1]; p++)
      MGT_CHECK(m->comm->wait(m->comm->ctx, &m->greqs[p]));
    m->gathering[k] = 0;
  }
  for (int k = 0; b >= 0 && k < m->n_buckets; k++)
    if (m->gathering[k]) {
      int done = 0;
      MGT_CHECK(m->comm->test(m->comm->ctx, &m->greqs[m->bucket_first[k]], &done));
    }
  return MGT_OK;
}

void mgt_gpt_weights_changed(mgt_gpt *m) {
  if (m->stale) memset(m->stale, 1, (size_t)m->n_buckets);
}

/* params_ready, then bucket b's (every bucket's with b < 0) 16-bit weights remade where they
   are stale: once per optimizer step, before the first GEMM that reads them. */
static mgt_status weights_ready(mgt_gpt *m, int b) {
  MGT_CHECK(params_ready(m, b));
  for (int k = 0; m->stale && k < m->n_buckets; k++) {
    if (!m->stale[k] || (b >= 0 && k != b)) continue;
    int first, last;
    bucket_params(m, k, &first, &last);
    const size_t lo = m->params[first].offset,
                 hi = m->params[last - 1].offset + m->params[last - 1].numel;
    MGT_CHECK(mgt_be_refresh_weights(m->be, lo, hi - lo));
    m->stale[k] = 0;
  }
  return MGT_OK;
}

static mgt_status trunk_forward(mgt_gpt *m, const step_ctx *s) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int N = d->B * d->T, C = d->C, Nl = d->Nl;
  const float *wte = m->w + m->params[m->ix.wte].offset, *wpe = m->w + m->params[m->ix.wpe].offset;

  MGT_CHECK(weights_ready(m, d->L + 1)); /* buckets: 0 final LayerNorm and heads, L - l layer l */
  if (d->sp) /* the lookup's sum over the vocabulary shards, reduce-scattered to the rows */
    MGT_CHECK(
        mgt_tp_embedding_forward_sp(&m->tp, m->res[0], m->lnf, m->inputs, wte, N, C, d->v0, d->Vl));
  else
    MGT_CHECK(mgt_tp_embedding_forward(&m->tp, m->res[0], m->inputs, wte, N, C, d->v0, d->Vl));
  MGT_CHECK(mgt_be_add_position(be, m->res[0], wpe, Nl, d->r0 % d->T, d->T, C));
  if (m->ix.tte >= 0) { /* two rows, replicated: a local lookup added in */
    const float *tte = m->w + m->params[m->ix.tte].offset;
    MGT_CHECK(mgt_be_embedding_forward(be, m->dtmp, m->types + d->r0, tte, Nl, C, 0, 2));
    MGT_CHECK(mgt_be_add(be, m->res[0], m->dtmp, (size_t)Nl * C));
  }
  mgt_dropout de = dropout_site(m, s->train ? m->cfg.hidden_dropout : 0, s->sample_base, 0xFFFF,
                                MGT_DROPOUT_EMBED);
  de.first = (uint64_t)d->r0 * C;
  MGT_CHECK(mgt_be_dropout_forward(be, m->res[0], m->res[0], NULL, (size_t)Nl * C, (size_t)d->T * C,
                                   &de));

  for (int l = 0; l < d->L; l++) {
    MGT_CHECK(weights_ready(m, d->L - l));
    MGT_CHECK(layer_forward(m, l, m->res[l], m->res[l + 1], acts_of(m, l), s));
  }
  MGT_CHECK(weights_ready(m, 0));
  const mgt_param *lnf = &m->params[m->ix.lnf];
  /* the heads see every row: under sequence parallelism they are gathered into m->lnf */
  MGT_CHECK(mgt_be_layernorm_forward(be, d->sp ? m->sp_loc : m->lnf, m->lnf_mean, m->lnf_rstd,
                                     m->res[d->L], m->w + lnf[0].offset, m->w + lnf[1].offset, Nl,
                                     C, (float)m->cfg.layernorm_epsilon));
  if (d->sp) MGT_CHECK(mgt_tp_sp_gather(&m->tp, m->lnf, m->sp_loc));
  return MGT_OK;
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
  const float *wte = m->w + m->params[m->ix.wte].offset;
  float *gwte = m->g + m->params[m->ix.wte].offset;
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
  MGT_CHECK(trunk_forward(m, s));
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

/* Gathers the vocabulary shards of one row of logits into the full vocabulary (host). */
static mgt_status gather_row(mgt_gpt *m, const float *row_local, float *host_shard, float *all,
                             float *logits) {
  const mgt_gpt_dims *d = &m->d;
  MGT_CHECK(mgt_be_download(m->be, host_shard, row_local, sizeof(float) * (size_t)d->Vl));
  MGT_CHECK(m->comm->allgather(m->comm->ctx, m->grid, MGT_AXIS_TP, host_shard, all, (size_t)d->Vl));
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
  if (st == MGT_OK)
    st = m->comm->allreduce_maxloc(m->comm->ctx, m->grid, MGT_AXIS_TP, val, pred, (size_t)N);
  free(val);
  return st;
}

mgt_status mgt_gpt_forward_logits(mgt_gpt *m, const int32_t *tokens, int row, float *logits) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(row >= 0 && row < d->B * d->T, "row %d outside the batch", row);
  MGT_CHECK(load_tokens(m, tokens));
  step_ctx s = {0, 0};
  MGT_CHECK(trunk_forward(m, &s));
  const float *wte = m->w + m->params[m->ix.wte].offset;
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->logits, m->lnf + (size_t)row * d->C, wte, NULL, 1,
                                  d->C, d->Vl)); /* that row only */
  float *shard = malloc(sizeof(float) * (size_t)d->Vl),
        *all = malloc(sizeof(float) * (size_t)d->Vp);
  mgt_status st = shard && all ? gather_row(m, m->logits, shard, all, logits) : MGT_ERR_NOMEM;
  free(shard);
  free(all);
  if (st == MGT_ERR_NOMEM) MGT_FAIL(st, "out of memory gathering logits");
  return st;
}

/* ---- decoding with a key/value cache ---- */

struct mgt_gpt_decoder {
  mgt_gpt *m;
  int max_len;
  void *mem; /* backend memory for everything below */
  float *x, *ln, *mean, *rstd, *qkv, *att, *tmp, *fch, *fch_gelu, *logits;
  float **kc, **vc; /* per layer, (max_len, Cl) */
  int32_t *tok;
  float *host_shard, *host_all;
};

mgt_status mgt_gpt_decoder_create(mgt_gpt *m, int max_len, mgt_gpt_decoder **out) {
  MGT_CHECK(weights_ready(m, -1));
  *out = NULL;
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(!d->bert, "BERT is not a generative model: no decoding");
  MGT_REQUIRE(max_len >= 1 && max_len <= d->maxpos,
              "a sequence of %d tokens does not fit the model's %d positions", max_len, d->maxpos);
  mgt_status st = MGT_OK;
  mgt_gpt_decoder *dec = NULL;
  MGT_CHECK(mgt_calloc(sizeof *dec, "decoder", (void **)&dec));
  dec->m = m;
  dec->max_len = max_len;
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->kc));
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->vc));
  for (int pass = 0; pass < 2; pass++) {
    arena a = {(float *)dec->mem, 0};
    dec->x = take(&a, d->C), dec->ln = take(&a, d->C), dec->mean = take(&a, 1);
    dec->rstd = take(&a, 1), dec->qkv = take(&a, 3 * (size_t)d->Cl), dec->att = take(&a, d->Cl);
    dec->tmp = take(&a, d->C), dec->fch = take(&a, d->Fl), dec->fch_gelu = take(&a, d->Fl);
    dec->logits = take(&a, d->Vl);
    dec->tok = (int32_t *)take(&a, 1);
    for (int l = 0; l < d->L; l++) {
      dec->kc[l] = take(&a, (size_t)max_len * d->Cl);
      dec->vc[l] = take(&a, (size_t)max_len * d->Cl);
    }
    if (pass == 0)
      MGT_TRY(mgt_be_alloc(m->be, a.used * sizeof(float), "key/value cache", &dec->mem));
  }
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)d->Vl, "logit staging", (void **)&dec->host_shard));
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)d->Vp, "logit staging", (void **)&dec->host_all));
  *out = dec;
  return MGT_OK;
done:
  mgt_gpt_decoder_destroy(&dec);
  return st;
}

void mgt_gpt_decoder_destroy(mgt_gpt_decoder **pd) {
  mgt_gpt_decoder *dec = *pd;
  if (!dec) return;
  if (dec->mem) mgt_be_free(dec->m->be, dec->mem);
  mgt_free(dec->kc);
  mgt_free(dec->vc);
  mgt_free(dec->host_shard);
  mgt_free(dec->host_all);
  mgt_free(dec);
  *pd = NULL;
}

mgt_status mgt_gpt_decode(mgt_gpt_decoder *dec, int32_t token, int pos, float *logits) {
  mgt_gpt *m = dec->m;
  MGT_CHECK(weights_ready(m, -1));
  const mgt_gpt_dims *d = &m->d;
  const mgt_backend *be = m->be;
  const int C = d->C, Cl = d->Cl, Fl = d->Fl;
  const float eps = (float)m->cfg.layernorm_epsilon;
  MGT_REQUIRE(pos >= 0 && pos < dec->max_len, "position %d beyond the decoder's %d", pos,
              dec->max_len);
  MGT_REQUIRE(token >= 0 && token < d->V, "token id %d outside the vocabulary [0, %d)", token,
              d->V);
  const float *wte = m->w + m->params[m->ix.wte].offset, *wpe = m->w + m->params[m->ix.wpe].offset;
  MGT_CHECK(mgt_be_upload(be, dec->tok, &token, sizeof token));
  MGT_CHECK(mgt_tp_embedding_forward(&m->tp, dec->x, dec->tok, wte, 1, C, d->v0, d->Vl));
  MGT_CHECK(mgt_be_add_bias(be, dec->x, wpe + (size_t)pos * C, 1, C));
  for (int l = 0; l < d->L; l++) {
    float *w[P_PER_LAYER];
    layer_views(m, m->w, l, w);
    MGT_CHECK(mgt_be_layernorm_forward(be, dec->ln, dec->mean, dec->rstd, dec->x, w[P_LN1_W],
                                       w[P_LN1_B], 1, C, eps));
    MGT_CHECK(
        mgt_tp_column_forward(&m->tp, dec->qkv, dec->ln, w[P_QKV_W], w[P_QKV_B], 1, C, 3 * Cl));
    MGT_CHECK(
        mgt_be_copy(be, dec->kc[l] + (size_t)pos * Cl, dec->qkv + Cl, sizeof(float) * (size_t)Cl));
    MGT_CHECK(mgt_be_copy(be, dec->vc[l] + (size_t)pos * Cl, dec->qkv + 2 * Cl,
                          sizeof(float) * (size_t)Cl));
    MGT_CHECK(mgt_be_attention_decode(be, dec->att, dec->qkv, dec->kc[l], dec->vc[l], pos + 1,
                                      d->Hl, d->hd));
    MGT_CHECK(mgt_tp_row_forward(&m->tp, dec->tmp, dec->att, w[P_PROJ_W], w[P_PROJ_B], 1, Cl, C));
    MGT_CHECK(mgt_be_add(be, dec->x, dec->tmp, (size_t)C));
    MGT_CHECK(mgt_be_layernorm_forward(be, dec->ln, dec->mean, dec->rstd, dec->x, w[P_LN2_W],
                                       w[P_LN2_B], 1, C, eps));
    MGT_CHECK(mgt_tp_column_forward_gelu(&m->tp, dec->fch, dec->fch_gelu, dec->ln, w[P_FC_W],
                                         w[P_FC_B], 1, C, Fl));
    MGT_CHECK(
        mgt_tp_row_forward(&m->tp, dec->tmp, dec->fch_gelu, w[P_FCP_W], w[P_FCP_B], 1, Fl, C));
    MGT_CHECK(mgt_be_add(be, dec->x, dec->tmp, (size_t)C));
  }
  const mgt_param *lnf = &m->params[m->ix.lnf];
  MGT_CHECK(mgt_be_layernorm_forward(be, dec->ln, dec->mean, dec->rstd, dec->x,
                                     m->w + lnf[0].offset, m->w + lnf[1].offset, 1, C, eps));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, dec->logits, dec->ln, wte, NULL, 1, C, d->Vl));
  MGT_CHECK(gather_row(m, dec->logits, dec->host_shard, dec->host_all, logits));
  return MGT_OK;
}

/* ---- backward ---- */

/* Post-LN: the residual gradient belongs to the LayerNorm's output, not its input; dres is
   then rebuilt by the LayerNorm backward alone. */
static mgt_status post_ln_residual(mgt_gpt *m, float *dln, float *dres) {
  if (!m->d.post_ln) return MGT_OK;
  const size_t n = (size_t)m->d.Nl * m->d.C;
  MGT_CHECK(mgt_be_add(m->be, dln, dres, n));
  return mgt_be_zero(m->be, dres, n * sizeof(float));
}

/* A LayerNorm's backward on this rank's rows. Under sequence parallelism its weight and bias
   gradients are partial sums over the rows, summed over tp_comm before they are added in, so
   that every rank holds the same (replicated) gradient at all times. */
static mgt_status ln_backward(mgt_gpt *m, float *dx, float *dw, float *db, const float *dout,
                              const float *x, const float *w, const float *mean, const float *rstd,
                              int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C;
  if (!d->sp)
    return mgt_be_layernorm_backward(be, dx, dw, db, dout, x, w, mean, rstd, d->Nl, C, acc);
  MGT_CHECK(
      mgt_be_layernorm_backward(be, dx, m->lng, m->lng + C, dout, x, w, mean, rstd, d->Nl, C, 0));
  MGT_CHECK(m->comm->allreduce(m->comm->ctx, m->grid, MGT_AXIS_TP, m->lng, 2 * (size_t)C, MGT_SUM));
  if (!acc) {
    MGT_CHECK(mgt_be_copy(be, dw, m->lng, sizeof(float) * (size_t)C));
    return mgt_be_copy(be, db, m->lng + C, sizeof(float) * (size_t)C);
  }
  MGT_CHECK(mgt_be_add(be, dw, m->lng, (size_t)C));
  return mgt_be_add(be, db, m->lng + C, (size_t)C);
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
  MGT_CHECK(full_rows(m, x_local, &x));
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
  float *w[P_PER_LAYER], *g[P_PER_LAYER];
  layer_views(m, m->w, l, w);
  layer_views(m, m->g, l, g);
  layer_acts *a = acts_of(m, l);
  const float *x = m->res[l];
  int first;
  if (chunk_ending_at(&m->rp, l, d->L, &first)) /* its chunk's forward again, from its input */
    for (int k = first; k <= l; k++)
      MGT_CHECK(layer_forward(m, k, m->res[k], m->res[k + 1], acts_of(m, k), s));
  const layer_sites ds = sites_of(m, l, s);
  float *dres = m->dres, *dloc = d->sp ? m->sp_loc : m->dtmp, *dln;
  const float *dy;

  /* MLP: y = res_mid + dropout(row(gelu(column(ln2(res_mid))))); the row-parallel bias
     gradient comes from every row, as without sequence parallelism */
  MGT_CHECK(mgt_be_dropout_backward(be, dloc, dres, nl, row, &ds.mlp));
  MGT_CHECK(full_grad(m, dloc, &dy));
  /* the GeLU's gradient and the first layer's bias gradient fused into the dx GEMM */
  MGT_CHECK(mgt_tp_row_backward_gelu(&m->tp, m->dfch, g[P_FCP_W], g[P_FCP_B], g[P_FC_B], dy,
                                     a->fch_gelu, w[P_FCP_W], a->fch, N, Fl, C, acc));
  MGT_CHECK(column_back(m, &dln, g[P_FC_W], NULL, m->dfch, a->ln2, w[P_FC_W], Fl, acc));
  MGT_CHECK(post_ln_residual(m, dln, dres));
  MGT_CHECK(ln_backward(m, dres, g[P_LN2_W], g[P_LN2_B], dln, a->res_mid, w[P_LN2_W], a->ln2_mean,
                        a->ln2_rstd, acc));

  /* attention: res_mid = x + dropout(row(attention(column(ln1(x))))) */
  MGT_CHECK(mgt_be_dropout_backward(be, dloc, dres, nl, row, &ds.proj));
  MGT_CHECK(full_grad(m, dloc, &dy));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->datty, g[P_PROJ_W], g[P_PROJ_B], dy, a->atty,
                                w[P_PROJ_W], N, Cl, C, acc));
  if (m->rp.flash) /* the probabilities rebuilt tile by tile inside */
    MGT_CHECK(mgt_be_flash_attention_backward(be, m->dqkv, m->datty, a->qkv, a->atty, a->lse, d->B,
                                              d->T, d->Hl, d->hd, d->tp_rank * d->Hl, m->keylen,
                                              &ds.attn));
  else {
    if (m->rp.selective) /* the probabilities again; atty is rewritten with the same values */
      MGT_CHECK(mgt_be_attention_forward(be, a->atty, a->P, a->qkv, d->B, d->T, d->Hl, d->hd,
                                         d->tp_rank * d->Hl, d->H, m->keylen, &ds.attn,
                                         m->att_scratch));
    MGT_CHECK(mgt_be_attention_backward(be, m->dqkv, m->datty, a->qkv, a->P, d->B, d->T, d->Hl,
                                        d->hd, d->tp_rank * d->Hl, d->H, m->keylen, &ds.attn,
                                        m->att_scratch));
  }
  MGT_CHECK(column_back(m, &dln, g[P_QKV_W], g[P_QKV_B], m->dqkv, a->ln1, w[P_QKV_W], 3 * Cl, acc));
  MGT_CHECK(post_ln_residual(m, dln, dres));
  MGT_CHECK(ln_backward(m, dres, g[P_LN1_W], g[P_LN1_B], dln, x, w[P_LN1_W], a->ln1_mean,
                        a->ln1_rstd, acc));
  return MGT_OK;
}

/* Sums bucket b's pieces over the data-parallel group, as soon as backward completes the
   bucket: started non-blocking with --overlap-grad-reduce, otherwise done here. */
static mgt_status start_bucket(mgt_gpt *m, int b) {
  for (int p = m->bucket_first[b]; p < m->bucket_first[b + 1]; p++, m->n_started++) {
    float *buf = m->g + m->piece_off[p];
    if (m->piece_counts) { /* distributed optimizer: only the owned part is summed here */
      const size_t lo = m->shard[m->grid->dp_rank], hi = m->shard[m->grid->dp_rank + 1],
                   at = m->piece_off[p] < lo ? lo : (m->piece_off[p] > hi ? hi : m->piece_off[p]);
      MGT_CHECK(m->comm->reduce_scatter(m->comm->ctx, m->grid, MGT_AXIS_DP, buf,
                                        m->gshard + (at - lo),
                                        m->piece_counts + (size_t)p * m->grid->dp,
                                        m->cfg.overlap_grad_reduce ? &m->reqs[p] : NULL));
      continue;
    }
    if (m->cfg.overlap_grad_reduce)
      MGT_CHECK(m->comm->iallreduce(m->comm->ctx, m->grid, MGT_AXIS_DP, buf, m->piece_n[p], MGT_SUM,
                                    &m->reqs[p]));
    else
      MGT_CHECK(
          m->comm->allreduce(m->comm->ctx, m->grid, MGT_AXIS_DP, buf, m->piece_n[p], MGT_SUM));
  }
  if (!m->cfg.overlap_grad_reduce) m->n_done = m->n_started;
  return MGT_OK;
}

/* Drives the started all-reduces: MPI progresses them only inside MPI calls. */
static mgt_status progress_buckets(mgt_gpt *m) {
  while (m->n_done < m->n_started) {
    int done = 0;
    MGT_CHECK(m->comm->test(m->comm->ctx, &m->reqs[m->n_done], &done));
    if (!done) break;
    m->n_done++;
  }
  return MGT_OK;
}

/* From the gradient of the final LayerNorm's output down to the embeddings, starting each
   bucket's data-parallel all-reduce as soon as backward completes it (bucket 0, the final
   LayerNorm and the heads, first). The gradient is in m->dtmp for every row, or with
   local_ready already this rank's rows of it in m->sp_loc (sequence parallelism). */
static mgt_status trunk_backward(mgt_gpt *m, const step_ctx *s, int accumulate, int dp_sync,
                                 int local_ready) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C;
  const size_t nl = (size_t)d->Nl * C;
  float *gwte = m->g + m->params[m->ix.wte].offset, *gwpe = m->g + m->params[m->ix.wpe].offset;
  const mgt_param *lnf = &m->params[m->ix.lnf];
  const float *dlnf = m->dtmp;
  if (d->sp) {
    if (!local_ready)
      MGT_CHECK(mgt_be_copy(be, m->sp_loc, m->dtmp + (size_t)d->r0 * C, sizeof(float) * nl));
    dlnf = m->sp_loc;
  }
  MGT_CHECK(mgt_be_zero(be, m->dres, sizeof(float) * nl));
  MGT_CHECK(ln_backward(m, m->dres, m->g + lnf[0].offset, m->g + lnf[1].offset, dlnf, m->res[d->L],
                        m->w + lnf[0].offset, m->lnf_mean, m->lnf_rstd, accumulate));
  m->n_started = m->n_done = 0;
  if (dp_sync) MGT_CHECK(start_bucket(m, 0));

  for (int l = d->L - 1; l >= 0; l--) {
    MGT_CHECK(layer_backward(m, l, s, accumulate));
    if (dp_sync) {
      MGT_CHECK(progress_buckets(m));
      MGT_CHECK(start_bucket(m, d->L - l));
    }
  }
  mgt_dropout de =
      dropout_site(m, m->cfg.hidden_dropout, s->sample_base, 0xFFFF, MGT_DROPOUT_EMBED);
  de.first = (uint64_t)d->r0 * C;
  MGT_CHECK(mgt_be_dropout_backward(be, m->dres, m->dres, nl, (size_t)d->T * C, &de));
  /* every row's gradient (gathered under sequence parallelism): the embedding gradients are
     then complete on each rank, as without it */
  const float *demb;
  MGT_CHECK(full_grad(m, m->dres, &demb));
  /* the tied LM head writes the word-embedding gradient first; a task model has no LM head */
  if (d->task && !accumulate)
    MGT_CHECK(mgt_be_zero(be, gwte, sizeof(float) * m->params[m->ix.wte].numel));
  MGT_CHECK(mgt_be_embedding_backward(be, gwte, gwpe, demb, m->inputs, d->B, d->T, C, d->v0, d->Vl,
                                      accumulate));
  if (m->ix.tte >= 0) {
    float *gtte = m->g + m->params[m->ix.tte].offset;
    if (!accumulate) MGT_CHECK(mgt_be_zero(be, gtte, sizeof(float) * 2 * (size_t)C));
    MGT_CHECK(
        mgt_be_embedding_backward(be, gtte, NULL, demb, m->types, d->B, d->T, C, 0, 2, accumulate));
  }
  if (dp_sync) {
    MGT_CHECK(start_bucket(m, d->L + 1));
    for (; m->n_done < m->n_started; m->n_done++)
      MGT_CHECK(m->comm->wait(m->comm->ctx, &m->reqs[m->n_done]));
  }
  return MGT_OK;
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
    MGT_CHECK(
        m->comm->allreduce(m->comm->ctx, m->grid, MGT_AXIS_TP, m->dtmp, (size_t)N * C, MGT_SUM));
  return trunk_backward(m, &s, accumulate, sync_dp && m->grid->dp > 1, 1);
}

/* ---- BERT ---- */

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
  MGT_REQUIRE(d->bert, "a GPT model takes windows of tokens, not BERT samples");
  int32_t *ids = m->host_tokens, *typ = m->host_tokens + N;
  int32_t *mrow = m->host_rows, *mlab = m->host_rows + (size_t)B * d->P;
  int32_t *len = m->host_b, *sop = m->host_b + B;
  /* the order label, or a fine-tuning example's class (its rows' labels side by side) */
  const int classes = d->task ? mgt_task_classes(d->task) : 2;
  int M = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *r = rows + (size_t)b * W;
    len[b] = r[mgt_bert_length_at(T)];
    const int32_t label = r[mgt_bert_random_at(T)];
    MGT_REQUIRE(len[b] >= 1 && len[b] <= T && label >= 0 && label < classes,
                "BERT sample row %d: length %d or label %d out of range", b, len[b], label);
    if (b % d->rows == 0) sop[b / d->rows] = label;
    int in_sample = 0;
    for (int t = 0; t < T; t++) {
      const int32_t x = r[MGT_BERT_TOKENS * T + t], y = r[MGT_BERT_TYPES * T + t],
                    lab = r[MGT_BERT_LABELS * T + t];
      MGT_REQUIRE(x >= 0 && x < d->V, "token id %d out of range [0, %d) in sample row %d", x, d->V,
                  b);
      MGT_REQUIRE(y == 0 || y == 1, "token type %d (not 0 or 1) in sample row %d", y, b);
      MGT_REQUIRE(lab >= -1 && lab < d->V && !(d->task && lab >= 0),
                  "label %d out of range in sample row %d (a task row has no masked positions)",
                  lab, b);
      ids[b * T + t] = x;
      typ[b * T + t] = y;
      if (lab < 0) continue;
      MGT_REQUIRE(t < len[b] && ++in_sample <= d->P,
                  "sample row %d: a masked position in the padding, or more than the %d masked "
                  "positions --mask-prob allows",
                  b, d->P);
      mrow[M] = b * T + t;
      mlab[M++] = lab;
    }
  }
  const mgt_backend *be = m->be;
  MGT_CHECK(mgt_be_upload(be, m->inputs, ids, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(be, m->types, typ, sizeof(int32_t) * (size_t)N));
  MGT_CHECK(mgt_be_upload(be, m->keylen, len, sizeof(int32_t) * (size_t)B));
  MGT_CHECK(mgt_be_upload(be, m->sop_tgt, sop, sizeof(int32_t) * (size_t)(B / d->rows)));
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
  const float eps = (float)m->cfg.layernorm_epsilon;
  memset(out, 0, sizeof *out);
  MGT_CHECK(trunk_forward(m, s));
  float *h[H_LM];
  views(m, m->w, m->ix.lm, H_LM, h);
  const float *wte = m->w + m->params[m->ix.wte].offset;
  if (M > 0) {
    MGT_CHECK(mgt_be_gather_rows(be, m->lm_in, m->lnf, m->lm_rows, M, C));
    MGT_CHECK(mgt_tp_column_forward(&m->tp, m->lm_pre, m->lm_in, h[H_DENSE_W], NULL, M, C, C));
    MGT_CHECK(
        mgt_be_bias_act_forward(be, MGT_ACT_GELU_ERF, m->lm_act, m->lm_pre, h[H_DENSE_B], M, C));
    MGT_CHECK(mgt_be_layernorm_forward(be, m->lm_ln, m->lm_mean, m->lm_rstd, m->lm_act, h[H_LN_W],
                                       h[H_LN_B], M, C, eps));
    MGT_CHECK(mgt_tp_column_forward(&m->tp, m->logits, m->lm_ln, wte, h[H_BIAS], M, C, d->Vl));
    MGT_CHECK(mgt_tp_xent_forward(&m->tp, &m->xent, m->logits, m->targets, M, d->Vl, d->nv, d->v0,
                                  keep_exp, &out->lm_sum));
  }
  out->lm_count = M;
  if (!d->binary) return MGT_OK;
  float *q[Q_POOL];
  views(m, m->w, m->ix.pool, Q_POOL, q);
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
  MGT_CHECK(mgt_be_xent_loss(be, x->losses, x->rowmax, x->sumtgt, x->sumtgt + B, B, &out->sop_sum));
  for (int b = 0; b < B; b++)
    out->sop_correct += pred[b] == tgt[b];
  out->sop_count = B;
  return MGT_OK;
}

mgt_status mgt_bert_forward(mgt_gpt *m, const int32_t *rows, mgt_bert_losses *out) {
  MGT_REQUIRE(!m->d.task, "a fine-tuning model takes mgt_task_forward");
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
  MGT_REQUIRE(!d->task, "a fine-tuning model takes mgt_task_forward_backward");
  MGT_CHECK(load_bert(m, rows));
  step_ctx s = {sample_base, 1};
  MGT_CHECK(bert_forward(m, &s, 1, out));
  const int M = m->n_masked;
  const int acc = accumulate;
  float *h[H_LM], *gh[H_LM];
  views(m, m->w, m->ix.lm, H_LM, h);
  views(m, m->g, m->ix.lm, H_LM, gh);
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
    MGT_CHECK(mgt_be_layernorm_backward(be, m->dlm2, gh[H_LN_W], gh[H_LN_B], m->dlm, m->lm_act,
                                        h[H_LN_W], m->lm_mean, m->lm_rstd, M, C, acc));
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
  if (d->binary) {
    float *q[Q_POOL], *gq[Q_POOL];
    views(m, m->w, m->ix.pool, Q_POOL, q);
    views(m, m->g, m->ix.pool, Q_POOL, gq);
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
  return trunk_backward(m, &s, acc, sync_dp && m->grid->dp > 1, 0);
}

/* ---- fine-tuning heads ---- */

static mgt_dropout head_dropout(const mgt_gpt *m, const step_ctx *s) {
  return dropout_site(m, s->train ? m->cfg.hidden_dropout : 0, s->sample_base, 0xFFFE,
                      MGT_DROPOUT_HEAD);
}

/* The trunk, the pooled [CLS] of every row (tanh, dropout) and the task head: logits (B, K)
   read as (examples, rows * K). The loss and predictions of the first n examples. */
static mgt_status task_forward(mgt_gpt *m, const step_ctx *s, int n, int keep_exp, int32_t *pred,
                               mgt_task_result *out) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, B = d->B, W = d->rows * d->K;
  memset(out, 0, sizeof *out);
  MGT_CHECK(trunk_forward(m, s));
  float *q[Q_POOL];
  views(m, m->w, m->ix.pool, Q_POOL, q);
  MGT_CHECK(mgt_be_gather_rows(be, m->pool_in, m->lnf, m->cls_rows, B, C));
  MGT_CHECK(mgt_tp_column_forward(&m->tp, m->pool_pre, m->pool_in, q[Q_POOL_W], NULL, B, C, C));
  MGT_CHECK(mgt_be_bias_act_forward(be, MGT_ACT_TANH, m->pooled, m->pool_pre, q[Q_POOL_B], B, C));
  const mgt_dropout dh = head_dropout(m, s);
  MGT_CHECK(mgt_be_dropout_forward(be, m->pooled, m->pooled, NULL, (size_t)B * C, (size_t)C, &dh));
  MGT_CHECK(
      mgt_tp_column_forward(&m->tp, m->sop_logits, m->pooled, q[Q_BIN_W], q[Q_BIN_B], B, C, d->K));
  if (n == 0) return MGT_OK;
  int32_t *p = m->host_b, *tgt = m->host_b + B;
  float *val = (float *)(m->host_b + 2 * B);
  const mgt_tp_xent *x = &m->sop_xent;
  MGT_CHECK(mgt_be_argmax(be, m->sop_logits, n, W, W, val, p));
  MGT_CHECK(mgt_be_download(be, tgt, m->sop_tgt, sizeof(int32_t) * (size_t)n));
  MGT_CHECK(mgt_be_xent_max(be, x->rowmax, m->sop_logits, n, W, W));
  MGT_CHECK(mgt_be_xent_sumexp(be, x->sumtgt, x->sumtgt + n, m->sop_logits, x->rowmax, m->sop_tgt,
                               n, W, W, 0, keep_exp));
  MGT_CHECK(
      mgt_be_xent_loss(be, x->losses, x->rowmax, x->sumtgt, x->sumtgt + n, n, &out->loss_sum));
  for (int g = 0; g < n; g++) {
    out->correct += p[g] == tgt[g];
    if (pred) pred[g] = p[g];
  }
  out->count = n;
  return MGT_OK;
}

static mgt_status check_task(const mgt_gpt *m) {
  MGT_REQUIRE(m->d.task, "the model has no fine-tuning head (--task)");
  return MGT_OK;
}

mgt_status mgt_task_forward(mgt_gpt *m, const int32_t *rows, int n, int32_t *pred,
                            mgt_task_result *out) {
  MGT_CHECK(check_task(m));
  MGT_REQUIRE(n >= 0 && n <= m->d.B / m->d.rows, "%d examples in a micro-batch of %d", n,
              m->d.B / m->d.rows);
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
  const int N = d->B * d->T, C = d->C, B = d->B, G = d->B / d->rows, W = d->rows * d->K;
  MGT_CHECK(load_bert(m, rows));
  /* dropout streams by row, so that an example's masks do not depend on the micro-batch */
  step_ctx s = {example_base * (uint64_t)d->rows, 1};
  MGT_CHECK(task_forward(m, &s, G, 1, NULL, out));
  float *q[Q_POOL], *gq[Q_POOL];
  views(m, m->w, m->ix.pool, Q_POOL, q);
  views(m, m->g, m->ix.pool, Q_POOL, gq);
  float *dlnf = m->dtmp;
  MGT_CHECK(mgt_be_zero(be, dlnf, sizeof(float) * (size_t)N * C));
  MGT_CHECK(
      mgt_be_xent_backward(be, m->sop_logits, m->sop_xent.sumtgt, m->sop_tgt, G, W, W, 0, scale));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool, gq[Q_BIN_W], gq[Q_BIN_B], m->sop_logits,
                                m->pooled, q[Q_BIN_W], B, C, d->K, accumulate));
  const mgt_dropout dh = head_dropout(m, &s);
  MGT_CHECK(mgt_be_dropout_backward(be, m->dpool, m->dpool, (size_t)B * C, (size_t)C, &dh));
  MGT_CHECK(mgt_be_act_backward(be, MGT_ACT_TANH, m->dpool, m->dpool, m->pool_pre, (size_t)B * C));
  MGT_CHECK(mgt_tp_row_backward(&m->tp, m->dpool2, gq[Q_POOL_W], gq[Q_POOL_B], m->dpool, m->pool_in,
                                q[Q_POOL_W], B, C, C, accumulate));
  MGT_CHECK(mgt_be_scatter_add_rows(be, dlnf, m->dpool2, m->cls_rows, B, C));
  return trunk_backward(m, &s, accumulate, sync_dp && m->grid->dp > 1, 0);
}

/* ---- accessors ---- */

const mgt_gpt_dims *mgt_gpt_get_dims(const mgt_gpt *m) { return &m->d; }
const mgt_backend *mgt_gpt_backend(const mgt_gpt *m) { return m->be; }
const mgt_param *mgt_gpt_params(const mgt_gpt *m, int *count) {
  *count = m->n_params;
  return m->params;
}
float *mgt_gpt_param_data(mgt_gpt *m) {
  (void)params_ready(m, -1);  /* the caller reads them: a failed wait has aborted MPI anyway */
  mgt_gpt_weights_changed(m); /* or writes them */
  return m->w;
}
float *mgt_gpt_grad_data(mgt_gpt *m) { return m->g; }
size_t mgt_gpt_param_count(const mgt_gpt *m) { return m->n_floats; }

float *mgt_gpt_grad_shard(mgt_gpt *m, size_t *first, size_t *n) {
  if (!m->shard) {
    *first = 0, *n = m->n_floats;
    return m->g;
  }
  const int r = m->grid->dp_rank;
  *first = m->shard[r], *n = m->shard[r + 1] - m->shard[r];
  return m->gshard;
}

mgt_status mgt_gpt_gather_params(mgt_gpt *m) {
  if (!m->piece_counts) return MGT_OK;
  MGT_CHECK(params_ready(m, -1)); /* a second step before any forward */
  const int overlap = m->cfg.overlap_param_gather;
  /* in the order the forward needs them: embeddings, layers 0.., the final LayerNorm */
  for (int k = 0; k < m->n_buckets; k++) {
    const int b = m->n_buckets - 1 - k;
    for (int p = m->bucket_first[b]; p < m->bucket_first[b + 1]; p++)
      MGT_CHECK(m->comm->allgatherv(m->comm->ctx, m->grid, MGT_AXIS_DP, m->w + m->piece_off[p],
                                    m->piece_counts + (size_t)p * m->grid->dp,
                                    m->piece_displs + (size_t)p * m->grid->dp,
                                    overlap ? &m->greqs[p] : NULL));
    m->gathering[b] = (char)overlap;
  }
  mgt_gpt_weights_changed(m);
  return MGT_OK;
}
const mgt_segment *mgt_gpt_segments(const mgt_gpt *m, int *count) {
  *count = m->n_params;
  return m->segs;
}

/* ---- state ---- */

static mgt_status list_params(const mgt_param *params, int n, int tp_rank, int dp_rank, float *flat,
                              const mgt_backend *mem, mgt_state *out) {
  for (int i = 0; i < n; i++) {
    mgt_state_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "model/%s", params[i].name);
    t.dtype = MGT_DTYPE_F32;
    t.shard = params[i].shard;
    t.replica = replica_of(&params[i], tp_rank, dp_rank);
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
  build_params(cfg, &d, NULL, &n, &total, NULL);
  mgt_param *params = calloc((size_t)n, sizeof *params);
  if (!params) MGT_FAIL(MGT_ERR_NOMEM, "out of memory describing the model");
  build_params(cfg, &d, params, &n, &total, NULL);
  mgt_status st = list_params(params, n, tp_rank, dp_rank, NULL, NULL, out);
  free(params);
  return st;
}

mgt_status mgt_gpt_state(mgt_gpt *m, mgt_state *out) {
  MGT_CHECK(params_ready(m, -1)); /* a checkpoint reads every parameter */
  mgt_gpt_weights_changed(m);     /* and a load writes them */
  return list_params(m->params, m->n_params, m->grid->tp_rank, m->grid->dp_rank, m->w, m->be, out);
}
