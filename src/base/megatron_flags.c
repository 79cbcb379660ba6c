/* Megatron-LM's flags that mgt train's table lacks under their name, each with its answer, so
   that a Megatron job script gets every refusal at once and with what to do, and no flag is
   ignored without a word (docs/training.md, "Megatron-LM's flags"). */
#include "mgt/flags.h"

#define RENAMED(n, v, to)                                                                          \
  { n, v, MGT_FOREIGN_RENAMED, NULL, to }
#define AT(n, v, accept, why)                                                                      \
  { n, v, MGT_FOREIGN_AT, accept, why }
#define NOTE(n, v, why)                                                                            \
  { n, v, MGT_FOREIGN_NOTE, NULL, why }
#define REFUSED(n, v, why)                                                                         \
  { n, v, MGT_FOREIGN_REFUSED, NULL, why }

#define NO_PP "mgt has no pipeline parallelism: split the model with --tensor-model-parallel-size"
#define NO_FP8 "mgt has no FP8 training: train in --bf16"
#define FUSION "a kernel-fusion choice: mgt's kernels give the same arithmetic either way"
#define NO_PROFILER                                                                                \
  "mgt has no built-in profiler: run it under nsys, perf or VTune; its log prints per-phase "      \
  "timers"
#define NO_LOGGER                                                                                  \
  "mgt does not log this: its log line, --metrics-file and --tensorboard-dir hold its values"

static const mgt_foreign_flag megatron[] = {
    /* renamed by Megatron-LM itself (its arguments.py names the new flag) */
    RENAMED("--batch-size", 1, "--micro-batch-size"),
    RENAMED("--warmup", 1, "--lr-warmup-fraction"),
    RENAMED("--model-parallel-size", 1, "--tensor-model-parallel-size"),
    RENAMED("--checkpoint-activations", 0,
            "--recompute-activations, or --recompute-granularity and --recompute-method"),
    RENAMED("--activations-checkpoint-method", 1, "--recompute-method"),
    RENAMED("--activations-checkpoint-num-layers", 1, "--recompute-num-layers"),
    RENAMED("--checkpoint-num-layers", 1, "--recompute-num-layers"),
    RENAMED("--activations-checkpoint-granularity", 1, "--recompute-granularity"),
    /* accepted at the values mgt implements */
    AT("--pipeline-model-parallel-size", 1, "1", NO_PP),
    AT("--virtual-pipeline-model-parallel-size", 1, "1", NO_PP),
    AT("--num-layers-per-virtual-pipeline-stage", 1, "0", NO_PP),
    AT("--context-parallel-size", 1, "1",
       "mgt has no context parallelism: long sequences fit through --sequence-parallel, "
       "recomputation and the tiled attention"),
    AT("--expert-model-parallel-size", 1, "1", "mgt has no Mixture-of-Experts layer yet"),
    AT("--rotary-percent", 1, "1",
       "rotary positions on part of each head are not implemented: the whole head turns"),
    AT("--data-impl", 1, "mmap|infer",
       "mgt reads Megatron-LM's mmap .bin/.idx format (and its own HDF5); convert lazy or "
       "cached datasets with Megatron-LM's tools/preprocess_data.py"),
    AT("--transformer-impl", 1, "local|transformer_engine",
       "mgt's own layers compute what Megatron-LM's local and Transformer Engine layers compute"),
    AT("--tokenizer-prompt-format", 1, "none", "mgt's tokenizers add no prompt format"),
    /* accepted: they change no number here (a note says so) */
    NOTE("--use-mcore-models", 0,
         "mgt has one implementation of the model (Megatron-Core's "
         "arithmetic); nothing to choose"),
    NOTE("--use-legacy-models", 0, "mgt has one implementation of the model; nothing to choose"),
    NOTE("--num-workers", 1, "each rank reads its samples from the memory-mapped file itself"),
    NOTE("--no-mmap-bin-files", 0, "mgt always memory-maps the .bin files"),
    NOTE("--mmap-bin-files", 0, "mgt always memory-maps the .bin files"),
    NOTE("--no-create-attention-mask-in-dataloader", 0,
         "mgt never builds a mask in the data loader: the attention applies causality itself"),
    NOTE("--log-throughput", 0, "mgt's log line always has tokens/s and TFLOP/s"),
    NOTE("--manual-gc", 0, "mgt has no garbage collector"),
    NOTE("--manual-gc-interval", 1, "mgt has no garbage collector"),
    NOTE("--no-manual-gc-eval", 0, "mgt has no garbage collector"),
    NOTE("--empty-unused-memory-level", 1, "mgt allocates its memory once, at start"),
    NOTE("--cross-entropy-loss-fusion", 0, "mgt's cross-entropy is always fused, chunk by chunk"),
    NOTE("--cross-entropy-fusion-impl", 1, FUSION),
    NOTE("--no-masked-softmax-fusion", 0, FUSION),
    NOTE("--no-bias-gelu-fusion", 0, FUSION),
    NOTE("--no-bias-swiglu-fusion", 0, FUSION),
    NOTE("--no-bias-dropout-fusion", 0, FUSION),
    NOTE("--no-rope-fusion", 0, FUSION),
    NOTE("--no-persist-layer-norm", 0, FUSION),
    NOTE("--no-gradient-accumulation-fusion", 0, FUSION),
    NOTE("--no-async-tensor-model-parallel-allreduce", 0, FUSION),
    NOTE("--apply-query-key-layer-scaling", 0,
         "an fp16 overflow guard that leaves the attention's result unchanged"),
    NOTE("--attention-softmax-in-fp32", 0, "mgt's softmax is always computed in fp32"),
    NOTE("--accumulate-allreduce-grads-in-fp32", 0,
         "mgt accumulates and all-reduces gradients in fp32 always"),
    NOTE("--calculate-per-token-loss", 0,
         "mgt's loss is always the mean over the global batch's tokens, on every layout"),
    NOTE("--grad-reduce-in-bf16", 0,
         "mgt accumulates and reduces gradients in fp32: twice the bytes of bf16, no rounding"),
    NOTE("--tp-comm-overlap", 0,
         "mgt does not overlap tensor-parallel communication with GEMMs (same numbers, slower)"),
    NOTE("--tiktoken-pattern", 1, "only for TikTokenizer, which mgt does not have"),
    NOTE("--profile", 0, NO_PROFILER),
    NOTE("--use-pytorch-profiler", 0, NO_PROFILER),
    NOTE("--profile-step-start", 1, NO_PROFILER),
    NOTE("--profile-step-end", 1, NO_PROFILER),
    NOTE("--profile-ranks", 2, NO_PROFILER),
    NOTE("--record-memory-history", 0, NO_PROFILER),
    NOTE("--memory-snapshot-path", 1, NO_PROFILER),
    NOTE("--nvtx-ranges", 0, NO_PROFILER),
    NOTE("--timing-log-level", 1, "mgt prints its per-phase timers at the end of every run"),
    NOTE("--timing-log-option", 1, "mgt prints its per-phase timers at the end of every run"),
    NOTE("--log-params-norm", 0, NO_LOGGER),
    NOTE("--log-num-zeros-in-grad", 0, NO_LOGGER),
    NOTE("--log-timers-to-tensorboard", 0, NO_LOGGER),
    NOTE("--log-validation-ppl-to-tensorboard", 0, NO_LOGGER),
    NOTE("--log-memory-to-tensorboard", 0, NO_LOGGER),
    NOTE("--log-world-size-to-tensorboard", 0, NO_LOGGER),
    NOTE("--log-loss-scale-to-tensorboard", 0, "mgt writes the loss scale to TensorBoard always"),
    NOTE("--log-batch-size-to-tensorboard", 0, "mgt writes the batch size to TensorBoard always"),
    NOTE("--tensorboard-log-interval", 1, "mgt writes TensorBoard at every --log-interval"),
    NOTE("--tensorboard-queue-size", 1, "mgt writes TensorBoard events as they come"),
    NOTE("--wandb-project", 1, "mgt writes no Weights & Biases logs: use --tensorboard-dir"),
    NOTE("--wandb-exp-name", 1, "mgt writes no Weights & Biases logs: use --tensorboard-dir"),
    NOTE("--wandb-save-dir", 1, "mgt writes no Weights & Biases logs: use --tensorboard-dir"),
    NOTE("--ckpt-format", 1,
         "mgt writes its own sharded HDF5 checkpoints, which resume on any layout "
         "(docs/checkpoint-format.md); mgt ckpt export writes Hugging Face's"),
    NOTE("--use-dist-ckpt", 0, "mgt's HDF5 checkpoints are written in parallel by every rank"),
    NOTE("--auto-detect-ckpt-format", 0, "mgt reads its own checkpoint format"),
    NOTE("--ckpt-fully-parallel-save", 0,
         "mgt's HDF5 checkpoints are written in parallel by every rank"),
    NOTE("--ckpt-fully-parallel-load", 0, "every rank reads its own slabs of mgt's checkpoints"),
    NOTE("--dist-ckpt-strictness", 1, "mgt checks every tensor of a checkpoint by name and shape"),
    NOTE("--use-cpu-initialization", 0,
         "mgt's initialization gives the same numbers on any device and layout"),
    /* refused: what mgt lacks, and what to do */
    REFUSED("--fp8-format", 1, NO_FP8),
    REFUSED("--fp8", 1, NO_FP8),
    REFUSED("--fp8-recipe", 1, NO_FP8),
    REFUSED("--fp8-margin", 1, NO_FP8),
    REFUSED("--fp8-interval", 1, NO_FP8),
    REFUSED("--fp8-amax-history-len", 1, NO_FP8),
    REFUSED("--fp8-amax-compute-algo", 1, NO_FP8),
    REFUSED("--fp8-param-gather", 0, NO_FP8),
    REFUSED("--fp4-format", 1, "mgt has no FP4 training: train in --bf16"),
    REFUSED("--distribute-saved-activations", 0,
            "mgt does not split saved activations over tensor-parallel ranks: use "
            "--sequence-parallel, which splits them by token rows"),
    REFUSED("--distribute-checkpointed-activations", 0,
            "mgt does not split saved activations over tensor-parallel ranks: use "
            "--sequence-parallel, which splits them by token rows"),
    REFUSED("--use-torch-fsdp2", 0,
            "mgt shards the optimizer state with --use-distributed-optimizer, not the weights"),
    REFUSED("--use-megatron-fsdp", 0,
            "mgt shards the optimizer state with --use-distributed-optimizer, not the weights"),
};

const mgt_foreign_flag *mgt_megatron_flags(int *n) {
  *n = (int)(sizeof megatron / sizeof megatron[0]);
  return megatron;
}
