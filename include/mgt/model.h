/* A model is data. Its spec (what it is: kind, sizes, block and head) is derived once from the
   configuration or read from a checkpoint, and every consumer reads it (the block, the heads,
   parameters and FLOPs, the memory plan, Hugging Face names, the trainer, datasets); its layout
   (how it runs on the ranks: the step's shape, sequence parallelism, recomputation, attention,
   precision, device) is the job's. A combination no code runs is refused here, never run as
   another kind. Not collective. */
#pragma once

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_norm_kind { MGT_NORM_LAYERNORM = 0, MGT_NORM_RMSNORM = 1 } mgt_norm_kind;
typedef enum mgt_pos_kind { MGT_POS_LEARNED = 0, MGT_POS_ROPE = 1 } mgt_pos_kind;
/* tanh GeLU (Megatron's), or SwiGLU over gate and up projections (Llama's) */
typedef enum mgt_mlp_kind { MGT_MLP_GELU = 0, MGT_MLP_SWIGLU = 1 } mgt_mlp_kind;

/* What a micro-batch is: B windows of T + 1 tokens (inputs and next-token targets), or B packed
   sample rows of mgt_bert_row_ints(T) (ids, types, labels, length, a label: data.h). */
typedef enum mgt_input_kind { MGT_INPUT_WINDOWS = 0, MGT_INPUT_SAMPLES = 1 } mgt_input_kind;

/* The head on the trunk. */
typedef enum mgt_head_kind {
  MGT_HEAD_CAUSAL_LM = 0, /* next-token loss at every position, output tied to wte (GPT) or not */
  MGT_HEAD_MLM_SOP = 1,   /* masked LM on the masked rows and sentence order on [CLS] */
  MGT_HEAD_MLM = 2,       /* masked LM alone (--bert-no-binary-head) */
  MGT_HEAD_CLASSIFY = 3,  /* the pooled [CLS] into K classes (MNLI, QQP) */
  MGT_HEAD_MULTIPLE_CHOICE = 4 /* one logit per pooled row, an example's rows its choices (RACE) */
} mgt_head_kind;

/* A model kind: a row of mgt_model_kinds, chosen by --model. */
typedef struct mgt_model_kind {
  const char *name;  /* the --model value */
  const char *title; /* its name in messages */
  mgt_input_kind input;
  mgt_head_kind head; /* the pretraining head */
  int causal;         /* causal attention; else a sample's padding mask */
  int finetunable;    /* takes a --task head (mgt finetune) */
} mgt_model_kind;

/* The kinds, indexed by MGT_MODEL_* (mgt_model_names[] lists their names). */
extern const mgt_model_kind mgt_model_kinds[];
extern const int mgt_n_model_kinds;

typedef struct mgt_model_spec mgt_model_spec;
/* Whether layer l of spec s is a Mixture-of-Experts layer. */
int mgt_model_is_moe_layer(const mgt_model_spec *s, int l);

typedef struct mgt_model_spec {
  int kind; /* MGT_MODEL_*, a row of mgt_model_kinds */
  /* sizes: layers, hidden, attention heads, head size (hidden / heads), the MLP's inner width,
     the vocabulary (without padding), positions */
  int layers, hidden, heads, head_size, ffn, vocab, positions;
  double norm_eps;  /* LayerNorm's or RMSNorm's epsilon */
  double init_std;  /* the normal initialization's deviation (the output projections' scaled) */
  double rope_base; /* rotary theta, with pos MGT_POS_ROPE */
  int rope_scaling; /* Llama 3.1's long-context frequencies, by rope_factor */
  double rope_factor;
  mgt_input_kind input;
  mgt_norm_kind norm;
  mgt_pos_kind pos;
  mgt_mlp_kind mlp;
  int post_ln;  /* the LayerNorm after each residual add (the original BERT), not before */
  int norm_1p;  /* every norm's gain is 1 + its stored weight (--apply-layernorm-1p) */
  int qkv_bias; /* the QKV projection has biases though `bias` is off (Qwen 2) */
  int qk_norm;  /* RMSNorm over each head's q and k before the rotary positions (Qwen 3); 2:
                   over all heads' q and all heads' k (OLMoE) */
  /* Mixture-of-Experts: `experts` (0: none) of inner width moe_ffn in layers moe_first,
     moe_first + moe_every, ...; each token to `topk` of them, by the router's score (MGT_MOE_*),
     softmax before the top-k (router_pre), its weights times router_scale (0: 1); at most
     ceil(tokens x topk / experts x capacity) tokens an expert (capacity 0: all), dropping by
     drop_policy (MGT_MOE_DROP_*) */
  int experts, topk, moe_ffn, moe_first, moe_every, router_score, router_pre, drop_policy;
  int expert_bias; /* the router's aux-loss-free bias (mlp.router.expert_bias) */
  int shared_ffn;  /* a shared expert's inner width (0: none), and whether a gate scales it */
  int shared_gate;
  double router_scale, capacity;
  int causal;      /* causal attention; else every row sees its sample's keys (padding) */
  int token_types; /* token-type embeddings (with a pooled head, as Megatron-LM) */
  mgt_head_kind head;
  int masked_lm;       /* the LM head is BERT's (dense, erf GeLU, LayerNorm, tied output, bias) */
  int pooler;          /* dense + tanh on [CLS], then `logits` outputs per row */
  int logits;          /* outputs of the pooled head per row: 2 (SOP), the classes, 1 (RACE) */
  int classes;         /* labels of an example: 2 (SOP), 3 or 2 (MNLI, QQP), 4 (RACE) */
  int task;            /* MGT_TASK_* of a fine-tuning head, else MGT_TASK_NONE */
  int rows;            /* sample rows per example: 4 for RACE, else 1 */
  int max_predictions; /* masked rows a sample may have (masked LM), else 0 */
  int untied; /* the causal LM's output layer is a weight of its own (output_layer.weight) */
  int groups; /* key/value heads: the attention heads, or fewer with grouped-query attention */
  int bias;   /* the block's linear layers have biases (not --disable-bias-linear) */
} mgt_model_spec;

/* How a model runs on its ranks: the job's choice, never the checkpoint's. */
typedef struct mgt_model_layout {
  int micro_batch;       /* examples of a micro-batch */
  int seq_length;        /* positions of an example */
  int vocab_multiple;    /* the vocabulary is padded to a multiple of it times tp */
  int sequence_parallel; /* rows outside the tensor-parallel regions split over tp */
  int recompute;         /* MGT_RECOMPUTE_NONE, FULL or SELECTIVE */
  int recompute_method;  /* MGT_RECOMPUTE_UNIFORM or BLOCK */
  int recompute_layers;  /* layers per recomputed chunk (uniform) or recomputed (block) */
  int flash;             /* the attention in tiles (the resolved --attention-backend) */
  int bf16, fp16;        /* the GEMM inputs in 16 bits; neither: fp32 */
  int weight_copies;     /* with bf16 or fp16: 16-bit copies of the weights made once a step */
  int device;            /* MGT_DEVICE_* */
  int cpu_gemm;          /* MGT_CPU_GEMM_*, -1: native bf16 GEMMs where the CPU can */
  int logits_chunk_rows; /* GPT's output layer in chunks of rows; 0: 64 MiB of logits */
  int expert_parallel;   /* ranks an MoE layer's experts are shared out to (1: none) */
} mgt_model_layout;

/* The layout cfg asks for (the attention resolved by mgt_config_flash). */
mgt_model_layout mgt_model_layout_of(const mgt_config *cfg);
/* The vocabulary padded for tp ranks: a multiple of layout->vocab_multiple * tp. */
int64_t mgt_model_padded_vocab(const mgt_model_spec *spec, const mgt_model_layout *layout, int tp);

/* The description of cfg's model. An unknown kind, or a head or flag the kind does not have,
   is refused naming the flag. */
MGT_NODISCARD mgt_status mgt_model_describe(const mgt_config *cfg, mgt_model_spec *out);

/* The description of a configuration that mgt_config_check (or a checkpoint's check) accepted:
   cannot fail. */
mgt_model_spec mgt_model_of(const mgt_config *cfg);

/* The spec as one JSON object of every field (a checkpoint's model section, format 3); NULL
   when out of memory, else free(). */
char *mgt_model_spec_to_text(const mgt_model_spec *spec);
/* Reads that text: every field present, typed (integers, numbers, choices by name), no other.
   `what` names the source in messages. */
MGT_NODISCARD mgt_status mgt_model_spec_from_text(const char *text, mgt_model_spec *out,
                                                  const char *what);
/* The first field in which a and b differ ("layers 4, not 2"), in buf, or NULL when none. */
const char *mgt_model_spec_diff(const mgt_model_spec *a, const mgt_model_spec *b, char *buf,
                                size_t n);

/* Whether the head scores tokens (a language model: perplexity, LM loss, decoding). */
int mgt_model_has_lm(const mgt_model_spec *d);
/* Whether the model decodes (generation): a causal language model. */
int mgt_model_generative(const mgt_model_spec *d);

#ifdef __cplusplus
}
#endif
