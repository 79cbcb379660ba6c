/* The sizes a configuration may reach: counts that must not wrap (samples, schedule steps,
   parameters) and per-rank tensors indexed with int. See include/mgt/config.h. */
#include "mgt/config.h"

#include <stdint.h>

/* An upper bound of the model's parameters, in double so that it cannot wrap: the exact count
   in int64 (src/model) is then safe below it. */
static double params_bound(const mgt_config *c, int tp) {
  const double h = c->hidden_size, q = (double)mgt_config_head_size(c) * c->num_attention_heads;
  const double ffn = 3.0 * h * c->ffn_hidden_size;
  const double moe = c->num_experts > 0 ? c->num_experts * (3.0 * h * c->moe_ffn_hidden_size + h) +
                                              3.0 * h * c->moe_shared_expert_intermediate_size
                                        : 0;
  const double layer = 4.0 * h * (q > h ? q : h) + (ffn > moe ? ffn : moe) + 16.0 * h;
  const double vocab = c->vocab_size > 0 ? (double)mgt_config_padded_vocab(c, tp) : 0;
  return c->num_layers * layer + 2.0 * h * (vocab + c->max_position_embeddings);
}

mgt_status mgt_config_check_bounds(const mgt_config *c, int tp) {
  const int64_t gbs = c->global_batch_size > 0 ? c->global_batch_size : 1;
  /* samples are counted in 64 bits, with room for the valid split */
  MGT_REQUIRE(c->train_iters <= ((int64_t)1 << 60) / gbs,
              "--train-iters %lld times --global-batch-size %d is more samples than can be counted",
              (long long)c->train_iters, c->global_batch_size);
  if (c->eval_iters > 0) { /* every validation's samples, planned ahead */
    const int64_t per = (int64_t)c->eval_iters * gbs;
    const int64_t n = (c->eval_interval > 0 ? c->train_iters / c->eval_interval : 0) + 1;
    MGT_REQUIRE(n <= ((int64_t)1 << 60) / per,
                "--eval-iters %d at every --eval-interval %d of --train-iters %lld is more "
                "validation samples than can be counted",
                c->eval_iters, c->eval_interval, (long long)c->train_iters);
  }
  if (c->train_samples == 0 && (c->rampup_batch_size[0] || c->step_batch_size_schedule[0]))
    /* the schedule then counts in samples: iterations times the global batch */
    MGT_REQUIRE(c->lr_decay_iters <= ((int64_t)1 << 62) / gbs &&
                    c->lr_warmup_iters <= ((int64_t)1 << 62) / gbs,
                "--lr-decay-iters %lld or --lr-warmup-iters %lld times --global-batch-size %d is "
                "more samples than can be counted",
                (long long)c->lr_decay_iters, (long long)c->lr_warmup_iters, c->global_batch_size);
  MGT_REQUIRE(params_bound(c, tp) < 0x1p50,
              "the model has over 10^15 parameters (--num-layers %d, --hidden-size %d, "
              "--num-experts %d, ...): more than can be counted",
              c->num_layers, c->hidden_size, c->num_experts);
  /* Activations are indexed with int: keep every per-rank tensor below 2^31 elements. */
  const int64_t tokens = (int64_t)c->micro_batch_size * c->seq_length;
  const int64_t qkv = (int64_t)mgt_config_head_size(c) *
                      (c->num_attention_heads + 2 * (int64_t)mgt_config_query_groups(c));
  MGT_REQUIRE(tokens * (qkv / tp) < (1ll << 31),
              "--num-attention-heads %d of --kv-channels %d with --micro-batch-size %d and "
              "--seq-length %d make an attention activation of 2^31 elements or more per rank",
              c->num_attention_heads, mgt_config_head_size(c), c->micro_batch_size, c->seq_length);
  const int64_t vp = c->vocab_size > 0 ? mgt_config_padded_vocab(c, tp) : 0;
  MGT_REQUIRE(tokens * (vp / tp) < (1ll << 31) && tokens * c->ffn_hidden_size / tp < (1ll << 31) &&
                  (int64_t)c->micro_batch_size * c->num_attention_heads / tp * c->seq_length *
                          c->seq_length <
                      (1ll << 31),
              "--micro-batch-size %d with --seq-length %d makes an activation of 2^31 "
              "elements or more per rank; lower the micro-batch size",
              c->micro_batch_size, c->seq_length);
  /* an expert-parallel rank may receive every routed row of its group (the all-to-all's counts
     are ints of floats) */
  const int64_t ep = c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1;
  MGT_REQUIRE(!c->num_experts || tokens * c->moe_router_topk * ep * c->hidden_size < (1ll << 31),
              "--micro-batch-size %d with --seq-length %d, --moe-router-topk %d, --hidden-size "
              "%d and --expert-model-parallel-size %d routes 2^31 floats or more to a rank; "
              "lower the micro-batch size",
              c->micro_batch_size, c->seq_length, c->moe_router_topk, c->hidden_size, (int)ep);
  return MGT_OK;
}
