/* Hugging Face GPT-2 export and import (include/mgt/hf.h). The model module says which tensors
   a configuration has (mgt_gpt_describe); this file says what Hugging Face calls them and how
   it lays them out; io/ reads and writes the files. */
#define _GNU_SOURCE
#include "mgt/hf.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgt/checkpoint.h"
#include "mgt/gpt.h"
#include "mgt/json.h"
#include "mgt/safetensors.h"

typedef enum hf_layout {
  HF_SAME,   /* the same shape and data */
  HF_FLAT,   /* the same data as one vector (the QKV bias (3, C) is (3C)) */
  HF_CONV1D, /* Conv1D: the transpose of our (out, in) matrix, the QKV weight as (3C, C) */
} hf_layout;

typedef struct hf_name {
  const char *hf, *ours;
  hf_layout layout;
} hf_name;

static const hf_name model_names[] = {
    {"transformer.wte.weight", "embedding.word_embeddings.weight", HF_SAME},
    {"transformer.wpe.weight", "embedding.position_embeddings.weight", HF_SAME},
    {"transformer.ln_f.weight", "final_layernorm.weight", HF_SAME},
    {"transformer.ln_f.bias", "final_layernorm.bias", HF_SAME},
};
static const hf_name layer_names[] = {
    {"ln_1.weight", "input_layernorm.weight", HF_SAME},
    {"ln_1.bias", "input_layernorm.bias", HF_SAME},
    {"attn.c_attn.weight", "attention.qkv.weight", HF_CONV1D},
    {"attn.c_attn.bias", "attention.qkv.bias", HF_FLAT},
    {"attn.c_proj.weight", "attention.dense.weight", HF_CONV1D},
    {"attn.c_proj.bias", "attention.dense.bias", HF_SAME},
    {"ln_2.weight", "post_attention_layernorm.weight", HF_SAME},
    {"ln_2.bias", "post_attention_layernorm.bias", HF_SAME},
    {"mlp.c_fc.weight", "mlp.dense_h_to_4h.weight", HF_CONV1D},
    {"mlp.c_fc.bias", "mlp.dense_h_to_4h.bias", HF_SAME},
    {"mlp.c_proj.weight", "mlp.dense_4h_to_h.weight", HF_CONV1D},
    {"mlp.c_proj.bias", "mlp.dense_4h_to_h.bias", HF_SAME},
};

/* Hugging Face's name for our tensor "model/...", and its layout. */
static mgt_status hf_lookup(const char *ours, char *hf, size_t n, hf_layout *layout) {
  const char *name = strncmp(ours, "model/", 6) == 0 ? ours + 6 : ours;
  int layer = -1, used = 0;
  if (sscanf(name, "layers.%d.%n", &layer, &used) == 1 && used > 0) {
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
      if (!strcmp(name + used, layer_names[i].ours)) {
        snprintf(hf, n, "transformer.h.%d.%s", layer, layer_names[i].hf);
        *layout = layer_names[i].layout;
        return MGT_OK;
      }
  } else {
    for (size_t i = 0; i < sizeof model_names / sizeof model_names[0]; i++)
      if (!strcmp(name, model_names[i].ours)) {
        snprintf(hf, n, "%s", model_names[i].hf);
        *layout = model_names[i].layout;
        return MGT_OK;
      }
  }
  MGT_FAIL(MGT_ERR_INTERNAL, "no Hugging Face GPT-2 name for tensor %s", ours);
}

/* The shape Hugging Face stores a logical tensor in. */
static int hf_shape(const mgt_state_tensor *t, hf_layout layout, int64_t *shape) {
  const mgt_shard *s = &t->shard;
  int64_t cols = s->full[s->ndim - 1], rows = mgt_state_numel(t) / cols;
  switch (layout) {
  case HF_FLAT: shape[0] = rows * cols; return 1;
  case HF_CONV1D: shape[0] = cols, shape[1] = rows; return 2;
  default:
    for (int d = 0; d < s->ndim; d++)
      shape[d] = s->full[d];
    return s->ndim;
  }
}

/* dst (cols, rows) = src (rows, cols) transposed. */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst) {
  for (int64_t a = 0; a < rows; a++)
    for (int64_t b = 0; b < cols; b++)
      dst[b * rows + a] = src[a * cols + b];
}

/* The model tensors of cfg as whole logical tensors in host buffers of their own. */
static mgt_status whole_model(const mgt_config *cfg, mgt_state *out) {
  mgt_state desc = {0};
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_gpt_describe(cfg, 1, 0, 0, &desc));
  for (int i = 0; i < desc.n; i++) {
    mgt_state_tensor t;
    mgt_state_whole(&desc.t[i], &t);
    t.data = malloc(sizeof(float) * (size_t)mgt_state_numel(&t));
    if (!t.data) {
      mgt_error_set(MGT_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory for tensor %s",
                    t.name);
      st = MGT_ERR_NOMEM;
      goto done;
    }
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

/* Writes `text` to path through a temporary file, published durably. */
static mgt_status write_text(const char *path, const char *text) {
  char tmp[MGT_PATH_MAX + 80];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) MGT_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  int ok = fputs(text, f) >= 0;
  ok &= fclose(f) == 0;
  if (!ok) {
    unlink(tmp);
    MGT_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  }
  mgt_status st = mgt_publish_file(tmp, path);
  if (st != MGT_OK) unlink(tmp);
  return st;
}

static char *hf_config_json(const mgt_config *c, int64_t iteration) {
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

mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir, FILE *log) {
  mgt_config cfg;
  mgt_ckpt_state state;
  MGT_CHECK(mgt_ckpt_read_config(ckpt_path, &cfg, &state));
  mgt_status st = MGT_OK;
  mgt_state w = {0};
  mgt_st_tensor *out = NULL;
  char *json = NULL, *names = NULL;
  char path[MGT_PATH_MAX + 64];
  MGT_TRY(whole_model(&cfg, &w));
  MGT_TRY(mgt_ckpt_load(ckpt_path, MPI_COMM_SELF, &w, &state));
  if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__, "--output %s: cannot create: %s",
                  out_dir, strerror(errno));
    st = MGT_ERR_INPUT;
    goto done;
  }
  MGT_TRY(mgt_calloc(sizeof *out * (size_t)w.n, "export list", (void **)&out));
  MGT_TRY(mgt_calloc((size_t)w.n * 96, "export names", (void **)&names));
  for (int i = 0; i < w.n; i++) {
    mgt_state_tensor *t = &w.t[i];
    hf_layout layout;
    char *name = names + (size_t)i * 96;
    st = hf_lookup(t->name, name, 96, &layout);
    if (st != MGT_OK) break;
    out[i].name = name;
    out[i].ndim = hf_shape(t, layout, out[i].shape);
    if (layout == HF_CONV1D) { /* swap the buffer for its transpose: one extra tensor at most */
      float *tr = malloc(sizeof(float) * (size_t)mgt_state_numel(t));
      if (!tr) {
        mgt_error_set(MGT_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory exporting %s",
                      t->name);
        st = MGT_ERR_NOMEM;
        break;
      }
      transpose(t->data, out[i].shape[1], out[i].shape[0], tr);
      free(t->data);
      t->data = tr;
    }
    out[i].data = t->data;
  }
  if (st == MGT_OK) {
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    st = mgt_safetensors_write(path, out, w.n);
  }
  MGT_TRY(st);
  json = hf_config_json(&cfg, state.iteration);
  if (!json) {
    mgt_error_set(MGT_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
    st = MGT_ERR_NOMEM;
    goto done;
  }
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  MGT_TRY(write_text(path, json));
  if (log) fprintf(log, "exported %s to %s (model.safetensors, config.json)\n", ckpt_path, out_dir);
done:
  free(json);
  mgt_free(names);
  mgt_free(out);
  free_whole(&w);
  return st;
}

/* ---- import ---- */

static int json_int(const mgt_json *obj, const char *key, int dflt) {
  const mgt_json *v = mgt_json_get(obj, key);
  return v && v->type == MGT_JSON_NUMBER ? (int)v->number : dflt;
}

/* The model configuration of a Hugging Face GPT-2 config.json. */
static mgt_status read_hf_config(const char *hf_dir, mgt_config *cfg) {
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
  const mgt_json *act = mgt_json_get(conf, "activation_function");
  if (act && act->type == MGT_JSON_STRING && strcmp(act->str, "gelu_new") != 0 &&
      strcmp(act->str, "gelu_pytorch_tanh") != 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "%s: activation %s is not GPT-2's tanh GeLU", path, act->str);
    st = MGT_ERR_INPUT;
    goto done;
  }
  mgt_config_defaults(cfg);
  cfg->hidden_size = json_int(conf, "n_embd", 0);
  cfg->num_layers = json_int(conf, "n_layer", 0);
  cfg->num_attention_heads = json_int(conf, "n_head", 0);
  cfg->max_position_embeddings = json_int(conf, "n_positions", 1024);
  cfg->vocab_size = json_int(conf, "vocab_size", 0);
  cfg->ffn_hidden_size = json_int(conf, "n_inner", 0); /* null in most files: 4 * n_embd */
  const mgt_json *eps = mgt_json_get(conf, "layer_norm_epsilon");
  if (eps && eps->type == MGT_JSON_NUMBER) cfg->layernorm_epsilon = eps->number;
  if (cfg->hidden_size <= 0 || cfg->num_layers <= 0 || cfg->num_attention_heads <= 0 ||
      cfg->vocab_size <= 0 || cfg->max_position_embeddings <= 0 || cfg->ffn_hidden_size < 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "%s: n_embd, n_layer, n_head, n_positions and vocab_size must be positive", path);
    st = MGT_ERR_INPUT;
    goto done;
  }
  /* a model the trainer accepts: one rank, windows of every position */
  cfg->seq_length = cfg->max_position_embeddings;
  cfg->micro_batch_size = 1;
  cfg->mock_data = 1;
  MGT_TRY(mgt_config_finalize(cfg, 1));
  cfg->mock_data = 0; /* the imported model trains on data; nothing synthetic is implied */
done:
  mgt_json_parser_destroy(&jp);
  free(text);
  return st;
}

mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log) {
  mgt_config cfg;
  MGT_CHECK(read_hf_config(hf_dir, &cfg));
  mgt_status st = MGT_OK;
  mgt_safetensors *sf = NULL;
  mgt_state w = {0};
  float *tmp = NULL;
  char path[MGT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/model.safetensors", hf_dir);
  MGT_TRY(mgt_safetensors_open(path, &sf));
  MGT_TRY(whole_model(&cfg, &w));
  for (int i = 0; i < w.n; i++) {
    mgt_state_tensor *t = &w.t[i];
    char name[96];
    hf_layout layout;
    int64_t shape[MGT_ST_MAX_DIMS];
    MGT_TRY(hf_lookup(t->name, name, sizeof name, &layout));
    int nd = hf_shape(t, layout, shape);
    if (layout != HF_CONV1D) {
      MGT_TRY(mgt_safetensors_read(sf, name, nd, shape, t->data));
      continue;
    }
    free(tmp);
    tmp = malloc(sizeof(float) * (size_t)mgt_state_numel(t));
    if (!tmp) {
      mgt_error_set(MGT_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory reading %s", name);
      st = MGT_ERR_NOMEM;
      goto done;
    }
    MGT_TRY(mgt_safetensors_read(sf, name, nd, shape, tmp));
    transpose(tmp, shape[0], shape[1], t->data); /* HF (in, out) to our (out, in) */
  }
  mgt_ckpt_state state;
  memset(&state, 0, sizeof state);
  state.seed = cfg.seed;
  state.tensor_model_parallel_size = state.data_parallel_size = 1;
  int lock = 0;
  MGT_TRY(mgt_ckpt_prepare_dir(save_dir, MPI_COMM_SELF, mgt_ckpt_bytes(&w), &lock));
  st = mgt_ckpt_save(save_dir, MPI_COMM_SELF, &w, &cfg, &state, log);
  mgt_ckpt_unlock(save_dir, &lock);
  MGT_TRY(st);
done:
  free(tmp);
  free_whole(&w);
  mgt_safetensors_close(&sf);
  return st;
}
