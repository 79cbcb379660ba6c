#define _GNU_SOURCE /* open_memstream */
#include "mgt/config.h"
#include "mgt/data.h"

#include "mgt/backend.h" /* mgt_cpu_bf16_units, mgt_flash16_head */

#include "mgt/flags.h"
#include "mgt/json.h"
#include "mgt/model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const mgt_device_names[] = {"cpu", "cuda", NULL};
const char *const mgt_tokenizer_names[] = {"GPT2BPETokenizer",
                                           "ByteTokenizer",
                                           "BertWordPieceLowerCase",
                                           "BertWordPieceCase",
                                           "HuggingFaceTokenizer",
                                           "NullTokenizer",
                                           NULL};
const char *mgt_tokenizer_file_flag(int type) {
  return type == MGT_TOKENIZER_HF ? "--tokenizer-model" : "--vocab-file";
}
const char *const mgt_task_names[] = {"none", "RACE", "MNLI", "QQP", NULL};
const char *const mgt_pos_names[] = {"learned_absolute", "rope", NULL};
const char *const mgt_norm_names[] = {"LayerNorm", "RMSNorm", NULL};

int mgt_task_rows(int task) { return task == MGT_TASK_RACE ? 4 : 1; }
int mgt_task_row_logits(int task) {
  return task == MGT_TASK_MNLI ? 3 : (task == MGT_TASK_QQP ? 2 : 1);
}
int mgt_task_classes(int task) { return mgt_task_rows(task) * mgt_task_row_logits(task); }

const char *const mgt_model_names[] = {"gpt", "bert", NULL};

#define OFF(f) offsetof(mgt_config, f)
#define BIG 9.0e15

static const char *const lr_styles[] = {"constant", "linear", "cosine", NULL};
static const char *const dist_backends[] = {"nccl", "mpi", "gloo", NULL};
const char *const mgt_cpu_gemm_names[] = {"native", "emulated", NULL};
const char *const mgt_fp32_gemm_names[] = {"auto", "openblas", "onednn", NULL};
static const char *const attention_backends[] = {"auto",  "flash", "unfused",
                                                 "fused", "local", NULL};
static const char *const recompute_granularities[] = {"none", "full", "selective", NULL};
static const char *const recompute_methods[] = {"uniform", "block", NULL};
const char *const mgt_moe_lb_names[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none",
                                        NULL};
const char *const mgt_moe_score_names[] = {"softmax", "sigmoid", NULL};
const char *const mgt_moe_drop_names[] = {"probs", "position", NULL};
static const char *const moe_dispatchers[] = {"alltoall", "allgather", NULL};
static const char *const sft_long[] = {"truncate", "drop", "split", NULL};

#define INT(n, f, lo, hi, h)                                                                       \
  { n, MGT_FLAG_INT, OFF(f), lo, hi, h, NULL, 0, 0 }
#define I64(n, f, lo, hi, h)                                                                       \
  { n, MGT_FLAG_INT64, OFF(f), lo, hi, h, NULL, 0, 0 }
#define DBL(n, f, lo, hi, h)                                                                       \
  { n, MGT_FLAG_DOUBLE, OFF(f), lo, hi, h, NULL, 0, 0 }
#define BOOL(n, f, h)                                                                              \
  { n, MGT_FLAG_BOOL, OFF(f), 0, 1, h, NULL, 0, 0 }
#define STR(n, f, h)                                                                               \
  { n, MGT_FLAG_STR, OFF(f), 0, 0, h, NULL, sizeof(((mgt_config *)0)->f), 0 }
/* the model's flags, marked (mgt_flag.marks) */
#define SPEC MGT_FLAG_SPEC
#define RESUME (MGT_FLAG_SPEC | MGT_FLAG_RESUME)
#define INT_M(n, f, lo, hi, h, m)                                                                  \
  { n, MGT_FLAG_INT, OFF(f), lo, hi, h, NULL, 0, m }
#define DBL_M(n, f, lo, hi, h, m)                                                                  \
  { n, MGT_FLAG_DOUBLE, OFF(f), lo, hi, h, NULL, 0, m }
#define BOOL_M(n, f, h, m)                                                                         \
  { n, MGT_FLAG_BOOL, OFF(f), 0, 1, h, NULL, 0, m }

/* Every flag `mgt train` accepts. Names are Megatron-LM's. */
static const mgt_flag flags[] = {
    {"--model", MGT_FLAG_ENUM, OFF(model), 0, 0,
     "gpt (causal LM) or bert (masked LM + sentence order; docs/bert.md)", mgt_model_names, 0,
     RESUME},
    INT_M("--num-layers", num_layers, 1, 65535, "transformer layers", RESUME),
    INT_M("--encoder-num-layers", num_layers, 1, 65535, "", RESUME), /* Megatron-LM's too */
    INT_M("--hidden-size", hidden_size, 1, 1 << 20, "hidden size", RESUME),
    INT_M("--num-attention-heads", num_attention_heads, 1, 1 << 16, "attention heads", RESUME),
    INT_M("--ffn-hidden-size", ffn_hidden_size, 1, 1 << 22,
          "MLP inner size (default 4 * hidden size)", RESUME),
    INT_M("--seq-length", seq_length, 1, 1 << 20, "tokens per sample", MGT_FLAG_PLAN),
    INT_M("--encoder-seq-length", seq_length, 1, 1 << 20, "", MGT_FLAG_PLAN), /* Megatron's */
    INT_M("--max-position-embeddings", max_position_embeddings, 1, 1 << 20,
          "rows of the position embedding (default: seq length)", RESUME),
    INT_M("--vocab-size", vocab_size, 1, 1 << 30,
          "vocabulary size before padding (default: the dataset's; 128 with --mock-data)", RESUME),
    INT_M("--make-vocab-size-divisible-by", make_vocab_size_divisible_by, 1, 1 << 20,
          "pad the vocabulary to a multiple of this times the tensor-parallel size", SPEC),
    DBL("--init-method-std", init_method_std, 0, 10, "std of weight init"),
    DBL("--hidden-dropout", hidden_dropout, 0, 0.99, "dropout on hidden states"),
    DBL("--attention-dropout", attention_dropout, 0, 0.99, "dropout on attention probabilities"),
    DBL_M("--layernorm-epsilon", layernorm_epsilon, 1e-12, 1,
          "epsilon of the LayerNorms or RMSNorms (--norm-epsilon)", SPEC),
    DBL_M("--norm-epsilon", layernorm_epsilon, 1e-12, 1, "", SPEC), /* Megatron-LM's newer name */
    {"--normalization", MGT_FLAG_ENUM, OFF(normalization), 0, 0,
     "LayerNorm, or RMSNorm (a weight and no bias or centring: Llama)", mgt_norm_names, 0, RESUME},
    BOOL_M("--swiglu", swiglu,
           "SwiGLU MLP: silu(gate) * up, two column-parallel projections (Llama); the default "
           "--ffn-hidden-size becomes 8/3 of the hidden size, a multiple of 64",
           RESUME),
    BOOL_M("--group-query-attention", group_query_attention,
           "grouped-query attention: --num-query-groups key/value heads shared by the query heads",
           RESUME),
    INT_M("--num-query-groups", num_query_groups, 0, 1 << 16,
          "key/value heads with --group-query-attention (Llama 3 8B: 8)", RESUME),
    BOOL_M("--disable-bias-linear", disable_bias_linear,
           "no biases in the attention and MLP linear layers (Llama)", RESUME),
    BOOL_M("--add-qkv-bias", add_qkv_bias,
           "biases in the query, key and value projections only, with --disable-bias-linear "
           "(Qwen 2)",
           RESUME),
    BOOL_M("--qk-layernorm", qk_layernorm,
           "RMSNorm over each head's query and key, after the projection and before the rotary "
           "positions (Qwen 3); needs --normalization RMSNorm",
           RESUME),
    BOOL_M("--qk-layernorm-full", qk_layernorm_full,
           "with --qk-layernorm: one RMSNorm over the whole query projection and one over the "
           "whole key projection (all heads, OLMoE's), not per head",
           RESUME),
    INT_M("--num-experts", num_experts, 0, 1 << 16,
          "Mixture-of-Experts: experts of each MoE layer (0: a dense model; docs/moe.md)", RESUME),
    INT_M("--moe-router-topk", moe_router_topk, 1, 1 << 16, "experts each token is sent to",
          RESUME),
    INT_M("--expert-model-parallel-size", expert_model_parallel_size, 1, 1 << 16,
          "expert parallelism: groups of this many data-parallel ranks share the experts out "
          "(each holds experts / this of them)",
          MGT_FLAG_PLAN),
    INT_M("--moe-ffn-hidden-size", moe_ffn_hidden_size, 0, 1 << 22,
          "an expert's inner width (default --ffn-hidden-size)", RESUME),
    {"--moe-layer-freq", MGT_FLAG_STR, OFF(moe_layer_freq), 0, 0,
     "which layers are MoE: N, every N-th from layer 0, or Megatron-LM's list of 0s and 1s "
     "(\"[0,1,1]\", \"([0]*2+[1]*22)\")",
     NULL, sizeof(((mgt_config *)0)->moe_layer_freq), RESUME},
    {"--moe-router-score-function", MGT_FLAG_ENUM, OFF(moe_router_score_function), 0, 0,
     "the router's scores: softmax or sigmoid", mgt_moe_score_names, 0, RESUME},
    BOOL_M("--moe-router-pre-softmax", moe_router_pre_softmax,
           "softmax over every expert, then the top-k, not renormalized (OLMoE)", RESUME),
    DBL_M("--moe-router-topk-scaling-factor", moe_router_topk_scaling_factor, 0, 1e6,
          "multiplies the routing weights (0: none)", RESUME),
    {"--moe-router-load-balancing-type", MGT_FLAG_ENUM, OFF(moe_router_load_balancing_type), 0, 0,
     "aux_loss (Switch Transformer's, per micro-batch), seq_aux_loss (per sequence), "
     "global_aux_loss (over the data-parallel ranks' micro-batches of a step) or none",
     mgt_moe_lb_names, 0, 0},
    DBL("--moe-aux-loss-coeff", moe_aux_loss_coeff, 0, 1e6, "the load-balancing loss's weight"),
    DBL("--moe-z-loss-coeff", moe_z_loss_coeff, 0, 1e6,
        "the z-loss's weight (the squared log-sum-exp of the router's logits)"),
    DBL_M("--moe-expert-capacity-factor", moe_expert_capacity_factor, 0, 1e6,
          "an expert takes at most ceil(tokens x topk / experts x this) of a micro-batch's "
          "tokens (0: every token, dropless)",
          SPEC),
    {"--moe-token-drop-policy", MGT_FLAG_ENUM, OFF(moe_token_drop_policy), 0, 0,
     "over capacity: keep each expert's highest-probability tokens (probs) or its first "
     "(position)",
     mgt_moe_drop_names, 0, SPEC},
    BOOL("--moe-pad-expert-input-to-capacity", moe_pad_expert_input_to_capacity,
         "Megatron-LM pads each expert's tokens to its capacity with zeros: no number changes; "
         "mgt computes without the padding"),
    {"--moe-token-dispatcher-type", MGT_FLAG_ENUM, OFF(moe_token_dispatcher_type), 0, 0,
     "expert parallelism's rows by all-to-all, or by all-gather and reduce-scatter: the same "
     "numbers",
     moe_dispatchers, 0, MGT_FLAG_PLAN},
    BOOL_M("--moe-router-enable-expert-bias", moe_router_enable_expert_bias,
           "aux-loss-free balancing (sigmoid scores): a per-expert bias added to the scores to "
           "choose the experts only, moved after each step toward the even share",
           RESUME),
    DBL("--moe-router-bias-update-rate", moe_router_bias_update_rate, 0, 1e6,
        "the expert bias's step: + rate where an expert got fewer than the mean of the global "
        "batch's tokens, - rate where more"),
    INT_M("--moe-shared-expert-intermediate-size", moe_shared_expert_intermediate_size, 0, 1 << 22,
          "a shared expert of this inner width in each MoE layer: an MLP every token passes "
          "through, added to the routed experts' output",
          RESUME),
    BOOL_M("--moe-shared-expert-gate", moe_shared_expert_gate,
           "the shared expert's output times sigmoid(x . w), w of the hidden size (Qwen2-MoE's)",
           RESUME),
    BOOL("--moe-grouped-gemm", moe_grouped_gemm,
         "Megatron-LM's grouped GEMM of the experts: mgt groups them always (one cuBLAS grouped "
         "GEMM on GPUs), the same numbers as one GEMM per expert"),
    BOOL_M("--apply-layernorm-1p", apply_layernorm_1p,
           "the norms' weights stored zero-centred: the gain is 1 + weight, the weight "
           "initialized to 0 (Megatron-LM's; Transformer Engine's zero-centred gamma)",
           RESUME),
    BOOL_M("--apply-residual-connection-post-layernorm", apply_residual_connection_post_layernorm,
           "residuals start from the LayerNorm outputs: the original post-LN BERT", RESUME),
    BOOL_M("--bert-no-binary-head", bert_no_binary_head,
           "BERT without the sentence-order head (no tokentypes, pooler, SOP loss)", RESUME),
    {"--position-embedding-type", MGT_FLAG_ENUM, OFF(position_embedding_type), 0, 0,
     "learned_absolute (a table of positions) or rope (rotary, Hugging Face's half-split pairs)",
     mgt_pos_names, 0, RESUME},
    BOOL("--use-rotary-position-embeddings", position_embedding_type,
         ""), /* Megatron-LM's older switch: MGT_POS_ROPE is 1 */
    BOOL("--no-position-embedding", no_position_embedding,
         "no learned position table (Megatron-LM's): with --position-embedding-type rope there "
         "is none; mgt has no model without positions"),
    INT_M("--kv-channels", kv_channels, 0, 1 << 16,
          "the head size of attention (Qwen 3: 128 at any hidden size; 0: hidden size / heads)",
          RESUME),
    DBL_M("--rotary-base", rotary_base, 1, 1e12, "RoPE's base theta (Llama 3: 500000)", RESUME),
    BOOL_M("--use-rope-scaling", use_rope_scaling,
           "Llama 3.1's rotary frequencies for long contexts (rope_scaling type llama3)", RESUME),
    DBL_M("--rope-scaling-factor", rope_scaling_factor, 1, 1e6,
          "their factor (Llama 3.1: 8, Llama 3.2: 32)", RESUME),
    BOOL_M("--untie-embeddings-and-output-weights", untie_embeddings_and_output_weights,
           "GPT: an output layer of its own (output_layer.weight), not the word embeddings",
           RESUME),
    DBL("--mask-prob", mask_prob, 0, 1, "BERT: share of the tokens masked for prediction"),
    DBL("--short-seq-prob", short_seq_prob, 1e-6, 1,
        "BERT: probability of a sample with a random shorter target length"),
    {"--task", MGT_FLAG_ENUM, OFF(task), 0, 0, "mgt finetune: RACE, MNLI or QQP (docs/finetune.md)",
     mgt_task_names, 0, 0},
    {"--train-data", MGT_FLAG_LIST, OFF(train_data), 0, 0,
     "mgt finetune: training files (MNLI, QQP) or directories of *.txt (RACE)", NULL,
     sizeof(((mgt_config *)0)->train_data), 0},
    {"--valid-data", MGT_FLAG_LIST, OFF(valid_data), 0, 0,
     "mgt finetune: validation files or directories, each scored on its own", NULL,
     sizeof(((mgt_config *)0)->valid_data), 0},
    STR("--pretrained-checkpoint", pretrained_checkpoint,
        "mgt finetune: the pretrained BERT (directory or file) to start from"),
    INT("--epochs", epochs, 0, 1 << 20, "mgt finetune: passes over the training data"),
    BOOL("--skip-bad-records", skip_bad_records,
         "mgt finetune: count and skip malformed records instead of stopping"),
    INT("--tensor-model-parallel-size", tensor_model_parallel_size, 1, 1 << 16,
        "ranks that split each layer"),
    BOOL("--recompute-activations", recompute_activations,
         "keep only layer inputs; recompute each layer in backward (--recompute-granularity "
         "full with one layer per chunk)"),
    {"--recompute-granularity", MGT_FLAG_ENUM, OFF(recompute_granularity), 0, 0,
     "none; full: recompute whole layers from their inputs; selective: keep everything but the "
     "attention probabilities, recompute those",
     recompute_granularities, 0, 0},
    {"--recompute-method", MGT_FLAG_ENUM, OFF(recompute_method), 0, 0,
     "full: uniform (chunks of --recompute-num-layers layers, each recomputed from its input) "
     "or block (only the first --recompute-num-layers layers recomputed)",
     recompute_methods, 0, 0},
    INT("--recompute-num-layers", recompute_num_layers, 0, 1 << 20,
        "layers per recomputed chunk (uniform) or recomputed layers (block)"),
    I64("--ddp-bucket-size", ddp_bucket_size, 1024, 2147483647.0,
        "gradient elements per data-parallel all-reduce"),
    BOOL("--overlap-grad-reduce", overlap_grad_reduce,
         "start non-blocking gradient all-reduces while backward runs"),
    BOOL("--use-distributed-optimizer", use_distributed_optimizer,
         "shard the Adam moments and the update over the data-parallel ranks: gradients "
         "reduce-scattered, parameters all-gathered (Megatron-LM's distributed optimizer)"),
    BOOL("--overlap-param-gather", overlap_param_gather,
         "with --use-distributed-optimizer: start the parameter all-gathers non-blocking and "
         "wait for each layer's just before its forward"),
    BOOL("--sequence-parallel", sequence_parallel,
         "split the LayerNorms, dropouts and residuals over the tensor-parallel ranks by token "
         "rows: all-gather before each column-parallel layer, reduce-scatter after each "
         "row-parallel one (Megatron-LM's sequence parallelism)"),
    {"--attention-backend", MGT_FLAG_ENUM, OFF(attention_backend), 0, 0,
     "flash: attention in tiles of keys with an online softmax, never holding the T x T "
     "probabilities (FlashAttention; the same dropout masks); unfused: the probabilities "
     "materialized; auto: flash where it was measured at least as fast (CPUs, but for native "
     "bf16 below sequence 2048; GPUs under 16 bits at head sizes 32, 64, 128); Megatron-Core's "
     "fused is flash here, its local unfused",
     attention_backends, 0, MGT_FLAG_PLAN},
    BOOL_M("--use-flash-attn", attention_backend, "", MGT_FLAG_PLAN), /* MGT_ATTN_FLASH is 1 */
    INT("--logits-chunk-rows", logits_chunk_rows, 0, 1 << 30,
        "GPT: token rows whose output-layer logits (and their gradient) are held at once; 0: as "
        "many as fit 64 MiB"),
    BOOL("--dry-run", dry_run, "print the memory plan per rank and exit"),
    {"--device", MGT_FLAG_ENUM, OFF(device), 0, 0,
     "cpu, or cuda (one GPU per rank, chosen by the node-local rank)", mgt_device_names, 0, 0},
    {"--distributed-backend", MGT_FLAG_ENUM, OFF(distributed_backend), 0, 0,
     "collectives on GPU buffers: nccl or mpi (default: nccl when every rank has its own GPU); "
     "gloo, and nccl on CPUs, are mpi",
     dist_backends, 0, 0},
    {"--cpu-gemm", MGT_FLAG_ENUM, OFF(cpu_gemm), 0, 0,
     "--bf16 on the CPU: native (bf16 operands on the CPU's bf16 units through oneDNN, fp32 "
     "accumulation) or emulated (operands rounded to bf16, fp32 sgemm: the CUDA kernels' twin); "
     "default: native where the CPU has bf16 units",
     mgt_cpu_gemm_names, 0, 0},
    {"--cpu-gemm-fp32", MGT_FLAG_ENUM, OFF(cpu_gemm_fp32), 0, 0,
     "the CPU's fp32 GEMMs: openblas (the BLAS's sgemm), onednn (oneDNN's fp32 matmul) or auto "
     "(both timed at start on a layer's GEMM shapes, oneDNN taken where it is 10% faster; "
     "models too small to time keep the BLAS)",
     mgt_fp32_gemm_names, 0, 0},
    BOOL_M("--fp16", fp16, "fp16 GEMM inputs with loss scaling; fp32 master weights",
           MGT_FLAG_PLAN),
    BOOL_M("--bf16", bf16, "bf16 GEMM inputs; fp32 master weights", MGT_FLAG_PLAN),
    BOOL_M(
        "--no-weight-copies", no_weight_copies,
        "with --bf16 or --fp16: keep no 16-bit copy of the weights (remade once per step); "
        "every GEMM rounds its weights again (saves 2 bytes per parameter on GPUs and native CPU "
        "bf16, 4 in emulated)",
        MGT_FLAG_PLAN),
    DBL("--loss-scale", loss_scale, 0, 1e30, "fp16: a fixed loss scale (default: dynamic)"),
    DBL("--initial-loss-scale", initial_loss_scale, 1, 1e30, "fp16: the first dynamic scale"),
    DBL("--min-loss-scale", min_loss_scale, 1e-30, 1e30, "fp16: the dynamic scale's floor"),
    INT("--loss-scale-window", loss_scale_window, 1, 1 << 30,
        "fp16: iterations without overflow before the scale doubles"),
    INT("--hysteresis", hysteresis, 1, 1 << 30, "fp16: overflows before the scale halves"),
    INT("--micro-batch-size", micro_batch_size, 1, 1 << 20, "samples per micro-batch"),
    INT_M("--global-batch-size", global_batch_size, 1, 1 << 30,
          "samples per iteration (default: micro batch * data-parallel size)", MGT_FLAG_PLAN),
    I64("--train-iters", train_iters, 0, BIG, "iterations to train"),
    I64("--train-samples", train_samples, 0, BIG,
        "samples to train (instead of --train-iters): --train-samples / --global-batch-size "
        "iterations, the learning rate scheduled in samples"),
    DBL("--lr", lr, 0, 10, "peak learning rate"),
    DBL("--min-lr", min_lr, 0, 10, "learning rate at the end of decay"),
    DBL("--decoupled-lr", decoupled_lr, 0, 10,
        "the word embeddings' and output layer's own peak learning rate (Megatron-LM's; 0: "
        "--lr), on the same warmup and decay"),
    DBL("--decoupled-min-lr", decoupled_min_lr, -1, 10,
        "their learning rate at the end of decay (-1: --min-lr)"),
    {"--lr-decay-style", MGT_FLAG_ENUM, OFF(lr_decay_style), 0, 0, "constant, linear or cosine",
     lr_styles, 0, 0},
    I64("--lr-warmup-iters", lr_warmup_iters, 0, BIG, "linear warmup iterations"),
    I64("--lr-decay-iters", lr_decay_iters, 1, BIG, "iterations of decay (default: train iters)"),
    {"--step-batch-size-schedule", MGT_FLAG_LIST, OFF(step_batch_size_schedule), 0, 0,
     "TOKENS:BATCH ... (Megatron-LM's; suffixes K, M, B, T): the global batch is BATCH from "
     "TOKENS tokens on; the first at 0, the last the global batch",
     NULL, sizeof(((mgt_config *)0)->step_batch_size_schedule), 0},
    {"--rampup-batch-size", MGT_FLAG_LIST, OFF(rampup_batch_size), 0, 0,
     "START INCREMENT SAMPLES: with --train-samples, the global batch grows from START by "
     "INCREMENT in equal steps over SAMPLES samples, then is --global-batch-size (Megatron-LM's)",
     NULL, sizeof(((mgt_config *)0)->rampup_batch_size), 0},
    I64("--lr-warmup-samples", lr_warmup_samples, 0, BIG,
        "with --train-samples: linear warmup over this many samples"),
    I64("--lr-decay-samples", lr_decay_samples, 0, BIG,
        "with --train-samples: samples of decay (default: --train-samples)"),
    DBL("--lr-warmup-fraction", lr_warmup_fraction, 0, 1,
        "warmup over this fraction of the decay iterations, rounded down (instead of "
        "--lr-warmup-iters)"),
    DBL("--weight-decay", weight_decay, 0, 10,
        "decoupled weight decay (not on biases or LayerNorm)"),
    DBL("--adam-beta1", adam_beta1, 0, 0.999999, "Adam beta1"),
    DBL("--adam-beta2", adam_beta2, 0, 0.999999999, "Adam beta2"),
    DBL("--adam-eps", adam_eps, 1e-30, 1, "Adam epsilon"),
    DBL("--clip-grad", clip_grad, 0, 1e9, "clip the global gradient norm (0: off)"),
    {"--seed", MGT_FLAG_UINT64, OFF(seed), 0, BIG, "seed of initialization, dropout and data", NULL,
     0, 0},
    BOOL("--mock-data", mock_data, "synthetic sequences (start + stride * j) mod vocab"),
    BOOL("--eod-mask-loss", eod_mask_loss,
         "no loss where the input token is the tokenizer's end of document, so that no "
         "document's first token is predicted from the one before (Megatron-LM's)"),
    INT("--num-microbatches-in-minibatch", num_microbatches_in_minibatch, 0, 1 << 20,
        "Megatron-LM 2020's: micro-batches accumulated per step; the global batch is "
        "--micro-batch-size x it x the data-parallel size (--global-batch-size since)"),
    /* Megatron-LM's: attention kept apart at the end-of-document tokens (its cu_seqlens) */
    BOOL("--dataloader-inter-document-masking", reset_attention_mask, ""),
    BOOL("--reset-attention-mask", reset_attention_mask,
         "no attention across an end-of-document token within a sample: each token sees its own "
         "document's tokens only (Megatron-LM's; the CPU backend)"),
    BOOL("--sft", sft,
         "fine-tuning on whole documents: the datasets' documents (conversations of mgt "
         "preprocess --chat-template) packed into samples, each starting its own positions and "
         "attending only to itself, trained where their loss mask says (docs/chat.md)"),
    {"--sft-long-policy", MGT_FLAG_ENUM, OFF(sft_long_policy), 0, 0,
     "--sft: a document longer than --seq-length + 1 tokens is truncated, dropped, or split into "
     "pieces (each counted in the log)",
     sft_long, 0, 0},
    BOOL("--train-on-prompt", train_on_prompt,
         "--sft: every token of a conversation trains (the prompt too), not only its loss mask's"),
    BOOL("--reset-position-ids", reset_position_ids,
         "positions restart at 0 after each end-of-document token within a sample (Megatron-LM's)"),
    {"--data-path", MGT_FLAG_LIST, OFF(data_path), 0, 0,
     "dataset prefix P (P.h5 from mgt preprocess), or weights and prefixes W1 P1 W2 P2 ...", NULL,
     sizeof(((mgt_config *)0)->data_path), 0},
    STR("--split", split, "train,valid,test weights over documents"),
    {"--train-data-path", MGT_FLAG_LIST, OFF(train_data_path), 0, 0,
     "the training split's own blend, each dataset whole (instead of --data-path and --split)",
     NULL, sizeof(((mgt_config *)0)->train_data_path), 0},
    {"--valid-data-path", MGT_FLAG_LIST, OFF(valid_data_path), 0, 0,
     "the validation split's own blend, with --train-data-path", NULL,
     sizeof(((mgt_config *)0)->valid_data_path), 0},
    {"--test-data-path", MGT_FLAG_LIST, OFF(test_data_path), 0, 0,
     "the test split's blend, with --train-data-path (mgt train evaluates no test split)", NULL,
     sizeof(((mgt_config *)0)->test_data_path), 0},
    STR("--data-args-path", data_args_path,
        "a file holding --data-path's value (weights and prefixes, separated by white space)"),
    STR("--per-split-data-args-path", per_split_data_args_path,
        "a JSON file {\"train\": [...], \"valid\": [...], \"test\": [...]} of each split's "
        "--train-data-path, --valid-data-path, --test-data-path"),
    STR("--data-cache-path", data_cache_path,
        "folder of the datasets' sample-index caches (default: a folder mgt-cache beside each "
        "dataset)"),
    STR("--vocab-file", vocab_file, "GPT-2 vocabulary, to check the dataset was made with it"),
    STR("--tokenizer-model", vocab_file, ""), /* HuggingFaceTokenizer's tokenizer.json */
    STR("--merge-file", merge_file, "GPT-2 merges, with --vocab-file"),
    {"--tokenizer-type", MGT_FLAG_ENUM, OFF(tokenizer_type), 0, 0, MGT_TOKENIZER_HELP,
     mgt_tokenizer_names, 0, 0},
    INT("--eval-interval", eval_interval, 1, 1 << 30, "iterations between validations"),
    INT("--eval-iters", eval_iters, 0, 1 << 30,
        "global batches per validation (0: none); also run at the end"),
    STR("--save", save, "directory of checkpoints (iter_NNNNNNN.h5 and latest)"),
    INT("--save-interval", save_interval, 0, 1 << 30,
        "iterations between checkpoints (0: only at the end)"),
    BOOL("--no-save-optim", no_save_optim, "leave the optimizer state out of checkpoints"),
    INT("--keep-last", keep_last, 0, 1 << 30,
        "keep only the newest N checkpoints in --save (0: keep all)"),
    BOOL("--async-save", async_save,
         "copy the checkpoint to host memory and write it in the background while training "
         "continues"),
    STR("--load", load, "resume from this checkpoint directory (its latest) or file"),
    I64("--ckpt-iteration", ckpt_iteration, -1, BIG, "load this iteration instead of the latest"),
    I64("--ckpt-step", ckpt_iteration, -1, BIG, ""), /* Megatron-LM's name */
    BOOL("--no-load-optim", no_load_optim, "start the optimizer afresh when loading"),
    BOOL("--no-load-rng", no_load_rng,
         "use --seed instead of the checkpoint's seed (dropout and data order change)"),
    BOOL("--finetune", finetune, "load weights only; iteration, samples and optimizer restart"),
    BOOL("--exit-on-missing-checkpoint", exit_on_missing_checkpoint,
         "stop when --load holds no checkpoint, instead of starting from scratch"),
    INT("--exit-duration-in-mins", exit_duration_in_mins, 0, 1 << 30,
        "save and exit (status 75, for requeue) after this many minutes (0: never)"),
    INT("--max-skipped-iterations", max_skipped_iterations, 0, 1 << 30,
        "save and stop after this many iterations in a row with a non-finite loss or gradient "
        "norm (0: never; fp16 loss-scale overflows do not count)"),
    INT("--exit-interval", exit_interval, 0, 1 << 30,
        "save and exit (status 0) when the iteration is a multiple of this (0: never)"),
    DBL("--distributed-timeout-minutes", distributed_timeout_minutes, 0, 1e6,
        "end the job (status 76) when a collective has waited this long for its peers: a rank "
        "stopped or a node lost (fractions allowed; 0: wait forever)"),
    BOOL("--require-node-local-tp", require_node_local_tp,
         "refuse to start when a tensor-parallel group would span nodes (else a warning)"),
    INT("--log-interval", log_interval, 1, 1 << 30, "iterations between log lines"),
    STR("--metrics-file", metrics_file, "append one JSON object per logged iteration"),
    STR("--tensorboard-dir", tensorboard_dir,
        "write TensorBoard event files of the logged scalars here (created if missing)"),
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

const mgt_flag *mgt_config_flags(int *n) {
  *n = N_FLAGS;
  return flags;
}

void mgt_config_defaults(mgt_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->num_layers = 2;
  cfg->hidden_size = 64;
  cfg->num_attention_heads = 4;
  cfg->seq_length = 32;
  cfg->vocab_size = 0;
  cfg->make_vocab_size_divisible_by = 128;
  cfg->init_method_std = 0.02;
  cfg->distributed_timeout_minutes = 10; /* Megatron-LM's default */
  cfg->hidden_dropout = 0.1;
  cfg->attention_dropout = 0.1;
  cfg->layernorm_epsilon = 1e-5;
  cfg->mask_prob = 0.15;
  cfg->short_seq_prob = 0.1;
  cfg->rotary_base = 10000;
  cfg->rope_scaling_factor = 8;
  cfg->tensor_model_parallel_size = 1;
  cfg->ddp_bucket_size = 4194304; /* larger messages were 20x slower through Open MPI here */
  cfg->recompute_num_layers = 1;
  cfg->micro_batch_size = 16;
  cfg->train_iters = 100;
  cfg->lr = 3e-3;
  cfg->min_lr = 0.0;
  cfg->decoupled_min_lr = -1;
  cfg->lr_decay_style = MGT_LR_LINEAR;
  cfg->weight_decay = 0.01;
  cfg->adam_beta1 = 0.9;
  cfg->adam_beta2 = 0.999;
  cfg->adam_eps = 1e-8;
  cfg->clip_grad = 1.0;
  cfg->seed = 1234;
  cfg->log_interval = 100;
  strcpy(cfg->split, "969, 30, 1");
  cfg->tokenizer_type = MGT_TOKENIZER_GPT2;
  cfg->eval_interval = 1000;
  cfg->eval_iters = 100;
  cfg->ckpt_iteration = -1;
  cfg->moe_router_topk = 2;
  cfg->moe_router_bias_update_rate = 1e-3;
  cfg->eod_token = -1;
  cfg->expert_model_parallel_size = 1;
  strcpy(cfg->moe_layer_freq, "1");
  cfg->device = MGT_DEVICE_CPU;
  cfg->distributed_backend = -1;
  cfg->cpu_gemm = -1;
  cfg->initial_loss_scale = 4294967296.0; /* 2^32, as Megatron-LM */
  cfg->min_loss_scale = 1.0;
  cfg->loss_scale_window = 1000;
  cfg->hysteresis = 2;
}

mgt_status mgt_config_parse(mgt_config *cfg, int argc, char **argv, int first, int *help) {
  int nm;
  const mgt_foreign_flag *megatron = mgt_megatron_flags(&nm);
  MGT_CHECK(mgt_flags_parse_foreign(flags, N_FLAGS, megatron, nm, cfg, argc, argv, first, "train",
                                    help, cfg->notes, sizeof cfg->notes));
  int tokenizer_given = 0;
  for (int i = first; i < argc; i++) {
    tokenizer_given |= !strncmp(argv[i], "--tokenizer-type", 16);
    MGT_REQUIRE(cfg->train_samples == 0 || strncmp(argv[i], "--train-iters", 13) ||
                    (argv[i][13] && argv[i][13] != '='),
                "give one of --train-iters and --train-samples"); /* Megatron-LM refuses both */
  }
  /* BERT's vocabulary is WordPiece's unless said otherwise, as Megatron-LM's pretrain_bert.py */
  if (cfg->model == MGT_MODEL_BERT && !tokenizer_given && cfg->vocab_file[0])
    cfg->tokenizer_type = MGT_TOKENIZER_BERT_LOWER;
  mgt_config_note_unused(cfg, argc, argv, first);
  return MGT_OK;
}

int mgt_config_flash(const mgt_config *c, char *why, size_t n) {
  char none[1];
  if (!why) why = none, n = sizeof none;
  if (c->attention_backend != MGT_ATTN_AUTO) {
    snprintf(why, n, "--attention-backend %s", attention_backends[c->attention_backend]);
    return c->attention_backend == MGT_ATTN_FLASH || c->attention_backend == MGT_ATTN_FUSED;
  }
  if (c->device == MGT_DEVICE_CPU) {
    /* measured at T = 64 to 4096 (docs/performance.md "Choosing the attention"): in fp32 the
       tiles are never slower and hold no T x T; on the bf16 units the materialized products are
       a few large batched GEMMs, 3-8% faster than tile by tile until T x T traffic dominates */
    if (c->bf16 && c->cpu_gemm != MGT_CPU_GEMM_EMULATED && mgt_cpu_bf16_units(NULL, 0) &&
        c->seq_length < 2048) {
      snprintf(why, n, "auto: native bf16 GEMMs below sequence 2048");
      return 0;
    }
    snprintf(why, n, "auto: tiles are at least as fast here");
    return 1;
  }
  if (c->reset_attention_mask || c->sft) { /* the tensor-core tiles do not keep them apart */
    snprintf(why, n, "auto: documents kept apart: cuBLAS's materialized attention");
    return 0;
  }
  /* where the tensor-core kernels run; the fp32 kernel is a row per block, for correctness
     more than speed */
  const int hd = mgt_config_head_size(c);
  const int tc = (c->bf16 || c->fp16) && mgt_flash16_head(hd);
  snprintf(why, n, "auto: %s",
           tc ? "tensor-core tiles under 16-bit precision"
              : "no tensor-core tiles for fp32 or this head size");
  return tc;
}

int mgt_config_head_size(const mgt_config *c) {
  if (c->kv_channels > 0) return c->kv_channels;
  return c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
}

int mgt_config_query_groups(const mgt_config *c) {
  return c->group_query_attention ? c->num_query_groups : c->num_attention_heads;
}

void mgt_config_derive(mgt_config *c) {
  if (c->ffn_hidden_size == 0 && c->swiglu) { /* Megatron-LM's: the GeLU MLP's parameters */
    c->ffn_hidden_size = (int)((int64_t)c->hidden_size * 8 / 3 / 64 * 64);
    if (c->ffn_hidden_size < 64) c->ffn_hidden_size = 64;
  }
  if (c->ffn_hidden_size == 0) c->ffn_hidden_size = 4 * c->hidden_size;
  if (c->moe_ffn_hidden_size == 0) c->moe_ffn_hidden_size = c->ffn_hidden_size;
  if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
  if (c->mock_data && c->vocab_size == 0 && c->tokenizer_type != MGT_TOKENIZER_NULL)
    c->vocab_size = 128;
}

mgt_status mgt_config_check_model(const mgt_config *c, const char *what) {
  MGT_REQUIRE(c->num_attention_heads > 0 &&
                  (c->kv_channels > 0 || c->hidden_size % c->num_attention_heads == 0),
              "%s: configuration: hidden_size %d is not divisible by num_attention_heads %d", what,
              c->hidden_size, c->num_attention_heads);
  MGT_REQUIRE(c->vocab_size > 0, "%s: configuration: no vocab_size", what);
  MGT_REQUIRE(c->seq_length <= c->max_position_embeddings,
              "%s: configuration: seq_length %d exceeds max_position_embeddings %d", what,
              c->seq_length, c->max_position_embeddings);
  mgt_model_spec desc;
  if (mgt_model_describe(c, &desc) != MGT_OK) {
    char why[512]; /* the message is rewritten in place */
    snprintf(why, sizeof why, "%s", mgt_error_message());
    return MGT_ERROR(MGT_ERR_INPUT, "%s: configuration: %s", what, why);
  }
  MGT_REQUIRE(desc.input != MGT_INPUT_SAMPLES || c->seq_length >= 5,
              "%s: configuration: seq_length %d is too short for BERT ([CLS] A [SEP] B [SEP])",
              what, c->seq_length);
  return MGT_OK;
}

int64_t mgt_config_padded_vocab(const mgt_config *c, int tp) {
  int64_t mult = (int64_t)c->make_vocab_size_divisible_by * tp;
  return (c->vocab_size + mult - 1) / mult * mult;
}

/* c as the resume check compares it: the key/value heads as they are (--num-query-groups
   means nothing without --group-query-attention), the rotary settings only with rotary
   positions, the scaling factor only with scaling. */
static mgt_config resume_view(const mgt_config *c) {
  mgt_config v = *c;
  v.num_query_groups = mgt_config_query_groups(c);
  /* the head size when it is not hidden / heads (0 also in checkpoints before --kv-channels) */
  if (c->num_attention_heads > 0 && c->kv_channels * c->num_attention_heads == c->hidden_size)
    v.kv_channels = 0;
  v.group_query_attention = v.num_query_groups != c->num_attention_heads;
  if (c->position_embedding_type != MGT_POS_ROPE) v.rotary_base = 0, v.use_rope_scaling = 0;
  if (!v.use_rope_scaling) v.rope_scaling_factor = 1;
  if (!c->qk_layernorm) v.qk_layernorm_full = 0;
  if (!c->num_experts) { /* a dense model (and checkpoints from before MoE) */
    v.moe_router_enable_expert_bias = 0;
    v.moe_shared_expert_intermediate_size = 0, v.moe_shared_expert_gate = 0;
    v.moe_router_topk = 2, v.moe_ffn_hidden_size = 0, v.moe_router_score_function = 0;
    v.moe_router_pre_softmax = 0, v.moe_router_topk_scaling_factor = 0;
    strcpy(v.moe_layer_freq, "1");
  }
  return v;
}

/* A flag's value in c, as text ("32", "RMSNorm", "1e+06"). */
static void flag_value(const mgt_flag *f, const mgt_config *c, char *out, size_t n) {
  const char *p = (const char *)c + f->offset;
  switch (f->kind) {
  case MGT_FLAG_DOUBLE: snprintf(out, n, "%.17g", *(const double *)p); break;
  case MGT_FLAG_ENUM: snprintf(out, n, "%s", f->choices[*(const int *)p]); break;
  case MGT_FLAG_STR: snprintf(out, n, "%s", p); break;
  default: snprintf(out, n, "%d", *(const int *)p); break;
  }
}

int mgt_config_model_diff(const mgt_config *a, const mgt_config *b, char *diff, size_t n) {
  const mgt_config va = resume_view(a), vb = resume_view(b);
  int k = 0;
  if (n) diff[0] = 0;
  for (int i = 0; i < N_FLAGS; i++) { /* the flags marked RESUME, in the table's order */
    const mgt_flag *f = &flags[i];
    if (!(f->marks & MGT_FLAG_RESUME) || mgt_flag_is_alias(flags, i)) continue;
    char x[64], y[64];
    flag_value(f, &va, x, sizeof x), flag_value(f, &vb, y, sizeof y);
    if (!strcmp(x, y)) continue;
    const size_t used = strlen(diff);
    snprintf(diff + used, n - used, "%s%s %s (checkpoint %s)", k ? ", " : "", f->name, x, y);
    k++;
  }
  return k;
}

mgt_status mgt_config_check_tp(const mgt_config *c, int tp) {
  MGT_REQUIRE(c->kv_channels > 0 || c->hidden_size % c->num_attention_heads == 0,
              "--hidden-size %d is not divisible by --num-attention-heads %d (or give the head "
              "size, --kv-channels)",
              c->hidden_size, c->num_attention_heads);
  MGT_REQUIRE(c->num_attention_heads % tp == 0,
              "--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d",
              c->num_attention_heads, tp);
  MGT_REQUIRE(mgt_config_query_groups(c) % tp == 0,
              "--num-query-groups %d is not divisible by --tensor-model-parallel-size %d: each "
              "rank holds whole key/value groups with their query heads",
              mgt_config_query_groups(c), tp);
  MGT_REQUIRE(c->ffn_hidden_size % tp == 0,
              "--ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d",
              c->ffn_hidden_size, tp);
  MGT_REQUIRE(!c->num_experts || c->moe_ffn_hidden_size % tp == 0,
              "--moe-ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d",
              c->moe_ffn_hidden_size, tp);
  MGT_REQUIRE(c->moe_shared_expert_intermediate_size % tp == 0,
              "--moe-shared-expert-intermediate-size %d is not divisible by "
              "--tensor-model-parallel-size %d",
              c->moe_shared_expert_intermediate_size, tp);
  return MGT_OK;
}

mgt_status mgt_config_finalize(mgt_config *c, int world_size) {
  mgt_config_derive(c);
  MGT_REQUIRE(!c->recompute_activations || c->recompute_granularity != MGT_RECOMPUTE_SELECTIVE,
              "--recompute-activations is full recomputation: give it or --recompute-granularity "
              "selective");
  if (c->recompute_activations) c->recompute_granularity = MGT_RECOMPUTE_FULL;
  MGT_REQUIRE(!c->overlap_param_gather || c->use_distributed_optimizer,
              "--overlap-param-gather overlaps the distributed optimizer's all-gather: give "
              "--use-distributed-optimizer");
  MGT_REQUIRE(c->recompute_granularity == MGT_RECOMPUTE_FULL ||
                  (c->recompute_method == MGT_RECOMPUTE_UNIFORM && c->recompute_num_layers == 1),
              "--recompute-method and --recompute-num-layers choose the layers of "
              "--recompute-granularity full");
  MGT_REQUIRE(c->recompute_method == MGT_RECOMPUTE_BLOCK || c->recompute_num_layers >= 1,
              "--recompute-num-layers: at least 1 layer per chunk with --recompute-method uniform");
  MGT_REQUIRE(c->recompute_num_layers <= c->num_layers,
              "--recompute-num-layers %d exceeds --num-layers %d", c->recompute_num_layers,
              c->num_layers);
  if (c->train_samples > 0) /* the schedule in samples, derived below once the batch is known */
    MGT_REQUIRE(c->lr_decay_iters == 0 && c->lr_warmup_iters == 0,
                "--train-samples schedules the learning rate in samples: give "
                "--lr-decay-samples and --lr-warmup-samples (or --lr-warmup-fraction), not "
                "iterations");
  else
    MGT_REQUIRE(c->lr_decay_samples == 0 && c->lr_warmup_samples == 0,
                "--lr-decay-samples and --lr-warmup-samples need --train-samples (or give "
                "--lr-decay-iters and --lr-warmup-iters)");
  if (c->train_samples == 0 && c->lr_decay_iters == 0)
    c->lr_decay_iters = c->train_iters > 0 ? c->train_iters : 1;
  if (c->train_samples == 0 && c->lr_warmup_fraction > 0) { /* the same every time derived */
    const int64_t w = (int64_t)(c->lr_warmup_fraction * (double)c->lr_decay_iters);
    MGT_REQUIRE(c->lr_warmup_iters == 0 || c->lr_warmup_iters == w,
                "give one of --lr-warmup-iters and --lr-warmup-fraction");
    c->lr_warmup_iters = w;
  }
  int tp = c->tensor_model_parallel_size;
  MGT_REQUIRE(!c->sequence_parallel || (int64_t)c->micro_batch_size * c->seq_length % tp == 0,
              "--sequence-parallel splits the %d x %d token rows of a micro-batch over "
              "--tensor-model-parallel-size %d, which does not divide them",
              c->micro_batch_size, c->seq_length, tp);
  MGT_REQUIRE(world_size % tp == 0,
              "--tensor-model-parallel-size %d does not divide the number of ranks %d", tp,
              world_size);
  int dp = world_size / tp;
  mgt_batch_schedule batches;
  MGT_CHECK(mgt_config_batches(c, dp, &batches));
  if (c->train_samples > 0) { /* Megatron-LM's: whole global batches, the rest not trained */
    if (!batches.has_ramp && !batches.steps)
      c->train_iters = c->train_samples / c->global_batch_size;
    MGT_REQUIRE(c->train_iters > 0, "--train-samples %lld is less than one global batch of %d",
                (long long)c->train_samples, c->global_batch_size);
    if (c->lr_decay_samples == 0) c->lr_decay_samples = c->train_samples;
    if (c->lr_warmup_fraction > 0) {
      const int64_t w = (int64_t)(c->lr_warmup_fraction * (double)c->lr_decay_samples);
      MGT_REQUIRE(c->lr_warmup_samples == 0 || c->lr_warmup_samples == w,
                  "give one of --lr-warmup-samples and --lr-warmup-fraction");
      c->lr_warmup_samples = w;
    }
    MGT_REQUIRE(c->lr_decay_style == MGT_LR_CONSTANT || c->lr_warmup_samples <= c->lr_decay_samples,
                "--lr-warmup-samples %lld exceeds --lr-decay-samples %lld",
                (long long)c->lr_warmup_samples, (long long)c->lr_decay_samples);
  }
  MGT_CHECK(mgt_config_check_tp(c, tp));
  MGT_REQUIRE(!c->sft || mgt_model_kinds[c->model].causal,
              "--sft packs documents for causal (GPT-style) models");
  MGT_REQUIRE(!c->sft || mgt_config_padded_vocab(c, tp) <= MGT_TOKEN_ID + 1,
              "--sft: a vocabulary of %lld is above the 2^29 ids packed samples carry",
              (long long)mgt_config_padded_vocab(c, tp));
  MGT_REQUIRE(!(c->sft_long_policy || c->train_on_prompt) || c->sft,
              "--sft-long-policy and --train-on-prompt are --sft's");
  MGT_REQUIRE(!c->reset_attention_mask || mgt_model_kinds[c->model].causal,
              "--reset-attention-mask keeps documents apart in causal attention (GPT-style "
              "models)");
  MGT_REQUIRE(c->global_batch_size % (c->micro_batch_size * dp) == 0,
              "--global-batch-size %d is not divisible by --micro-batch-size %d times the "
              "data-parallel size %d",
              c->global_batch_size, c->micro_batch_size, dp);
  MGT_REQUIRE(c->seq_length <= c->max_position_embeddings,
              "--seq-length %d exceeds --max-position-embeddings %d", c->seq_length,
              c->max_position_embeddings);
  MGT_REQUIRE(!(c->fp16 && c->bf16), "--fp16 and --bf16 exclude each other");
  MGT_REQUIRE(c->cpu_gemm < 0 || c->device == MGT_DEVICE_CPU, "--cpu-gemm needs --device cpu");
  MGT_REQUIRE(c->cpu_gemm_fp32 == MGT_FP32_GEMM_AUTO || c->device == MGT_DEVICE_CPU,
              "--cpu-gemm-fp32 needs --device cpu");
  MGT_REQUIRE(c->cpu_gemm != MGT_CPU_GEMM_NATIVE || c->bf16,
              "--cpu-gemm native needs --bf16 (fp16 and fp32 GEMMs have no native bf16 path)");
  if (c->distributed_backend == MGT_DIST_BACKEND_NCCL && c->device != MGT_DEVICE_CUDA &&
      !strstr(c->notes, "--distributed-backend"))
    snprintf(c->notes + strlen(c->notes), sizeof c->notes - strlen(c->notes),
             "--distributed-backend nccl: no GPU in this run (--device cpu): the collectives go "
             "through MPI\n");
  const int ep = c->expert_model_parallel_size;
  MGT_REQUIRE(ep == 1 || c->num_experts > 0,
              "--expert-model-parallel-size %d shares experts out: give --num-experts", ep);
  MGT_REQUIRE(ep == 1 || c->num_experts % ep == 0,
              "--num-experts %d is not divisible by --expert-model-parallel-size %d",
              c->num_experts, ep);
  MGT_REQUIRE(ep == 1 || (world_size / tp) % ep == 0,
              "--expert-model-parallel-size %d does not divide the data-parallel size %d (%d ranks "
              "/ --tensor-model-parallel-size %d): expert parallelism is carved out of the "
              "data-parallel ranks",
              ep, world_size / tp, world_size, tp);
  MGT_REQUIRE(!c->no_position_embedding || c->position_embedding_type == MGT_POS_ROPE,
              "--no-position-embedding: a model without positions is not implemented (with "
              "--position-embedding-type rope there is no learned table)");
  MGT_REQUIRE(c->min_loss_scale <= c->initial_loss_scale,
              "--min-loss-scale %g exceeds --initial-loss-scale %g", c->min_loss_scale,
              c->initial_loss_scale);
  MGT_REQUIRE(c->min_lr <= c->lr, "--min-lr %g exceeds --lr %g", c->min_lr, c->lr);
  MGT_REQUIRE(c->decoupled_min_lr == -1 || c->decoupled_min_lr >= 0,
              "--decoupled-min-lr %g: a learning rate, or -1 for --min-lr", c->decoupled_min_lr);
  MGT_REQUIRE(c->decoupled_min_lr < 0 || c->decoupled_lr > 0,
              "--decoupled-min-lr needs --decoupled-lr");
  MGT_REQUIRE(c->decoupled_lr == 0 || c->decoupled_min_lr <= c->decoupled_lr,
              "--decoupled-min-lr %g exceeds --decoupled-lr %g", c->decoupled_min_lr,
              c->decoupled_lr);
  MGT_REQUIRE(c->decoupled_lr == 0 || c->decoupled_min_lr >= 0 || c->min_lr <= c->decoupled_lr,
              "--min-lr %g, the end of --decoupled-lr %g's decay unless --decoupled-min-lr says "
              "otherwise, exceeds it",
              c->min_lr, c->decoupled_lr);
  MGT_REQUIRE(c->lr_decay_style == MGT_LR_CONSTANT || c->lr_warmup_iters <= c->lr_decay_iters,
              "--lr-warmup-iters %lld exceeds --lr-decay-iters %lld", (long long)c->lr_warmup_iters,
              (long long)c->lr_decay_iters);
  MGT_CHECK(mgt_config_read_data_args(c));
  MGT_REQUIRE(!c->train_data_path[0] || !c->data_path[0],
              "give --data-path (split by --split) or each split's --train-data-path and "
              "--valid-data-path, not both");
  MGT_REQUIRE(c->train_data_path[0] || (!c->valid_data_path[0] && !c->test_data_path[0]),
              "--valid-data-path and --test-data-path need --train-data-path");
  MGT_REQUIRE(!(c->mock_data && c->train_data_path[0]),
              "--mock-data and --train-data-path exclude each other");
  if (c->test_data_path[0] && !strstr(c->notes, "--test-data-path"))
    snprintf(c->notes + strlen(c->notes), sizeof c->notes - strlen(c->notes),
             "--test-data-path: mgt train evaluates no test split (score it with mgt eval)\n");
  MGT_REQUIRE(c->mock_data || c->data_path[0] || c->train_data_path[0] || c->task,
              "no training data: pass --data-path or --mock-data");
  mgt_model_spec desc; /* refuses a head or flag the model kind does not have */
  MGT_CHECK(mgt_model_describe(c, &desc));
  if (desc.input == MGT_INPUT_SAMPLES) {
    MGT_REQUIRE(c->seq_length >= 5, "--seq-length %d is too short for BERT ([CLS] A [SEP] B [SEP])",
                c->seq_length);
    MGT_REQUIRE(c->mock_data ||
                    (c->vocab_file[0] && (c->tokenizer_type == MGT_TOKENIZER_BERT_LOWER ||
                                          c->tokenizer_type == MGT_TOKENIZER_BERT_CASED)),
                "--model bert needs --tokenizer-type BertWordPieceLowerCase or BertWordPieceCase "
                "and --vocab-file (the samples need [CLS], [SEP], [MASK] and the word pieces)");
  }
  if (desc.input != MGT_INPUT_SAMPLES &&
      (c->tokenizer_type == MGT_TOKENIZER_BERT_LOWER ||
       c->tokenizer_type == MGT_TOKENIZER_BERT_CASED) &&
      !strstr(c->notes, "--model gpt"))
    snprintf(c->notes + strlen(c->notes), sizeof c->notes - strlen(c->notes),
             "--model gpt on WordPiece ids: a BERT job (Megatron-LM's pretrain_bert.py) is "
             "--model bert\n");
  MGT_REQUIRE(!(c->mock_data && c->data_path[0]), "--mock-data and --data-path exclude each other");
  double w[3];
  MGT_CHECK(mgt_split_parse(c->split, w));
  if (c->data_path[0] && w[1] == 0 && c->eval_iters > 0 && !strstr(c->notes, "--split"))
    snprintf(c->notes + strlen(c->notes), sizeof c->notes - strlen(c->notes),
             "--split %s: no documents for validation: --eval-iters %d validates nothing\n",
             c->split, c->eval_iters);
  MGT_REQUIRE(!c->merge_file[0] || c->vocab_file[0], "--merge-file needs --vocab-file");
  struct stat sb; /* a model's folder: its tokenizer.json, the file every later reader reads */
  if (c->tokenizer_type == MGT_TOKENIZER_HF && c->vocab_file[0] && stat(c->vocab_file, &sb) == 0 &&
      S_ISDIR(sb.st_mode)) {
    const size_t n = strlen(c->vocab_file);
    MGT_REQUIRE(n + 16 < sizeof c->vocab_file, "--tokenizer-model %s: path too long",
                c->vocab_file);
    snprintf(c->vocab_file + n, sizeof c->vocab_file - n, "%stokenizer.json",
             c->vocab_file[n - 1] == '/' ? "" : "/");
  }
  MGT_REQUIRE(c->tokenizer_type != MGT_TOKENIZER_NULL || c->vocab_size > 0,
              "--tokenizer-type NullTokenizer needs --vocab-size (its ids, without the end of "
              "document, which is id --vocab-size)");
  MGT_REQUIRE(c->tokenizer_type != MGT_TOKENIZER_NULL || !c->vocab_file[0],
              "--tokenizer-type NullTokenizer reads no vocabulary file");
  MGT_REQUIRE(c->tokenizer_type < MGT_TOKENIZER_BERT_LOWER ||
                  c->tokenizer_type == MGT_TOKENIZER_NULL || c->vocab_file[0],
              "--tokenizer-type %s needs %s", mgt_tokenizer_names[c->tokenizer_type],
              mgt_tokenizer_file_flag(c->tokenizer_type));
  MGT_REQUIRE(!c->vocab_file[0] || c->merge_file[0] || c->tokenizer_type != MGT_TOKENIZER_GPT2,
              "--vocab-file needs --merge-file for GPT2BPETokenizer");
  return mgt_config_check_bounds(c, tp); /* without a vocabulary yet: again once it is known */
}

void mgt_config_usage(FILE *f) {
  mgt_config d;
  mgt_config_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "train", f);
}

void mgt_config_print(const mgt_config *cfg, FILE *f) {
  fprintf(f, "------------------------ arguments ------------------------\n");
  mgt_flags_print(flags, N_FLAGS, cfg, f);
  fprintf(f, "-------------------- end of arguments ---------------------\n");
}

void mgt_config_json(const mgt_config *cfg, FILE *f) { mgt_flags_json(flags, N_FLAGS, cfg, f); }

char *mgt_config_to_text(const mgt_config *cfg) {
  char *text = NULL;
  size_t len = 0;
  FILE *ms = open_memstream(&text, &len);
  if (!ms) return NULL;
  mgt_config_json(cfg, ms);
  if (fclose(ms) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

mgt_status mgt_config_from_text(mgt_config *cfg, const char *text, const char *what) {
  mgt_status st = MGT_OK;
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL;
  MGT_TRY(mgt_json_parser_create(&jp));
  if (mgt_json_parse(jp, text, strlen(text), &root) != MGT_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: configuration: %s", what, why);
  }
  mgt_config_defaults(cfg);
  MGT_TRY(mgt_config_from_json(cfg, root, what));
  mgt_config_derive(cfg);
  MGT_TRY(mgt_config_check_model(cfg, what));
done:
  mgt_json_parser_destroy(&jp);
  return st;
}

mgt_status mgt_config_from_json(mgt_config *cfg, const struct mgt_json *obj, const char *what) {
  return mgt_flags_from_json(flags, N_FLAGS, cfg, obj, what);
}
