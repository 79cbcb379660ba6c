/* A model is data: one description derived once from the configuration, which every consumer
   reads (the block, the heads, parameters and FLOPs, the memory plan, Hugging Face names, the
   planner, the trainer, datasets), and one table of model kinds. A combination the code cannot
   run is refused here, never run as another kind. Not collective. */
#pragma once

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_norm_kind { MGT_NORM_LAYERNORM = 0 } mgt_norm_kind;
typedef enum mgt_pos_kind { MGT_POS_LEARNED = 0 } mgt_pos_kind;
typedef enum mgt_mlp_kind { MGT_MLP_GELU = 0 } mgt_mlp_kind; /* tanh GeLU, Megatron's */

/* What a micro-batch is: B windows of T + 1 tokens (inputs and next-token targets), or B packed
   sample rows of mgt_bert_row_ints(T) (ids, types, labels, length, a label: data.h). */
typedef enum mgt_input_kind { MGT_INPUT_WINDOWS = 0, MGT_INPUT_SAMPLES = 1 } mgt_input_kind;

/* The head on the trunk. */
typedef enum mgt_head_kind {
  MGT_HEAD_CAUSAL_LM = 0,      /* next-token loss at every position, output tied to wte (GPT) */
  MGT_HEAD_MLM_SOP = 1,        /* masked LM on the masked rows and sentence order on [CLS] */
  MGT_HEAD_MLM = 2,            /* masked LM alone (--bert-no-binary-head) */
  MGT_HEAD_CLASSIFY = 3,       /* the pooled [CLS] into K classes (MNLI, QQP) */
  MGT_HEAD_MULTIPLE_CHOICE = 4 /* one logit per pooled row, an example's rows its choices (RACE) */
} mgt_head_kind;

/* A model kind: a row of mgt_model_kinds, chosen by --model. */
typedef struct mgt_model_kind {
  const char *name;       /* the --model value */
  const char *summary;    /* for --help */
  const char *hf_summary; /* what `ckpt export --format hf` writes */
} mgt_model_kind;

/* The kinds, indexed by MGT_MODEL_*. */
extern const mgt_model_kind mgt_model_kinds[];

typedef struct mgt_model_desc {
  const mgt_model_kind *kind;
  mgt_input_kind input;
  mgt_norm_kind norm;
  int post_ln; /* the LayerNorm after each residual add (the original BERT) instead of before */
  mgt_pos_kind pos;
  mgt_mlp_kind mlp;
  int heads, kv_groups; /* attention heads, and key/value groups (= heads: one per head) */
  int bias;             /* the linear layers have biases */
  int causal;           /* causal attention; else every row sees its sample's keys (padding) */
  int token_types;      /* token-type embeddings (BERT with a pooled head, as Megatron-LM) */
  mgt_head_kind head;
  int tied_output;  /* the LM head's output layer is the word embeddings */
  int masked_lm;    /* the LM head is BERT's (dense, erf GeLU, LayerNorm, tied output, bias) */
  int pooler;       /* dense + tanh on [CLS], then a head of `logits` outputs */
  int logits;       /* outputs of the pooled head per row: 2 (SOP), the classes, 1 (RACE) */
  int task;         /* MGT_TASK_* of a fine-tuning head, else MGT_TASK_NONE */
  int rows;         /* rows per example: 4 for RACE, else 1 */
  int head_dropout; /* dropout on the pooled output (fine-tuning heads) */
} mgt_model_desc;

/* The description of cfg's model; an unknown kind, or a head the kind does not have, is
   refused naming the flag. */
MGT_NODISCARD mgt_status mgt_model_describe(const mgt_config *cfg, mgt_model_desc *out);

/* Whether the model has a language-model head (it scores tokens). */
static inline int mgt_model_has_lm(const mgt_model_desc *d) {
  return d->head == MGT_HEAD_CAUSAL_LM || d->head == MGT_HEAD_MLM_SOP || d->head == MGT_HEAD_MLM;
}

#ifdef __cplusplus
}
#endif
