#include "mgt/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_INT, F_INT64, F_UINT64, F_DOUBLE, F_STR, F_BOOL, F_LRSTYLE } flag_kind;

typedef struct flag {
  const char *name;
  flag_kind kind;
  size_t offset;
  double min, max; /* inclusive range for numbers */
  const char *help;
} flag;

#define OFF(f) offsetof(mgt_config, f)
#define BIG 9.0e15

/* Every flag `mgt train` accepts. Names are Megatron-LM's. */
static const flag flags[] = {
    {"--num-layers", F_INT, OFF(num_layers), 1, 65535, "transformer layers"},
    {"--hidden-size", F_INT, OFF(hidden_size), 1, 1 << 20, "hidden size"},
    {"--num-attention-heads", F_INT, OFF(num_attention_heads), 1, 1 << 16, "attention heads"},
    {"--ffn-hidden-size", F_INT, OFF(ffn_hidden_size), 1, 1 << 22,
     "MLP inner size (default 4 * hidden size)"},
    {"--seq-length", F_INT, OFF(seq_length), 1, 1 << 20, "tokens per sample"},
    {"--max-position-embeddings", F_INT, OFF(max_position_embeddings), 1, 1 << 20,
     "rows of the position embedding (default: seq length)"},
    {"--vocab-size", F_INT, OFF(vocab_size), 1, 1 << 30, "vocabulary size (before padding)"},
    {"--make-vocab-size-divisible-by", F_INT, OFF(make_vocab_size_divisible_by), 1, 1 << 20,
     "pad the vocabulary to a multiple of this times the tensor-parallel size"},
    {"--init-method-std", F_DOUBLE, OFF(init_method_std), 0, 10, "std of weight init"},
    {"--hidden-dropout", F_DOUBLE, OFF(hidden_dropout), 0, 0.99, "dropout on hidden states"},
    {"--attention-dropout", F_DOUBLE, OFF(attention_dropout), 0, 0.99,
     "dropout on attention probabilities"},
    {"--layernorm-epsilon", F_DOUBLE, OFF(layernorm_epsilon), 1e-12, 1, "LayerNorm epsilon"},
    {"--tensor-model-parallel-size", F_INT, OFF(tensor_model_parallel_size), 1, 1 << 16,
     "ranks that split each layer"},
    {"--recompute-activations", F_BOOL, OFF(recompute_activations), 0, 1,
     "keep only layer inputs; recompute each layer in backward"},
    {"--ddp-bucket-size", F_INT64, OFF(ddp_bucket_size), 1024, 2147483647.0,
     "gradient elements per data-parallel all-reduce"},
    {"--overlap-grad-reduce", F_BOOL, OFF(overlap_grad_reduce), 0, 1,
     "start non-blocking gradient all-reduces while backward runs"},
    {"--dry-run", F_BOOL, OFF(dry_run), 0, 1, "print the memory plan per rank and exit"},
    {"--micro-batch-size", F_INT, OFF(micro_batch_size), 1, 1 << 20, "samples per micro-batch"},
    {"--global-batch-size", F_INT, OFF(global_batch_size), 1, 1 << 30,
     "samples per iteration (default: micro batch * data-parallel size)"},
    {"--train-iters", F_INT64, OFF(train_iters), 0, BIG, "iterations to train"},
    {"--lr", F_DOUBLE, OFF(lr), 0, 10, "peak learning rate"},
    {"--min-lr", F_DOUBLE, OFF(min_lr), 0, 10, "learning rate at the end of decay"},
    {"--lr-decay-style", F_LRSTYLE, OFF(lr_decay_style), 0, 0, "constant, linear or cosine"},
    {"--lr-warmup-iters", F_INT64, OFF(lr_warmup_iters), 0, BIG, "linear warmup iterations"},
    {"--lr-decay-iters", F_INT64, OFF(lr_decay_iters), 1, BIG,
     "iterations of decay (default: train iters)"},
    {"--weight-decay", F_DOUBLE, OFF(weight_decay), 0, 10,
     "decoupled weight decay (not on biases or LayerNorm)"},
    {"--adam-beta1", F_DOUBLE, OFF(adam_beta1), 0, 0.999999, "Adam beta1"},
    {"--adam-beta2", F_DOUBLE, OFF(adam_beta2), 0, 0.999999999, "Adam beta2"},
    {"--adam-eps", F_DOUBLE, OFF(adam_eps), 1e-30, 1, "Adam epsilon"},
    {"--clip-grad", F_DOUBLE, OFF(clip_grad), 0, 1e9, "clip the global gradient norm (0: off)"},
    {"--seed", F_UINT64, OFF(seed), 0, BIG, "seed of initialization, dropout and data"},
    {"--mock-data", F_BOOL, OFF(mock_data), 0, 1,
     "synthetic sequences (start + stride * j) mod vocab"},
    {"--log-interval", F_INT, OFF(log_interval), 1, 1 << 30, "iterations between log lines"},
    {"--metrics-file", F_STR, OFF(metrics_file), 0, 0,
     "append one JSON object per logged iteration"},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

static const char *lr_style_names[] = {"constant", "linear", "cosine"};

void mgt_config_defaults(mgt_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->num_layers = 2;
  cfg->hidden_size = 64;
  cfg->num_attention_heads = 4;
  cfg->seq_length = 32;
  cfg->vocab_size = 128;
  cfg->make_vocab_size_divisible_by = 128;
  cfg->init_method_std = 0.02;
  cfg->hidden_dropout = 0.1;
  cfg->attention_dropout = 0.1;
  cfg->layernorm_epsilon = 1e-5;
  cfg->tensor_model_parallel_size = 1;
  cfg->ddp_bucket_size = 4194304; /* larger messages were 20x slower through Open MPI here */
  cfg->micro_batch_size = 16;
  cfg->train_iters = 100;
  cfg->lr = 3e-3;
  cfg->min_lr = 0.0;
  cfg->lr_decay_style = MGT_LR_LINEAR;
  cfg->weight_decay = 0.01;
  cfg->adam_beta1 = 0.9;
  cfg->adam_beta2 = 0.999;
  cfg->adam_eps = 1e-8;
  cfg->clip_grad = 1.0;
  cfg->seed = 1234;
  cfg->log_interval = 100;
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  size_t d[64][64];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

static const flag *find_flag(const char *name, size_t len) {
  for (int i = 0; i < N_FLAGS; i++)
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

static mgt_status unknown_flag(const char *arg, size_t len) {
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), arg);
  const char *best = NULL;
  size_t bd = 4;
  for (int i = 0; i < N_FLAGS; i++) {
    size_t d = edit_distance(name, flags[i].name);
    if (d < bd) bd = d, best = flags[i].name;
  }
  if (best) MGT_FAIL(MGT_ERR_INPUT, "unknown flag '%s' (did you mean %s?)", name, best);
  MGT_FAIL(MGT_ERR_INPUT, "unknown flag '%s' (see mgt train --help)", name);
}

static mgt_status set_value(mgt_config *cfg, const flag *f, const char *v) {
  char *p = (char *)cfg + f->offset;
  char *end = NULL;
  errno = 0;
  switch (f->kind) {
  case F_INT:
  case F_INT64:
  case F_UINT64: {
    long long x = strtoll(v, &end, 10);
    MGT_REQUIRE(v[0] != '\0' && *end == '\0' && errno == 0, "%s: expected an integer, got '%s'",
                f->name, v);
    MGT_REQUIRE((double)x >= f->min && (double)x <= f->max, "%s: %lld is out of range [%.0f, %.0f]",
                f->name, x, f->min, f->max);
    if (f->kind == F_INT)
      *(int *)p = (int)x;
    else if (f->kind == F_INT64)
      *(int64_t *)p = (int64_t)x;
    else
      *(uint64_t *)p = (uint64_t)x;
    break;
  }
  case F_DOUBLE: {
    double x = strtod(v, &end);
    MGT_REQUIRE(v[0] != '\0' && *end == '\0' && errno == 0 && isfinite(x),
                "%s: expected a number, got '%s'", f->name, v);
    MGT_REQUIRE(x >= f->min && x <= f->max, "%s: %g is out of range [%g, %g]", f->name, x, f->min,
                f->max);
    *(double *)p = x;
    break;
  }
  case F_STR:
    MGT_REQUIRE(strlen(v) < MGT_PATH_MAX, "%s: value longer than %d characters", f->name,
                MGT_PATH_MAX - 1);
    MGT_REQUIRE(v[0] != '\0', "%s: empty value", f->name);
    strcpy(p, v);
    break;
  case F_LRSTYLE: {
    int found = -1;
    for (int i = 0; i < 3; i++)
      if (strcmp(v, lr_style_names[i]) == 0) found = i;
    MGT_REQUIRE(found >= 0, "%s: expected constant, linear or cosine, got '%s'", f->name, v);
    *(mgt_lr_style *)p = (mgt_lr_style)found;
    break;
  }
  case F_BOOL: *(int *)p = 1; break;
  }
  return MGT_OK;
}

mgt_status mgt_config_parse(mgt_config *cfg, int argc, char **argv, int first, int *help) {
  *help = 0;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      *help = 1;
      continue;
    }
    MGT_REQUIRE(strncmp(a, "--", 2) == 0, "unexpected argument '%s' (flags start with --)", a);
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const flag *f = find_flag(a, len);
    if (!f) MGT_CHECK(unknown_flag(a, len));
    if (f->kind == F_BOOL) {
      MGT_REQUIRE(!eq, "%s takes no value", f->name);
      MGT_CHECK(set_value(cfg, f, ""));
      continue;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      MGT_REQUIRE(i + 1 < argc, "%s: missing value", f->name);
      v = argv[++i];
    }
    MGT_CHECK(set_value(cfg, f, v));
  }
  return MGT_OK;
}

mgt_status mgt_config_finalize(mgt_config *c, int world_size) {
  if (c->ffn_hidden_size == 0) c->ffn_hidden_size = 4 * c->hidden_size;
  if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
  if (c->lr_decay_iters == 0) c->lr_decay_iters = c->train_iters > 0 ? c->train_iters : 1;
  int tp = c->tensor_model_parallel_size;
  MGT_REQUIRE(world_size % tp == 0,
              "--tensor-model-parallel-size %d does not divide the number of ranks %d", tp,
              world_size);
  int dp = world_size / tp;
  if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * dp;
  MGT_REQUIRE(c->hidden_size % c->num_attention_heads == 0,
              "--hidden-size %d is not divisible by --num-attention-heads %d", c->hidden_size,
              c->num_attention_heads);
  MGT_REQUIRE(c->num_attention_heads % tp == 0,
              "--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d",
              c->num_attention_heads, tp);
  MGT_REQUIRE(c->ffn_hidden_size % tp == 0,
              "--ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d",
              c->ffn_hidden_size, tp);
  MGT_REQUIRE(c->global_batch_size % (c->micro_batch_size * dp) == 0,
              "--global-batch-size %d is not divisible by --micro-batch-size %d times the "
              "data-parallel size %d",
              c->global_batch_size, c->micro_batch_size, dp);
  MGT_REQUIRE(c->seq_length <= c->max_position_embeddings,
              "--seq-length %d exceeds --max-position-embeddings %d", c->seq_length,
              c->max_position_embeddings);
  MGT_REQUIRE(c->min_lr <= c->lr, "--min-lr %g exceeds --lr %g", c->min_lr, c->lr);
  MGT_REQUIRE(c->lr_decay_style == MGT_LR_CONSTANT || c->lr_warmup_iters <= c->lr_decay_iters,
              "--lr-warmup-iters %lld exceeds --lr-decay-iters %lld", (long long)c->lr_warmup_iters,
              (long long)c->lr_decay_iters);
  MGT_REQUIRE(c->mock_data, "no training data: pass --mock-data");
  /* Activations are indexed with int: keep every per-rank tensor below 2^31 elements. */
  int64_t vp = ((int64_t)c->vocab_size + (int64_t)c->make_vocab_size_divisible_by * tp - 1) /
               ((int64_t)c->make_vocab_size_divisible_by * tp) *
               ((int64_t)c->make_vocab_size_divisible_by * tp);
  int64_t tokens = (int64_t)c->micro_batch_size * c->seq_length;
  MGT_REQUIRE(tokens * (vp / tp) < (1ll << 31) && tokens * c->ffn_hidden_size / tp < (1ll << 31) &&
                  (int64_t)c->micro_batch_size * c->num_attention_heads / tp * c->seq_length *
                          c->seq_length <
                      (1ll << 31),
              "--micro-batch-size %d with --seq-length %d makes an activation of 2^31 "
              "elements or more per rank; lower the micro-batch size",
              c->micro_batch_size, c->seq_length);
  return MGT_OK;
}

static void value_string(const mgt_config *cfg, const flag *f, char *buf, size_t n) {
  const char *p = (const char *)cfg + f->offset;
  switch (f->kind) {
  case F_INT: snprintf(buf, n, "%d", *(const int *)p); break;
  case F_INT64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
  case F_UINT64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case F_DOUBLE: snprintf(buf, n, "%.9g", *(const double *)p); break;
  case F_STR: snprintf(buf, n, "%s", p); break;
  case F_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
  case F_LRSTYLE: snprintf(buf, n, "%s", lr_style_names[*(const mgt_lr_style *)p]); break;
  }
}

void mgt_config_usage(FILE *f) {
  mgt_config d;
  mgt_config_defaults(&d);
  fprintf(f, "usage: mgt train [flags]\n\nflags (Megatron-LM names):\n");
  for (int i = 0; i < N_FLAGS; i++) {
    char v[64];
    value_string(&d, &flags[i], v, sizeof v);
    const char *arg = flags[i].kind == F_BOOL ? "" : " V";
    fprintf(f, "  %s%-*s %s", flags[i].name, (int)(36 - strlen(flags[i].name)), arg, flags[i].help);
    if (flags[i].kind != F_BOOL && v[0] && strcmp(v, "0") != 0) fprintf(f, " [%s]", v);
    fprintf(f, "\n");
  }
}

void mgt_config_print(const mgt_config *cfg, FILE *f) {
  fprintf(f, "------------------------ arguments ------------------------\n");
  for (int i = 0; i < N_FLAGS; i++) {
    char v[MGT_PATH_MAX + 32];
    value_string(cfg, &flags[i], v, sizeof v);
    fprintf(f, "  %-32s %s\n", flags[i].name + 2, v);
  }
  fprintf(f, "-------------------- end of arguments ---------------------\n");
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

void mgt_config_json(const mgt_config *cfg, FILE *f) {
  fputc('{', f);
  for (int i = 0; i < N_FLAGS; i++) {
    char key[64], v[MGT_PATH_MAX + 32];
    snprintf(key, sizeof key, "%s", flags[i].name + 2);
    for (char *k = key; *k; k++)
      if (*k == '-') *k = '_';
    value_string(cfg, &flags[i], v, sizeof v);
    fprintf(f, "%s\"%s\":", i ? "," : "", key);
    if (flags[i].kind == F_STR || flags[i].kind == F_LRSTYLE)
      json_string(f, v);
    else
      fputs(v, f);
  }
  fputc('}', f);
}

double mgt_lr_at(const mgt_config *c, int64_t iter) {
  if (c->lr_warmup_iters > 0 && iter <= c->lr_warmup_iters)
    return c->lr * (double)iter / (double)c->lr_warmup_iters;
  if (c->lr_decay_style == MGT_LR_CONSTANT) return c->lr;
  if (iter > c->lr_decay_iters) return c->min_lr;
  double span = (double)(c->lr_decay_iters - c->lr_warmup_iters);
  double ratio = span > 0 ? (double)(iter - c->lr_warmup_iters) / span : 1.0;
  double coeff = c->lr_decay_style == MGT_LR_LINEAR
                     ? 1.0 - ratio
                     : 0.5 * (cos(3.14159265358979323846 * ratio) + 1.0);
  return c->min_lr + coeff * (c->lr - c->min_lr);
}
