/* The transformer of both model families, with Megatron-LM's intra-layer (tensor) model
   parallelism: vocabulary-parallel embedding and cross-entropy, attention split by heads, MLP
   split on its inner dimension, everything else computed redundantly on each tensor-parallel
   rank. GPT-2 (cfg->model MGT_MODEL_GPT): causal attention, next-token loss. BERT
   (MGT_MODEL_BERT): token types, a padding mask, pre-LN blocks or the original post-LN ones,
   the LM head (dense, erf GeLU, LayerNorm, tied output, bias) on the masked positions and the
   pooler (dense + tanh on [CLS]) with the sentence-order head. */
#pragma once

#include <stdint.h>

#include "mgt/backend.h"
#include "mgt/config.h"
#include "mgt/comm.h"
#include "mgt/grid.h"
#include "mgt/model.h"
#include "mgt/state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Logical sizes and this rank's share of them. */
typedef struct mgt_gpt_dims {
  int L, C, H, F, T, maxpos, V, Vp; /* layers, hidden, heads, ffn, seq, positions, vocab */
  int B;                            /* micro-batch rows (examples times spec.rows) */
  mgt_model_spec spec;              /* what the model is (mgt/model.h) */
  int tp, tp_rank;
  int hd;             /* head size C / H */
  int Cl, Hl, Fl, Vl; /* local: C/tp (attention width), H/tp, F/tp, Vp/tp */
  int v0, nv;         /* first vocabulary row held here, and how many are not padding */
  /* key/value heads (spec.groups; H unless grouped-query attention), Gl = G/tp of them here;
     KVl = Gl*hd floats of a row's keys (and of its values), QKVl = Cl + 2*KVl of its QKV
     projection, [q | k | v] */
  int G, Gl, KVl, QKVl;
  int Fo; /* the MLP's first projection's local outputs: Fl, or 2*Fl (gate and up) with SwiGLU */
  /* Mixture-of-Experts (spec.experts > 0): E experts, each token to K of them; an expert's inner
     width Fe, Fel = Fe/tp of it here, Foe its first projections' local outputs (Fel, or 2*Fel) */
  int E, K, Fe, Fel, Foe;
  int Fs, Fsl, Fso; /* the shared expert's (spec.shared_ffn): Fs, Fs/tp here, and its Foe */
  /* expert parallelism: ep ranks share the experts out, this one (ep_rank) holding El of them
     from e0 */
  int ep, ep_rank, El, e0;
  /* --sequence-parallel (tp > 1): outside the tensor-parallel regions this rank holds token
     rows [r0, r0 + Nl) of the micro-batch's B*T; otherwise r0 = 0, Nl = B*T */
  int sp, r0, Nl;
  int logit_rows; /* GPT: rows of output-layer logits held at once (--logits-chunk-rows) */
  /* --bf16/--fp16: bytes per element of the GEMM-input activations kept in 16 bits (the MLP's
     GeLU output): 2 on GPUs, 4 on the CPU (floats holding 16-bit values); 0 at fp32 */
  int act16;
} mgt_gpt_dims;

/* Bytes one rank needs, computed before anything is allocated. */
typedef struct mgt_gpt_memory {
  size_t params, grads, optimizer;
  size_t weight_copies;         /* --bf16/--fp16: the 16-bit weights (floats when emulated) */
  size_t activations;           /* as configured */
  size_t activations_full;      /* without recomputation */
  size_t activations_recompute; /* with full recomputation, one layer per chunk */
  size_t activations_selective; /* with --recompute-granularity selective */
  size_t total; /* params + weight copies + grads + optimizer + activations as configured */
} mgt_gpt_memory;

enum { MGT_PARAM_NAME = 64 };

/* One parameter tensor: a view into the flat buffers and where its shard sits. */
typedef struct mgt_param {
  char name[MGT_PARAM_NAME]; /* e.g. "layers.3.attention.qkv.weight" */
  size_t offset, numel;      /* in the flat buffers, in floats */
  mgt_shard shard;
  uint32_t id;    /* RNG stream of its initialization */
  float init_std; /* > 0: normal init; otherwise constant init_value */
  float init_value;
  int decay;      /* weight decay applies */
  int replicated; /* every tensor-parallel rank holds the same values */
  int expert;     /* an MoE layer's experts: over the expert-parallel ranks */
} mgt_param;

typedef struct mgt_gpt mgt_gpt;

/* The dimensions of a model of `spec` in `layout` at tensor-parallel rank tp_rank of tp. */
void mgt_gpt_dims_of(const mgt_model_spec *spec, const mgt_model_layout *layout, int tp,
                     int tp_rank, mgt_gpt_dims *d);
/* The same for the model and layout of `cfg`. */
void mgt_gpt_dims_from_config(const mgt_config *cfg, int tp, int tp_rank, mgt_gpt_dims *d);
/* Computes the per-rank memory of a configuration on tp x dp ranks (dp matters to the
   distributed optimizer), and the same at dp = 1. */
void mgt_gpt_memory_plan_grid(const mgt_config *cfg, int tp, int dp, mgt_gpt_memory *m);
void mgt_gpt_memory_plan(const mgt_config *cfg, int tp, mgt_gpt_memory *m);

/* Allocates parameters, gradients and activations of a model of `spec` in `layout` on `be`
   (the grid's tensor-parallel size and rank): a model for inference, its parameters zero until
   loaded, no dropout, gradients averaged over the data-parallel group one bucket at a time.
   Not collective. The model keeps pointers to grid, be and comm, which must outlive it. */
MGT_NODISCARD mgt_status mgt_gpt_create(const mgt_model_spec *spec, const mgt_model_layout *layout,
                                        const mgt_grid *grid, const mgt_backend *be,
                                        const mgt_comm *comm, mgt_gpt **out);
void mgt_gpt_destroy(mgt_gpt **model);

/* What a trainer gives its model: dropout and the seed of initialization and dropout masks,
   weight decay, and how gradients travel over the data-parallel group. */
typedef struct mgt_gpt_training {
  double hidden_dropout, attention_dropout;
  uint64_t seed;
  double weight_decay; /* of the tensors that decay (mgt_gpt_segments) */
  size_t ddp_bucket_size;
  int overlap_grad_reduce, distributed_optimizer, overlap_param_gather;
  /* Mixture-of-Experts' auxiliary losses: MGT_MOE_LB_AUX (or _NONE), their coefficients */
  int moe_load_balancing;
  double moe_aux_coeff, moe_z_coeff;
  int moe_allgather;   /* expert parallelism's rows travel by all-gather and reduce-scatter */
  int eod_mask;        /* --eod-mask-loss: no loss where the input is this token (-1: none) */
  int reset_positions; /* --reset-position-ids: positions restart after this token (-1: no) */
  int reset_attention; /* --reset-attention-mask: no attention across this token (-1: across) */
  int doc_flags;       /* --sft: samples carry MGT_TOKEN_* flags (include/mgt/data.h) */
} mgt_gpt_training;
/* Makes m a model being trained as t says and initializes its parameters from t->seed. Not
   collective. */
MGT_NODISCARD mgt_status mgt_gpt_train_with(mgt_gpt *m, const mgt_gpt_training *t);

/* One micro-batch: forward, loss and backward. `tokens` (host) holds B windows of T+1
   tokens; sample_base is the global index of the first. Gradients are scaled by
   grad_scale (1 / tokens of the global batch) and added to the gradient buffer, or
   overwrite it when accumulate is 0. With sync_dp, gradients are averaged over the
   data-parallel group (non-blocking, bucket by bucket as backward proceeds) before the
   call returns. *loss_sum is the summed token loss of this micro-batch. Collective over
   tp_comm (and dp_comm with sync_dp). */
MGT_NODISCARD mgt_status mgt_gpt_forward_backward(mgt_gpt *m, const int32_t *tokens,
                                                  uint64_t sample_base, float grad_scale,
                                                  int accumulate, int sync_dp, double *loss_sum);
/* Forward and loss only, dropout off. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_forward(mgt_gpt *m, const int32_t *tokens, double *loss_sum);
/* Forward with dropout off; losses (host, B*T) receives the loss of every position.
   Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_forward_losses(mgt_gpt *m, const int32_t *tokens, float *losses);

/* Forward with dropout off: per-position losses (host, B*T) and greedy predictions (host,
   B*T): the argmax over the whole vocabulary, lowest id on ties. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_forward_predict(mgt_gpt *m, const int32_t *tokens, float *losses,
                                                 int32_t *pred);
/* Forward with dropout off; logits (host, V floats) receives the full-vocabulary logits of
   position `row` (of B*T), gathered over tp_comm. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_forward_logits(mgt_gpt *m, const int32_t *tokens, int row,
                                                float *logits);

/* Autoregressive decoding with a key/value cache: every token is fed once, the keys and
   values of every layer are kept, and each step costs one token's work. */
typedef struct mgt_gpt_decoder mgt_gpt_decoder;
/* A decoder for sequences of up to max_len tokens (at most the model's positions). */
MGT_NODISCARD mgt_status mgt_gpt_decoder_create(mgt_gpt *m, int max_len, mgt_gpt_decoder **out);
void mgt_gpt_decoder_destroy(mgt_gpt_decoder **d);
/* Feeds `token` at position `pos` (0, 1, 2, ... in order) and writes the full-vocabulary
   logits of the next token (host, V floats). Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_decode(mgt_gpt_decoder *d, int32_t token, int pos, float *logits);
/* A decoder of `slots` sequences of up to max_len tokens each, decoded together: a batch of
   rows through every GEMM. */
MGT_NODISCARD mgt_status mgt_gpt_decoder_create_batch(mgt_gpt *m, int slots, int max_len,
                                                      mgt_gpt_decoder **out);
/* One position of each of n sequences at once: row i is token[i] at pos[i] of the sequence in
   cache slot slot[i] (earlier positions of that slot are its context); logits (n x V, host)
   gets each row's full-vocabulary logits. Slots are independent: a new sequence starts at
   position 0 of a slot. Collective over the tensor-parallel group. */
MGT_NODISCARD mgt_status mgt_gpt_decode_batch(mgt_gpt_decoder *d, int n, const int *slot,
                                              const int32_t *token, const int *pos, float *logits);

/* ---- BERT ---- */

/* Sums over one BERT micro-batch (over the samples of this rank). */
typedef struct mgt_bert_losses {
  double lm_sum;       /* masked-LM cross-entropy summed over the masked positions */
  int64_t lm_count;    /* masked positions */
  double sop_sum;      /* sentence-order cross-entropy summed over the samples */
  int64_t sop_correct; /* samples whose order was predicted right */
  int64_t sop_count;   /* samples (0 without the binary head) */
} mgt_bert_losses;

/* Masked positions of n BERT sample rows (mgt_bert_row_ints(T) each, data.h). */
int64_t mgt_bert_count_masked(const int32_t *rows, int n, int T);
/* One BERT micro-batch of B packed sample rows (data.h): forward, losses and backward. The
   masked-LM gradient is scaled by lm_scale (1 / masked positions of the global batch) and the
   sentence-order gradient by sop_scale (1 / samples of the global batch); otherwise as
   mgt_gpt_forward_backward. Collective over tp_comm (and dp_comm with sync_dp). */
MGT_NODISCARD mgt_status mgt_bert_forward_backward(mgt_gpt *m, const int32_t *rows,
                                                   uint64_t sample_base, float lm_scale,
                                                   float sop_scale, int accumulate, int sync_dp,
                                                   mgt_bert_losses *out);
/* Forward and losses only, dropout off. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_bert_forward(mgt_gpt *m, const int32_t *rows, mgt_bert_losses *out);

/* ---- fine-tuning (cfg->task) ---- */

/* Sums over the examples of one micro-batch. */
typedef struct mgt_task_result {
  double loss_sum; /* cross-entropy over each example's classes (RACE: its 4 options) */
  int64_t correct, count;
} mgt_task_result;

/* One fine-tuning micro-batch: cfg->micro_batch_size examples of mgt_task_rows rows each
   (mgt/tasks.h), the label in each row's order slot. The pooled [CLS] of every row, after
   dropout, goes through the task head; an example's logits are its rows' outputs side by side.
   Gradients are scaled by `scale` (1 / examples of the global batch); example_base is the
   global index of the first example (dropout). Collective over tp_comm (and dp_comm). */
MGT_NODISCARD mgt_status mgt_task_forward_backward(mgt_gpt *m, const int32_t *rows,
                                                   uint64_t example_base, float scale,
                                                   int accumulate, int sync_dp,
                                                   mgt_task_result *out);
/* Forward only, dropout off, over the first n examples of the micro-batch (the rest are filler);
   pred (host, n) receives each example's predicted class, or NULL. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_task_forward(mgt_gpt *m, const int32_t *rows, int n, int32_t *pred,
                                          mgt_task_result *out);

/* Mixture-of-Experts' auxiliary losses: each micro-batch's gradient is 1 / micro_batches of
   theirs (the micro-batches of the global batch over all data-parallel ranks: the losses are
   means of the micro-batches', as Megatron-LM's), times the loss scale; their values (load
   balancing, z-loss) so weighted, summed over the micro-batches since the last call and
   averaged over the MoE layers, go to out and restart from 0. Summed over the data-parallel
   group they are the global batch's. set_micro_batches starts a step (global_aux_loss's
   running counts restart). */
void mgt_gpt_set_micro_batches(mgt_gpt *m, int micro_batches);
void mgt_gpt_aux_losses(mgt_gpt *m, double out[2]);
/* The fewest and the most tokens an expert of an MoE layer got in a training micro-batch since
   the last call, over the mean (N topk / experts: 1 when balanced); NaN for none. */
void mgt_gpt_expert_spread(mgt_gpt *m, double out[2]);
/* Aux-loss-free balancing (spec.expert_bias): each MoE layer's expert bias moves by rate toward
   the even share of the tokens the training micro-batches since the last call sent (summed over
   the data-parallel group): + rate for an expert under the mean, - rate over it. Collective over
   dp. */
MGT_NODISCARD mgt_status mgt_gpt_update_expert_bias(mgt_gpt *m, double rate);

/* ---- the head interface: one training micro-batch whatever the head ---- */

/* Ints of one example in a host batch: a window of T + 1 tokens, or an example's sample rows. */
size_t mgt_gpt_example_ints(const mgt_gpt *m);
/* The sums a micro-batch gives (mgt_gpt_train_micro): 1 (causal LM: the token loss), 3 (masked
   LM: its loss, the sentence-order loss, orders right) or 2 (a task: its loss, examples right). */
int mgt_gpt_head_sums(const mgt_gpt *m);
/* Adds to units what this rank's n examples of `batch` count toward the means of the head's
   losses: tokens (causal LM); masked positions and samples (masked LM, sentence order);
   examples (a task head). Summed over the data-parallel group they are the global batch's. */
void mgt_gpt_loss_units(const mgt_gpt *m, const int32_t *batch, int n, double units[2]);
/* One training micro-batch of any head: forward, losses and backward, each loss's gradient
   scaled by loss_scale / its global units; sums[0 .. mgt_gpt_head_sums) receives the
   micro-batch's sums. Otherwise as mgt_gpt_forward_backward. */
MGT_NODISCARD mgt_status mgt_gpt_train_micro(mgt_gpt *m, const int32_t *batch, uint64_t first,
                                             const double units[2], double loss_scale,
                                             int accumulate, int sync_dp, double *sums);

/* Forward only, dropout off, of B examples: adds the sums of mgt_gpt_train_micro and the units
   (the positions scored: tokens, masked positions and samples). A task head is scored by
   mgt_task_forward instead. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_eval_micro(mgt_gpt *m, const int32_t *batch, double *sums,
                                            double units[2]);

/* Accessors. */
const mgt_gpt_dims *mgt_gpt_get_dims(const mgt_gpt *m); /* its spec is ->spec */
const mgt_backend *mgt_gpt_backend(const mgt_gpt *m);
const mgt_param *mgt_gpt_params(const mgt_gpt *m, int *count);
float *mgt_gpt_param_data(mgt_gpt *m); /* flat buffer, in the backend's memory */
float *mgt_gpt_grad_data(mgt_gpt *m);
size_t mgt_gpt_param_count(const mgt_gpt *m); /* floats in the flat buffers */
/* The gradient of the flat-buffer elements this rank updates, *n of them packed from the spans
   (sorted): with --use-distributed-optimizer its data-parallel shard (with expert parallelism
   its part of the rest and of its experts, several spans), summed by the last backward of an
   iteration; otherwise the whole gradient buffer, one span. */
float *mgt_gpt_grad_shard(mgt_gpt *m, const mgt_span **spans, int *n_spans, size_t *n);
/* --use-distributed-optimizer: every rank's updated shard of the parameters to every
   data-parallel rank (nothing otherwise). Collective over dp_comm. */
MGT_NODISCARD mgt_status mgt_gpt_gather_params(mgt_gpt *m);
/* The parameters were written by other means than the optimizer's (a checkpoint load through
   the state list, a copy into mgt_gpt_param_data): their 16-bit copies are remade before the
   next GEMM that reads them. mgt_gpt_param_data and mgt_gpt_state imply it. Not collective. */
void mgt_gpt_weights_changed(mgt_gpt *m);
/* Whether the model keeps 16-bit copies of its weights (set_weights), remade per bucket. */
int mgt_gpt_weight_copies(const mgt_gpt *m);
/* Every parameter's copy was just written with it (adamw's copies): none is remade. */
void mgt_gpt_copies_fresh(mgt_gpt *m);
/* Optimizer segments (weight decay and norm ownership per tensor); `count` receives n. */
const mgt_segment *mgt_gpt_segments(const mgt_gpt *m, int *count);
/* Appends the model's parameters to `out` as "model/<name>" entries: this rank's slabs in the
   backend's memory, data-parallel replica d holding copy d, a replicated tensor's copy held by
   tensor-parallel rank 0. Not collective. */
MGT_NODISCARD mgt_status mgt_gpt_state(mgt_gpt *m, mgt_state *out);
/* The same list for configuration cfg at tensor-parallel rank tp_rank of tp and data-parallel
   rank dp_rank, without a model (data NULL): what a checkpoint of cfg holds. Not collective. */
MGT_NODISCARD mgt_status mgt_gpt_describe(const mgt_config *cfg, int tp, int tp_rank, int dp_rank,
                                          mgt_state *out);
/* Parameters of the logical (unsharded) model, without vocabulary padding. */
int64_t mgt_gpt_logical_params(const mgt_config *cfg);
int64_t mgt_gpt_spec_params(const mgt_model_spec *spec);
/* Those a token passes through: with Mixture-of-Experts layers, topk of their experts. */
int64_t mgt_gpt_spec_active_params(const mgt_model_spec *spec);
/* The hd/2 rotary frequencies of spec (hd its head size): base^(-2i/hd), with --use-rope-scaling
   Llama 3.1's rescaling (Hugging Face's rope_type "llama3": wavelengths beyond the original
   8192 positions divided by the factor, below 8192/4 kept, smoothed between), each computed in
   double and rounded once to float. */
void mgt_gpt_rope_frequencies(const mgt_model_spec *spec, float *out);
/* Model FLOPs of one iteration: GPT 6 N tokens + 12 L C T tokens (N without positions);
   BERT the same over the layers, plus the LM head on mask_prob of the tokens and the pooler
   and SOP head on each sample. */
double mgt_gpt_flops_per_iteration(const mgt_config *cfg);

#ifdef __cplusplus
}
#endif
