/* A model is data: one description derived once from the configuration, which every consumer
   reads (the block, the heads, parameters and FLOPs, the memory plan, Hugging Face names, the
   trainer, datasets), and one table of model kinds. A combination no code runs is refused here,
   never run as another kind. Not collective. */
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

typedef struct mgt_model_desc {
  int kind; /* MGT_MODEL_*, a row of mgt_model_kinds */
  mgt_input_kind input;
  mgt_norm_kind norm;
  mgt_pos_kind pos;
  mgt_mlp_kind mlp;
  int post_ln;     /* the LayerNorm after each residual add (the original BERT), not before */
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
} mgt_model_desc;

/* The description of cfg's model. An unknown kind, or a head or flag the kind does not have,
   is refused naming the flag. */
MGT_NODISCARD mgt_status mgt_model_describe(const mgt_config *cfg, mgt_model_desc *out);

/* The description of a configuration that mgt_config_check (or a checkpoint's check) accepted:
   cannot fail. */
mgt_model_desc mgt_model_of(const mgt_config *cfg);

/* Whether the head scores tokens (a language model: perplexity, LM loss, decoding). */
int mgt_model_has_lm(const mgt_model_desc *d);
/* Whether the model decodes (generation): a causal language model. */
int mgt_model_generative(const mgt_model_desc *d);

#ifdef __cplusplus
}
#endif
