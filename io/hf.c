/* Hugging Face GPT-2 export and import: model.safetensors with the transformer.* names
   (Conv1D weights stored (in, out), the transpose of our (out, in)) and config.json. Both run
   on one rank with a single-rank model. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgt/checkpoint.h"
#include "mgt/json.h"

/* One HF tensor and where it lives in our model. */
typedef struct hf_map {
  char hf[96];
  char ours[MGT_PARAM_NAME];
  int transpose; /* HF holds the transpose of our (out, in) matrix */
} hf_map;

static int build_map(const mgt_config *c, hf_map *m) {
  int n = 0;
#define MAP(h, o, t)                                                                               \
  do {                                                                                             \
    snprintf(m[n].hf, sizeof m[n].hf, "%s", h);                                                    \
    snprintf(m[n].ours, sizeof m[n].ours, "%s", o);                                                \
    m[n++].transpose = t;                                                                          \
  } while (0)
  MAP("transformer.wte.weight", "embedding.word_embeddings.weight", 0);
  MAP("transformer.wpe.weight", "embedding.position_embeddings.weight", 0);
  for (int l = 0; l < c->num_layers; l++) {
    static const char *pairs[][3] = {
        {"ln_1.weight", "input_layernorm.weight", "0"},
        {"ln_1.bias", "input_layernorm.bias", "0"},
        {"attn.c_attn.weight", "attention.qkv.weight", "1"},
        {"attn.c_attn.bias", "attention.qkv.bias", "0"},
        {"attn.c_proj.weight", "attention.dense.weight", "1"},
        {"attn.c_proj.bias", "attention.dense.bias", "0"},
        {"ln_2.weight", "post_attention_layernorm.weight", "0"},
        {"ln_2.bias", "post_attention_layernorm.bias", "0"},
        {"mlp.c_fc.weight", "mlp.dense_h_to_4h.weight", "1"},
        {"mlp.c_fc.bias", "mlp.dense_h_to_4h.bias", "0"},
        {"mlp.c_proj.weight", "mlp.dense_4h_to_h.weight", "1"},
        {"mlp.c_proj.bias", "mlp.dense_4h_to_h.bias", "0"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
      char h[96], o[MGT_PARAM_NAME];
      snprintf(h, sizeof h, "transformer.h.%d.%s", l, pairs[k][0]);
      snprintf(o, sizeof o, "layers.%d.%s", l, pairs[k][1]);
      MAP(h, o, pairs[k][2][0] == '1');
    }
  }
  MAP("transformer.ln_f.weight", "final_layernorm.weight", 0);
  MAP("transformer.ln_f.bias", "final_layernorm.bias", 0);
#undef MAP
  return n;
}

static const mgt_param *find_param(const mgt_param *p, int np, const char *name) {
  for (int i = 0; i < np; i++)
    if (strcmp(p[i].name, name) == 0) return &p[i];
  return NULL;
}

/* Logical shape of a parameter as a matrix (rows, cols): 1-D tensors are (1, n); the QKV
   weight [3, C, C] is (3C, C). Vocabulary padding rows are left out. */
static void matrix_shape(const mgt_param *p, int64_t *rows, int64_t *cols) {
  const mgt_shard *s = &p->shard;
  if (s->ndim == 1) {
    *rows = 1, *cols = s->full[0];
  } else if (s->ndim == 2) {
    if (s->full[0] == 3) /* qkv bias [3, C] is one vector */
      *rows = 1, *cols = 3 * s->full[1];
    else
      *rows = s->full[0], *cols = s->full[1];
  } else {
    *rows = s->full[0] * s->full[1], *cols = s->full[2];
  }
}

/* A single-rank model of cfg on this process alone. */
typedef struct solo {
  mgt_grid *grid;
  mgt_backend *be;
  mgt_comm comm;
  mgt_gpt *model;
} solo;

static void solo_destroy(solo *s) {
  mgt_gpt_destroy(&s->model);
  mgt_backend_destroy(&s->be);
  mgt_grid_destroy(&s->grid);
}

static mgt_status solo_create(mgt_config *cfg, solo *s) {
  memset(s, 0, sizeof *s);
  cfg->tensor_model_parallel_size = 1;
  cfg->micro_batch_size = 1;
  cfg->global_batch_size = 0;
  cfg->seq_length = 1; /* activations are not used */
  cfg->recompute_activations = 0;
  cfg->mock_data = 1;
  cfg->data_path[0] = 0;
  MGT_CHECK(mgt_config_finalize(cfg, 1));
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_grid_create(MPI_COMM_SELF, 1, &s->grid));
  MGT_TRY(mgt_backend_cpu_create(&s->be));
  mgt_comm_mpi_init(&s->comm, s->grid, NULL);
  MGT_TRY(mgt_gpt_create(cfg, s->grid, s->be, &s->comm, &s->model));
  return MGT_OK;
done:
  solo_destroy(s);
  return st;
}

static mgt_status write_all(int fd, const void *p, size_t n, const char *what) {
  const unsigned char *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) MGT_FAIL(MGT_ERR_IO, "%s: write failed: %s", what, strerror(errno));
    b += w, n -= (size_t)w;
  }
  return MGT_OK;
}

mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir, FILE *log) {
  mgt_config cfg;
  mgt_ckpt_state state;
  MGT_CHECK(mgt_ckpt_read_config(ckpt_path, &cfg, &state));
  const int seq = cfg.seq_length, pos = cfg.max_position_embeddings;
  solo s;
  MGT_CHECK(solo_create(&cfg, &s));
  mgt_status st = MGT_OK;
  hf_map *map = NULL;
  char *header = NULL;
  float *buf = NULL;
  int fd = -1;
  char tmp[MGT_PATH_MAX + 96], final[MGT_PATH_MAX + 64];
  MGT_TRY(mgt_ckpt_load(ckpt_path, s.grid, s.model, NULL, &state));
  if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__, "--output %s: cannot create: %s",
                  out_dir, strerror(errno));
    st = MGT_ERR_INPUT;
    goto done;
  }
  int np;
  const mgt_param *params = mgt_gpt_params(s.model, &np);
  const float *w = mgt_gpt_param_data(s.model);
  MGT_TRY(mgt_calloc(sizeof *map * (size_t)(np + 4), "export map", (void **)&map));
  int nm = build_map(&cfg, map);
  /* header: every tensor with its byte range in the data section */
  size_t hcap = 256 + (size_t)nm * 200, hl = 0, off = 0, max_n = 0;
  MGT_TRY(mgt_calloc(hcap, "safetensors header", (void **)&header));
  hl += (size_t)snprintf(header + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < nm; i++) {
    const mgt_param *p = find_param(params, np, map[i].ours);
    int64_t r, c;
    matrix_shape(p, &r, &c);
    size_t n = (size_t)(r * c);
    if (n > max_n) max_n = n;
    if (map[i].transpose)
      hl += (size_t)snprintf(header + hl, hcap - hl,
                             ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld]", map[i].hf,
                             (long long)c, (long long)r);
    else if (r == 1)
      hl += (size_t)snprintf(header + hl, hcap - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld]",
                             map[i].hf, (long long)c);
    else
      hl += (size_t)snprintf(header + hl, hcap - hl,
                             ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld]", map[i].hf,
                             (long long)r, (long long)c);
    hl +=
        (size_t)snprintf(header + hl, hcap - hl, ",\"data_offsets\":[%zu,%zu]}", off, off + 4 * n);
    off += 4 * n;
  }
  hl += (size_t)snprintf(header + hl, hcap - hl, "}");
  while (hl % 8)
    header[hl++] = ' '; /* the data section starts 8-aligned */
  snprintf(final, sizeof final, "%s/model.safetensors", out_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "cannot write %s: %s", tmp,
                  strerror(errno));
    st = MGT_ERR_IO;
    goto done;
  }
  uint64_t hlen = hl;
  unsigned char le[8];
  for (int i = 0; i < 8; i++)
    le[i] = (unsigned char)(hlen >> (8 * i));
  MGT_TRY(write_all(fd, le, 8, tmp));
  MGT_TRY(write_all(fd, header, hl, tmp));
  MGT_TRY(mgt_calloc(max_n * sizeof(float), "export buffer", (void **)&buf));
  for (int i = 0; i < nm; i++) {
    const mgt_param *p = find_param(params, np, map[i].ours);
    int64_t r, c;
    matrix_shape(p, &r, &c);
    const float *src = w + p->offset; /* tp = 1: local = logical, padding rows last */
    if (map[i].transpose)
      for (int64_t a = 0; a < r; a++)
        for (int64_t b = 0; b < c; b++)
          buf[b * r + a] = src[a * c + b];
    else
      memcpy(buf, src, sizeof(float) * (size_t)(r * c));
    MGT_TRY(write_all(fd, buf, sizeof(float) * (size_t)(r * c), tmp));
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    fd = -1;
    mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "cannot write %s: %s", tmp,
                  strerror(errno));
    st = MGT_ERR_IO;
    goto done;
  }
  fd = -1;
  if (rename(tmp, final) != 0) {
    mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "cannot rename %s: %s", tmp,
                  strerror(errno));
    st = MGT_ERR_IO;
    goto done;
  }
  {
    char cpath[MGT_PATH_MAX + 64];
    snprintf(cpath, sizeof cpath, "%s/config.json", out_dir);
    FILE *f = fopen(cpath, "w");
    if (!f) {
      mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "cannot write %s: %s", cpath,
                    strerror(errno));
      st = MGT_ERR_IO;
      goto done;
    }
    int F = cfg.ffn_hidden_size;
    fprintf(f,
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
            "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": %.9g,\n"
            "  \"initializer_range\": %.9g,\n  \"resid_pdrop\": %.9g,\n  \"embd_pdrop\": %.9g,\n"
            "  \"attn_pdrop\": %.9g,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
            "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n"
            "  \"megatron_c\": {\"iteration\": %lld, \"seq_length\": %d}\n}\n",
            cfg.vocab_size, pos, pos, cfg.hidden_size, cfg.num_layers, cfg.num_attention_heads, F,
            cfg.layernorm_epsilon, cfg.init_method_std, cfg.hidden_dropout, cfg.hidden_dropout,
            cfg.attention_dropout, cfg.vocab_size - 1, cfg.vocab_size - 1,
            (long long)state.iteration, seq);
    if (fclose(f) != 0) {
      mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "cannot write %s", cpath);
      st = MGT_ERR_IO;
      goto done;
    }
  }
  if (log) fprintf(log, "exported %s to %s (model.safetensors, config.json)\n", ckpt_path, out_dir);
done:
  if (fd >= 0) {
    close(fd);
    unlink(tmp);
  }
  mgt_free(buf);
  mgt_free(header);
  mgt_free(map);
  solo_destroy(&s);
  return st;
}

/* ---- import ---- */

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  if (e == 31)
    bits = sign | 0x7F800000u | (m << 13);
  else
    bits = sign | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static int json_int(const mgt_json *obj, const char *key, int dflt) {
  const mgt_json *v = mgt_json_get(obj, key);
  return v && v->type == MGT_JSON_NUMBER ? (int)v->number : dflt;
}

mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log) {
  mgt_status st = MGT_OK;
  char path[MGT_PATH_MAX + 64];
  char *ctext = NULL;
  mgt_json_parser *jc = NULL, *jh = NULL;
  const mgt_json *conf = NULL, *hdr = NULL;
  void *map = MAP_FAILED;
  size_t map_len = 0;
  hf_map *names = NULL;
  float *buf = NULL;
  solo s;
  memset(&s, 0, sizeof s);
  /* config.json */
  snprintf(path, sizeof path, "%s/config.json", hf_dir);
  {
    FILE *f = fopen(path, "rb");
    MGT_REQUIRE(f, "--input %s: no config.json (%s)", hf_dir, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    ctext = malloc((size_t)n + 1);
    size_t got = ctext ? fread(ctext, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!ctext || got != (size_t)n) {
      free(ctext);
      MGT_FAIL(MGT_ERR_IO, "cannot read %s", path);
    }
    ctext[n] = 0;
  }
  MGT_TRY(mgt_json_parser_create(&jc));
  MGT_TRY(mgt_json_parse(jc, ctext, strlen(ctext), &conf));
  const mgt_json *act = mgt_json_get(conf, "activation_function");
  if (act && act->type == MGT_JSON_STRING && strcmp(act->str, "gelu_new") != 0 &&
      strcmp(act->str, "gelu_pytorch_tanh") != 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "%s: activation %s is not GPT-2's tanh GeLU", path, act->str);
    st = MGT_ERR_INPUT;
    goto done;
  }
  mgt_config cfg;
  mgt_config_defaults(&cfg);
  cfg.hidden_size = json_int(conf, "n_embd", 0);
  cfg.num_layers = json_int(conf, "n_layer", 0);
  cfg.num_attention_heads = json_int(conf, "n_head", 0);
  cfg.max_position_embeddings = json_int(conf, "n_positions", 1024);
  cfg.vocab_size = json_int(conf, "vocab_size", 0);
  cfg.ffn_hidden_size = json_int(conf, "n_inner", 4 * cfg.hidden_size);
  const mgt_json *eps = mgt_json_get(conf, "layer_norm_epsilon");
  if (eps && eps->type == MGT_JSON_NUMBER) cfg.layernorm_epsilon = eps->number;
  if (cfg.hidden_size <= 0 || cfg.num_layers <= 0 || cfg.num_attention_heads <= 0 ||
      cfg.vocab_size <= 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "%s: n_embd, n_layer, n_head and vocab_size are needed", path);
    st = MGT_ERR_INPUT;
    goto done;
  }
  int seq = cfg.max_position_embeddings;
  MGT_TRY(solo_create(&cfg, &s));
  /* model.safetensors */
  snprintf(path, sizeof path, "%s/model.safetensors", hf_dir);
  {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size < 8) {
      if (fd >= 0) close(fd);
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--input %s: no readable "
                    "model.safetensors",
                    hf_dir);
      st = MGT_ERR_INPUT;
      goto done;
    }
    map_len = (size_t)sb.st_size;
    map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
      mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "%s: mmap failed", path);
      st = MGT_ERR_IO;
      goto done;
    }
  }
  const unsigned char *base = map;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)base[i] << (8 * i);
  if (hlen > map_len - 8) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__, "%s: header longer than the file",
                  path);
    st = MGT_ERR_INPUT;
    goto done;
  }
  MGT_TRY(mgt_json_parser_create(&jh));
  MGT_TRY(mgt_json_parse(jh, (const char *)base + 8, (size_t)hlen, &hdr));
  const unsigned char *data = base + 8 + hlen;
  size_t data_len = map_len - 8 - hlen;
  int np;
  const mgt_param *params = mgt_gpt_params(s.model, &np);
  float *w = mgt_gpt_param_data(s.model);
  MGT_TRY(mgt_calloc(sizeof *names * (size_t)(np + 4), "import map", (void **)&names));
  int nm = build_map(&cfg, names);
  for (int i = 0; i < nm; i++) {
    const mgt_param *p = find_param(params, np, names[i].ours);
    int64_t r, c;
    matrix_shape(p, &r, &c);
    const mgt_json *t = mgt_json_get(hdr, names[i].hf);
    const mgt_json *dt = mgt_json_get(t, "dtype"), *sh = mgt_json_get(t, "shape"),
                   *of = mgt_json_get(t, "data_offsets");
    int64_t want0 = names[i].transpose ? c : (r == 1 ? c : r), want1 = names[i].transpose ? r : c;
    int ok = t && dt && sh && of && dt->type == MGT_JSON_STRING && sh->type == MGT_JSON_ARRAY &&
             of->type == MGT_JSON_ARRAY && of->len == 2;
    int esize = !ok ? 0
                    : (!strcmp(dt->str, "F32")                                 ? 4
                       : (!strcmp(dt->str, "F16") || !strcmp(dt->str, "BF16")) ? 2
                                                                               : 0);
    if (ok)
      ok = esize &&
           ((r == 1 && !names[i].transpose && sh->len == 1 && sh->items[0].number == (double)c) ||
            (sh->len == 2 && sh->items[0].number == (double)want0 &&
             sh->items[1].number == (double)want1));
    size_t b0 = ok ? (size_t)of->items[0].number : 0, b1 = ok ? (size_t)of->items[1].number : 0;
    if (ok) ok = b1 <= data_len && b1 - b0 == (size_t)(r * c) * (size_t)esize;
    if (!ok) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "%s: tensor %s is missing or not a float tensor of shape [%lld, %lld]", path,
                    names[i].hf, (long long)want0, (long long)want1);
      st = MGT_ERR_INPUT;
      goto done;
    }
    float *dst = w + p->offset;
    const unsigned char *src = data + b0;
    for (int64_t e = 0; e < r * c; e++) {
      float v;
      if (esize == 4) {
        memcpy(&v, src + 4 * e, 4);
      } else {
        uint16_t h;
        memcpy(&h, src + 2 * e, 2);
        if (!strcmp(dt->str, "BF16")) {
          uint32_t bits = (uint32_t)h << 16;
          memcpy(&v, &bits, 4);
        } else {
          v = half_to_float(h);
        }
      }
      if (names[i].transpose) {
        int64_t a = e / r, b = e % r; /* HF element (a, b) of (c, r) is ours (b, a) */
        dst[b * c + a] = v;
      } else {
        dst[e] = v;
      }
    }
  }
  /* the imported model trains on data; nothing synthetic is implied */
  cfg.mock_data = 0;
  cfg.seq_length = seq;
  cfg.micro_batch_size = 1;
  mgt_ckpt_state state = {0, 0, 0, cfg.seed, 0.0, 0, 0};
  MGT_TRY(mgt_ckpt_save(save_dir, &cfg, s.grid, s.model, NULL, &state, log));
done:
  if (map != MAP_FAILED) munmap(map, map_len);
  mgt_free(names);
  mgt_free(buf);
  mgt_json_parser_destroy(&jc);
  mgt_json_parser_destroy(&jh);
  free(ctext);
  solo_destroy(&s);
  return st;
}
