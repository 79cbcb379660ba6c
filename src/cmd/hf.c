/* Hugging Face export and import: GPT-2, BERT and Llama (src/mgt/hf.h). The model module says which
   tensors a configuration has (mgt_gpt_describe); this file says what Hugging Face calls them and
   how it lays them out; io/ reads and writes the files. */
#define _GNU_SOURCE
#include "mgt/hf.h"
#include "mgt/hf_impl.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgt/checkpoint.h"
#include "mgt/gpt.h"
#include "mgt/json.h"
#include "mgt/tasks.h"
#include "mgt/safetensors.h"
#include "mgt/train.h"

mgt_status hf_plan_add(hf_plan *pl, const char *name, int ours, int64_t offset, int ndim,
                       const int64_t *shape, int transpose) {
  if (pl->n == pl->cap) {
    int cap = pl->cap ? 2 * pl->cap : 64;
    hf_piece *q = realloc(pl->p, sizeof *q * (size_t)cap);
    if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory planning the Hugging Face tensors");
    pl->p = q, pl->cap = cap;
  }
  hf_piece *x = &pl->p[pl->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->ours = ours, x->offset = offset, x->ndim = ndim, x->transpose = transpose, x->n = 1;
  for (int d = 0; d < ndim; d++)
    x->shape[d] = shape[d], x->n *= shape[d];
  return MGT_OK;
}

int hf_find(const hf_names *w, const char *name) {
  char full[MGT_STATE_NAME];
  snprintf(full, sizeof full, "model/%s", name);
  return mgt_state_index_find(&w->ix, full);
}

/* Our tensor `ours` whole as `hf`, in its own shape (flat: as one vector; conv1d: transposed). */
mgt_status hf_plan_whole(hf_plan *pl, const hf_names *w, const char *hf, const char *ours, int flat,
                         int conv1d) {
  int i = hf_find(w, ours);
  if (i < 0) MGT_FAIL(MGT_ERR_INTERNAL, "the model has no tensor %s", ours);
  const mgt_shard *s = &w->s->t[i].shard;
  int64_t shape[3], n = mgt_state_numel(&w->s->t[i]);
  int nd = s->ndim;
  for (int d = 0; d < nd; d++)
    shape[d] = s->full[d];
  if (flat) shape[0] = n, nd = 1;
  if (conv1d) shape[1] = s->full[s->ndim - 1], shape[0] = n / shape[1], nd = 2;
  if (conv1d) { /* HF's shape is (in, out) */
    int64_t t = shape[0];
    shape[0] = shape[1], shape[1] = t;
  }
  return hf_plan_add(pl, hf, i, 0, nd, shape, conv1d);
}

static const char *const gpt2_layer[][3] = {
    /* HF name, ours, layout: "" same, "f" flat, "c" Conv1D */
    {"ln_1.weight", "input_layernorm.weight", ""},
    {"ln_1.bias", "input_layernorm.bias", ""},
    {"attn.c_attn.weight", "attention.qkv.weight", "c"},
    {"attn.c_attn.bias", "attention.qkv.bias", "f"},
    {"attn.c_proj.weight", "attention.dense.weight", "c"},
    {"attn.c_proj.bias", "attention.dense.bias", ""},
    {"ln_2.weight", "post_attention_layernorm.weight", ""},
    {"ln_2.bias", "post_attention_layernorm.bias", ""},
    {"mlp.c_fc.weight", "mlp.dense_h_to_4h.weight", "c"},
    {"mlp.c_fc.bias", "mlp.dense_h_to_4h.bias", ""},
    {"mlp.c_proj.weight", "mlp.dense_4h_to_h.weight", "c"},
    {"mlp.c_proj.bias", "mlp.dense_4h_to_h.bias", ""},
};

static mgt_status plan_gpt2(hf_plan *pl, const mgt_config *c, const hf_names *w) {
  MGT_CHECK(
      hf_plan_whole(pl, w, "transformer.wte.weight", "embedding.word_embeddings.weight", 0, 0));
  MGT_CHECK(
      hf_plan_whole(pl, w, "transformer.wpe.weight", "embedding.position_embeddings.weight", 0, 0));
  for (int l = 0; l < c->num_layers; l++)
    for (size_t k = 0; k < sizeof gpt2_layer / sizeof gpt2_layer[0]; k++) {
      char hf[96], ours[96];
      snprintf(hf, sizeof hf, "transformer.h.%d.%s", l, gpt2_layer[k][0]);
      snprintf(ours, sizeof ours, "layers.%d.%s", l, gpt2_layer[k][1]);
      MGT_CHECK(
          hf_plan_whole(pl, w, hf, ours, gpt2_layer[k][2][0] == 'f', gpt2_layer[k][2][0] == 'c'));
    }
  MGT_CHECK(hf_plan_whole(pl, w, "transformer.ln_f.weight", "final_layernorm.weight", 0, 0));
  return hf_plan_whole(pl, w, "transformer.ln_f.bias", "final_layernorm.bias", 0, 0);
}

/* A LayerNorm's weight and bias under HF prefix `hf` ("...LayerNorm" or "...ln"). */
static mgt_status plan_ln(hf_plan *pl, const hf_names *w, const char *hf, const char *ours) {
  char a[96], b[96];
  snprintf(a, sizeof a, "%s.weight", hf), snprintf(b, sizeof b, "%s.weight", ours);
  MGT_CHECK(hf_plan_whole(pl, w, a, b, 0, 0));
  snprintf(a, sizeof a, "%s.bias", hf), snprintf(b, sizeof b, "%s.bias", ours);
  return hf_plan_whole(pl, w, a, b, 0, 0);
}

/* A linear layer: weight (out, in) and bias, the same layout in both. */
static mgt_status plan_linear(hf_plan *pl, const hf_names *w, const char *hf, const char *ours) {
  return plan_ln(pl, w, hf, ours);
}

/* BERT: MegatronBertForPreTraining for the pre-LN model (its per-layer attention.ln and ln, the
   final bert.encoder.ln, no embedding LayerNorm); BertForPreTraining for the post-LN one,
   whose LayerNorms are the same ones shifted by one place (layer 0's input LayerNorm is the
   embedding LayerNorm, layer l+1's input LayerNorm layer l's output LayerNorm). Without the
   binary head: the ...ForMaskedLM model, no pooler, zero token types. A fine-tuned model: the
   ...ForSequenceClassification (MNLI, QQP) or ...ForMultipleChoice (RACE) model, whose
   "classifier" is our task head on the pooler, and no LM head. */
static mgt_status plan_bert(hf_plan *pl, const mgt_config *c, const mgt_model_spec *d,
                            const hf_names *w) {
  const int post = d->post_ln, task = d->task, binary = d->pooler;
  const int64_t C = c->hidden_size;
  MGT_CHECK(hf_plan_whole(pl, w, "bert.embeddings.word_embeddings.weight",
                          "embedding.word_embeddings.weight", 0, 0));
  MGT_CHECK(hf_plan_whole(pl, w, "bert.embeddings.position_embeddings.weight",
                          "embedding.position_embeddings.weight", 0, 0));
  if (binary) {
    MGT_CHECK(hf_plan_whole(pl, w, "bert.embeddings.token_type_embeddings.weight",
                            "embedding.tokentype_embeddings.weight", 0, 0));
  } else {
    const int64_t shape[2] = {2, C};
    MGT_CHECK(hf_plan_add(pl, "bert.embeddings.token_type_embeddings.weight", -1, 0, 2, shape, 0));
  }
  if (post) MGT_CHECK(plan_ln(pl, w, "bert.embeddings.LayerNorm", "layers.0.input_layernorm"));
  for (int l = 0; l < c->num_layers; l++) {
    char hf[MGT_STATE_NAME], ours[96];
    const char *qkv_names[3] = {"query", "key", "value"};
    snprintf(ours, sizeof ours, "layers.%d.attention.qkv.weight", l);
    const int qw = hf_find(w, ours);
    snprintf(ours, sizeof ours, "layers.%d.attention.qkv.bias", l);
    const int qb = hf_find(w, ours);
    MGT_REQUIRE(qw >= 0 && qb >= 0, "the model has no QKV tensors in layer %d", l);
    for (int k = 0; k < 3; k++) { /* ours (3, C, C): q, k and v one after another */
      const int64_t ws[2] = {C, C}, bs[1] = {C};
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.attention.self.%s.weight", l, qkv_names[k]);
      MGT_CHECK(hf_plan_add(pl, hf, qw, k * C * C, 2, ws, 0));
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.attention.self.%s.bias", l, qkv_names[k]);
      MGT_CHECK(hf_plan_add(pl, hf, qb, k * C, 1, bs, 0));
    }
    struct {
      const char *hf, *ours;
    } lin[] = {{"attention.output.dense", "attention.dense"},
               {"intermediate.dense", "mlp.dense_h_to_4h"},
               {"output.dense", "mlp.dense_4h_to_h"}};
    for (size_t k = 0; k < 3; k++) {
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.%s", l, lin[k].hf);
      snprintf(ours, sizeof ours, "layers.%d.%s", l, lin[k].ours);
      MGT_CHECK(plan_linear(pl, w, hf, ours));
    }
    if (post) {
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.attention.output.LayerNorm", l);
      snprintf(ours, sizeof ours, "layers.%d.post_attention_layernorm", l);
      MGT_CHECK(plan_ln(pl, w, hf, ours));
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.output.LayerNorm", l);
      if (l + 1 < c->num_layers)
        snprintf(ours, sizeof ours, "layers.%d.input_layernorm", l + 1);
      else
        snprintf(ours, sizeof ours, "final_layernorm");
      MGT_CHECK(plan_ln(pl, w, hf, ours));
    } else {
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.attention.ln", l);
      snprintf(ours, sizeof ours, "layers.%d.input_layernorm", l);
      MGT_CHECK(plan_ln(pl, w, hf, ours));
      snprintf(hf, sizeof hf, "bert.encoder.layer.%d.ln", l);
      snprintf(ours, sizeof ours, "layers.%d.post_attention_layernorm", l);
      MGT_CHECK(plan_ln(pl, w, hf, ours));
    }
  }
  if (!post) MGT_CHECK(plan_ln(pl, w, "bert.encoder.ln", "final_layernorm"));
  if (binary) MGT_CHECK(plan_linear(pl, w, "bert.pooler.dense", "pooler.dense"));
  if (task)
    return plan_linear(pl, w, "classifier",
                       task == MGT_TASK_RACE ? "multichoice_head" : "classification_head");
  MGT_CHECK(plan_linear(pl, w, "cls.predictions.transform.dense", "lm_head.dense"));
  MGT_CHECK(plan_ln(pl, w, "cls.predictions.transform.LayerNorm", "lm_head.layernorm"));
  MGT_CHECK(hf_plan_whole(pl, w, "cls.predictions.bias", "lm_head.bias", 0, 0));
  if (binary) MGT_CHECK(plan_linear(pl, w, "cls.seq_relationship", "binary_head"));
  return MGT_OK;
}

static mgt_status make_plan(const mgt_config *c, const mgt_state *model, hf_plan *pl) {
  memset(pl, 0, sizeof *pl);
  hf_names w = {.s = model};
  MGT_CHECK(mgt_state_index_init(&w.ix, model));
  mgt_model_spec d;
  mgt_status st = mgt_model_describe(c, &d);
  if (st == MGT_OK && hf_is_llama(&d)) {
    st = hf_plan_llama(pl, c, &d, &w);
    goto done;
  }
  if (st == MGT_OK && d.pos != MGT_POS_LEARNED)
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--position-embedding-type %s: Hugging Face's GPT-2 and BERT "
                   "have learned positions (Llama: rotary with RMSNorm and --swiglu)",
                   mgt_pos_names[d.pos]);
  else if (st == MGT_OK && d.norm != MGT_NORM_LAYERNORM)
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--normalization %s: Hugging Face's GPT-2 and BERT have LayerNorms (Llama: "
                   "RMSNorm with rotary positions and --swiglu)",
                   mgt_norm_names[d.norm]);
  else if (st == MGT_OK && d.mlp != MGT_MLP_GELU)
    st = MGT_ERROR(MGT_ERR_INPUT, "--swiglu: Hugging Face's GPT-2 and BERT have GeLU MLPs");
  else if (st == MGT_OK && d.groups != c->num_attention_heads)
    st = MGT_ERROR(MGT_ERR_INPUT, "--group-query-attention: Hugging Face's GPT-2 and BERT have a "
                                  "key and value for every head");
  else if (st == MGT_OK && !d.bias)
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--disable-bias-linear: Hugging Face's GPT-2 and BERT have linear biases");
  if (st == MGT_OK) {
    switch (d.kind) {   /* a kind without Hugging Face names is refused, never named as another */
    case MGT_MODEL_GPT: /* GPT2LMHeadModel's lm_head is wte */
      st = d.untied ? MGT_ERROR(MGT_ERR_INPUT, "--untie-embeddings-and-output-weights: Hugging "
                                               "Face's GPT-2 ties its output layer to wte")
                    : plan_gpt2(pl, c, &w);
      break;
    case MGT_MODEL_BERT: st = plan_bert(pl, c, &d, &w); break;
    default:
      st = MGT_ERROR(MGT_ERR_INPUT, "--model %s has no Hugging Face names",
                     mgt_model_kinds[d.kind].name);
    }
  }
done:
  mgt_state_index_fini(&w.ix);
  if (st != MGT_OK) free(pl->p), memset(pl, 0, sizeof *pl);
  return st;
}

/* dst (cols, rows) = src (rows, cols) transposed. */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst) {
  for (int64_t a = 0; a < rows; a++)
    for (int64_t b = 0; b < cols; b++)
      dst[b * rows + a] = src[a * cols + b];
}

/* The model tensors of cfg as whole logical tensors in host buffers of their own. */
/* The model's tensors, allocated; with sf (an import), only where its weights can hold them. */
static mgt_status whole_model(const mgt_config *cfg, const mgt_st_dir *sf, const char *dir,
                              mgt_state *out) {
  mgt_state desc = {0};
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_gpt_describe(cfg, 1, 0, 0, &desc));
  if (sf) { /* sizes come from config.json: a small folder must not make them gigabytes */
    double want = 0, held = 0;
    for (int i = 0; i < desc.n; i++) {
      mgt_state_tensor t;
      mgt_state_whole(&desc.t[i], &t);
      want += (double)mgt_state_numel(&t);
    }
    for (int i = 0; i < mgt_st_dir_count(sf); i++) {
      int64_t shape[MGT_ST_MAX_DIMS];
      const int nd = mgt_st_dir_dims(sf, mgt_st_dir_name(sf, i), shape);
      double n = 1;
      for (int k = 0; k < nd; k++)
        n *= (double)shape[k];
      held += nd >= 0 ? n : 0;
    }
    if (want > 2 * held + (1 << 20))
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s: config.json describes %.0f parameters, its safetensors hold %.0f: not "
                    "this model's weights",
                    dir, want, held);
  }
  for (int i = 0; i < desc.n; i++) {
    mgt_state_tensor t;
    mgt_state_whole(&desc.t[i], &t);
    t.data = malloc(sizeof(float) * (size_t)mgt_state_numel(&t));
    if (!t.data) MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory for tensor %s", t.name);
    st = mgt_state_add(out, &t);
    if (st != MGT_OK) {
      free(t.data);
      goto done;
    }
  }
done:
  mgt_state_fini(&desc);
  return st;
}

static void free_whole(mgt_state *s) {
  for (int i = 0; i < s->n; i++)
    free(s->t[i].data);
  mgt_state_fini(s);
}

/* An export in progress: this file is written before anything else and removed after the last
   file is in, and config.json is removed before the first weight is written, so that an export
   cut short (a kill, a full disk) leaves a folder that neither mgt ckpt import nor transformers
   reads: never the first shards of one model beside the rest of another. */
static const char export_mark[] = ".mgt-export-incomplete";

static void mark_path(const char *dir, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, export_mark);
}

/* Writes `text` to path, published durably. */
mgt_status hf_write_text(const char *path, const char *text) {
  return mgt_write_file("--output", path, text, strlen(text));
}

/* config.json of a BERT export. HF has one activation: "gelu" (erf) is exact in the LM head
   and approximates our MLP's tanh GeLU (at most 4.7e-4 per activation apart). */
static char *bert_config_json(const mgt_config *c, const mgt_model_spec *d, int64_t iteration) {
  const int post = d->post_ln;
  /* a fine-tuned model's head, and its labels in Megatron-LM's order */
  const char *kind = d->head == MGT_HEAD_MULTIPLE_CHOICE ? "ForMultipleChoice"
                     : d->head == MGT_HEAD_CLASSIFY      ? "ForSequenceClassification"
                     : d->head == MGT_HEAD_MLM_SOP       ? "ForPreTraining"
                                                         : "ForMaskedLM";
  char labels[256] = "";
  if (c->task == MGT_TASK_MNLI)
    snprintf(labels, sizeof labels,
             "  \"num_labels\": 3,\n  \"id2label\": {\"0\": \"contradiction\", \"1\": "
             "\"entailment\", \"2\": \"neutral\"},\n  \"label2id\": {\"contradiction\": 0, "
             "\"entailment\": 1, \"neutral\": 2},\n");
  else if (c->task == MGT_TASK_QQP)
    snprintf(labels, sizeof labels,
             "  \"num_labels\": 2,\n  \"id2label\": {\"0\": \"not_duplicate\", \"1\": "
             "\"duplicate\"},\n  \"label2id\": {\"not_duplicate\": 0, \"duplicate\": 1},\n");
  char *s = NULL;
  if (asprintf(
          &s,
          "{\n  \"architectures\": [\"%s%s\"],\n  \"model_type\": \"%s\",\n"
          "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"num_hidden_layers\": %d,\n"
          "  \"num_attention_heads\": %d,\n  \"intermediate_size\": %d,\n"
          "  \"hidden_act\": \"gelu\",\n  \"hidden_dropout_prob\": %.9g,\n"
          "  \"attention_probs_dropout_prob\": %.9g,\n  \"max_position_embeddings\": %d,\n"
          "  \"type_vocab_size\": 2,\n  \"initializer_range\": %.9g,\n"
          "  \"layer_norm_eps\": %.9g,\n  \"pad_token_id\": 0,\n"
          "  \"position_embedding_type\": \"absolute\",\n  \"tie_word_embeddings\": true,\n"
          "  \"torch_dtype\": \"float32\",\n%s"
          "  \"megatron_c\": {\"iteration\": %lld, \"seq_length\": %d, \"mlp_gelu\": \"tanh\", "
          "\"lm_head_gelu\": \"erf\", \"post_layernorm\": %s, \"task\": \"%s\"}\n}\n",
          post ? "Bert" : "MegatronBert", kind, post ? "bert" : "megatron-bert", c->vocab_size,
          c->hidden_size, c->num_layers, c->num_attention_heads, c->ffn_hidden_size,
          c->hidden_dropout, c->attention_dropout, c->max_position_embeddings, c->init_method_std,
          c->layernorm_epsilon, labels, (long long)iteration, c->seq_length,
          post ? "true" : "false", mgt_task_names[c->task]) < 0)
    return NULL;
  return s;
}

static char *hf_config_json(const mgt_config *c, int64_t iteration, int32_t bos, int32_t eos) {
  const mgt_model_spec d = mgt_model_of(c); /* make_plan refused the kinds with no names */
  if (hf_is_llama(&d)) return hf_llama_config_json(c, &d, iteration, bos, eos);
  if (d.kind == MGT_MODEL_BERT) return bert_config_json(c, &d, iteration);
  if (d.kind != MGT_MODEL_GPT) return NULL;
  char *s = NULL;
  if (asprintf(&s,
               "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
               "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n"
               "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
               "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": %.9g,\n"
               "  \"initializer_range\": %.9g,\n  \"resid_pdrop\": %.9g,\n  \"embd_pdrop\": %.9g,\n"
               "  \"attn_pdrop\": %.9g,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
               "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n"
               "  \"megatron_c\": {\"iteration\": %lld, \"seq_length\": %d}\n}\n",
               c->vocab_size, c->max_position_embeddings, c->max_position_embeddings,
               c->hidden_size, c->num_layers, c->num_attention_heads, c->ffn_hidden_size,
               c->layernorm_epsilon, c->init_method_std, c->hidden_dropout, c->hidden_dropout,
               c->attention_dropout, c->vocab_size - 1, c->vocab_size - 1, (long long)iteration,
               c->seq_length) < 0)
    return NULL;
  return s;
}

mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir, size_t max_shard_bytes,
                         FILE *log) {
  mgt_config cfg;
  mgt_ckpt_state state;
  MGT_CHECK(mgt_train_read_config(ckpt_path, &cfg, &state));
  mgt_status st = MGT_OK;
  mgt_state w = {0};
  mgt_st_tensor *out = NULL;
  hf_plan plan = {0};
  float **zeros = NULL;
  char *json = NULL;
  char path[MGT_PATH_MAX + 64];
  MGT_TRY(whole_model(&cfg, NULL, NULL, &w));
  MGT_TRY(mgt_ckpt_load(ckpt_path, MPI_COMM_SELF, &w, &state));
  for (int i = 0; cfg.apply_layernorm_1p && i < w.n; i++) { /* HF stores the gain, 1 + w */
    const size_t len = strlen(w.t[i].name), k = strlen("layernorm.weight");
    if (len < k || strcmp(w.t[i].name + len - k, "layernorm.weight") != 0) continue;
    float *g = w.t[i].data;
    for (int64_t j = 0; j < mgt_state_numel(&w.t[i]); j++)
      g[j] = 1.0f + g[j]; /* rounded as the model's own gain */
  }
  if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--output %s: cannot create: %s", out_dir, strerror(errno));
  MGT_TRY(make_plan(&cfg, &w, &plan));
  if (cfg.num_experts && cfg.moe_expert_capacity_factor > 0 && log)
    fprintf(log,
            "note: --moe-expert-capacity-factor %g: Hugging Face's MoE models drop no token, so "
            "the export computes without the capacity (as mgt generate and mgt serve do)\n",
            cfg.moe_expert_capacity_factor);
  char mark[MGT_PATH_MAX + 64];
  mark_path(out_dir, mark, sizeof mark);
  {
    char note[MGT_PATH_MAX + 160];
    snprintf(note, sizeof note,
             "mgt ckpt export of %s into this folder did not complete: export again\n", ckpt_path);
    MGT_TRY(hf_write_text(mark, note));
  }
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  MGT_TRY(mgt_remove_file(path));
  MGT_TRY(mgt_calloc(sizeof *out * (size_t)plan.n, "export list", (void **)&out));
  MGT_TRY(mgt_calloc(sizeof *zeros * (size_t)plan.n, "export buffers", (void **)&zeros));
  for (int i = 0; i < plan.n; i++) {
    const hf_piece *pc = &plan.p[i];
    out[i].name = pc->name;
    out[i].ndim = pc->ndim;
    for (int d = 0; d < pc->ndim; d++)
      out[i].shape[d] = pc->shape[d];
    if (pc->ours < 0) { /* a tensor the model does not have: zeros */
      st = mgt_calloc(sizeof(float) * (size_t)pc->n, "export zeros", (void **)&zeros[i]);
      if (st != MGT_OK) break;
      out[i].data = zeros[i];
      continue;
    }
    mgt_state_tensor *t = &w.t[pc->ours];
    if (pc->transpose) { /* swap the buffer for its transpose: one extra tensor at most */
      float *tr = malloc(sizeof(float) * (size_t)mgt_state_numel(t));
      if (!tr) {
        st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory exporting %s", t->name);
        break;
      }
      transpose(t->data, pc->shape[1], pc->shape[0], tr);
      free(t->data);
      t->data = tr;
    }
    out[i].data = (const float *)t->data + pc->offset;
  }
  int files = 0;
  if (st == MGT_OK) st = mgt_st_dir_write(out_dir, out, plan.n, max_shard_bytes, &files);
  MGT_TRY(st);
  int32_t bos = -1, eos = -1;
  const mgt_model_spec desc = mgt_model_of(&cfg);
  if (cfg.tokenizer_type == MGT_TOKENIZER_HF && hf_is_llama(&desc))
    hf_copy_tokenizer(cfg.vocab_file, out_dir, log, &bos, &eos);
  json = hf_config_json(&cfg, state.iteration, bos, eos);
  if (!json) MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory");
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  MGT_TRY(hf_write_text(path, json));
  MGT_TRY(mgt_remove_file(mark)); /* complete */
  if (log && files == 1)
    fprintf(log, "exported %s to %s (model.safetensors, config.json)\n", ckpt_path, out_dir);
  else if (log)
    fprintf(log,
            "exported %s to %s (%d safetensors files, model.safetensors.index.json, "
            "config.json)\n",
            ckpt_path, out_dir, files);
done:
  for (int i = 0; zeros && i < plan.n; i++)
    mgt_free(zeros[i]);
  mgt_free(zeros);
  free(plan.p);
  free(json);
  mgt_free(out);
  free_whole(&w);
  return st;
}

/* ---- import ---- */

/* config.json's integer `key` (dflt when absent or null) within [lo, hi]. */
mgt_status hf_int(const mgt_json *conf, const char *path, const char *key, int dflt, int lo, int hi,
                  int *out) {
  const mgt_json *v = mgt_json_get(conf, key);
  if (!v || v->type == MGT_JSON_NULL) {
    *out = dflt;
    return MGT_OK;
  }
  MGT_REQUIRE(v->type == MGT_JSON_NUMBER && v->number == floor(v->number) && v->number >= lo &&
                  v->number <= hi,
              "%s: %s must be an integer in [%d, %d]", path, key, lo, hi);
  *out = (int)v->number;
  return MGT_OK;
}

/* config.json's number `key` (dflt when absent or null) within [lo, hi]. */
mgt_status hf_num(const mgt_json *conf, const char *path, const char *key, double dflt, double lo,
                  double hi, double *out) {
  const mgt_json *v = mgt_json_get(conf, key);
  if (!v || v->type == MGT_JSON_NULL) {
    *out = dflt;
    return MGT_OK;
  }
  MGT_REQUIRE(v->type == MGT_JSON_NUMBER && v->number >= lo && v->number <= hi,
              "%s: %s must be a number in [%g, %g]", path, key, lo, hi);
  *out = v->number;
  return MGT_OK;
}

/* The head of a BERT checkpoint: the first entry of "architectures" (a class of the family
   model_type names: Bert... or MegatronBert...) or, where a hand-written or converted
   config.json has none, the tensors the file holds. */
static mgt_status bert_kind(const mgt_json *conf, const char *path, int post, const mgt_st_dir *sf,
                            const char **kind) {
  static const char *const kinds[] = {"ForPreTraining", "ForMaskedLM", "ForMultipleChoice",
                                      "ForSequenceClassification"};
  const char *family = post ? "Bert" : "MegatronBert";
  const mgt_json *arch = mgt_json_get(conf, "architectures");
  *kind = NULL;
  if (arch && arch->type != MGT_JSON_NULL) {
    MGT_REQUIRE(arch->type == MGT_JSON_ARRAY &&
                    (arch->len == 0 || arch->items[0].type == MGT_JSON_STRING),
                "%s: architectures must be a list of class names, such as "
                "[\"BertForPreTraining\"]",
                path);
    if (arch->len > 0) {
      const mgt_json *a = &arch->items[0];
      for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", family, kinds[k]);
        if (mgt_json_is(a, name)) *kind = kinds[k];
      }
      MGT_REQUIRE(*kind, "%s: architecture %.100s is none of BERT's %s%s, ...%s, ...%s or ...%s",
                  path, a->str, family, kinds[0], kinds[1], kinds[2], kinds[3]);
      return MGT_OK;
    }
  }
  int64_t shape[MGT_ST_MAX_DIMS];
  const int nd = mgt_st_dir_dims(sf, "classifier.weight", shape);
  if (nd == 2)
    *kind = shape[0] == 1 ? kinds[2] : kinds[3];
  else
    *kind = mgt_st_dir_dims(sf, "cls.seq_relationship.weight", shape) >= 0 ? kinds[0] : kinds[1];
  return MGT_OK;
}

/* config.json's "architectures" of a GPT-2 or Llama model, imported as `cls`: a class of another
   family (its first entry not `family`...) is refused; another class of this family (GPT2Model,
   GPT2ForSequenceClassification) is imported as `cls`, and the log says so. */
static mgt_status check_architecture(const mgt_json *conf, const char *path, const char *model_type,
                                     const char *family, const char *cls, FILE *log) {
  const mgt_json *arch = mgt_json_get(conf, "architectures");
  if (!arch || arch->type == MGT_JSON_NULL || (arch->type == MGT_JSON_ARRAY && arch->len == 0))
    return MGT_OK;
  MGT_REQUIRE(arch->type == MGT_JSON_ARRAY && arch->items[0].type == MGT_JSON_STRING &&
                  strlen(arch->items[0].str) == arch->items[0].len,
              "%s: architectures must be a list of class names, such as [\"%s\"]", path, cls);
  const char *a = arch->items[0].str;
  const size_t fl = strlen(family);
  /* the family's spelling in any case: early Llama conversions say LLaMAForCausalLM */
  MGT_REQUIRE(!strncasecmp(a, family, fl) && a[fl] >= 'A' && a[fl] <= 'Z',
              "%s: architecture %.100s is not a %s class, as model_type %s says", path, a, family,
              model_type);
  if (strcmp(a, cls) != 0 && log)
    fprintf(log,
            "note: %s: architecture %.100s is imported as %s (tensors of another head, if "
            "any, are listed below as not imported)\n",
            path, a, cls);
  return MGT_OK;
}

/* A BERT config.json: MegatronBert (pre-LN) or Bert (post-LN), ...ForPreTraining with the
   binary head or ...ForMaskedLM without; ...ForMultipleChoice is RACE, ...ForSequenceClassification
   MNLI (3 labels) or QQP (2). */
static mgt_status read_bert_config(const mgt_json *conf, const char *path, int post,
                                   const mgt_st_dir *sf, mgt_config *cfg) {
  const char *kind;
  MGT_CHECK(bert_kind(conf, path, post, sf, &kind));
  const int binary = strcmp(kind, "ForMaskedLM") != 0;
  int task = MGT_TASK_NONE;
  if (!strcmp(kind, "ForMultipleChoice")) task = MGT_TASK_RACE;
  if (!strcmp(kind, "ForSequenceClassification")) {
    const mgt_json *id2 = mgt_json_get(conf, "id2label");
    int64_t shape[MGT_ST_MAX_DIMS];
    int n = mgt_st_dir_dims(sf, "classifier.weight", shape) == 2 ? (int)shape[0] : 2;
    if (id2 && id2->type == MGT_JSON_OBJECT) n = (int)id2->len;
    MGT_CHECK(hf_int(conf, path, "num_labels", n, 1, 1 << 20, &n));
    MGT_REQUIRE(n == 2 || n == 3,
                "%s: a sequence classifier of %d labels is none of the fine-tuning tasks (MNLI has "
                "3, QQP 2)",
                path, n);
    task = n == 3 ? MGT_TASK_MNLI : MGT_TASK_QQP;
  }
  const mgt_json *act = mgt_json_get(conf, "hidden_act");
  MGT_REQUIRE(!act || mgt_json_is(act, "gelu"),
              "%s: hidden_act must be \"gelu\" (erf), the LM head's activation", path);
  int types;
  MGT_CHECK(hf_int(conf, path, "type_vocab_size", 2, 2, 2, &types));
  mgt_config_defaults(cfg);
  cfg->model = MGT_MODEL_BERT;
  cfg->apply_residual_connection_post_layernorm = post;
  cfg->bert_no_binary_head = !binary;
  cfg->task = task;
  MGT_CHECK(hf_int(conf, path, "hidden_size", 0, 1, HF_MAX_HIDDEN, &cfg->hidden_size));
  MGT_CHECK(hf_int(conf, path, "num_hidden_layers", 0, 1, HF_MAX_LAYERS, &cfg->num_layers));
  MGT_CHECK(hf_int(conf, path, "num_attention_heads", 0, 1, 65536, &cfg->num_attention_heads));
  MGT_CHECK(hf_int(conf, path, "max_position_embeddings", 512, 5, HF_MAX_POSITIONS,
                   &cfg->max_position_embeddings));
  MGT_CHECK(hf_int(conf, path, "vocab_size", 0, 1, HF_MAX_VOCAB, &cfg->vocab_size));
  MGT_CHECK(hf_int(conf, path, "intermediate_size", 0, 0, HF_MAX_FFN, &cfg->ffn_hidden_size));
  return hf_num(conf, path, "layer_norm_eps", 1e-12, 1e-12, 1, &cfg->layernorm_epsilon);
}

/* Whatever is imported must load: the configuration as a checkpoint stores it, read back as a
   checkpoint's is (flag ranges, model checks). */
static mgt_status check_loadable(const mgt_config *cfg, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  FILE *ms = open_memstream(&buf, &len);
  if (!ms) MGT_FAIL(MGT_ERR_NOMEM, "out of memory checking %s", path);
  mgt_config_json(cfg, ms);
  fclose(ms);
  mgt_json_parser *jp = NULL;
  const mgt_json *obj = NULL;
  mgt_config back;
  mgt_config_defaults(&back);
  mgt_status st = mgt_json_parser_create(&jp);
  if (st == MGT_OK) st = mgt_json_parse(jp, buf, len, &obj);
  if (st == MGT_OK) st = mgt_config_from_json(&back, obj, path);
  if (st == MGT_OK) mgt_config_derive(&back), st = mgt_config_check_model(&back, path);
  mgt_json_parser_destroy(&jp);
  free(buf);
  return st;
}

/* The model configuration of a Hugging Face GPT-2 or BERT config.json; sf is its weights,
   which tell a BERT's head when config.json does not. */
static mgt_status read_hf_config(const char *hf_dir, const mgt_st_dir *sf, mgt_config *cfg,
                                 FILE *log) {
  char path[MGT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/config.json", hf_dir);
  char *text = NULL;
  size_t n = 0;
  mgt_json_parser *jp = NULL;
  const mgt_json *conf = NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_read_file("--input", path, &text, &n));
  MGT_TRY(mgt_json_parser_create(&jp));
  MGT_TRY(mgt_json_parse(jp, text, n, &conf));
  if (conf->type != MGT_JSON_OBJECT) MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: not a JSON object", path);
  const mgt_json *type = mgt_json_get(conf, "model_type");
  if (type && (type->type != MGT_JSON_STRING || strlen(type->str) != type->len))
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "%s: model_type must be a string: gpt2, llama, qwen2, qwen3, mixtral, qwen3_moe, "
                  "olmoe, megatron-bert or bert",
                  path);
  const char *mt = type ? type->str : "gpt2";
  if (!strcmp(mt, "megatron-bert") || !strcmp(mt, "bert")) {
    MGT_TRY(read_bert_config(conf, path, !strcmp(mt, "bert"), sf, cfg));
    goto finish;
  }
  static const char *const llamas[][3] = {{"llama", "Llama", "LlamaForCausalLM"},
                                          {"qwen2", "Qwen2", "Qwen2ForCausalLM"},
                                          {"qwen3", "Qwen3", "Qwen3ForCausalLM"},
                                          {"mixtral", "Mixtral", "MixtralForCausalLM"},
                                          {"qwen3_moe", "Qwen3Moe", "Qwen3MoeForCausalLM"},
                                          {"olmoe", "Olmoe", "OlmoeForCausalLM"}};
  for (int k = 0; k < 6; k++)
    if (!strcmp(mt, llamas[k][0])) {
      MGT_TRY(check_architecture(conf, path, mt, llamas[k][1], llamas[k][2], log));
      MGT_TRY(hf_read_llama_config(conf, path, mt, cfg));
      goto windows;
    }
  if (strcmp(mt, "gpt2") != 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "%s: model_type %.100s is not gpt2, llama, qwen2, qwen3, mixtral, qwen3_moe, "
                  "olmoe, megatron-bert or bert",
                  path, mt);
  MGT_TRY(check_architecture(conf, path, "gpt2", "GPT2", "GPT2LMHeadModel", log));
  const mgt_json *act = mgt_json_get(conf, "activation_function");
  if (act && act->type != MGT_JSON_NULL && !mgt_json_is(act, "gelu_new") &&
      !mgt_json_is(act, "gelu_pytorch_tanh")) {
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: activation_function must be \"gelu_new\" (GPT-2's tanh GeLU)",
                  path);
  }
  int scaled = 1, by_layer = 0; /* GPT2Attention's: 1 / sqrt(head size), not 1 / layer too */
  MGT_TRY(hf_bool(conf, path, "scale_attn_weights", 1, &scaled));
  MGT_TRY(hf_bool(conf, path, "scale_attn_by_inverse_layer_idx", 0, &by_layer));
  if (!scaled || by_layer)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "%s: %s: attention scaled otherwise than by 1 / sqrt(head size) is not "
                  "implemented",
                  path, scaled ? "scale_attn_by_inverse_layer_idx" : "scale_attn_weights false");
  mgt_config_defaults(cfg);
  MGT_TRY(hf_int(conf, path, "n_embd", 0, 1, HF_MAX_HIDDEN, &cfg->hidden_size));
  MGT_TRY(hf_int(conf, path, "n_layer", 0, 1, HF_MAX_LAYERS, &cfg->num_layers));
  MGT_TRY(hf_int(conf, path, "n_head", 0, 1, 65536, &cfg->num_attention_heads));
  MGT_TRY(
      hf_int(conf, path, "n_positions", 1024, 1, HF_MAX_POSITIONS, &cfg->max_position_embeddings));
  MGT_TRY(hf_int(conf, path, "vocab_size", 0, 1, HF_MAX_VOCAB, &cfg->vocab_size));
  /* null in most files: 4 * n_embd */
  MGT_TRY(hf_int(conf, path, "n_inner", 0, 0, HF_MAX_FFN, &cfg->ffn_hidden_size));
  MGT_TRY(hf_num(conf, path, "layer_norm_epsilon", cfg->layernorm_epsilon, 1e-12, 1,
                 &cfg->layernorm_epsilon));
finish:
  /* a model the trainer accepts: one rank, windows of every position */
  cfg->seq_length = cfg->max_position_embeddings;
windows:
  cfg->micro_batch_size = 1;
  cfg->mock_data = 1;
  if (mgt_config_finalize(cfg, 1) != MGT_OK) {
    char why[512]; /* the message is rewritten in place */
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: %s", path, why);
  }
  cfg->mock_data = 0; /* the imported model trains on data; nothing synthetic is implied */
  MGT_TRY(check_loadable(cfg, path));
done:
  mgt_json_parser_destroy(&jp);
  free(text);
  return st;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Buffers Hugging Face stores beside the weights and computes again itself: nothing is lost
   when they are not imported. */
static int is_buffer(const char *name) {
  static const char *const ends[] = {".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq",
                                     "embeddings.position_ids"};
  const size_t n = strlen(name);
  for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
    const size_t e = strlen(ends[k]);
    if (n >= e && !strcmp(name + n - e, ends[k])) return 1;
  }
  return 0;
}

/* Says which tensors of the directory the model has no place for (a layer beyond
   num_hidden_layers, a head of another class), up to eight by name. */
static mgt_status report_unused(const mgt_st_dir *sf, const hf_plan *plan, const char *dir,
                                FILE *log) {
  const char **used = malloc(sizeof *used * (size_t)(plan->n + 1));
  if (!used) MGT_FAIL(MGT_ERR_NOMEM, "out of memory importing %s", dir);
  for (int i = 0; i < plan->n; i++)
    used[i] = plan->p[i].name;
  qsort(used, (size_t)plan->n, sizeof *used, cmp_str);
  int unused = 0;
  char names[600] = "";
  for (int i = 0, n = mgt_st_dir_count(sf); i < n; i++) {
    const char *name = mgt_st_dir_name(sf, i);
    if (!name || is_buffer(name) || bsearch(&name, used, (size_t)plan->n, sizeof *used, cmp_str))
      continue;
    if (++unused <= 8) {
      const size_t at = strlen(names);
      snprintf(names + at, sizeof names - at, "%s%.60s", unused > 1 ? ", " : "", name);
    }
  }
  free(used);
  if (unused && log)
    fprintf(log, "note: %d tensors of %s are not part of the model and are not imported: %s%s\n",
            unused, dir, names, unused > 8 ? ", ..." : "");
  return MGT_OK;
}

/* The name a piece has in the files when they spell it otherwise than save_pretrained does now:
   GPT-2's Hub files without the "transformer." prefix (GPT2Model's names; transformers adds
   it), BERT's LayerNorms as gamma and beta (TensorFlow's names, bert-base-uncased's). */
static void hub_names(const mgt_st_dir *sf, hf_plan *plan) {
  int64_t shape[MGT_ST_MAX_DIMS];
  for (int i = 0; i < plan->n; i++) {
    char *name = plan->p[i].name, alt[MGT_STATE_NAME];
    if (mgt_st_dir_dims(sf, name, shape) >= 0) continue;
    const size_t n = strlen(name);
    if (!strncmp(name, "transformer.", 12)) {
      snprintf(alt, sizeof alt, "%s", name + 12);
    } else if (n > 17 && !strcmp(name + n - 17, ".LayerNorm.weight")) {
      snprintf(alt, sizeof alt, "%.*s.LayerNorm.gamma", (int)(n - 17), name);
    } else if (n > 15 && !strcmp(name + n - 15, ".LayerNorm.bias")) {
      snprintf(alt, sizeof alt, "%.*s.LayerNorm.beta", (int)(n - 15), name);
    } else {
      continue;
    }
    if (mgt_st_dir_dims(sf, alt, shape) >= 0) snprintf(name, MGT_STATE_NAME, "%s", alt);
  }
}

mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log) {
  mgt_config cfg;
  mgt_status st = MGT_OK;
  mgt_st_dir *sf = NULL;
  mgt_state w = {0};
  hf_plan plan = {0};
  int64_t *covered = NULL;
  float *tmp = NULL;
  char path[MGT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s", hf_dir);
  char mark[MGT_PATH_MAX + 64];
  mark_path(hf_dir, mark, sizeof mark);
  if (access(mark, F_OK) == 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--input %s: an export into this folder did not complete (%s is there): "
                  "export it again",
                  hf_dir, export_mark);
  MGT_TRY(mgt_st_dir_open(hf_dir, &sf));
  if (mgt_st_dir_index_ignored(sf) && log)
    fprintf(log,
            "note: %s has both model.safetensors and model.safetensors.index.json: "
            "model.safetensors is read, as transformers reads it; the index is ignored\n",
            hf_dir);
  MGT_TRY(read_hf_config(hf_dir, sf, &cfg, log));
  const mgt_model_spec desc = mgt_model_of(&cfg);
  if (hf_is_llama(&desc)) MGT_TRY(hf_adopt_tokenizer(hf_dir, &cfg, log));
  MGT_TRY(whole_model(&cfg, sf, hf_dir, &w));
  MGT_TRY(make_plan(&cfg, &w, &plan));
  hub_names(sf, &plan);
  MGT_TRY(mgt_calloc(sizeof(int64_t) * (size_t)w.n, "import counts", (void **)&covered));
  for (int i = 0; i < plan.n; i++) {
    const hf_piece *pc = &plan.p[i];
    if (pc->ours >= 0 && !pc->transpose) {
      MGT_TRY(mgt_st_dir_read(sf, pc->name, pc->ndim, pc->shape,
                              (float *)w.t[pc->ours].data + pc->offset));
      covered[pc->ours] += pc->n;
      continue;
    }
    free(tmp);
    tmp = malloc(sizeof(float) * (size_t)pc->n);
    if (!tmp) MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", pc->name);
    MGT_TRY(mgt_st_dir_read(sf, pc->name, pc->ndim, pc->shape, tmp));
    if (pc->ours < 0) { /* a tensor the model has no place for must be zero to mean nothing */
      for (int64_t k = 0; k < pc->n; k++)
        if (tmp[k] != 0.0f)
          MGT_GOTO_FAIL(MGT_ERR_INPUT,
                        "%s: tensor %s is not zero, but a BERT without the binary head has no "
                        "token types",
                        path, pc->name);
      continue;
    }
    transpose(tmp, pc->shape[0], pc->shape[1], w.t[pc->ours].data); /* HF (in, out) to ours */
    covered[pc->ours] += pc->n;
  }
  MGT_TRY(report_unused(sf, &plan, hf_dir, log));
  for (int i = 0; i < w.n; i++)
    if (covered[i] != mgt_state_numel(&w.t[i]))
      MGT_GOTO_FAIL(MGT_ERR_INTERNAL,
                    "the Hugging Face names cover %lld of the %lld elements of %s",
                    (long long)covered[i], (long long)mgt_state_numel(&w.t[i]), w.t[i].name);
  mgt_ckpt_state state;
  memset(&state, 0, sizeof state);
  state.seed = cfg.seed;
  state.tensor_model_parallel_size = state.data_parallel_size = 1;
  int lock = 0;
  /* an iteration-0 checkpoint would become a run's `latest` over its own */
  if (!mgt_ckpt_none_yet(save_dir))
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--save %s: holds checkpoints already (or is not a directory): import into a "
                  "new directory",
                  save_dir);
  MGT_TRY(mgt_ckpt_prepare_dir(save_dir, MPI_COMM_SELF, mgt_ckpt_bytes(&w), &lock));
  char *config = mgt_config_to_text(&cfg);
  const mgt_model_spec spec = mgt_model_of(&cfg);
  char *model = mgt_model_spec_to_text(&spec);
  st = config && model ? mgt_ckpt_save(save_dir, MPI_COMM_SELF, &w, config, model, &state, log)
                       : MGT_ERROR(MGT_ERR_NOMEM, "out of memory importing %s", hf_dir);
  free(config);
  free(model);
  mgt_ckpt_unlock(save_dir, &lock);
  MGT_TRY(st);
done:
  free(tmp);
  free(plan.p);
  mgt_free(covered);
  free_whole(&w);
  mgt_st_dir_close(&sf);
  return st;
}
