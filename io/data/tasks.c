/* Fine-tuning data (include/mgt/tasks.h): the public formats read as Megatron-LM's
   tasks/race/data.py, tasks/glue/{mnli,qqp}.py and tasks/data_utils.py read them, down to
   Python's strip(), split('\t'), universal newlines and clean_text. */
#define _GNU_SOURCE
#include "mgt/tasks.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgt/json.h"
#include "mgt/rng.h"

enum { N_CHOICES = 4, MAX_QA = 128, MAX_SEG = 5 };

/* Token segments of one example in the pool: GLUE a, b; RACE the 4 question+option texts and
   the article. */
typedef struct example {
  int64_t off[MAX_SEG];
  int32_t len[MAX_SEG];
  int32_t label;
} example;

struct mgt_task_set {
  int task;
  char path[MGT_PATH_MAX];
  int32_t cls, sep, pad;
  int32_t *pool;
  size_t pool_n, pool_cap;
  example *ex;
  int64_t n, cap, skipped;
  int header_cols, unlabelled; /* GLUE: a test file's rows carry label 0, not theirs */
};

/* ---- Python's text handling ---- */

/* Bytes of the whitespace character (str.isspace) at s, or 0. */
static size_t space_at(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  unsigned char c = s[0];
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  if (n >= 2 && c == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
  if (n >= 3 && c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3; /* U+1680 */
  if (n >= 3 && c == 0xE2 && s[1] == 0x80 &&
      ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
    return 3;                                                        /* U+2000-200A, 2028/9, 202F */
  if (n >= 3 && c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
  if (n >= 3 && c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

/* Python's str.strip(): [*b, *e) without leading and trailing whitespace. */
static void strip(const char **b, const char **e) {
  size_t k;
  while (*b < *e && (k = space_at((const unsigned char *)*b, (size_t)(*e - *b))) > 0)
    *b += k;
  for (;;) { /* trailing: find the last character and test it */
    const char *p = *e;
    while (p > *b && ((unsigned char)p[-1] & 0xC0) == 0x80)
      p--;
    if (p > *b) p--;
    while (p > *b && ((unsigned char)*p & 0xC0) == 0x80)
      p--;
    if (p >= *e || !(k = space_at((const unsigned char *)p, (size_t)(*e - p))) || p + k != *e)
      break;
    *e = p;
  }
}

/* tasks/data_utils.py clean_text: newlines to spaces, whitespace runs to one space, then three
   passes of " . " to ". ". out holds at least n + 1 bytes; returns its length. */
static size_t clean_text(const char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t k = space_at((const unsigned char *)s + i, n - i);
    if (!k) {
      out[o++] = s[i++];
      continue;
    }
    while (i < n && (k = space_at((const unsigned char *)s + i, n - i)) > 0)
      i += k;
    out[o++] = ' ';
  }
  for (int pass = 0; pass < 3; pass++) { /* str.replace: left to right, not overlapping */
    size_t w = 0;
    for (size_t r = 0; r < o;) {
      if (r + 3 <= o && out[r] == ' ' && out[r + 1] == '.' && out[r + 2] == ' ') {
        out[w++] = '.', out[w++] = ' ';
        r += 3;
      } else {
        out[w++] = out[r++];
      }
    }
    o = w;
  }
  out[o] = 0;
  return o;
}

/* ---- the set ---- */

/* Tokenizes the cleaned text[0..n) into the pool: *off, *len (capped at cap tokens). */
static mgt_status add_text(mgt_task_set *s, mgt_tokenizer *tok, const char *text, size_t n, int cap,
                           int64_t *off, int32_t *len) {
  char *buf = malloc(n + 1);
  if (!buf) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", s->path);
  size_t m = clean_text(text, n, buf);
  mgt_ids ids = {0};
  mgt_status st = mgt_tok_encode(tok, buf, m, &ids);
  free(buf);
  if (st == MGT_OK && cap > 0 && ids.n > (size_t)cap) ids.n = (size_t)cap;
  if (st == MGT_OK && s->pool_n + ids.n > s->pool_cap) {
    size_t cap2 = s->pool_cap ? s->pool_cap : 1 << 16;
    while (cap2 < s->pool_n + ids.n)
      cap2 *= 2;
    int32_t *p = realloc(s->pool, sizeof *p * cap2);
    if (!p) {
      st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory reading %s", s->path);
    } else {
      s->pool = p, s->pool_cap = cap2;
    }
  }
  if (st == MGT_OK) {
    if (ids.n) memcpy(s->pool + s->pool_n, ids.ids, sizeof(int32_t) * ids.n);
    *off = (int64_t)s->pool_n;
    *len = (int32_t)ids.n;
    s->pool_n += ids.n;
  }
  mgt_ids_free(&ids);
  return st;
}

static mgt_status add_example(mgt_task_set *s, const example *e) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 1024;
    example *p = realloc(s->ex, sizeof *p * (size_t)cap);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", s->path);
    s->ex = p, s->cap = cap;
  }
  s->ex[s->n++] = *e;
  return MGT_OK;
}

/* A malformed record: an error naming file and line, or counted when skipping. */
static mgt_status bad(mgt_task_set *s, int skip, const char *file, int64_t line, const char *why) {
  if (skip) {
    s->skipped++;
    return MGT_OK;
  }
  MGT_FAIL(MGT_ERR_INPUT, "%s:%lld: %s (--skip-bad-records counts and skips such records)", file,
           (long long)line, why);
}

/* Calls fn on each line of text[0..n) as Python's universal newlines split it (\n, \r\n, \r). */
typedef mgt_status (*line_fn)(void *ctx, const char *b, const char *e, int64_t line);
static mgt_status each_line(const char *text, size_t n, line_fn fn, void *ctx) {
  int64_t line = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && text[j] != '\n' && text[j] != '\r')
      j++;
    MGT_CHECK(fn(ctx, text + i, text + j, ++line));
    if (j < n && text[j] == '\r' && j + 1 < n && text[j + 1] == '\n') j++;
    i = j + 1;
  }
  return MGT_OK;
}

/* ---- GLUE: MNLI and QQP ---- */

typedef struct glue_ctx {
  mgt_task_set *s;
  mgt_tokenizer *tok;
  const char *file;
  int skip, header_cols, is_test;
} glue_ctx;

enum { MAX_COLS = 32 };

/* Python's line.strip().split('\t'), each field then stripped. */
static int split_tabs(const char *b, const char *e, const char **fb, const char **fe) {
  strip(&b, &e);
  int n = 0;
  for (const char *p = b;; p++) {
    if (p == e || *p == '\t') {
      if (n < MAX_COLS) {
        fb[n] = b, fe[n] = p;
        strip(&fb[n], &fe[n]);
      }
      n++;
      b = p + 1;
      if (p == e) break;
    }
  }
  return n;
}

static int parse_uint(const char *b, const char *e, int64_t *v) {
  if (b == e) return 0;
  int64_t x = 0;
  for (const char *p = b; p < e; p++) {
    if (*p < '0' || *p > '9' || x > (INT64_MAX - 9) / 10) return 0;
    x = 10 * x + (*p - '0');
  }
  *v = x;
  return 1;
}

static mgt_status glue_line(void *vctx, const char *b, const char *e, int64_t line) {
  glue_ctx *c = vctx;
  mgt_task_set *s = c->s;
  const char *fb[MAX_COLS], *fe[MAX_COLS];
  int n = split_tabs(b, e, fb, fe);
  if (c->header_cols == 0) { /* the header says which file this is */
    c->header_cols = n;
    c->is_test = s->task == MGT_TASK_MNLI ? n == 10 : n == 3;
    if (s->task == MGT_TASK_MNLI && n < 10)
      MGT_FAIL(MGT_ERR_INPUT, "%s:1: an MNLI header has 10 or more columns, this one %d", c->file,
               n);
    if (s->task == MGT_TASK_QQP && n != 3 && n != 6)
      MGT_FAIL(MGT_ERR_INPUT, "%s:1: a QQP header has 6 columns (3 for test), this one %d", c->file,
               n);
    return MGT_OK;
  }
  if (b == e) return MGT_OK; /* a blank line, as at the end of a file */
  example ex;
  memset(&ex, 0, sizeof ex);
  int ia, ib;
  int64_t uid = 0;
  if (s->task == MGT_TASK_MNLI) {
    if (n > MAX_COLS) return bad(s, c->skip, c->file, line, "more than 32 columns");
    if (n < 10) return bad(s, c->skip, c->file, line, "too few columns for MNLI (10 or more)");
    if (n != c->header_cols) { /* a test row has 10, a dev row's label is its last column */
      char why[80];
      snprintf(why, sizeof why, "the header has %d columns, this row %d", c->header_cols, n);
      return bad(s, c->skip, c->file, line, why);
    }
    ia = 8, ib = 9;
    if (c->is_test) {
      ex.label = 0; /* Megatron-LM labels test rows 'contradiction' */
    } else {
      static const char *const labels[] = {"contradiction", "entailment", "neutral"};
      size_t l = (size_t)(fe[n - 1] - fb[n - 1]);
      ex.label = -1;
      for (int k = 0; k < 3; k++)
        if (l == strlen(labels[k]) && !memcmp(fb[n - 1], labels[k], l)) ex.label = k;
      if (ex.label < 0)
        return bad(s, c->skip, c->file, line,
                   "the label is not contradiction, entailment or neutral");
    }
    if (!parse_uint(fb[0], fe[0], &uid))
      return bad(s, c->skip, c->file, line, "the first column is not an index");
  } else {
    if (n > MAX_COLS) return bad(s, c->skip, c->file, line, "more than 32 columns");
    if (c->is_test && n != 3) { /* Megatron-LM asserts */
      char why[64];
      snprintf(why, sizeof why, "a QQP test row has 3 columns, this one %d", n);
      return bad(s, c->skip, c->file, line, why);
    }
    if (!c->is_test && n != 6) { /* a training or dev row: Megatron-LM skips it, warning */
      s->skipped++;
      return MGT_OK;
    }
    ia = c->is_test ? 1 : 3, ib = c->is_test ? 2 : 4;
    if (!parse_uint(fb[0], fe[0], &uid))
      return bad(s, c->skip, c->file, line, "the first column is not an id");
    int64_t lab = 0;
    if (!c->is_test && (!parse_uint(fb[5], fe[5], &lab) || lab > 1))
      return bad(s, c->skip, c->file, line, "is_duplicate is not 0 or 1");
    ex.label = (int32_t)lab;
  }
  if (fb[ia] == fe[ia] || fb[ib] == fe[ib]) {
    if (s->task == MGT_TASK_QQP && !c->is_test) { /* skipped with a warning there too */
      s->skipped++;
      return MGT_OK;
    }
    return bad(s, c->skip, c->file, line, "an empty sentence");
  }
  MGT_CHECK(add_text(s, c->tok, fb[ia], (size_t)(fe[ia] - fb[ia]), 0, &ex.off[0], &ex.len[0]));
  MGT_CHECK(add_text(s, c->tok, fb[ib], (size_t)(fe[ib] - fb[ib]), 0, &ex.off[1], &ex.len[1]));
  return add_example(s, &ex);
}

static mgt_status read_glue(mgt_task_set *s, mgt_tokenizer *tok, int skip) {
  char *text = NULL;
  size_t n = 0;
  MGT_CHECK(mgt_read_file("--train-data/--valid-data", s->path, &text, &n));
  glue_ctx c = {s, tok, s->path, skip, 0, 0};
  mgt_status st = each_line(text, n, glue_line, &c);
  free(text);
  MGT_CHECK(st);
  MGT_REQUIRE(c.header_cols > 0, "%s: empty (GLUE files start with a header line)", s->path);
  s->header_cols = c.header_cols, s->unlabelled = c.is_test;
  return MGT_OK;
}

/* ---- RACE ---- */

typedef struct race_ctx {
  mgt_task_set *s;
  mgt_tokenizer *tok;
  mgt_json_parser *jp;
  const char *file;
  int skip;
} race_ctx;

static int str_of(const mgt_json *v) { return v && v->type == MGT_JSON_STRING; }

static mgt_status race_line(void *vctx, const char *b, const char *e, int64_t line) {
  race_ctx *c = vctx;
  mgt_task_set *s = c->s;
  const char *sb = b, *se = e;
  strip(&sb, &se);
  if (sb == se) return MGT_OK;
  const mgt_json *doc = NULL;
  if (mgt_json_parse(c->jp, b, (size_t)(e - b), &doc) != MGT_OK) {
    char why[256];
    snprintf(why, sizeof why, "not JSON: %s", mgt_error_message());
    mgt_error_clear();
    return bad(s, c->skip, c->file, line, why);
  }
  const mgt_json *art = mgt_json_get(doc, "article"), *qs = mgt_json_get(doc, "questions"),
                 *opts = mgt_json_get(doc, "options"), *ans = mgt_json_get(doc, "answers");
  if (doc->type != MGT_JSON_OBJECT || !str_of(art) || !qs || qs->type != MGT_JSON_ARRAY || !opts ||
      opts->type != MGT_JSON_ARRAY || !ans || ans->type != MGT_JSON_ARRAY)
    return bad(s, c->skip, c->file, line,
               "a passage needs article (a string) and questions, options, answers (lists)");
  if (qs->len != opts->len || qs->len != ans->len)
    return bad(s, c->skip, c->file, line, "questions, options and answers differ in length");
  for (size_t q = 0; q < qs->len; q++) {
    const mgt_json *o = &opts->items[q], *a = &ans->items[q];
    int ok = str_of(&qs->items[q]) && o->type == MGT_JSON_ARRAY && o->len == N_CHOICES &&
             str_of(a) && a->len == 1 && a->str[0] >= 'A' && a->str[0] < 'A' + N_CHOICES;
    for (size_t k = 0; ok && k < N_CHOICES; k++)
      ok = str_of(&o->items[k]);
    if (!ok)
      return bad(s, c->skip, c->file, line,
                 "a question needs a string, 4 string options and an answer A-D");
  }
  example ex;
  memset(&ex, 0, sizeof ex);
  MGT_CHECK(add_text(s, c->tok, art->str, art->len, 0, &ex.off[4], &ex.len[4]));
  for (size_t q = 0; q < qs->len; q++) {
    const mgt_json *qu = &qs->items[q];
    ex.label = ans->items[q].str[0] - 'A';
    for (int k = 0; k < N_CHOICES; k++) {
      const mgt_json *op = &opts->items[q].items[k];
      /* "_" in the question is a blank the option fills; else "question option" */
      size_t blanks = 0;
      for (size_t i = 0; i < qu->len; i++)
        blanks += qu->str[i] == '_';
      size_t cap = blanks ? qu->len + blanks * op->len : qu->len + 1 + op->len;
      char *qa = malloc(cap + 1);
      if (!qa) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", c->file);
      size_t m = 0;
      if (blanks) {
        for (size_t i = 0; i < qu->len; i++)
          if (qu->str[i] == '_')
            memcpy(qa + m, op->str, op->len), m += op->len;
          else
            qa[m++] = qu->str[i];
      } else {
        memcpy(qa, qu->str, qu->len), m = qu->len;
        qa[m++] = ' ';
        memcpy(qa + m, op->str, op->len), m += op->len;
      }
      mgt_status st = add_text(s, c->tok, qa, m, MAX_QA, &ex.off[k], &ex.len[k]);
      free(qa);
      MGT_CHECK(st);
    }
    MGT_CHECK(add_example(s, &ex));
  }
  return MGT_OK;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static mgt_status read_race(mgt_task_set *s, mgt_tokenizer *tok, int skip) {
  DIR *d = opendir(s->path);
  MGT_REQUIRE(d, "%s: cannot open the RACE directory: %s", s->path, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  mgt_status st = MGT_OK;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    size_t l = strlen(de->d_name);
    /* as Python's glob("*.txt"): hidden files (a copy's "._x.txt") are not matched */
    if (l < 4 || de->d_name[0] == '.' || strcmp(de->d_name + l - 4, ".txt") != 0) continue;
    if (n == cap) {
      char **p = realloc(names, sizeof *p * (cap = cap ? 2 * cap : 256));
      if (!p) {
        st = MGT_ERR_NOMEM;
        break;
      }
      names = p;
    }
    if (!(names[n] = strdup(de->d_name))) {
      st = MGT_ERR_NOMEM;
      break;
    }
    n++;
  }
  closedir(d);
  mgt_json_parser *jp = NULL;
  if (st == MGT_OK) st = mgt_json_parser_create(&jp);
  if (st == MGT_OK && n > 0)
    qsort(names, n, sizeof *names, by_name); /* glob's order is the disk's */
  for (size_t i = 0; i < n && st == MGT_OK; i++) {
    char file[MGT_PATH_MAX + 256], *text = NULL;
    size_t len = 0;
    snprintf(file, sizeof file, "%s/%s", s->path, names[i]);
    st = mgt_read_file("--train-data/--valid-data", file, &text, &len);
    race_ctx c = {s, tok, jp, file, skip};
    if (st == MGT_OK) st = each_line(text, len, race_line, &c);
    free(text);
  }
  mgt_json_parser_destroy(&jp);
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  if (st == MGT_ERR_NOMEM && !mgt_error_message()[0])
    MGT_FAIL(st, "out of memory listing %s", s->path);
  MGT_CHECK(st);
  MGT_REQUIRE(n > 0, "%s: no *.txt passage files in the RACE directory", s->path);
  return MGT_OK;
}

mgt_status mgt_task_set_read(int task, const char *path, mgt_tokenizer *tok, int skip_bad,
                             FILE *log, mgt_task_set **out) {
  *out = NULL;
  MGT_REQUIRE(task > MGT_TASK_NONE && task <= MGT_TASK_QQP, "no fine-tuning task given");
  MGT_REQUIRE(mgt_tok_type(tok) >= MGT_TOKENIZER_BERT_LOWER,
              "fine-tuning needs a WordPiece tokenizer (--tokenizer-type BertWordPieceLowerCase "
              "or BertWordPieceCase)");
  mgt_task_set *s = NULL;
  MGT_CHECK(mgt_calloc(sizeof *s, "task data", (void **)&s));
  s->task = task;
  snprintf(s->path, sizeof s->path, "%s", path);
  s->cls = mgt_tok_special(tok, "[CLS]");
  s->sep = mgt_tok_special(tok, "[SEP]");
  s->pad = mgt_tok_special(tok, "[PAD]");
  mgt_status st = MGT_OK;
  if (s->cls < 0 || s->sep < 0 || s->pad < 0) {
    st = MGT_ERROR(MGT_ERR_INPUT, "--vocab-file: no [CLS], [SEP] or [PAD] in the vocabulary");
  }
  if (st == MGT_OK)
    st = task == MGT_TASK_RACE ? read_race(s, tok, skip_bad) : read_glue(s, tok, skip_bad);
  if (st == MGT_OK && s->n == 0) {
    st = MGT_ERROR(MGT_ERR_INPUT, "%s: no %s examples", path, mgt_task_names[task]);
  }
  if (st != MGT_OK) {
    mgt_task_set_destroy(&s);
    return st;
  }
  if (log)
    fprintf(log, "%s %s: %lld examples%s%lld records skipped\n", mgt_task_names[task], path,
            (long long)s->n, ", ", (long long)s->skipped);
  *out = s;
  return MGT_OK;
}

void mgt_task_set_destroy(mgt_task_set **ps) {
  mgt_task_set *s = *ps;
  if (!s) return;
  free(s->pool);
  free(s->ex);
  mgt_free(s);
  *ps = NULL;
}

int64_t mgt_task_set_size(const mgt_task_set *s) { return s->n; }
int64_t mgt_task_set_skipped(const mgt_task_set *s) { return s->skipped; }
const char *mgt_task_set_path(const mgt_task_set *s) { return s->path; }
int mgt_task_set_label(const mgt_task_set *s, int64_t i) { return s->ex[i].label; }

/* tasks/data_utils.py build_tokens_types_paddings_from_ids, into one packed row. */
static void encode_pair(const mgt_task_set *s, const int32_t *a, int la, const int32_t *b, int lb,
                        int has_b, int label, int T, int32_t *row) {
  int32_t *ids = row + MGT_BERT_TOKENS * T, *types = row + MGT_BERT_TYPES * T,
          *labels = row + MGT_BERT_LABELS * T;
  int n = 0;
  const int cap = T - 1; /* a row of T ids or more is cut to T - 1 and closed with [SEP] */
  int trimmed = 0;
#define PUT(id, ty)                                                                                \
  do {                                                                                             \
    if (n < cap) {                                                                                 \
      ids[n] = (id), types[n] = (ty), n++;                                                         \
    } else {                                                                                       \
      trimmed = 1;                                                                                 \
    }                                                                                              \
  } while (0)
  PUT(s->cls, 0);
  for (int k = 0; k < la; k++)
    PUT(a[k], 0);
  PUT(s->sep, 0);
  for (int k = 0; has_b && k < lb; k++)
    PUT(b[k], 1);
#undef PUT
  if (has_b || trimmed) {
    ids[n] = s->sep;
    types[n] = has_b ? 1 : 0;
    n++;
  }
  for (int t = n; t < T; t++) /* Megatron-LM pads the types with [PAD]'s id, 0 in BERT's vocab */
    ids[t] = s->pad, types[t] = 0;
  for (int t = 0; t < T; t++)
    labels[t] = -1;
  row[mgt_bert_length_at(T)] = n;
  row[mgt_bert_random_at(T)] = label;
}

void mgt_task_set_encode(const mgt_task_set *s, int64_t i, int T, int32_t *rows) {
  const example *e = &s->ex[i];
  const int W = mgt_bert_row_ints(T);
  if (s->task == MGT_TASK_RACE) {
    for (int k = 0; k < N_CHOICES; k++)
      encode_pair(s, s->pool + e->off[k], e->len[k], s->pool + e->off[4], e->len[4], 1, e->label, T,
                  rows + (size_t)k * W);
    return;
  }
  encode_pair(s, s->pool + e->off[0], e->len[0], s->pool + e->off[1], e->len[1], 1, e->label, T,
              rows);
}

/* ---- the training source ---- */

typedef struct task_source {
  mgt_task_set *const *sets;
  int n_sets, task;
  int64_t total, per_epoch;
  uint64_t seed;
  int64_t epoch; /* of perm, -1 before the first */
  int64_t *perm; /* total */
} task_source;

/* Example k of the concatenated sets. */
static void locate(const task_source *ts, int64_t k, const mgt_task_set **s, int64_t *i) {
  int d = 0;
  while (k >= ts->sets[d]->n)
    k -= ts->sets[d++]->n;
  *s = ts->sets[d];
  *i = k;
}

static void make_perm(task_source *ts, int64_t epoch) {
  for (int64_t k = 0; k < ts->total; k++)
    ts->perm[k] = k;
  const uint64_t stream = mgt_rng_data_stream(0x400u);
  for (int64_t k = ts->total - 1; k > 0; k--) { /* Fisher-Yates keyed by (seed, epoch, k) */
    uint32_t w[4];
    mgt_rng_block(ts->seed, stream, (uint64_t)epoch << 40 | (uint64_t)k, w);
    int64_t j = (int64_t)((((uint64_t)w[0] << 32) | w[1]) % (uint64_t)(k + 1));
    int64_t t = ts->perm[k];
    ts->perm[k] = ts->perm[j];
    ts->perm[j] = t;
  }
  ts->epoch = epoch;
}

static mgt_status task_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  task_source *ts = ctx;
  const size_t stride = (size_t)mgt_task_rows(ts->task) * mgt_bert_row_ints(T);
  for (int r = 0; r < n; r++) {
    const uint64_t g = first + (uint64_t)r;
    const int64_t epoch = (int64_t)(g / (uint64_t)ts->per_epoch);
    if (epoch != ts->epoch) make_perm(ts, epoch);
    const mgt_task_set *s;
    int64_t i;
    locate(ts, ts->perm[g % (uint64_t)ts->per_epoch], &s, &i);
    mgt_task_set_encode(s, i, T, out + (size_t)r * stride);
  }
  return MGT_OK;
}

static void task_destroy(void *ctx) {
  task_source *ts = ctx;
  if (!ts) return;
  mgt_free(ts->perm);
  mgt_free(ts);
}

mgt_status mgt_task_train_source(mgt_task_set *const *sets, int n, int task, uint64_t seed,
                                 int64_t per_epoch, mgt_data *out) {
  task_source *ts = NULL;
  MGT_CHECK(mgt_calloc(sizeof *ts, "task source", (void **)&ts));
  ts->sets = sets, ts->n_sets = n, ts->task = task, ts->seed = seed, ts->epoch = -1;
  for (int d = 0; d < n; d++)
    ts->total += sets[d]->n;
  ts->per_epoch = per_epoch;
  mgt_status st = MGT_OK;
  if (per_epoch < 1 || per_epoch > ts->total) {
    st = MGT_ERROR(MGT_ERR_INPUT, "%lld examples per epoch of %lld is not possible",
                   (long long)per_epoch, (long long)ts->total);
  }
  if (st == MGT_OK)
    st = mgt_calloc(sizeof(int64_t) * (size_t)ts->total, "epoch order", (void **)&ts->perm);
  if (st != MGT_OK) {
    task_destroy(ts);
    return st;
  }
  out->ctx = ts;
  out->get = task_get;
  out->destroy = task_destroy;
  return MGT_OK;
}

/* ---- a run's data ---- */

/* The paths of a list flag, one per line. */
static mgt_status read_sets(const mgt_config *cfg, const char *list, mgt_tokenizer *tok, FILE *log,
                            mgt_task_set ***sets, int *n) {
  *sets = NULL;
  *n = 0;
  int cap = 0;
  for (const char *p = list; *p;) {
    const char *e = strchr(p, '\n');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    char path[MGT_PATH_MAX];
    MGT_REQUIRE(l < sizeof path, "a data path of %zu bytes is too long", l);
    memcpy(path, p, l);
    path[l] = 0;
    p += l + (e != NULL);
    if (!l) continue;
    if (*n == cap) {
      mgt_task_set **q = realloc(*sets, sizeof *q * (size_t)(cap = cap ? 2 * cap : 8));
      if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the data sets");
      *sets = q;
    }
    MGT_CHECK(mgt_task_set_read(cfg->task, path, tok, cfg->skip_bad_records, log, &(*sets)[*n]));
    (*n)++;
    const mgt_task_set *s = (*sets)[*n - 1];
    MGT_REQUIRE(!s->unlabelled,
                "%s is a GLUE test file (its header has %d columns): it has no labels to train on "
                "or score against",
                path, s->header_cols);
  }
  return MGT_OK;
}

mgt_status mgt_task_data_open(const mgt_config *cfg, FILE *log, mgt_task_data *out) {
  memset(out, 0, sizeof *out);
  out->task = cfg->task;
  mgt_tokenizer *tok = NULL;
  mgt_status st = mgt_tok_open(cfg->tokenizer_type, cfg->vocab_file, cfg->merge_file, &tok);
  if (st == MGT_OK) st = read_sets(cfg, cfg->train_data, tok, log, &out->train, &out->n_train);
  if (st == MGT_OK) st = read_sets(cfg, cfg->valid_data, tok, log, &out->valid, &out->n_valid);
  mgt_tok_destroy(&tok);
  for (int i = 0; i < out->n_train; i++)
    out->train_examples += out->train[i]->n;
  if (st != MGT_OK) mgt_task_data_close(out);
  return st;
}

void mgt_task_data_close(mgt_task_data *d) {
  for (int i = 0; i < d->n_train; i++)
    mgt_task_set_destroy(&d->train[i]);
  for (int i = 0; i < d->n_valid; i++)
    mgt_task_set_destroy(&d->valid[i]);
  free(d->train);
  free(d->valid);
  memset(d, 0, sizeof *d);
}
