/* The model kinds and the description every consumer of a model reads. */
#include "mgt/model.h"

#include "mgt/data.h"

#include <stdio.h>
#include <stdlib.h>

/* Indexed by MGT_MODEL_*; mgt_model_names[] (the --model choices) is in the same order. */
const mgt_model_kind mgt_model_kinds[] = {
    [MGT_MODEL_GPT] = {"gpt", "GPT", MGT_INPUT_WINDOWS, MGT_HEAD_CAUSAL_LM, 1, 0},
    [MGT_MODEL_BERT] = {"bert", "BERT", MGT_INPUT_SAMPLES, MGT_HEAD_MLM_SOP, 0, 1},
};
const int mgt_n_model_kinds = (int)(sizeof mgt_model_kinds / sizeof mgt_model_kinds[0]);

static mgt_model_spec derive(const mgt_config *c) {
  const mgt_model_kind *k = &mgt_model_kinds[c->model];
  mgt_model_spec d = {0};
  d.kind = c->model;
  d.layers = c->num_layers;
  d.hidden = c->hidden_size;
  d.heads = c->num_attention_heads;
  d.head_size = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
  d.ffn = c->ffn_hidden_size;
  d.vocab = c->vocab_size;
  d.positions = c->max_position_embeddings;
  d.norm_eps = c->layernorm_epsilon;
  d.init_std = c->init_method_std;
  d.input = k->input;
  d.norm = c->normalization == MGT_NORM_RMSNORM ? MGT_NORM_RMSNORM : MGT_NORM_LAYERNORM;
  d.pos = c->position_embedding_type == MGT_POS_ROPE ? MGT_POS_ROPE : MGT_POS_LEARNED;
  d.mlp = c->swiglu ? MGT_MLP_SWIGLU : MGT_MLP_GELU;
  d.groups = mgt_config_query_groups(c);
  d.bias = !c->disable_bias_linear;
  d.post_ln = c->apply_residual_connection_post_layernorm;
  d.causal = k->causal;
  d.task = c->task;
  if (c->task == MGT_TASK_RACE)
    d.head = MGT_HEAD_MULTIPLE_CHOICE;
  else if (c->task != MGT_TASK_NONE)
    d.head = MGT_HEAD_CLASSIFY;
  else if (k->head == MGT_HEAD_MLM_SOP && c->bert_no_binary_head)
    d.head = MGT_HEAD_MLM;
  else
    d.head = k->head;
  d.masked_lm = d.head == MGT_HEAD_MLM_SOP || d.head == MGT_HEAD_MLM;
  d.pooler = d.head == MGT_HEAD_MLM_SOP || d.head == MGT_HEAD_CLASSIFY ||
             d.head == MGT_HEAD_MULTIPLE_CHOICE;
  d.token_types = d.pooler; /* Megatron-LM has token types only with a pooled head */
  d.rows = d.task ? mgt_task_rows(d.task) : 1;
  /* sample rows carry the two-way order label even without the binary head */
  d.logits = d.task ? mgt_task_row_logits(d.task) : (d.input == MGT_INPUT_SAMPLES ? 2 : 0);
  d.classes = d.task ? mgt_task_classes(d.task) : (d.input == MGT_INPUT_SAMPLES ? 2 : 0);
  d.max_predictions = d.masked_lm ? mgt_bert_max_predictions(c->seq_length, c->mask_prob) : 0;
  d.untied = c->untie_embeddings_and_output_weights;
  if (d.pos == MGT_POS_ROPE) { /* as the resume check: meaningless without rotary positions */
    d.rope_base = c->rotary_base;
    d.rope_scaling = c->use_rope_scaling;
    d.rope_factor = c->use_rope_scaling ? c->rope_scaling_factor : 0;
  }
  return d;
}

mgt_model_layout mgt_model_layout_of(const mgt_config *c) {
  mgt_model_layout l = {0};
  l.micro_batch = c->micro_batch_size;
  l.seq_length = c->seq_length;
  l.vocab_multiple = c->make_vocab_size_divisible_by;
  l.sequence_parallel = c->sequence_parallel;
  l.recompute = c->recompute_granularity == MGT_RECOMPUTE_SELECTIVE ? MGT_RECOMPUTE_SELECTIVE
                : c->recompute_granularity == MGT_RECOMPUTE_FULL || c->recompute_activations
                    ? MGT_RECOMPUTE_FULL
                    : MGT_RECOMPUTE_NONE;
  l.recompute_method = c->recompute_method;
  l.recompute_layers = c->recompute_num_layers;
  l.flash = mgt_config_flash(c, NULL, 0);
  l.bf16 = c->bf16;
  l.fp16 = c->fp16;
  l.weight_copies = (c->bf16 || c->fp16) && !c->no_weight_copies;
  l.device = c->device;
  l.cpu_gemm = c->cpu_gemm;
  l.logits_chunk_rows = c->logits_chunk_rows;
  return l;
}

int64_t mgt_model_padded_vocab(const mgt_model_spec *spec, const mgt_model_layout *layout, int tp) {
  const int64_t mult = (int64_t)layout->vocab_multiple * tp;
  return (spec->vocab + mult - 1) / mult * mult;
}

mgt_status mgt_model_describe(const mgt_config *c, mgt_model_spec *out) {
  MGT_REQUIRE(c->model >= 0 && c->model < mgt_n_model_kinds, "--model: no model kind %d", c->model);
  const mgt_model_kind *k = &mgt_model_kinds[c->model];
  MGT_REQUIRE(c->task >= MGT_TASK_NONE && c->task <= MGT_TASK_QQP, "--task: no task %d", c->task);
  MGT_REQUIRE(!c->task || k->finetunable, "--task %s: --model %s takes no fine-tuning head",
              mgt_task_names[c->task], k->name);
  MGT_REQUIRE(k->head == MGT_HEAD_MLM_SOP ||
                  (!c->apply_residual_connection_post_layernorm && !c->bert_no_binary_head),
              "--apply-residual-connection-post-layernorm and --bert-no-binary-head are BERT "
              "flags (--model bert)");
  MGT_REQUIRE(!c->untie_embeddings_and_output_weights ||
                  (k->head == MGT_HEAD_CAUSAL_LM && !c->task),
              "--untie-embeddings-and-output-weights: only a causal language model (--model gpt) "
              "has an output layer to untie");
  MGT_REQUIRE(c->position_embedding_type == MGT_POS_LEARNED ||
                  (c->position_embedding_type == MGT_POS_ROPE && c->num_attention_heads > 0 &&
                   c->hidden_size / c->num_attention_heads % 2 == 0),
              "--position-embedding-type rope: the head size %d is odd (rotary pairs halves)",
              c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0);
  MGT_REQUIRE(!c->use_rope_scaling || c->position_embedding_type == MGT_POS_ROPE,
              "--use-rope-scaling scales rotary frequencies: give --position-embedding-type rope");
  MGT_REQUIRE(c->normalization == MGT_NORM_LAYERNORM || c->normalization == MGT_NORM_RMSNORM,
              "--normalization: no normalization %d", c->normalization);
  MGT_REQUIRE(c->group_query_attention || c->num_query_groups == 0,
              "--num-query-groups %d needs --group-query-attention", c->num_query_groups);
  MGT_REQUIRE(!c->group_query_attention || c->num_query_groups >= 1,
              "--group-query-attention needs --num-query-groups (the key/value heads)");
  MGT_REQUIRE(!c->group_query_attention || c->num_attention_heads % c->num_query_groups == 0,
              "--num-query-groups %d does not divide --num-attention-heads %d (each group serves "
              "the same number of query heads)",
              c->num_query_groups, c->num_attention_heads);
  *out = derive(c);
  return MGT_OK;
}

mgt_model_spec mgt_model_of(const mgt_config *c) {
  mgt_model_spec d;
  if (mgt_model_describe(c, &d) != MGT_OK) {
    /* a caller skipped the configuration's check: a bug, not an input error */
    fprintf(stderr, "mgt: internal error: an unchecked configuration: %s\n", mgt_error_message());
    abort();
  }
  return d;
}

int mgt_model_has_lm(const mgt_model_spec *d) {
  return d->head == MGT_HEAD_CAUSAL_LM || d->masked_lm;
}

int mgt_model_generative(const mgt_model_spec *d) {
  return d->head == MGT_HEAD_CAUSAL_LM && d->causal;
}
