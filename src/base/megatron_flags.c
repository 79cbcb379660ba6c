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
#define NO_FSDP                                                                                    \
  "mgt has no fully sharded data parallelism: --use-distributed-optimizer shards the optimizer"
#define NO_MOE "mgt has no Mixture-of-Experts layer yet: a dense model only"
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
    RENAMED("--activations-checkpoint-method", 1,
            "--recompute-granularity full --recompute-method (the same value)"),
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
    /* Megatron-LM 2019-2020's, gone since */
    NOTE("--lazy-loader", 0, "mgt memory-maps its datasets always"),
    NOTE("--resume-dataloader", 0, "mgt resumes the data where the checkpoint left it always"),
    NOTE("--cache-dir", 1,
         "mgt's sample-index caches go to mgt-cache beside each dataset, or --data-cache-path"),
    NOTE("--presplit-sentences", 0,
         "mgt's BERT datasets are split into sentences by mgt preprocess --split-sentences"),
    NOTE("--fp32-embedding", 0, "mgt keeps the embedding tables in fp32 always"),
    NOTE("--fp32-layernorm", 0, "mgt computes its norms in fp32 always"),
    REFUSED("--tokenizer-model-type", 1,
            "Megatron-LM 2019's tokenizer choice: give --tokenizer-type BertWordPieceLowerCase "
            "(or BertWordPieceCase) and --vocab-file"),
    REFUSED("--max-preds-per-seq", 1,
            "Megatron-LM 2019's: mgt masks up to --mask-prob of each sample's tokens, as "
            "Megatron-LM since 2020; leave it out"),
    REFUSED("--num-microbatches-in-minibatch", 1,
            "Megatron-LM 2020's: give --global-batch-size (micro-batch size x micro-batches x "
            "data-parallel size)"),
    NOTE("--no-check-for-nan-in-loss-and-grad", 0,
         "mgt finds a non-finite loss or gradient norm always and skips that update "
         "(--max-skipped-iterations stops the run)"),
    NOTE("--logging-level", 1, "mgt logs at one level"),
    NOTE("--init-model-with-meta-device", 0, "mgt allocates each rank's shards only"),
    REFUSED("--data-parallel-sharding-strategy", 1, NO_FSDP),
    REFUSED("--fsdp-double-buffer", 0, NO_FSDP),
    REFUSED("--fsdp-manual-registration", 0, NO_FSDP),
    REFUSED("--use-nccl-ub", 0, NO_FSDP),
    REFUSED("--num-experts", 1, NO_MOE),
    REFUSED("--moe-router-topk", 1, NO_MOE),
    REFUSED("--moe-router-load-balancing-type", 1, NO_MOE),
    REFUSED("--moe-aux-loss-coeff", 1, NO_MOE),
    REFUSED("--moe-grouped-gemm", 0, NO_MOE),
    REFUSED("--moe-token-dispatcher-type", 1, NO_MOE),
    REFUSED("--moe-ffn-hidden-size", 1, NO_MOE),
    REFUSED("--moe-layer-freq", 1, NO_MOE),
    REFUSED("--moe-z-loss-coeff", 1, NO_MOE),
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
    REFUSED("--use-torch-fsdp2", 0, NO_FSDP),
    REFUSED("--use-megatron-fsdp", 0, NO_FSDP),
};

const mgt_foreign_flag *mgt_megatron_flags(int *n) {
  *n = (int)(sizeof megatron / sizeof megatron[0]);
  return megatron;
}
