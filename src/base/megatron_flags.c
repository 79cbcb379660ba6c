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
/* flags of one answer, ' ' between, with any number of values (Megatron-LM checked them) */
#define NOTES(why, names)                                                                          \
  { names, 3, MGT_FOREIGN_NOTE, NULL, why }
#define REFUSE(why, names)                                                                         \
  { names, 3, MGT_FOREIGN_REFUSED, NULL, why }

#define NO_PP "mgt has no pipeline parallelism: split the model with --tensor-model-parallel-size"
#define NO_FP8 "mgt has no FP8 training: train in --bf16"
#define NO_FSDP                                                                                    \
  "mgt has no fully sharded data parallelism: --use-distributed-optimizer shards the optimizer"
#define NO_MOE                                                                                     \
  "not in mgt's Mixture-of-Experts layers yet (docs/moe.md has what they do): leave it out"
#define MOE_DISPATCH                                                                               \
  "a dispatch, fusion or memory setting of Megatron-LM's MoE: the same numbers here"
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
    NOTE("--local-rank --local_rank", 1, "mgt takes each rank's number from MPI"),
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
    NOTE("--no-check-for-nan-in-loss-and-grad", 0,
         "mgt finds a non-finite loss or gradient norm always and skips that update "
         "(--max-skipped-iterations stops the run)"),
    NOTE("--logging-level", 1, "mgt logs at one level"),
    NOTE("--init-model-with-meta-device", 0, "mgt allocates each rank's shards only"),
    REFUSED("--data-parallel-sharding-strategy", 1, NO_FSDP),
    REFUSED("--fsdp-double-buffer", 0, NO_FSDP),
    REFUSED("--fsdp-manual-registration", 0, NO_FSDP),
    REFUSED("--use-nccl-ub", 0, NO_FSDP),
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
    /* the rest of Megatron-LM's parser (megatron/training/arguments.py at d98e8a64, its
       dataclass groups included), by answer: accepted with a note, refused, accepted at a value */
    NOTES("a CUDA-graph setting: mgt launches its kernels one by one, with the same numbers",
          "--cuda-graph-impl --cuda-graph-modules --cuda-graph-scope --cuda-graph-warmup-steps "
          "--enable-cuda-graph --external-cuda-graph --optimizer-cuda-graph"),
    NOTES("a Megatron-LM development switch (ONNX export, experimental code, self-tests): mgt has "
          "none, no number changes",
          "--enable-experimental --onnx-safe --test-mode"),
    NOTES("a communication-tuning setting: mgt runs its collectives its own way, with the same "
          "numbers",
          "--create-all-gather-group --ddp-average-in-collective --ddp-num-buckets "
          "--ddp-pad-buckets-for-high-nccl-busbw --disable-gloo-process-groups "
          "--disable-symmetric-registration --high-priority-stream-groups "
          "--nccl-communicator-config-path --overlap-param-gather-with-optimizer-step "
          "--sharp-enabled-group --symmetric-ar-type --use-sharp"),
    NOTES("a context-parallel setting: mgt's context-parallel size is 1, where it changes nothing",
          "--cp-comm-type --hierarchical-context-parallel-sizes"),
    NOTES("a data-loader setting of Megatron's: mgt memory-maps local files and builds its own "
          "sample index as the run needs it",
          "--dataloader-defer-npy-index-mmap --dataloader-fast-cache-load --disable-msc "
          "--enable-msc --mid-level-dataset-surplus --num-dataset-builder-threads "
          "--object-storage-cache-path --per-dataset-sequences-path"),
    NOTES(FUSION, "--disable-jit-fuser --fused-residual-rmsnorm --no-gradient-reduce-div-fusion "
                  "--use-transformer-engine-op-fuser"),
    NOTES("a performance or memory setting of Megatron's: mgt has no counterpart, and no number "
          "depends on it",
          "--delay-wgrad-compute --disable-clone-scatter-output-in-embedding "
          "--mlp-chunks-for-training --no-clone-scatter-output-in-embedding --train-sync-interval"),
    NOTES("a pipeline-parallel setting: mgt's pipeline size is 1, where it changes nothing",
          "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
          "--decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers "
          "--defer-embedding-wgrad-compute --disable-align-grad-reduce "
          "--microbatch-group-size-per-virtual-pipeline-stage --no-align-grad-reduce "
          "--no-align-param-gather --no-overlap-p2p-communication "
          "--overlap-p2p-communication-warmup-flush --pipeline-model-parallel-comm-backend "
          "--use-ring-exchange-p2p --use-tp-pp-dp-mapping --wgrad-deferral-limit"),
    NOTES("a resiliency setting (fault tolerance, injection, restarts, stragglers): mgt has none; "
          "it saves on SIGTERM or SIGUSR1",
          "--calc-ft-timeouts --check-for-large-grads --check-for-spiky-loss "
          "--check-weight-hash-across-dp-replicas-interval --disable-straggler-on-startup "
          "--enable-ft-package --error-injection-type --fault-injector-delay-start-iteration "
          "--fault-injector-fault-delay --fault-injector-fault-probabilities "
          "--fault-injector-fault-types --fault-injector-mtti-seconds --fault-injector-num-ranks "
          "--fault-injector-offset-seconds --fault-injector-ranks --fault-injector-seed "
          "--ft-num-warmup-iters --gpu-sniff-test-interval --inprocess-active-world-size "
          "--inprocess-barrier-timeout --inprocess-completion-timeout --inprocess-empty-cuda-cache "
          "--inprocess-granularity --inprocess-hard-timeout --inprocess-heartbeat-interval "
          "--inprocess-heartbeat-timeout --inprocess-last-call-wait --inprocess-max-iterations "
          "--inprocess-monitor-process-interval --inprocess-monitor-thread-interval "
          "--inprocess-progress-watchdog-interval --inprocess-restart --inprocess-soft-timeout "
          "--inprocess-termination-grace-time --log-straggler --rerun-mode "
          "--result-rejected-tracker-filename --straggler-ctrlr-port --straggler-minmax-count"),
    NOTES("a setting of Megatron's checkpoint formats: mgt writes its own checksummed HDF5 "
          "checkpoints in parallel, for any layout",
          "--async-ckpt-cpu-priority --async-ckpt-io-priority --async-ckpt-use-cpu-shm "
          "--async-strategy --ckpt-assume-constant-structure --ckpt-drop-redundant-extra-state "
          "--ckpt-fully-parallel-load-exchange-algo --ckpt-fully-parallel-load-per-rank-objects "
          "--ckpt-fully-parallel-load-process-group --ckpt-fully-parallel-save-process-group "
          "--ckpt-pg-tensors-cache-create --ckpt-pg-tensors-cache-path "
          "--disable-ckpt-load-validate-sharding-integrity --dist-ckpt-format "
          "--dist-ckpt-optim-fully-reshardable --dist-ckpt-save-pre-mcore-014 --dist-ckpt-workers "
          "--distrib-optim-fully-reshardable-mem-efficient "
          "--no-ckpt-load-validate-sharding-integrity --use-persistent-ckpt-worker "
          "--verify-integrity"),
    NOTES("a setting of Megatron's inference engine: mgt train runs no inference (mgt generate and "
          "mgt serve do)",
          "--decode-only-cuda-graphs --enable-chunked-prefill --flash-decode "
          "--inference-batch-times-seqlen-threshold --inference-coordinator-port "
          "--inference-cuda-graph-all-prefills --inference-cuda-graph-max-tokens "
          "--inference-cuda-graph-scope --inference-disable-triton-nvls-kernels "
          "--inference-dynamic-batching --inference-dynamic-batching-async-sched-mode "
          "--inference-dynamic-batching-block-size --inference-dynamic-batching-buffer-size-gb "
          "--inference-dynamic-batching-cuda-graph-mixed-prefill-count "
          "--inference-dynamic-batching-cuda-graph-sizing-distribution "
          "--inference-dynamic-batching-logprobs-mode --inference-dynamic-batching-max-requests "
          "--inference-dynamic-batching-max-tokens --inference-dynamic-batching-num-cuda-graphs "
          "--inference-dynamic-batching-paused-buffer-size-gb "
          "--inference-dynamic-batching-prefix-caching "
          "--inference-dynamic-batching-prefix-caching-coordinator-policy "
          "--inference-dynamic-batching-prefix-caching-eviction-policy "
          "--inference-dynamic-batching-prefix-caching-routing-alpha "
          "--inference-dynamic-batching-sampling-backend "
          "--inference-dynamic-batching-track-generated-token-events "
          "--inference-dynamic-batching-track-paused-request-events "
          "--inference-dynamic-batching-unified-memory-level --inference-fuse-tp-communication "
          "--inference-logging-step-interval --inference-max-requests --inference-max-seq-length "
          "--inference-rng-tracker --inference-shards --inference-text-gen-server-logging "
          "--inference-use-synchronous-zmq-collectives --inference-wandb-logging "
          "--max-tokens-to-oom --mlp-chunks-for-prefill --nccl-all-reduce-for-prefill "
          "--num-speculative-tokens --use-legacy-static-engine "
          "--use-same-sampling-seed-across-dp-ranks"),
    NOTES("a text-encoding setting: mgt train reads token ids already made by preprocessing",
          "--disable-tokenizer-sentencepiece-ignore-extra-whitespaces "
          "--no-tokenizer-sentencepiece-ignore-extra-whitespaces "
          "--tokenizer-hf-no-include-special-tokens --tokenizer-hf-no-use-fast "
          "--tokenizer-sentencepiece-legacy --trust-remote-code --use-gigatoken"),
    NOTES("an NCCL watchdog setting: mgt's --distributed-timeout-minutes ends a run whose "
          "collective hangs",
          "--disable-flight-recorder-dump-on-timeout --disable-flight-recorder-extra-dump-on-exec "
          "--disable-flight-recorder-include-only-active --distributed-timeout-seconds-after-init "
          "--flight-recorder-dump-path --flight-recorder-include-stack-trace "
          "--flight-recorder-trace-buffer-size --no-flight-recorder-dump-on-timeout "
          "--no-flight-recorder-extra-dump-on-exec --no-flight-recorder-include-only-active"),
    NOTES("an implementation choice of Megatron's (kernels, RNG, determinism): mgt's deterministic "
          "kernels compute the same",
          "--batch-invariant-backend --batch-invariant-mode --deterministic-mode "
          "--flash-attention-version --te-rng-tracker --use-grouped-gemm-for-dense-mlp "
          "--use-te-activation-func"),
    NOTES("mgt accumulates and all-reduces gradients in fp32 always",
          "--ddp-param-name-patterns-for-fp32-local-accumulation "
          "--ddp-reduce-scatter-with-fp32-accumulation"),
    NOTES(NO_LOGGER,
          "--app-tag-run-name --app-tag-run-version --config-logger-dir "
          "--dump-param-to-param-group-map --log-device-memory-used --log-energy "
          "--log-max-attention-logit --log-memory-interval --log-progress --no-one-logger "
          "--one-logger-async --one-logger-project --one-logger-run-name --otel-enabled "
          "--otel-service-name --otel-span-groups"),
    NOTES("mgt does not overlap tensor-parallel communication with GEMMs (same numbers, slower)",
          "--disable-tp-comm-bulk-dgrad --disable-tp-comm-bulk-wgrad --disable-tp-comm-overlap-ag "
          "--disable-tp-comm-overlap-rs --disable-tp-comm-split-ag --disable-tp-comm-split-rs "
          "--no-tp-comm-bulk-dgrad --no-tp-comm-bulk-wgrad --no-tp-comm-overlap-ag "
          "--no-tp-comm-overlap-rs --no-tp-comm-split-ag --no-tp-comm-split-rs "
          "--tp-comm-bootstrap-backend --tp-comm-overlap-cfg --tp-comm-overlap-rs-dgrad"),
    NOTES(NO_PROFILER,
          "--pytorch-profiler-collect-callstack --pytorch-profiler-collect-chakra "
          "--pytorch-profiler-collect-shapes --record-shapes --run-workload-inspector-server"),
    NOTES("mgt has no garbage collector", "--disable-manual-gc-eval"),
    NOTES("mgt initializes weights always; its checkpoints hold them (fp32, the only copy) and the "
          "seed, no tokenizer files",
          "--disable-save-tokenizer-assets --disable-use-tokenizer-model-from-checkpoint-args "
          "--load-main-params-from-ckpt --no-initialization --no-save-rng "
          "--no-save-tokenizer-assets --no-use-tokenizer-model-from-checkpoint-args"),
    NOTES("mgt prints its per-phase timers at the end of every run",
          "--no-barrier-with-level-1-timing"),
    NOTES("mgt reads every sample of its splits in its index's order, as Megatron-LM's single "
          "loader does",
          "--no-data-sharding"),
    NOTES("mgt rounds only GEMM inputs to 16 bits: weights, gradients, moments, residuals, logits "
          "and sums stay fp32",
          "--disable-bf16-reduced-precision-matmul --fp16-lm-cross-entropy "
          "--fp32-residual-connection --output-logit-dtype --use-precision-aware-optimizer"),
    NOTES("mgt saves a checkpoint and exits on SIGTERM or SIGUSR1 always",
          "--adlr-autoresume --adlr-autoresume-interval --exit-signal-handler "
          "--exit-signal-handler-for-dataloader --exit-signal-handler-for-training"),
    NOTES("mgt takes the learning-rate schedule from the command line always, on resume too",
          "--override-opt-param-scheduler --override-opt_param-scheduler"),
    NOTES("mgt writes no Weights & Biases logs: use --tensorboard-dir", "--wandb-entity"),
    NOTES("mgt writes the loss scale to TensorBoard always",
          "--disable-log-loss-scale-to-tensorboard --no-log-loss-scale-to-tensorboard"),
    NOTES("mgt's HDF5 checkpoints are written in parallel by every rank",
          "--no-ckpt-fully-parallel-save"),
    NOTES("only for TikTokenizer, which mgt does not have", "--tiktoken-num-special-tokens"),
    REFUSE("mgt applies no weight decay to biases and norm weights, the q/k norms included "
           "(Megatron-LM's default rule)",
           "--apply-wd-to-qk-layernorm --no-weight-decay-cond-type"),
    REFUSE(
        "mgt has no CPU offloading: save memory with recomputation or --use-distributed-optimizer",
        "--activation-offload-fraction --cpu-offloading-retain-pinned-cpu-buffers "
        "--delay-offload-until-cuda-graph --delta-offload-bytes-across-pp-ranks "
        "--fine-grained-activation-offloading --fine-grained-offloading-max-inflight-offloads "
        "--min-offloaded-tensor-size --no-pin-cpu-grads --no-pin-cpu-params --offload-modules "
        "--optimizer-cpu-offload --optimizer-offload-fraction --overlap-cpu-optimizer-d2h-h2d "
        "--use-torch-optimizer-for-cpu-offload"),
    REFUSE("mgt has no FP4 training: train in --bf16",
           "--fp4-param-gather --fp4-quantizer-factory --fp4-recipe"),
    REFUSE(NO_FP8,
           "--disable-fp8-wgrad --first-last-layers-bf16 --fp8-output-proj --fp8-quantizer-factory "
           "--keep-fp8-transpose-cache --no-fp8-wgrad --num-layers-at-end-in-bf16 "
           "--num-layers-at-start-in-bf16 --reuse-grad-buf-for-mxfp8-param-ag"),
    REFUSE("mgt has no GTP weight sharding: --tensor-model-parallel-size splits the weights",
           "--gtp-expert-remat-nccl-ub --gtp-remat-nccl-ub --gtp-remat-opt-in-modules "
           "--gtp-remat-reduce-scatter-with-fp32-accumulation --tensor-parallel-num-weight-shards"),
    REFUSE(
        "mgt has no Mamba or hybrid models: transformer layers only",
        "--disable-mamba-mem-eff-path --hybrid-layer-pattern --hybrid-override-pattern "
        "--inference-dynamic-batching-mamba-memory-ratio "
        "--inference-dynamic-batching-prefix-caching-mamba-gb --is-hybrid-model --mamba-head-dim "
        "--mamba-inference-conv-states-dtype --mamba-inference-ssm-states-dtype "
        "--mamba-num-groups --mamba-num-heads --mamba-state-dim "
        "--mamba-training-ssm-states-dtype"),
    NOTES(MOE_DISPATCH,
          "--ep-overlap-early-attn-memory-release --high-priority-a2a-comm-stream "
          "--inference-disable-ep-consensus --inference-grouped-gemm-backend "
          "--inference-moe-disable-fused-quant-kernels --inference-moe-token-dispatcher-type "
          "--moe-deepep-num-sms --moe-enable-deepep --moe-flex-dispatcher-backend "
          "--moe-flex-dispatcher-num-sms --moe-hybridep-num-blocks-permute "
          "--moe-hybridep-num-blocks-unpermute --moe-hybridep-num-sms "
          "--moe-hybridep-num-sms-preprocessing --moe-hybridep-pad-uneven-dispatch-inputs "
          "--moe-ncclep-zero-copy --moe-pad-experts-for-cuda-graph-inference --moe-paged-stash "
          "--moe-paged-stash-buffer-size-factor-cpu --moe-paged-stash-buffer-size-factor-cuda "
          "--moe-paged-stash-page-size --moe-per-layer-logging --moe-permute-fusion "
          "--moe-permute-fusion-into-hybridep --moe-router-fusion --moe-shared-expert-overlap "
          "--moe-single-grouped-bias --moe-single-grouped-weight --moe-use-grouped-tensor "
          "--overlap-dispatch-backward-with-experts-wgrad --overlap-moe-expert-parallel-comm"),
    AT("--moe-router-dtype", 1, "fp32", "mgt's router computes in fp32 always"),
    REFUSE(NO_MOE,
           "--expert-tensor-parallel-num-weight-shards --expert-tensor-parallel-size "
           "--moe-apply-probs-on-input --moe-combine-bwd-dtype --moe-dispatch-fwd-dtype "
           "--moe-enable-routing-replay --moe-expert-rank-capacity-factor --moe-input-jitter-eps "
           "--moe-latent-size --moe-layer-recompute --moe-mlp-glu-interleave-size "
           "--moe-router-force-biased "
           "--moe-router-force-load-balancing --moe-router-group-topk --moe-router-num-groups "
           "--moe-router-padding-for-fp8 --moe-router-padding-for-quantization "
           "--moe-router-quantile-balancing-ema --moe-routing-trace-capture-hidden-states "
           "--moe-routing-trace-capture-logits --moe-routing-trace-dump-weights "
           "--moe-routing-trace-max-training-iters --moe-routing-trace-path "
           "--moe-shared-expert-glu-interleave-size "
           "--moe-upcycling-granularity --moe-use-upcycling "
           "--save-tokens-per-expert-interval --use-fused-weighted-squared-relu "
           "--use-grouped-gemm-for-shared-expert"),
    REFUSE("mgt has no context parallelism: long sequences fit through --sequence-parallel, "
           "recomputation and the tiled attention",
           "--hybrid-context-parallel --max-seqlen-per-dp-cp-rank"),
    REFUSE("mgt has no encoder-decoder (T5) models: GPT and BERT only",
           "--decoder-num-layers --decoder-seq-length --relative-attention-max-distance "
           "--relative-attention-num-buckets"),
    REFUSE("mgt has no fill-in-the-middle data: next-token samples only",
           "--fim-data --fim-eod-token --fim-fragment-rate --fim-middle-token --fim-no-prefix "
           "--fim-pad-token --fim-prefix-token --fim-rate --fim-split-sample --fim-spm-rate "
           "--fim-suffix-token"),
    REFUSE(NO_FSDP,
           "--disable-strict-fsdp-dtensor-load --enable-full-sharding-in-hsdp "
           "--fsdp-db-use-persist-buf-on-alloc-fail "
           "--megatron-fsdp-enable-fine-grained-param-gather --megatron-fsdp-grad-comm-dtype "
           "--megatron-fsdp-main-grads-dtype --megatron-fsdp-main-params-dtype "
           "--megatron-fsdp-max-pool-double-buffer --megatron-fsdp-version "
           "--no-strict-fsdp-dtensor-load --outer-dp-sharding-strategy "
           "--suggested-communication-unit-size --torch-fsdp2-no-reshard-after-forward"),
    REFUSE(
        "mgt has no knowledge distillation: it neither saves nor trains on teacher logits",
        "--logits-load-decode-threads --logits-load-dir --logits-load-ignore-errors "
        "--logits-load-kd-loss-alpha --logits-load-msc-prefetch-depth "
        "--logits-load-prefetch-factor --logits-save-dir --logits-save-dtype --logits-save-top-k "
        "--logits-save-top-p --logits-save-top-p-min-k"),
    REFUSE(
        "mgt has no multi-latent attention: train with --group-query-attention",
        "--cache-mla-latents --kv-lora-rank --mla-down-proj-fusion --mscale --mscale-all-dim "
        "--multi-latent-attention --q-lora-rank --qk-head-dim --qk-pos-emb-head-dim --v-head-dim"),
    REFUSE("mgt has no multi-token prediction: next-token loss only",
           "--mtp-detach-heads --mtp-hsm --mtp-hybrid-override-pattern --mtp-loss-scaling-factor "
           "--mtp-num-layers --mtp-standalone --mtp-use-repeated-layer"),
    REFUSE(NO_PP, "--pipeline-model-parallel-layout"),
    REFUSE("mgt has no quantized training (Kitchen, Transformer Engine precision recipes): train "
           "in --bf16",
           "--kitchen-attention-backend --kitchen-config-file --kitchen-recipe-number "
           "--te-precision-config-file --use-kitchen-attention"),
    REFUSE(
        "mgt has no reinforcement-learning (GRPO) loop",
        "--grpo-clamp-eps-lower --grpo-clamp-eps-upper --grpo-entropy-term-weight "
        "--grpo-filter-groups-with-same-reward --grpo-group-size --grpo-iterations "
        "--grpo-kl-beta --grpo-prompts-per-step --langrl-env-config --perform-rl-step "
        "--refit-method --rl-consumption-granularity --rl-default-temperature --rl-default-top-k "
        "--rl-default-top-p --rl-durable-rollout-bank --rl-generation-lag "
        "--rl-importance-sampling-truncation-coef --rl-inference-expert-model-parallel-size "
        "--rl-inference-expert-tensor-model-parallel-size --rl-inference-logprobs-is-correction "
        "--rl-inference-model-unified-memory-level --rl-inference-parsers "
        "--rl-inference-pipeline-model-parallel-size --rl-inference-tensor-model-parallel-size "
        "--rl-kv-cache-management-mode --rl-max-inflight-requests "
        "--rl-offload-inference-model-weights-when-idle --rl-offload-optimizer-during-inference "
        "--rl-partial-rollouts --rl-persist-cuda-graphs --rl-profile --rl-profile-dir "
        "--rl-prompts-per-eval --rl-rollout-bank-dir --rl-rollout-bank-max-bytes "
        "--rl-sequence-packing-algo --rl-sequence-packing-max-sequences-per-bin "
        "--rl-skip-bos-token --rl-submission-granularity --rl-training-cuda-graphs "
        "--rl-use-sequence-packing --rl-verify-model-weights-swap"),
    REFUSE("mgt has no retrieval models (ICT, REALM, biencoder, DPR): GPT and BERT language models "
           "only",
           "--bert-embedder-type --bert-load --biencoder-projection-dim "
           "--biencoder-shared-query-context-model --block-data-path --embedding-path "
           "--evidence-data-path --ict-head-size --ict-load --indexer-batch-size "
           "--indexer-log-interval --output-bert-embeddings --query-in-block-prob "
           "--retriever-report-topk-accuracies --retriever-score-scaling --titles-data-path "
           "--use-one-sent-docs"),
    REFUSE("mgt initializes all weights from normals of --init-method-std, alike on every rank, "
           "and trains them all (no muP)",
           "--data-parallel-random-init --embedding-init-method-std --freeze-all-layers "
           "--init-method-xavier-uniform --mup-attn-scale-power --mup-base-head-dim "
           "--mup-base-hidden-size --mup-embedding-mult --mup-output-mult --mup-width-mult "
           "--use-mup"),
    REFUSE("mgt saves only full checkpoints (--save-interval, --keep-last): no non-persistent, "
           "local, retained or tensor dumps",
           "--non-persistent-ckpt-type --non-persistent-global-ckpt-dir "
           "--non-persistent-local-ckpt-algo --non-persistent-local-ckpt-dir "
           "--non-persistent-save-interval --replication --replication-factor --replication-jump "
           "--save-activations-interval --save-dgrads-interval --save-params-interval "
           "--save-retain-interval --save-wgrads-interval"),
    REFUSE("mgt takes a run's settings from the command line and its iteration from the checkpoint "
           "(--finetune restarts at 0)",
           "--override-ckpt-iteration --use-checkpoint-args --use-checkpoint-opt-param-scheduler "
           "--use-checkpoint-opt_param-scheduler --use-mp-args-from-checkpoint-args"),
    REFUSE("mgt train always trains, validating --eval-iters training-size batches of one blend "
           "each --eval-interval (or mgt eval)",
           "--eval-global-batch-size --eval-micro-batch-size --full-validation "
           "--multiple-validation-sets --skip-train --start-eval-at-iter --validation-set-names"),
    REFUSE(
        "mgt train converts no checkpoints: mgt ckpt export and import convert to and from Hugging "
        "Face's",
        "--ckpt-convert-format --ckpt-convert-save --ckpt-convert-update-legacy-dist-opt-format"),
    REFUSE("mgt train is one program driven by its flags: no YAML configs, Python layer specs, "
           "fake or external process groups",
           "--fake-process-group --lazy-mpu-init --yaml-cfg"),
    REFUSE("mgt trains every iteration, one dataset blend, at the global batch given: no phases, "
           "skipped iterations or batch cuts",
           "--decrease-batch-size-if-needed --iterations-to-skip --phase-transition-iterations"),
    REFUSE("mgt trains language models only: no vision models",
           "--classes-fraction --data-per-class-fraction --dino-bottleneck-size "
           "--dino-freeze-last-layer --dino-head-hidden-size --dino-local-crops-number "
           "--dino-local-img-size --dino-norm-last-layer --dino-teacher-temp "
           "--dino-warmup-teacher-temp --dino-warmup-teacher-temp-epochs --head-lr-mult --img-h "
           "--img-w --iter-per-epoch --mask-factor --mask-type --mrope-section --num-channels "
           "--num-classes --patch-dim --swin-backbone-type --vision-backbone-type "
           "--vision-pretraining --vision-pretraining-type"),
    REFUSE("mgt's GPT samples have no pad token; its NullTokenizer's end of document is id "
           "--vocab-size, the last",
           "--allow-ambiguous-pad-tokens --null-tokenizer-eod-id"),
    REFUSE("mgt's MLP activation is GeLU, or SwiGLU with --swiglu",
           "--activation-func-clamp-value --openai-gelu --quick-geglu --squared-relu"),
    REFUSE("mgt's attention is plain softmax: no sliding-window, gated, linear, sparse, "
           "QK-clipped, L2-normed or off-by-one variant",
           "--attention-output-gate --disable-dsa-indexer-rotate-activation "
           "--disable-dsa-indexer-scoring-relu --dsa-indexer-head-dim --dsa-indexer-k-norm-epsilon "
           "--dsa-indexer-k-norm-fp32 --dsa-indexer-loss-coeff --dsa-indexer-n-heads "
           "--dsa-indexer-rope-interleaved --dsa-indexer-skip-topk-offset --dsa-indexer-topk "
           "--dsa-indexer-topk-freq --dsa-indexer-use-sparse-loss --dsa-kernel-backend "
           "--experimental-attention-variant --gdp-cutedsl-kernel "
           "--gdp-num-chunk-states-to-recompute --gdp-num-householder --linear-attention-freq "
           "--linear-conv-kernel-dim --linear-key-head-dim --linear-num-key-heads "
           "--linear-num-value-heads --linear-value-head-dim --no-dsa-indexer-rotate-activation "
           "--no-dsa-indexer-scoring-relu --qk-clip --qk-clip-alpha --qk-clip-threshold "
           "--qk-l2-norm --window-attn-skip-freq --window-size"),
    REFUSE("mgt's layers are all alike, one residual stream each: no heterogeneous (NAS) layers or "
           "hyper-connections",
           "--enable-mhc-connections --heterogeneous-layers-config-encoded-json "
           "--heterogeneous-layers-config-path --mhc-init-gating-factor --mhc-num-residual-streams "
           "--mhc-recompute-layer-num --mhc-sinkhorn-iterations"),
    REFUSE("mgt's learning rate warms up from 0 and decays constant, linear or cosine (no WSD); "
           "its weight decay is constant",
           "--end-weight-decay --lr-wsd-decay-iters --lr-wsd-decay-samples --lr-wsd-decay-style "
           "--start-weight-decay"),
    REFUSE("mgt's optimizer is AdamW: no SGD, Lion, Muon or SOAP",
           "--lion-beta1 --lion-beta2 --muon-coefficient-type --muon-extra-scale-factor "
           "--muon-fp32-matmul-prec --muon-momentum --muon-nesterov --muon-no-split-qkv "
           "--muon-num-ns-steps --muon-scalar-optimizer --muon-scale-mode --muon-tp-mode "
           "--muon-use-syrk --no-use-layer-wise-param-layout --sgd-momentum"),
    REFUSE("mgt's rotary embedding is Llama's half-split one on every layer (Llama 3.1 scaling "
           "optional): no YaRN or interpolation",
           "--no-rope-freq --no-yarn-correction-range-round-to-int --rotary-interleaved "
           "--yarn-beta-fast --yarn-beta-slow --yarn-correction-range-round-to-int "
           "--yarn-original-max-position-embeddings"),
    REFUSE("mgt's vocabulary is the tokenizer's or --vocab-size, no extra tokens, padded to "
           "--make-vocab-size-divisible-by x TP",
           "--disable-pad-vocab-size --no-pad-vocab-size --padded-vocab-size --tokenizer-metadata "
           "--tokenizer-special-tokens"),
    REFUSE("mgt renders conversations when preprocessing (mgt preprocess --chat-template) and "
           "trains them with --sft",
           "--chat-template --sft-tokenizer-prompt-format"),
    REFUSE("write --save-interval (mgt's name for it)", "--persistent-save-interval"),
    AT("--cpu-offloading-num-layers", 1, "0",
       "mgt has no CPU offloading: save memory with recomputation or --use-distributed-optimizer"),
    AT("--dataloader-type", 1, "single",
       "mgt reads every sample of its splits in its index's order, as Megatron-LM's single loader "
       "does"),
    AT("--error-injection-rate", 1, "0",
       "a resiliency setting (fault tolerance, injection, restarts, stragglers): mgt has none; it "
       "saves on SIGTERM or SIGUSR1"),
    AT("--exit-signal", 1, "SIGTERM|SIGUSR1",
       "mgt saves a checkpoint and exits on SIGTERM or SIGUSR1 always"),
    AT("--exp-avg-dtype", 1, "fp32",
       "mgt rounds only GEMM inputs to 16 bits: weights, gradients, moments, residuals, logits and "
       "sums stay fp32"),
    AT("--exp-avg-sq-dtype", 1, "fp32",
       "mgt rounds only GEMM inputs to 16 bits: weights, gradients, moments, residuals, logits and "
       "sums stay fp32"),
    AT("--glu-linear-offset", 1, "0", "mgt's MLP activation is GeLU, or SwiGLU with --swiglu"),
    AT("--lr-warmup-init", 1, "0",
       "mgt's learning rate warms up from 0 and decays constant, linear or cosine (no WSD); its "
       "weight decay is constant"),
    AT("--main-grads-dtype", 1, "fp32",
       "mgt rounds only GEMM inputs to 16 bits: weights, gradients, moments, residuals, logits and "
       "sums stay fp32"),
    AT("--main-params-dtype", 1, "fp32",
       "mgt rounds only GEMM inputs to 16 bits: weights, gradients, moments, residuals, logits and "
       "sums stay fp32"),
    AT("--null-tokenizer-pad-id", 1, "-1",
       "mgt's GPT samples have no pad token; its NullTokenizer's end of document is id "
       "--vocab-size, the last"),
    AT("--num-distributed-optimizer-instances", 1, "1",
       "mgt's distributed optimizer shards over all data-parallel ranks: one instance"),
    AT("--num-virtual-stages-per-pipeline-rank", 1, "1", NO_PP),
    AT("--optimizer", 1, "adam", "mgt's optimizer is AdamW: no SGD, Lion, Muon or SOAP"),
    AT("--recompute-modules", 2, "core_attn",
       "mgt's selective recomputation recomputes the attention core only: --recompute-granularity "
       "full recomputes all"),
    AT("--rope-type", 1, "rope",
       "mgt's rotary embedding is Llama's half-split one on every layer (Llama 3.1 scaling "
       "optional): no YaRN or interpolation"),
    AT("--rotary-scaling-factor", 1, "1",
       "mgt's rotary embedding is Llama's half-split one on every layer (Llama 3.1 scaling "
       "optional): no YaRN or interpolation"),
    AT("--rotary-seq-len-interpolation-factor", 1, "1",
       "mgt's rotary embedding is Llama's half-split one on every layer (Llama 3.1 scaling "
       "optional): no YaRN or interpolation"),
    AT("--sample-rate", 1, "1",
       "mgt reads every sample of its splits in its index's order, as Megatron-LM's single loader "
       "does"),
    AT("--softmax-type", 1, "vanilla",
       "mgt's attention is plain softmax: no sliding-window, gated, linear, sparse, QK-clipped, "
       "L2-normed or off-by-one variant"),
    AT("--spec", 1, "local",
       "mgt train is one program driven by its flags: no YAML configs, Python layer specs, fake or "
       "external process groups"),
    AT("--vocab-extra-ids", 1, "0", "mgt has no encoder-decoder (T5) models: GPT and BERT only"),
    AT("--weight-decay-incr-style", 1, "constant",
       "mgt's learning rate warms up from 0 and decays constant, linear or cosine (no WSD); its "
       "weight decay is constant"),
};

const mgt_foreign_flag *mgt_megatron_flags(int *n) {
  *n = (int)(sizeof megatron / sizeof megatron[0]);
  return megatron;
}
