/* The model kinds, the spec every consumer of a model reads, and its text. */
#define _GNU_SOURCE /* open_memstream */
#include "mgt/model.h"

#include "mgt/data.h"
#include "mgt/backend.h"
#include "mgt/json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by MGT_MODEL_*; mgt_model_names[] (the --model choices) is in the same order. */
const mgt_model_kind mgt_model_kinds[] = {
    [MGT_MODEL_GPT] = {"gpt", "GPT", MGT_INPUT_WINDOWS, MGT_HEAD_CAUSAL_LM, 1, 0},
    [MGT_MODEL_BERT] = {"bert", "BERT", MGT_INPUT_SAMPLES, MGT_HEAD_MLM_SOP, 0, 1},
};
const int mgt_n_model_kinds = (int)(sizeof mgt_model_kinds / sizeof mgt_model_kinds[0]);

/* --moe-layer-freq: Megatron-LM's integer N (layers 0, N, 2N, ... are MoE) or its Python list of
   0s and 1s, a list literal or a sum of them, each repeated by "* n", in parentheses at will
   ("([0]*3+[1]*21)", "([1,0]*12)"). The parser of that list: */
typedef struct freq_parser {
  const char *s;
  char *out;  /* one 0/1 a layer */
  int n, max; /* written, capacity */
  int bad;
} freq_parser;

static void fp_space(freq_parser *p) {
  while (*p->s == ' ')
    p->s++;
}

static void fp_expr(freq_parser *p);

/* [a, b, ...] or (expr), then "* n" any number of times: appends its elements */
static void fp_term(freq_parser *p) {
  fp_space(p);
  const int start = p->n;
  if (*p->s == '[') {
    p->s++;
    for (fp_space(p); *p->s != ']' && !p->bad; fp_space(p)) {
      if ((*p->s != '0' && *p->s != '1') || p->n >= p->max) {
        p->bad = 1;
        return;
      }
      p->out[p->n++] = (char)(*p->s++ - '0');
      fp_space(p);
      if (*p->s == ',') p->s++;
    }
    if (*p->s != ']') p->bad = 1;
    p->s++;
  } else if (*p->s == '(') {
    p->s++;
    fp_expr(p);
    fp_space(p);
    if (*p->s != ')') p->bad = 1;
    p->s++;
  } else {
    p->bad = 1;
  }
  for (fp_space(p); *p->s == '*' && !p->bad; fp_space(p)) {
    char *end;
    p->s++;
    errno = 0;
    long r = strtol(p->s, &end, 10);
    const int len = p->n - start;
    if (end == p->s || errno == ERANGE || r < 0 || (len > 0 && r > (p->max - start) / len)) {
      p->bad = 1;
      return;
    }
    p->s = end;
    for (long i = 1; i < r; i++)
      memcpy(p->out + start + i * len, p->out + start, (size_t)len);
    p->n = start + (int)(len * r);
  }
}

static void fp_expr(freq_parser *p) {
  fp_term(p);
  for (fp_space(p); *p->s == '+' && !p->bad; fp_space(p)) {
    p->s++;
    fp_term(p);
  }
}

/* The MoE layers of --moe-layer-freq over L layers as first, first + every, ...: the forms a
   spec holds (Megatron-LM's every N-th, Qwen3-MoE's decoder_sparse_step, dense first layers). */
static mgt_status moe_layers(const char *freq, int L, int *first, int *every) {
  char *end;
  errno = 0;
  long n = strtol(freq, &end, 10);
  if (end != freq && *end == '\0') {
    MGT_REQUIRE(n >= 1 && n <= INT_MAX && errno != ERANGE,
                "--moe-layer-freq %s: every N-th layer needs N in [1, %d]", freq, INT_MAX);
    *first = 0, *every = (int)n;
    return MGT_OK;
  }
  char *bits = malloc((size_t)L + 1);
  MGT_REQUIRE(bits, "--moe-layer-freq: out of memory");
  freq_parser p = {freq, bits, 0, L, 0};
  fp_expr(&p);
  fp_space(&p);
  const int ok = !p.bad && *p.s == '\0' && p.n == L;
  int f = -1, e = 0, fits = ok;
  for (int l = 0; ok && l < L; l++)
    if (bits[l] && f < 0)
      f = l;
    else if (bits[l] && !e)
      e = l - f;
  if (f >= 0 && !e) e = L; /* one MoE layer */
  for (int l = 0; ok && f >= 0 && l < L; l++)
    fits &= bits[l] == (l >= f && (l - f) % e == 0);
  free(bits);
  MGT_REQUIRE(ok,
              "--moe-layer-freq %s: not an integer, nor a list of %d 0s and 1s (one a layer: "
              "\"[1,0,1,...]\", \"([0]*2+[1]*%d)\")",
              freq, L, L > 2 ? L - 2 : 1);
  MGT_REQUIRE(f >= 0, "--moe-layer-freq %s: no MoE layer (give --num-experts 0 for a dense model)",
              freq);
  MGT_REQUIRE(fits,
              "--moe-layer-freq %s: MoE layers at irregular places are not implemented: "
              "every N-th layer from the first MoE one",
              freq);
  *first = f, *every = e;
  return MGT_OK;
}

int mgt_model_is_moe_layer(const mgt_model_spec *s, int l) {
  return s->experts > 0 && l >= s->moe_first && (l - s->moe_first) % s->moe_every == 0;
}

static mgt_model_spec derive(const mgt_config *c) {
  const mgt_model_kind *k = &mgt_model_kinds[c->model];
  mgt_model_spec d = {0};
  d.kind = c->model;
  d.layers = c->num_layers;
  d.hidden = c->hidden_size;
  d.heads = c->num_attention_heads;
  d.head_size = mgt_config_head_size(c);
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
  d.norm_1p = c->apply_layernorm_1p;
  d.qkv_bias = c->add_qkv_bias && c->disable_bias_linear;
  d.qk_norm = c->qk_layernorm ? (c->qk_layernorm_full ? 2 : 1) : 0;
  if (c->num_experts > 0) {
    d.experts = c->num_experts, d.topk = c->moe_router_topk;
    d.moe_ffn = c->moe_ffn_hidden_size > 0 ? c->moe_ffn_hidden_size : c->ffn_hidden_size;
    if (moe_layers(c->moe_layer_freq, c->num_layers, &d.moe_first, &d.moe_every) != MGT_OK)
      mgt_error_clear(); /* mgt_model_describe says why */
    d.router_score = c->moe_router_score_function, d.router_pre = c->moe_router_pre_softmax;
    d.router_scale = c->moe_router_topk_scaling_factor;
    d.capacity = c->moe_expert_capacity_factor, d.drop_policy = c->moe_token_drop_policy;
    d.expert_bias = c->moe_router_enable_expert_bias;
    d.shared_ffn = c->moe_shared_expert_intermediate_size;
    d.shared_gate = c->moe_shared_expert_gate;
  }
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
  l.expert_parallel = c->expert_model_parallel_size > 0 ? c->expert_model_parallel_size : 1;
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
                  (c->position_embedding_type == MGT_POS_ROPE && mgt_config_head_size(c) % 2 == 0),
              "--position-embedding-type rope: the head size %d is odd (rotary pairs halves)",
              mgt_config_head_size(c));
  MGT_REQUIRE(!c->qk_layernorm || c->normalization == MGT_NORM_RMSNORM,
              "--qk-layernorm: mgt's query/key norm is RMSNorm (Qwen 3's): give --normalization "
              "RMSNorm");
  MGT_REQUIRE(!c->qk_layernorm_full || c->qk_layernorm,
              "--qk-layernorm-full says how wide the q/k norms are: give --qk-layernorm");
  MGT_REQUIRE(!c->qk_layernorm || !c->apply_residual_connection_post_layernorm,
              "--qk-layernorm with --apply-residual-connection-post-layernorm is not implemented");
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
  MGT_REQUIRE(c->num_experts > 0 || !c->moe_shared_expert_intermediate_size,
              "--moe-shared-expert-intermediate-size: a shared expert is part of an MoE layer: "
              "give --num-experts");
  if (c->num_experts > 0) {
    int first, every;
    MGT_CHECK(moe_layers(c->moe_layer_freq, c->num_layers, &first, &every));
    MGT_REQUIRE(c->moe_router_topk <= c->num_experts,
                "--moe-router-topk %d exceeds --num-experts %d", c->moe_router_topk,
                c->num_experts);
    MGT_REQUIRE(c->disable_bias_linear,
                "--num-experts: mgt's experts have no biases (as "
                "Mixtral's, Qwen3-MoE's and OLMoE's): give --disable-bias-linear");
    MGT_REQUIRE(k->head == MGT_HEAD_CAUSAL_LM && !c->task,
                "--num-experts: Mixture-of-Experts layers are implemented in GPT-style models "
                "(--model gpt)");
    MGT_REQUIRE(c->moe_router_score_function == MGT_MOE_SOFTMAX || !c->moe_router_pre_softmax,
                "--moe-router-pre-softmax is for --moe-router-score-function softmax");
    MGT_REQUIRE(!c->moe_shared_expert_gate || c->moe_shared_expert_intermediate_size > 0,
                "--moe-shared-expert-gate scales a shared expert: give "
                "--moe-shared-expert-intermediate-size");
    MGT_REQUIRE(
        !c->moe_router_enable_expert_bias || c->moe_router_score_function == MGT_MOE_SIGMOID,
        "--moe-router-enable-expert-bias chooses by sigmoid scores plus the bias (Megatron-LM "
        "ignores it with softmax): give --moe-router-score-function sigmoid");
  }
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

/* ---- the spec as text (a checkpoint's model section) ---- */

static const char *const mlp_names[] = {"gelu", "swiglu", NULL};
static const char *const input_names[] = {"windows", "samples", NULL};
static const char *const head_names[] = {"causal_lm", "mlm_sop",         "mlm",
                                         "classify",  "multiple_choice", NULL};

/* Every field of the spec once, for writing and reading. */
typedef struct spec_field {
  const char *key;
  char type; /* i int, d double, e enum (an int written as names[value]) */
  size_t off;
  const char *const *names;
  int later; /* added after format 3 began: a section without it holds 0 */
} spec_field;

#define F_INT(f)                                                                                   \
  { #f, 'i', offsetof(mgt_model_spec, f), NULL, 0 }
#define F_DBL(f)                                                                                   \
  { #f, 'd', offsetof(mgt_model_spec, f), NULL, 0 }
#define F_ENUM(f, n)                                                                               \
  { #f, 'e', offsetof(mgt_model_spec, f), n, 0 }
static const spec_field spec_fields[] = {
    F_ENUM(kind, mgt_model_names),
    F_INT(layers),
    F_INT(hidden),
    F_INT(heads),
    F_INT(head_size),
    F_INT(groups),
    F_INT(ffn),
    F_INT(vocab),
    F_INT(positions),
    F_ENUM(norm, mgt_norm_names),
    F_DBL(norm_eps),
    F_DBL(init_std),
    F_ENUM(pos, mgt_pos_names),
    F_DBL(rope_base),
    F_INT(rope_scaling),
    F_DBL(rope_factor),
    F_ENUM(mlp, mlp_names),
    F_INT(bias),
    F_INT(post_ln),
    F_INT(untied),
    F_ENUM(input, input_names),
    F_INT(causal),
    F_INT(token_types),
    F_ENUM(head, head_names),
    F_INT(masked_lm),
    F_INT(pooler),
    F_INT(logits),
    F_INT(classes),
    F_ENUM(task, mgt_task_names),
    F_INT(rows),
    F_INT(max_predictions),
    {"norm_1p", 'i', offsetof(mgt_model_spec, norm_1p), NULL, 1},
    {"qkv_bias", 'i', offsetof(mgt_model_spec, qkv_bias), NULL, 1},
    {"qk_norm", 'i', offsetof(mgt_model_spec, qk_norm), NULL, 1},
    {"experts", 'i', offsetof(mgt_model_spec, experts), NULL, 1},
    {"topk", 'i', offsetof(mgt_model_spec, topk), NULL, 1},
    {"moe_ffn", 'i', offsetof(mgt_model_spec, moe_ffn), NULL, 1},
    {"moe_first", 'i', offsetof(mgt_model_spec, moe_first), NULL, 1},
    {"moe_every", 'i', offsetof(mgt_model_spec, moe_every), NULL, 1},
    {"router_score", 'i', offsetof(mgt_model_spec, router_score), NULL, 1},
    {"router_pre", 'i', offsetof(mgt_model_spec, router_pre), NULL, 1},
    {"router_scale", 'd', offsetof(mgt_model_spec, router_scale), NULL, 1},
    {"capacity", 'd', offsetof(mgt_model_spec, capacity), NULL, 1},
    {"drop_policy", 'i', offsetof(mgt_model_spec, drop_policy), NULL, 1},
    {"expert_bias", 'i', offsetof(mgt_model_spec, expert_bias), NULL, 1},
    {"shared_ffn", 'i', offsetof(mgt_model_spec, shared_ffn), NULL, 1},
    {"shared_gate", 'i', offsetof(mgt_model_spec, shared_gate), NULL, 1},
};
enum { N_SPEC_FIELDS = sizeof spec_fields / sizeof spec_fields[0] };

char *mgt_model_spec_to_text(const mgt_model_spec *spec) {
  char *text = NULL;
  size_t len = 0;
  FILE *ms = open_memstream(&text, &len);
  if (!ms) return NULL;
  fputc('{', ms);
  for (int i = 0; i < N_SPEC_FIELDS; i++) {
    const spec_field *f = &spec_fields[i];
    const char *at = (const char *)spec + f->off;
    fprintf(ms, "%s\"%s\": ", i ? ", " : "", f->key);
    if (f->type == 'd')
      fprintf(ms, "%.17g", *(const double *)at);
    else if (f->type == 'e')
      fprintf(ms, "\"%s\"", f->names[*(const int *)at]);
    else
      fprintf(ms, "%d", *(const int *)at);
  }
  fputs("}", ms);
  if (fclose(ms) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

static mgt_status read_field(const spec_field *f, const mgt_json *v, mgt_model_spec *out,
                             const char *what) {
  char *at = (char *)out + f->off;
  if (f->type == 'e') {
    MGT_REQUIRE(v->type == MGT_JSON_STRING, "%s: model \"%s\" is not a name", what, f->key);
    for (int k = 0; f->names[k]; k++)
      if (strcmp(f->names[k], v->str) == 0) {
        *(int *)at = k;
        return MGT_OK;
      }
    MGT_FAIL(MGT_ERR_INPUT, "%s: model \"%s\": no such choice \"%.40s\"", what, f->key, v->str);
  }
  MGT_REQUIRE(v->type == MGT_JSON_NUMBER && isfinite(v->number), "%s: model \"%s\" is not a number",
              what, f->key);
  if (f->type == 'd') {
    *(double *)at = v->number;
    return MGT_OK;
  }
  MGT_REQUIRE(v->number == floor(v->number) && fabs(v->number) <= 2147483647.0,
              "%s: model \"%s\" is not an integer", what, f->key);
  *(int *)at = (int)v->number;
  return MGT_OK;
}

mgt_status mgt_model_spec_from_text(const char *text, mgt_model_spec *out, const char *what) {
  memset(out, 0, sizeof *out);
  mgt_status st = MGT_OK;
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL;
  MGT_TRY(mgt_json_parser_create(&jp));
  if (mgt_json_parse(jp, text, strlen(text), &root) != MGT_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: model section: %s", what, why);
  }
  if (root->type != MGT_JSON_OBJECT)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: the model section is not a JSON object", what);
  for (size_t k = 0; k < root->len; k++) {
    int known = 0;
    for (int i = 0; i < N_SPEC_FIELDS && !known; i++)
      known = strcmp(root->keys[k], spec_fields[i].key) == 0;
    if (!known)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: model section: unknown field \"%.40s\"", what,
                    root->keys[k]);
  }
  for (int i = 0; i < N_SPEC_FIELDS; i++) {
    const mgt_json *v = mgt_json_get(root, spec_fields[i].key);
    if (!v && spec_fields[i].later) continue; /* written before the field existed: 0 */
    if (!v) MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: model section: no \"%s\"", what, spec_fields[i].key);
    MGT_TRY(read_field(&spec_fields[i], v, out, what));
  }
done:
  mgt_json_parser_destroy(&jp);
  return st;
}

const char *mgt_model_spec_diff(const mgt_model_spec *a, const mgt_model_spec *b, char *buf,
                                size_t n) {
  for (int i = 0; i < N_SPEC_FIELDS; i++) {
    const spec_field *f = &spec_fields[i];
    const char *x = (const char *)a + f->off, *y = (const char *)b + f->off;
    if (f->type == 'd' ? *(const double *)x != *(const double *)y
                       : *(const int *)x != *(const int *)y) {
      if (f->type == 'd')
        snprintf(buf, n, "%s %.17g, not %.17g", f->key, *(const double *)x, *(const double *)y);
      else if (f->type == 'e')
        snprintf(buf, n, "%s %s, not %s", f->key, f->names[*(const int *)x],
                 f->names[*(const int *)y]);
      else
        snprintf(buf, n, "%s %d, not %d", f->key, *(const int *)x, *(const int *)y);
      return buf;
    }
  }
  return NULL;
}
