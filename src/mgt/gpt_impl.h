/* Private to the model's files (src/model/): the model object, the activation sets and the
   helpers one file of the model shares with another. The public interface is include/mgt/gpt.h. */
#pragma once

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/data.h"
#include "mgt/ddp.h"
#include "mgt/gpt.h"
#include "mgt/rng.h"
#include "mgt/tp.h"

/* The parameter slots of a layer, in flat-buffer order; the description chooses which a layer
   has (gpt_layer_views gives NULL for the others). A pair the block multiplies as one matrix is
   stored as two logical tensors back to back, so that each reshards on its own: grouped
   attention's query and key_value (rows [q | k | v]), SwiGLU's gate and up (outputs
   [gate | up]), and their biases. */
enum {
  P_LN1_W,
  P_LN1_B, /* LayerNorm only */
  P_QKV_W, /* with grouped-query attention the query rows only, then P_KV_W */
  P_KV_W,
  P_QKV_B, /* biases: not with --disable-bias-linear */
  P_KV_B,
  P_QN_W, /* --qk-layernorm: the RMSNorm weights of each head's query, then of its key */
  P_KN_W,
  P_PROJ_W,
  P_PROJ_B,
  P_LN2_W,
  P_LN2_B,
  P_FC_W, /* SwiGLU: the gate, then P_UP_W */
  P_UP_W,
  P_FC_B,
  P_UP_B,
  P_FCP_W,
  P_FCP_B,
  P_RT_W, /* a Mixture-of-Experts layer's router, then its experts' in place of the MLP */
  P_EFC_W,
  P_EUP_W,
  P_EFCP_W,
  P_RT_B,  /* the router's expert bias (aux-loss-free balancing): no gradient, moved by counts */
  P_SFC_W, /* the shared expert, as the MLP (SwiGLU: the gate, then P_SUP_W), and its gate */
  P_SUP_W,
  P_SFCP_W,
  P_SG_W,
  P_SLOTS
};

/* BERT's heads, in flat-buffer order after the final LayerNorm: the LM head, then the pooler
   and the sentence-order (binary) head. */
enum { H_DENSE_W, H_DENSE_B, H_LN_W, H_LN_B, H_BIAS, H_LM };

enum { Q_POOL_W, Q_POOL_B, Q_BIN_W, Q_BIN_B, Q_POOL };

/* Where the model-wide parameters sit in the descriptor array (-1: absent). */
typedef struct param_index {
  int wte, wpe, tte, first_layer, lnf, lm, pool;
  int out;               /* the untied output layer, else -1 (the output layer is wte) */
  int per_layer[2];      /* parameters of a dense layer, [1]: of a Mixture-of-Experts layer */
  int8_t at[2][P_SLOTS]; /* a slot's index among its layer's parameters, -1 when absent */
} param_index;

/* The causal LM's output layer: its own weight, or the word embeddings (tied). */
static inline int gpt_output_param(const param_index *ix) {
  return ix->out >= 0 ? ix->out : ix->wte;
}

/* Activations one layer keeps for its backward pass. */
typedef struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
  float *qkv;                       /* (N, QKVl): [q | k | v] of the heads and key/value groups */
  float *qn_raw, *qn_rstd, *kn_raw, *kn_rstd; /* --qk-layernorm: q and k before their norm */
  float *P;                                   /* (B, Hl, T, T); NULL with --use-flash-attn */
  float *lse;     /* (B, Hl, T) row log-sum-exp, with --use-flash-attn */
  float *atty;    /* (N, Cl) */
  float *res_mid; /* (N,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu; /* (N, Fo) and (N, Fl): before and after GeLU or SwiGLU; in an MoE
                            layer (M, Foe) and (M, Fel) of the experts' M = N*K rows at most */
  /* a Mixture-of-Experts layer: the router's logits and scores (N, E), their log-sum-exp (N),
     each token's K experts, weights and rows among the experts' (-1: dropped) (N, K), the rows
     gathered for the experts in their order (M: the token of each), and the experts' outputs
     (M, C, partial sums over tp) */
  float *logits, *probs, *rlse, *rw, *mout;
  int32_t *ridx, *rpos, *rperm;
  float *xin; /* expert parallelism: the rows this rank's experts received, by expert (ep M, C) */
  /* the shared expert: its first projections (N, Fso) and activation (N, Fsl); with its gate
     its output (N, C, partial over tp), the gate's logit, weight, sigmoid and log-sum-exp (N)
     and expert (N, all 0): a router of one expert */
  float *sfch, *sact, *sout, *glogit, *gw, *gprobs, *glse;
  int32_t *gidx;
} layer_acts;

typedef struct rplan {
  int full, selective, block, k, nsets;
  int flash; /* --use-flash-attn: no probabilities kept */
} rplan;

struct mgt_gpt {
  mgt_gpt_dims d; /* the spec is d.spec */
  mgt_model_layout layout;
  mgt_gpt_training run; /* zero (no dropout) until mgt_gpt_train_with */
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
  int32_t *positions; /* (N) each input's position when they restart after each document */
  int32_t *kfirst;    /* (N) each row's first key: its document's first row */
  float *dres, *dtmp, *dqkv, *datty, *dfch, *att_scratch;
  float *inv_freq; /* (hd/2) rotary frequencies, with --position-embedding-type rope */
  float *qkvx;     /* (N, 3*Cl) grouped-query attention: the groups repeated for the heads, then the
                      groups' gradient; else NULL */
  float *dact;     /* (N, Fl) the gradient of SwiGLU's output, else NULL */
  /* --sequence-parallel: a block of this rank's rows (N/tp, C), the LayerNorm gradients' sum
     over tp (2C) and the floats of each rank's rows; m->lnf (N, C) is also the buffer rows are
     gathered into inside the layers */
  float *sp_loc, *lng;
  float *gain; /* --apply-layernorm-1p: the gain 1 + w of the norm being run (C or hd floats) */
  float *qkg;  /* --qk-layernorm at tp > 1: the q and k norms' gradients summed over tp (2 hd) */
  float *qks;  /* --qk-layernorm-full at tp > 1: each row's sums over all heads (N) */
  /* Mixture-of-Experts (src/model/moe.c): the rows gathered for the experts (M, C), the gradient
     of their outputs then of their inputs (M, C), of their first projections (M, Foe) and
     activations (M, Fel), of the layer's input (N, C), of the router's logits (N, E) and of the
     routing weights (N, K); the load-balancing loss's gradient of the scores (E) */
  float *moe_xp, *moe_dout, *moe_dfch, *moe_dact, *moe_dx, *moe_dlogits, *moe_dw, *moe_aux;
  /* the shared expert's gradients: of its first projections (N, Fso), activation (N, Fsl),
     output under the gate (N, C), the gate's weight and logit (N); each row's own position */
  float *sh_dfch, *sh_dact, *sh_ds, *sh_dg, *sh_dglogit;
  int32_t *sh_pos;
  /* expert parallelism: rows as received from (and sent back to) the other ranks (ep M, C),
     this rank's experts' outputs or input gradients by expert (ep M, C), and the orders
     between the two (ep M each) */
  float *moe_recv, *moe_eout;
  int32_t *moe_order, *moe_unorder;
  struct gpt_moe_host *moe; /* host-side routing of each layer (moe.c) */
  double aux_scale;         /* 1 / the micro-batches of the global batch (the losses' weight) */
  double aux_loss_scale;    /* the loss scale of this micro-batch's gradients */
  double aux_sums[2];       /* their values (load balancing, z) summed since last read */
  double spread[2];         /* the fewest and most tokens an expert got, over the mean, since */
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

  int32_t *host_tokens; /* (N) staging of inputs and targets, then of positions */
  /* data parallelism over the flat buffers: buckets of the final LayerNorm and heads, the
     layers last to first, the embeddings (bucket_range in gpt.c) */
  mgt_ddp *ddp;
  int weight_copies; /* --bf16/--fp16: the backend keeps 16-bit copies of w */
  /* the region of the 16-bit activations (dims act16) and its bytes */
  float *act16;
  size_t act16_bytes;
};

typedef struct arena {
  float *base;
  size_t used; /* floats */
} arena;

typedef struct step_ctx {
  uint64_t sample_base;
  int train; /* dropout on */
} step_ctx;

/* The three dropout sites of layer l for this micro-batch. */
typedef struct layer_sites {
  mgt_dropout attn, proj, mlp;
} layer_sites;

static inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static inline float *take(arena *a, size_t n) {
  float *p = a->base ? a->base + a->used : NULL;
  a->used += round16(n);
  return p;
}

/* ---- parameters (params.c) ---- */

/* Lists the parameters in flat-buffer order; with out == NULL only counts them. */
/* The random stream of a layer's tensor of stream code `code` in layer l (params.c says the
   rule: the first sixteen codes as every checkpoint so far, later ones in streams of their own). */
uint32_t gpt_layer_stream(uint32_t code, int l);
void gpt_build_params(const mgt_gpt_dims *d, mgt_param *out, int *n, size_t *total,
                      param_index *ix);
/* The one decision of who holds the saved copy: data-parallel replica d holds copy d; a
   replicated tensor's copy is tensor-parallel rank 0's, the others are duplicates. */
int gpt_replica_of(const mgt_param *p, int tp_rank, int dp_rank, int ep);
/* The experts of expert-parallel rank ep_rank in d. */
void gpt_dims_set_expert_rank(mgt_gpt_dims *d, int ep_rank);
void gpt_layer_views(const mgt_gpt *m, float *base, int l, float *v[P_SLOTS]);
/* The index of layer l's first parameter and how many it has. */
int gpt_layer_first(const mgt_gpt *m, int l, int *count);
/* Views of `count` consecutive parameters from index first (-1: none). */
void gpt_views(const mgt_gpt *m, float *base, int first, int count, float **v);
mgt_status gpt_init_params(mgt_gpt *m, uint64_t seed);

/* ---- activations and the memory plan (layout.c) ---- */

/* Which activations a layer keeps: --recompute-granularity full recomputes whole layers from
   their inputs (the residual stream is always kept), in chunks of k layers (uniform: one chunk
   live at a time, k sets) or for the first k layers only (block: one shared set, the others
   their own); selective keeps every layer's set but one shared buffer of attention
   probabilities, recomputed before each attention backward. */
rplan gpt_recompute_plan(const mgt_model_layout *layout, int L);
/* The recomputed chunk whose last layer is l ([*first, l]), or 0 when l starts none. */
int gpt_chunk_ending_at(const rplan *p, int l, int L, int *first);
/* Places every activation buffer; with m->arena == NULL it only counts floats. */
size_t gpt_layout_activations(mgt_gpt *m, const mgt_gpt_dims *d, const rplan *rp);
layer_acts *gpt_acts_of(mgt_gpt *m, int l);
/* What a layer keeps of its attention for the backward: nothing (decoding: the cache), its
   probabilities in a buffer of its own, in the buffer P every layer shares (selective
   recomputation), or each row's log-sum-exp (flash). */
enum { GPT_ATTN_NONE, GPT_ATTN_PROBS, GPT_ATTN_SHARED, GPT_ATTN_LSE };
/* One layer's activations in the arena, for training (N rows, Nl of them this rank's under
   sequence parallelism; keep16: the GEMM inputs the 16-bit region holds are left NULL) and
   for decoding (one row a sequence): the one layout of both. */
void gpt_take_layer(arena *a, const mgt_gpt_dims *d, size_t N, size_t Nl, int keep16, int attn,
                    float *P, layer_acts *la);

/* ---- the transformer block and the trunk (block.c) ---- */

/* A layer's rows: the micro-batch's (N = B*T, this rank's Nl of them, sequence parallelism as
   configured), or N decoding positions (N = Nl), one of each of N sequences: row i's key and
   value join its sequence's cache (kc, vc + slot[i] * slot_stride; max_len x KVl) at pos[i],
   and its attention reads positions 0..pos[i] from it. Decoding is the block's forward with
   this cache hook, not a copy of the block. */
typedef struct layer_rows {
  int N, Nl, sp;
  float *kc, *vc;
  const int *pos, *slot; /* slot NULL: every row in the cache at kc, vc */
  size_t slot_stride;
} layer_rows;

layer_rows gpt_batch_rows(const mgt_gpt *m);
/* The description's norm (LayerNorm with its bias b, or RMSNorm) of N rows of x. */
/* The gain a norm multiplies by: its stored weight w, or with --apply-layernorm-1p 1 + w, made
   in m->gain (which the next call remakes). */
mgt_status gpt_norm_gain(const mgt_gpt *m, const float *w, const float **gain);
/* The same for a norm of n floats (the q/k norms' head size). */
mgt_status gpt_norm_gain_n(const mgt_gpt *m, const float *w, int n, const float **gain);
mgt_status gpt_norm_forward(const mgt_gpt *m, float *out, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int N);
/* The final norm's weight and bias (NULL: RMSNorm) in base (m->w or m->g). */
void gpt_final_norm(const mgt_gpt *m, float *base, float **w, float **b);
/* Layer l from its input x to its output y, keeping what its backward needs in a. */
mgt_status gpt_layer_forward(mgt_gpt *m, int l, const layer_rows *r, const float *x, float *y,
                             layer_acts *a, const step_ctx *s);

mgt_dropout gpt_dropout_site(const mgt_gpt *m, double p, uint64_t sample_base, int layer, int site);
mgt_status gpt_trunk_forward(mgt_gpt *m, const step_ctx *s);
/* From the gradient of the final LayerNorm's output down to the embeddings, starting each
   bucket's data-parallel all-reduce as soon as backward completes it (bucket 0, the final
   LayerNorm and the heads, first). The gradient is in m->dtmp for every row, or with
   local_ready already this rank's rows of it in m->sp_loc (sequence parallelism). */
mgt_status gpt_trunk_backward(mgt_gpt *m, const step_ctx *s, int accumulate, int dp_sync,
                              int local_ready);

/* ---- Mixture-of-Experts layers (moe.c) ---- */

/* Host-side routing state of the model's MoE layers (NULL without). */
mgt_status gpt_moe_create(mgt_gpt *m);
void gpt_moe_destroy(mgt_gpt *m);
/* Layer l's MoE in place of the MLP, on the N rows of `in` (every row, gathered): y (N, C) gets
   the experts' outputs weighted by the router, a partial sum over tp to be reduced; dropless:
   no capacity whatever was configured. */
mgt_status gpt_moe_forward(mgt_gpt *m, int l, int N, const float *in, layer_acts *a, float *y,
                           int dropless);
/* Its backward from dy (N, C, every row): dx (N, C) the gradient of its input, a partial sum over
   tp to be reduced; the router's and the experts' gradients into g (accumulated with acc). */
mgt_status gpt_moe_backward(mgt_gpt *m, int l, const float *in, const float *dy, layer_acts *a,
                            float *dx, int acc);

/* ---- the heads (heads.c) ---- */

/* Gathers the vocabulary shards of one row of logits into the full vocabulary (host). */
mgt_status gpt_gather_row(mgt_gpt *m, const float *row_local, float *host_shard, float *all,
                          float *logits);
