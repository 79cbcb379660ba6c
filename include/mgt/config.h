/* The one configuration of a run: defaults, command-line parsing with Megatron-LM's flag
   names, validation with messages that name the flag, and the table rank 0 prints. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tokenizer types, and their names as --tokenizer-type spells them (NULL-terminated,
   indexed by type): the one place they are spelt. */
enum {
  MGT_TOKENIZER_GPT2 = 0,       /* GPT-2's byte-level BPE */
  MGT_TOKENIZER_BYTES = 1,      /* bytes, end of document 256 */
  MGT_TOKENIZER_BERT_LOWER = 2, /* BERT's WordPiece, uncased rules */
  MGT_TOKENIZER_BERT_CASED = 3, /* BERT's WordPiece, cased */
  MGT_TOKENIZER_HF = 4,         /* Hugging Face's tokenizer.json (--tokenizer-model) */
  MGT_TOKENIZER_NULL = 5,       /* Megatron-LM's: ids as they are, --vocab-size of them + the eod */
};
extern const char *const mgt_tokenizer_names[];
/* Why NullTokenizer serves no command that reads or writes text. */
#define MGT_NULL_TOKENIZER_WHY                                                                     \
  "NullTokenizer has no text: it is for mgt train with --vocab-size, on token ids as they are "    \
  "(mock data, or datasets of ids)"
/* The flag naming a tokenizer type's file: --tokenizer-model (tokenizer.json) or --vocab-file. */
const char *mgt_tokenizer_file_flag(int type);
#define MGT_TOKENIZER_HELP                                                                         \
  "GPT2BPETokenizer, ByteTokenizer, BertWordPieceLowerCase, BertWordPieceCase, "                   \
  "HuggingFaceTokenizer, or NullTokenizer (mgt train: token ids as they are, --vocab-size of "     \
  "them "                                                                                          \
  "and the end of document after them)"

/* The fine-tuning tasks (--task): a fact of their data format that the model's head shares. */
enum { MGT_TASK_NONE = 0, MGT_TASK_RACE = 1, MGT_TASK_MNLI = 2, MGT_TASK_QQP = 3 };
/* --task names, indexed by MGT_TASK_* ("none" for pretraining; NULL-terminated). */
extern const char *const mgt_task_names[];
/* --position-embedding-type names, indexed by mgt_pos_kind (NULL-terminated). */
extern const char *const mgt_pos_names[];
/* --normalization names, indexed by mgt_norm_kind (NULL-terminated). */
extern const char *const mgt_norm_names[];

/* Rows an example is encoded in (RACE: one per option), and the logits of each row (RACE: one
   score; MNLI: 3 classes; QQP: 2). An example's logits are its rows' logits side by side. */
int mgt_task_rows(int task);
int mgt_task_row_logits(int task);
/* Logits an example is classified over: 4, 3 or 2. */
int mgt_task_classes(int task);

typedef enum mgt_lr_style { MGT_LR_CONSTANT, MGT_LR_LINEAR, MGT_LR_COSINE } mgt_lr_style;

/* --moe-router-load-balancing-type and --moe-token-drop-policy */
enum { MGT_MOE_LB_AUX = 0, MGT_MOE_LB_SEQ_AUX, MGT_MOE_LB_GLOBAL_AUX, MGT_MOE_LB_NONE };
enum { MGT_MOE_DROP_PROBS = 0, MGT_MOE_DROP_POSITION = 1 };
extern const char *const mgt_moe_lb_names[], *const mgt_moe_score_names[],
                                                 *const mgt_moe_drop_names[];
enum { MGT_DEVICE_CPU = 0, MGT_DEVICE_CUDA = 1 };
/* The --device names, indexed by MGT_DEVICE_* (NULL-terminated). */
extern const char *const mgt_device_names[];
/* --distributed-backend: gloo (Megatron-LM's CPU collectives) is MPI here */
enum { MGT_DIST_BACKEND_NCCL = 0, MGT_DIST_BACKEND_MPI = 1, MGT_DIST_BACKEND_GLOO = 2 };
/* --cpu-gemm: bf16 GEMMs on the CPU's bf16 units, or emulated in fp32 (the CUDA twin) */
enum { MGT_CPU_GEMM_NATIVE = 0, MGT_CPU_GEMM_EMULATED = 1 };
extern const char *const mgt_cpu_gemm_names[];
/* --cpu-gemm-fp32: the fp32 GEMMs' library on the CPU, chosen by measurement at start (auto) */
enum { MGT_FP32_GEMM_AUTO = 0, MGT_FP32_GEMM_OPENBLAS = 1, MGT_FP32_GEMM_ONEDNN = 2 };
extern const char *const mgt_fp32_gemm_names[];
/* --attention-backend (Megatron-Core's name): auto, the tiled kernel (flash) or the one that
   materializes the probabilities. FLASH is 1: --use-flash-attn, a flag alias, sets it. */
enum { MGT_ATTN_AUTO = 0, MGT_ATTN_FLASH = 1, MGT_ATTN_UNFUSED = 2 };
/* Megatron-Core's other names for them, accepted by --attention-backend: fused (cuDNN's fused
   attention, which holds no T x T probabilities: flash) and local (its own unfused). */
enum { MGT_ATTN_FUSED = 3, MGT_ATTN_LOCAL = 4 };
/* The model families (--model): GPT-2 (causal, next-token loss) and BERT (padding mask, masked
   LM and sentence-order losses). */
enum { MGT_MODEL_GPT = 0, MGT_MODEL_BERT = 1 };
extern const char *const mgt_model_names[];

/* --recompute-granularity: nothing, whole layers (from their inputs), or only the attention
   core (its probabilities, the T x T tensors). */
enum { MGT_RECOMPUTE_NONE = 0, MGT_RECOMPUTE_FULL = 1, MGT_RECOMPUTE_SELECTIVE = 2 };
enum { MGT_RECOMPUTE_UNIFORM = 0, MGT_RECOMPUTE_BLOCK = 1 };

typedef struct mgt_config {
  /* model */
  int model; /* MGT_MODEL_* */
  int num_layers;
  int hidden_size;
  int num_attention_heads;
  int ffn_hidden_size; /* 0: 4 * hidden_size */
  int seq_length;
  int max_position_embeddings; /* 0: seq_length */
  int vocab_size;              /* 0: from the dataset (128 with --mock-data) */
  int make_vocab_size_divisible_by;
  double init_method_std;
  double hidden_dropout;
  double attention_dropout;
  double layernorm_epsilon;
  int apply_residual_connection_post_layernorm; /* the original post-LN BERT (paper Fig. 7a) */
  int apply_layernorm_1p; /* norm weights stored as w, the gain 1 + w (Megatron-LM's) */
  int add_qkv_bias;       /* biases in the QKV projection even with disable_bias_linear */
  int qk_layernorm;       /* RMSNorm over each head's q and k (Qwen 3) */
  int qk_layernorm_full;  /* ... over all heads' q and all heads' k instead (OLMoE) */
  /* Mixture-of-Experts (docs/moe.md; Megatron-LM's flags) */
  int num_experts;                       /* 0: dense */
  int expert_model_parallel_size;        /* the experts shared out over this many dp ranks */
  int moe_router_topk;                   /* experts per token */
  int moe_ffn_hidden_size;               /* an expert's inner width; 0: --ffn-hidden-size */
  char moe_layer_freq[256];              /* which layers: N (every N-th from 0) or a 0/1 list */
  int moe_router_score_function;         /* MGT_MOE_SOFTMAX or MGT_MOE_SIGMOID */
  int moe_router_pre_softmax;            /* softmax over all experts before the top-k */
  double moe_router_topk_scaling_factor; /* multiplies the weights; 0: none */
  int moe_router_load_balancing_type;    /* MGT_MOE_LB_* */
  double moe_aux_loss_coeff, moe_z_loss_coeff;
  double moe_expert_capacity_factor;    /* 0: dropless */
  int moe_token_drop_policy;            /* MGT_MOE_DROP_PROBS or _POSITION */
  int moe_pad_expert_input_to_capacity; /* changes no number here */
  int moe_token_dispatcher_type;        /* alltoall or allgather: the same numbers */
  int moe_grouped_gemm;                 /* changes no number here */
  int moe_router_enable_expert_bias;    /* aux-loss-free balancing: a bias that only chooses */
  double moe_router_bias_update_rate;
  int moe_shared_expert_intermediate_size; /* a dense MLP every token passes through; 0: none */
  int moe_shared_expert_gate;              /* its output times sigmoid(x . w) (Qwen2-MoE's) */
  int bert_no_binary_head;                 /* BERT without tokentypes, pooler and SOP */
  int untie_embeddings_and_output_weights; /* GPT: an output layer of its own (Llama) */
  int position_embedding_type;             /* 0 learned_absolute, 1 rope */
  double rotary_base;                      /* RoPE's theta (10000; Llama 3: 500000) */
  int use_rope_scaling;                    /* Llama 3.1's long-context frequencies */
  double rope_scaling_factor;              /* their factor (8; Llama 3.2: 32) */
  int normalization;                       /* 0 LayerNorm, 1 RMSNorm (mgt_norm_kind) */
  int swiglu;                              /* the MLP's gate and up projections (Llama) */
  int group_query_attention;               /* key/value heads shared by query heads */
  int num_query_groups;                    /* those key/value heads (groups) */
  int disable_bias_linear;                 /* no bias in any linear layer of the block */
  double mask_prob;                        /* BERT: share of tokens to predict */
  double short_seq_prob;                   /* BERT: samples with a shorter target */
  /* fine-tuning (mgt finetune): a BERT with a task head instead of its pretraining heads */
  int task;                 /* MGT_TASK_* (mgt/tasks.h); 0 for pretraining */
  char train_data[1 << 14]; /* paths, one per line */
  char valid_data[1 << 14]; /* paths, one per line; each is evaluated on its own */
  char pretrained_checkpoint[MGT_PATH_MAX];
  int epochs;
  int skip_bad_records;
  /* parallelism and memory */
  int tensor_model_parallel_size;
  int recompute_activations; /* = --recompute-granularity full, uniform, 1 layer */
  int recompute_granularity; /* MGT_RECOMPUTE_* */
  int recompute_method;      /* 0 uniform, 1 block */
  int recompute_num_layers;
  int64_t ddp_bucket_size;       /* gradient elements per data-parallel all-reduce */
  int overlap_grad_reduce;       /* non-blocking bucket all-reduces during backward */
  int use_distributed_optimizer; /* ZeRO-1: optimizer state sharded over data parallelism */
  int overlap_param_gather;      /* its parameter all-gather non-blocking, under the forward */
  int sequence_parallel;         /* rows outside the tensor-parallel regions split over tp_comm */
  int attention_backend;         /* MGT_ATTN_*; mgt_config_flash resolves auto */
  int logits_chunk_rows;         /* GPT's output layer in chunks of rows; 0: 64 MiB of logits */
  int dry_run;
  /* devices and precision */
  int device;              /* MGT_DEVICE_* */
  int distributed_backend; /* MGT_DIST_BACKEND_*; -1: NCCL where it can run, else MPI */
  int cpu_gemm;            /* MGT_CPU_GEMM_*; -1: native under --bf16 where the CPU can */
  int cpu_gemm_fp32;       /* MGT_FP32_GEMM_* */
  int fp16, bf16;          /* 16-bit GEMM inputs, fp32 master weights */
  int no_weight_copies;    /* 16-bit: round the weights in every GEMM, not once per step */
  double loss_scale;       /* fp16: a fixed scale; 0: dynamic */
  double initial_loss_scale;
  double min_loss_scale;
  int loss_scale_window; /* iterations without overflow before the scale doubles */
  int hysteresis;        /* overflows tolerated before the scale halves */
  /* batches and schedule */
  int micro_batch_size;
  int global_batch_size; /* 0: micro_batch_size * data-parallel size */
  int64_t train_iters;
  int64_t train_samples;      /* > 0: the run in samples (Megatron-LM's); train_iters derived */
  char rampup_batch_size[96]; /* "START\nINCREMENT\nSAMPLES" (Megatron-LM's), or "" */
  char step_batch_size_schedule[1024]; /* "TOKENS:BATCH ..." (Megatron-LM 2026's), or "" */
  double lr;
  double min_lr;
  double decoupled_lr;     /* > 0: the word embeddings' and output layer's own peak rate */
  double decoupled_min_lr; /* their rate at the end of decay; < 0: --min-lr */
  int lr_decay_style;      /* mgt_lr_style */
  int64_t lr_warmup_iters;
  double lr_warmup_fraction; /* > 0: lr_warmup_iters derived from lr_decay_iters */
  int64_t lr_decay_iters;    /* 0: train_iters */
  int64_t lr_warmup_samples; /* with train_samples: the schedule in samples */
  int64_t lr_decay_samples;  /* 0: train_samples */
  double weight_decay;
  double adam_beta1;
  double adam_beta2;
  double adam_eps;
  double clip_grad;
  uint64_t seed;
  /* data */
  int mock_data;
  int eod_mask_loss;                 /* no loss where the input token is the end of a document */
  int reset_position_ids;            /* positions restart after each end of document */
  int reset_attention_mask;          /* no attention across an end of document */
  int num_microbatches_in_minibatch; /* Megatron-LM 2020's: global batch = micro x it x dp */
  int sft;             /* documents (conversations) packed whole, kept apart, masked as stored */
  int sft_long_policy; /* a document longer than a sample: 0 truncate, 1 drop, 2 split */
  int train_on_prompt; /* --sft: every token of a conversation trains, not its loss mask's */
  int eod_token;       /* the tokenizer's end-of-document id, -1 unknown (set by the job) */
  char data_path[1 << 16]; /* "P" or "W1 P1 W2 P2 ...", one value per line (hundreds of pairs) */
  char split[128];         /* train,valid,test weights over documents */
  /* each split its own blend (Megatron-LM's), "P" or "W1 P1 ..." or "P1 P2 ...", one per line */
  char train_data_path[1 << 14], valid_data_path[1 << 14], test_data_path[1 << 14];
  char data_args_path[MGT_PATH_MAX];           /* a file holding --data-path's value */
  char per_split_data_args_path[MGT_PATH_MAX]; /* JSON: {"train": [...], "valid": [...], ...} */
  char data_cache_path[MGT_PATH_MAX]; /* the datasets' index caches; "": mgt-cache beside each */
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type; /* MGT_TOKENIZER_* */
  int eval_interval;
  int eval_iters;
  /* checkpoints */
  char save[MGT_PATH_MAX];
  int save_interval;
  int no_save_optim;
  int keep_last;  /* keep only the newest this many checkpoints; 0: all */
  int async_save; /* write checkpoints from a background thread while training goes on */
  char load[MGT_PATH_MAX];
  int64_t ckpt_iteration; /* -1: the latest */
  int no_load_optim;
  int no_load_rng;
  int finetune;
  int exit_on_missing_checkpoint; /* --load without a checkpoint stops instead of starting afresh */
  /* stopping early */
  int exit_duration_in_mins;
  int exit_interval;
  int max_skipped_iterations; /* stop after this many non-finite iterations in a row; 0: never */
  /* many nodes */
  double distributed_timeout_minutes; /* a collective waiting longer ends the job; 0: never */
  int require_node_local_tp;          /* refuse tensor-parallel groups that span nodes */
  /* logging */
  int log_interval;
  char metrics_file[MGT_PATH_MAX];
  char tensorboard_dir[MGT_PATH_MAX]; /* rank 0 writes TensorBoard event files here */
  int kv_channels;                    /* the head size; 0: hidden / heads */
  int no_position_embedding;          /* Megatron-LM's: no learned table (with rope: none is) */
  /* not a flag: what the command line said that changes nothing here ("--flag: why\n" each),
     for rank 0 to print */
  char notes[32768]; /* every note of megatron_flags.c's table fits */
} mgt_config;

/* Megatron-LM's defaults where it has them; a small model otherwise. */
void mgt_config_defaults(mgt_config *cfg);

/* Parses argv[first..argc) into cfg (which holds defaults). Unknown flags, missing or
   malformed values and values out of range fail with MGT_ERR_INPUT naming the flag.
   `--help` sets *help. Not collective: every rank parses the same arguments. */
MGT_NODISCARD mgt_status mgt_config_parse(mgt_config *cfg, int argc, char **argv, int first,
                                          int *help);

/* Fills derived defaults and checks the relations between flags for a job of
   `world_size` ranks. Fails with MGT_ERR_INPUT naming the flags. Not collective. */
MGT_NODISCARD mgt_status mgt_config_finalize(mgt_config *cfg, int world_size);
/* The widths tensor parallelism splits (heads, key/value groups, MLP and expert widths) divide
   by `tp`, as mgt_config_finalize checks (for mgt plan's layouts). */
MGT_NODISCARD mgt_status mgt_config_check_tp(const mgt_config *c, int tp);

/* Fills the sizes other flags imply when they are left at 0: --ffn-hidden-size (4 * hidden),
   --max-position-embeddings (the sequence length), --vocab-size with --mock-data (128). The
   one owner of these defaults; mgt_config_finalize calls it. */
void mgt_config_derive(mgt_config *cfg);
/* Checks the relations between the model flags of a configuration read from a file (its
   values were range-checked as flags are): heads divide the hidden size, a vocabulary, the
   sequence within the positions. `what` names the file in the error. */
MGT_NODISCARD mgt_status mgt_config_check_model(const mgt_config *cfg, const char *what);
/* 1 when the attention runs in tiles without the T x T probabilities (flash), 0 when it
   materializes them: --attention-backend, with auto resolved from the device, precision, head
   size and sequence length (docs/performance.md has the measurements behind the rule). `why`
   (may be NULL) gets a few words for the log: "auto: ...", or the flag. */
int mgt_config_flash(const mgt_config *cfg, char *why, size_t n);
/* Key/value heads: --num-query-groups with --group-query-attention, else the attention heads. */
int mgt_config_query_groups(const mgt_config *cfg);
/* --data-args-path and --per-split-data-args-path: their files' lists become the data flags'
   (the paths are then cleared); src/base/data_args.c. */
MGT_NODISCARD mgt_status mgt_config_read_data_args(mgt_config *cfg);
/* Notes the flags of argv that change nothing in this configuration (--loss-scale without
   --fp16, --save-interval without --save, ...): src/base/config_notes.c. */
void mgt_config_note_unused(mgt_config *cfg, int argc, char **argv, int first);
/* The sizes finalize allows (src/base/config_bounds.c): sample counts and the schedule's steps
   within 64 bits, parameters under 2^50, every per-rank activation under 2^31 elements (the
   vocabulary's once it is known). */
MGT_NODISCARD mgt_status mgt_config_check_bounds(const mgt_config *cfg, int tp);
/* The head size: --kv-channels, or hidden size / heads. */
int mgt_config_head_size(const mgt_config *cfg);
/* The vocabulary padded to a multiple of --make-vocab-size-divisible-by times tp. */
int64_t mgt_config_padded_vocab(const mgt_config *cfg, int tp);
/* Compares the model flags of a and b (layers, hidden size, heads, FFN size, vocabulary,
   positions) and writes the differences to diff ("--num-layers 3 (checkpoint 2), ..."), b
   being the checkpoint's. Returns the number of differences. */
int mgt_config_model_diff(const mgt_config *a, const mgt_config *b, char *diff, size_t n);

/* Writes the flags, their defaults and help to f. */
void mgt_config_usage(FILE *f);
/* Writes the configuration as an aligned table of flag = value. */
void mgt_config_print(const mgt_config *cfg, FILE *f);
/* Writes the configuration as one JSON object (no newline). */
void mgt_config_json(const mgt_config *cfg, FILE *f);
/* The configuration as a checkpoint stores it (JSON, mgt_config_json), malloc'd (NULL when out
   of memory); and back: parsed, range-checked as flags are, sizes derived and the model
   checked, errors naming `what` (a file). Not collective. */
char *mgt_config_to_text(const mgt_config *cfg);
MGT_NODISCARD mgt_status mgt_config_from_text(mgt_config *cfg, const char *text, const char *what);
/* Sets cfg from a configuration written by mgt_config_json. `what` names the source in
   errors. */
struct mgt_json;
MGT_NODISCARD mgt_status mgt_config_from_json(mgt_config *cfg, const struct mgt_json *obj,
                                              const char *what);

/* Parses --split "969, 30, 1" into fractions of documents (train, valid, test) summing to 1. */
MGT_NODISCARD mgt_status mgt_split_parse(const char *split, double w[3]);

/* The learning rate's schedule: a linear warmup over `warmup` steps, then constant, or a linear
   or cosine decay to min_lr at step `decay`; a step is an iteration, or a sample when the run is
   counted in samples (--train-samples, as Megatron-LM's scheduler steps by the global batch). */
typedef struct mgt_lr_schedule {
  double lr, min_lr;
  int style;             /* mgt_lr_style */
  int64_t warmup, decay; /* in steps */
  int64_t per_iteration; /* steps an iteration takes: 1, or its samples (--train-samples) */
} mgt_lr_schedule;
/* The global batch of each iteration, parsed once: Megatron-LM's --rampup-batch-size START
   INCREMENT SAMPLES grows it from START by INCREMENT in equal steps over SAMPLES, then
   --global-batch-size; its --step-batch-size-schedule takes the batch of the last threshold
   (tokens / --seq-length samples) reached; otherwise the global batch. */
enum { MGT_MAX_BATCH_STEPS = 64 };
typedef struct mgt_batch_schedule {
  int global_batch;
  int has_ramp;
  int64_t ramp[3]; /* start, increment, samples */
  int steps;
  int64_t threshold[MGT_MAX_BATCH_STEPS], batch[MGT_MAX_BATCH_STEPS]; /* samples, batch */
} mgt_batch_schedule;
/* The schedule cfg's flags give (malformed ones refused naming the flag). Not collective. */
MGT_NODISCARD mgt_status mgt_batch_schedule_of(const mgt_config *cfg, mgt_batch_schedule *out);
/* The global batch of the iteration that starts after `consumed` samples. */
int mgt_batch_at(const mgt_batch_schedule *s, uint64_t consumed);
/* Finalizing for dp data-parallel ranks: checks the schedule against the batch sizes, sets
   --global-batch-size (a step schedule's last batch, or micro-batch x dp), and with
   --train-samples the iterations as Megatron-LM counts them. */
MGT_NODISCARD mgt_status mgt_config_batches(mgt_config *cfg, int dp, mgt_batch_schedule *out);

/* Validation samples a run of train_iters iterations plans for validations of `per` samples
   every eval_interval iterations and at the end (Megatron-LM's count; at least 1). */
int64_t mgt_valid_samples_planned(int64_t train_iters, int eval_interval, int64_t per);

/* The schedule cfg's flags give (finalized: the warmup and decay lengths derived); with
   decoupled, that of --decoupled-lr (the word embeddings and output layer): the same warmup and
   decay from --decoupled-lr to --decoupled-min-lr. */
mgt_lr_schedule mgt_lr_schedule_of(const mgt_config *cfg);
mgt_lr_schedule mgt_lr_schedule_decoupled(const mgt_config *cfg);
/* The learning rate of iteration `iter` (1-based), and at step `step` (the samples consumed
   after the iteration, for a schedule in samples). */
double mgt_lr_at(const mgt_lr_schedule *s, int64_t iter);
double mgt_lr_at_step(const mgt_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
