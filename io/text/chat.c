/* The chat formats of include/mgt/chat.h. Each renders what its Jinja template renders under
   transformers' settings (jinja2, trim_blocks and lstrip_blocks): Python's string methods are
   written out (str.strip() strips what str.isspace() calls white space), and the templates'
   exceptions are errors here. */
#include "mgt/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/json.h"
#include "mgt/sha256.h"

const char *const mgt_chat_names[MGT_CHAT_N] = {"llama3", "chatml", "llama2", "mistral"};
static const char *const role_names[] = {"system", "user", "assistant"};

/* SHA-256 of each format's template text as its tokenizer_config.json holds it. */
static const char *const known[MGT_CHAT_N] = {
    "b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2", /* Meta-Llama-3-8B-Instruct
                                                                         */
    "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", /* Qwen 3 */
    "e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf", /* Llama-2-7b-chat-hf */
    "26a59556925c987317ce5291811ba3b7f32ec4c647c400c6cc7e3a9993007ba7", /* Mistral-7B-Instruct */
};

void mgt_chat_text_free(mgt_chat_text *t) {
  free(t->s);
  free(t->train);
  memset(t, 0, sizeof *t);
}

mgt_status mgt_chat_format_named(const char *name, int *format) {
  for (int f = 0; f < MGT_CHAT_N; f++)
    if (strcmp(name, mgt_chat_names[f]) == 0) return *format = f, MGT_OK;
  if (strcmp(name, "qwen3") == 0) return *format = MGT_CHAT_CHATML, MGT_OK;
  MGT_FAIL(MGT_ERR_INPUT,
           "--chat-template %s: not a chat format here (llama3, chatml or qwen3, "
           "llama2, mistral)",
           name);
}

mgt_status mgt_chat_format_of(const char *path, int *format) {
  char *buf = NULL;
  size_t len = 0;
  mgt_status st = mgt_read_file("--chat-template auto", path, &buf, &len);
  if (st != MGT_OK) {
    char why[600];
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_FAIL(st,
             "%s (so the chat format is unknown: name it with --chat-template: llama3, "
             "chatml, llama2, mistral)",
             why);
  }
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL, *t = NULL;
  if (st == MGT_OK) st = mgt_json_parser_create(&jp);
  if (st == MGT_OK) st = mgt_json_parse(jp, buf, len, &root);
  if (st == MGT_OK) {
    t = mgt_json_get(root, "chat_template");
    if (!t || t->type != MGT_JSON_STRING)
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "%s: no chat_template (a string) to recognize: name the format with "
                     "--chat-template (llama3, chatml, llama2, mistral)",
                     path);
  }
  if (st == MGT_OK) {
    char hex[65];
    unsigned char digest[32];
    mgt_sha256 h;
    mgt_sha256_init(&h);
    mgt_sha256_update(&h, t->str, t->len);
    mgt_sha256_final(&h, digest);
    mgt_sha256_hex(digest, hex);
    *format = -1;
    for (int k = 0; k < MGT_CHAT_N; k++)
      if (strcmp(hex, known[k]) == 0) *format = k;
    if (*format < 0)
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "%s: its chat_template (%zu characters, sha256 %.12s...) is none of the "
                     "formats here (llama3, chatml, llama2, mistral): name the one it writes with "
                     "--chat-template, or convert the data to {\"segments\": ...}",
                     path, t->len, hex);
  }
  mgt_json_parser_destroy(&jp);
  free(buf);
  return st;
}

mgt_status mgt_chat_format_resolve(const char *name, const mgt_tokenizer *tok, int *format) {
  if (strcmp(name, "auto") != 0) return mgt_chat_format_named(name, format);
  char path[MGT_PATH_MAX + 32];
  MGT_REQUIRE(mgt_tok_config_file(tok, path, sizeof path),
              "%s has no tokenizer_config.json to name its chat format: give one with "
              "--chat-template (llama3, chatml, llama2, mistral)",
              mgt_tok_name(tok));
  return mgt_chat_format_of(path, format);
}

/* ---- Python's string methods ---- */

static int py_space(uint32_t c) { /* str.isspace() */
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

/* The code point of the UTF-8 character at s[0..n) and its length (an invalid byte: itself, 1). */
static uint32_t utf8_at(const unsigned char *s, size_t n, size_t *len) {
  const unsigned c = s[0];
  size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (l == 0 || l > n) return *len = 1, 0xFFFFFFFF;
  uint32_t cp = l == 1 ? c : l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < l; k++) {
    if ((s[k] & 0xC0) != 0x80) return *len = 1, 0xFFFFFFFF;
    cp = cp << 6 | (s[k] & 0x3F);
  }
  *len = l;
  return cp;
}

enum { LEFT = 1, RIGHT = 2, BOTH = 3 };
typedef struct str {
  const char *s;
  size_t n;
} str;

/* str.strip() (newline 0) or str.strip('\n') (newline 1), on the sides `side`. */
static str strip(str x, int side, int newline) {
  const unsigned char *s = (const unsigned char *)x.s;
  size_t a = 0, b = x.n;
  while ((side & LEFT) && a < b) {
    size_t l;
    const uint32_t c = newline ? s[a] : utf8_at(s + a, b - a, &l);
    if (newline ? c != '\n' : !py_space(c)) break;
    a += newline ? 1 : l;
  }
  while ((side & RIGHT) && b > a) {
    size_t k = b - 1; /* the start of the last character */
    while (!newline && k > a && (s[k] & 0xC0) == 0x80 && b - k < 4)
      k--;
    size_t l;
    const uint32_t c = newline ? s[k] : utf8_at(s + k, b - k, &l);
    if (newline ? c != '\n' : (!py_space(c) || k + l != b)) break;
    b = k;
  }
  return (str){x.s + a, b - a};
}

/* Where sub first (or last) occurs in x, or -1. */
static long find(str x, const char *sub, int last) {
  const size_t m = strlen(sub);
  long at = -1;
  for (size_t i = 0; i + m <= x.n; i++)
    if (memcmp(x.s + i, sub, m) == 0) {
      at = (long)i;
      if (!last) break;
    }
  return at;
}

/* ---- rendering ---- */

static mgt_status put_n(mgt_chat_text *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    size_t c = t->cap ? t->cap : 1024;
    while (c < t->n + n + 1)
      c *= 2;
    char *p = realloc(t->s, c);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory rendering a conversation of %zu bytes", t->n);
    t->s = p, t->cap = c;
  }
  memcpy(t->s + t->n, s, n);
  t->n += n;
  t->s[t->n] = 0;
  return MGT_OK;
}
static mgt_status put(mgt_chat_text *t, const char *s) { return put_n(t, s, strlen(s)); }
static mgt_status put_str(mgt_chat_text *t, str x) { return put_n(t, x.s, x.n); }

/* Marks where a trained range starts or ends: the text's length now. */
static mgt_status mark(mgt_chat_text *t) {
  if (t->n_train == t->cap_train) {
    size_t c = t->cap_train ? 2 * t->cap_train : 16;
    size_t *p = realloc(t->train, c * sizeof *p);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory rendering a conversation");
    t->train = p, t->cap_train = c;
  }
  t->train[t->n_train++] = t->n;
  return MGT_OK;
}

static str content_of(const mgt_chat_message *m) { return (str){m->content, m->len}; }

static mgt_status llama3(const mgt_chat_message *m, int n, const char *bos, mgt_chat_text *t) {
  for (int i = 0; i < n; i++) {
    if (i == 0) MGT_CHECK(put(t, bos));
    MGT_CHECK(put(t, "<|start_header_id|>"));
    MGT_CHECK(put(t, role_names[m[i].role]));
    MGT_CHECK(put(t, "<|end_header_id|>\n\n"));
    const int a = m[i].role == MGT_ROLE_ASSISTANT;
    if (a) MGT_CHECK(mark(t));
    MGT_CHECK(put_str(t, strip(content_of(&m[i]), BOTH, 0)));
    MGT_CHECK(put(t, "<|eot_id|>"));
    if (a) MGT_CHECK(mark(t));
  }
  /* this template writes the assistant's header after the last message, asked or not */
  return put(t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int tool_response(str c) {
  static const char a[] = "<tool_response>", b[] = "</tool_response>";
  return c.n >= sizeof a - 1 && memcmp(c.s, a, sizeof a - 1) == 0 && c.n >= sizeof b - 1 &&
         memcmp(c.s + c.n - (sizeof b - 1), b, sizeof b - 1) == 0;
}

static mgt_status chatml(const mgt_chat_message *m, int n, int gen, mgt_chat_text *t) {
  if (m[0].role == MGT_ROLE_SYSTEM) {
    MGT_CHECK(put(t, "<|im_start|>system\n"));
    MGT_CHECK(put_str(t, content_of(&m[0])));
    MGT_CHECK(put(t, "<|im_end|>\n"));
  }
  int last_query = n - 1; /* the last user message that is not a tool's response */
  for (int i = n - 1; i >= 0; i--)
    if (m[i].role == MGT_ROLE_USER && !tool_response(content_of(&m[i]))) {
      last_query = i;
      break;
    }
  for (int i = 0; i < n; i++) {
    if (m[i].role == MGT_ROLE_USER || (m[i].role == MGT_ROLE_SYSTEM && i > 0)) {
      MGT_CHECK(put(t, "<|im_start|>"));
      MGT_CHECK(put(t, role_names[m[i].role]));
      MGT_CHECK(put(t, "\n"));
      MGT_CHECK(put_str(t, content_of(&m[i])));
      MGT_CHECK(put(t, "<|im_end|>\n"));
    } else if (m[i].role == MGT_ROLE_ASSISTANT) {
      str content = content_of(&m[i]), reasoning = {"", 0};
      if (m[i].reasoning) {
        reasoning = (str){m[i].reasoning, m[i].reasoning_len};
      } else {
        const long close_last = find(content, "</think>", 1), close = find(content, "</think>", 0);
        if (close >= 0) {
          str before = strip((str){content.s, (size_t)close}, RIGHT, 1);
          const long open = find(before, "<think>", 1);
          if (open >= 0) before = (str){before.s + open + 7, before.n - (size_t)open - 7};
          reasoning = strip(before, LEFT, 1);
          content =
              strip((str){content.s + close_last + 8, content.n - (size_t)close_last - 8}, LEFT, 1);
        }
      }
      MGT_CHECK(put(t, "<|im_start|>assistant\n"));
      MGT_CHECK(mark(t));
      if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
        MGT_CHECK(put(t, "<think>\n"));
        MGT_CHECK(put_str(t, strip(reasoning, BOTH, 1)));
        MGT_CHECK(put(t, "\n</think>\n\n"));
        MGT_CHECK(put_str(t, strip(content, LEFT, 1)));
      } else {
        MGT_CHECK(put_str(t, content));
      }
      MGT_CHECK(put(t, "<|im_end|>"));
      MGT_CHECK(mark(t));
      MGT_CHECK(put(t, "\n"));
    }
  }
  return gen ? put(t, "<|im_start|>assistant\n") : MGT_OK;
}

static mgt_status alternate(int k, int role, const char *format) {
  if ((role == MGT_ROLE_USER) != (k % 2 == 0))
    MGT_FAIL(MGT_ERR_INPUT,
             "the %s chat format needs roles that alternate user/assistant/user/assistant/... "
             "(message %d is %s)",
             format, k + 1, role_names[role]);
  return MGT_OK;
}

static mgt_status llama2(const mgt_chat_message *m, int n, const char *bos, const char *eos,
                         mgt_chat_text *t) {
  const int sys = m[0].role == MGT_ROLE_SYSTEM;
  char *first = NULL; /* the system message and the first message's content, joined */
  mgt_status st = MGT_OK;
  for (int k = 0; k + sys < n && st == MGT_OK; k++) {
    const mgt_chat_message *x = &m[k + sys];
    MGT_TRY(x->role == MGT_ROLE_SYSTEM
                ? MGT_ERROR(MGT_ERR_INPUT,
                            "the llama2 chat format has a system message only first (message "
                            "%d is one)",
                            k + sys + 1)
                : alternate(k, x->role, "llama2"));
    str c = content_of(x);
    if (k == 0 && sys) {
      const size_t l = 8 + m[0].len + 11 + x->len;
      MGT_TRY(mgt_calloc(l + 1, "a conversation", (void **)&first));
      memcpy(first, "<<SYS>>\n", 8); /* byte by byte: a NUL in the text is text */
      memcpy(first + 8, m[0].content, m[0].len);
      memcpy(first + 8 + m[0].len, "\n<</SYS>>\n\n", 11);
      memcpy(first + 8 + m[0].len + 11, x->content, x->len);
      c = (str){first, l};
    }
    if (x->role == MGT_ROLE_USER) {
      MGT_TRY(put(t, bos));
      MGT_TRY(put(t, "[INST] "));
      MGT_TRY(put_str(t, strip(c, BOTH, 0)));
      MGT_TRY(put(t, " [/INST]"));
    } else {
      MGT_TRY(mark(t));
      MGT_TRY(put(t, " "));
      MGT_TRY(put_str(t, strip(c, BOTH, 0)));
      MGT_TRY(put(t, " "));
      MGT_TRY(put(t, eos));
      MGT_TRY(mark(t));
    }
    mgt_free(first);
    first = NULL;
  }
done:
  mgt_free(first);
  return st;
}

static mgt_status mistral(const mgt_chat_message *m, int n, const char *bos, const char *eos,
                          mgt_chat_text *t) {
  MGT_CHECK(put(t, bos));
  for (int k = 0; k < n; k++) {
    MGT_CHECK(alternate(k, m[k].role, "mistral"));
    if (m[k].role == MGT_ROLE_USER) {
      MGT_CHECK(put(t, "[INST] "));
      MGT_CHECK(put_str(t, content_of(&m[k])));
      MGT_CHECK(put(t, " [/INST]"));
    } else {
      MGT_CHECK(mark(t));
      MGT_CHECK(put_str(t, content_of(&m[k])));
      MGT_CHECK(put(t, eos));
      MGT_CHECK(mark(t));
    }
  }
  return MGT_OK;
}

mgt_status mgt_chat_render(int format, const mgt_chat_message *m, int n, int gen, const char *bos,
                           const char *eos, mgt_chat_text *t) {
  t->n = t->n_train = 0;
  if (t->s) t->s[0] = 0;
  MGT_REQUIRE(format >= 0 && format < MGT_CHAT_N, "chat format %d is not one here", format);
  MGT_REQUIRE(n > 0, "a conversation without messages");
  for (int i = 0; i < n; i++) {
    MGT_REQUIRE(m[i].role >= MGT_ROLE_SYSTEM && m[i].role <= MGT_ROLE_ASSISTANT,
                "message %d: role %d is not system, user or assistant", i + 1, m[i].role);
    MGT_REQUIRE(format != MGT_CHAT_MISTRAL || m[i].role != MGT_ROLE_SYSTEM,
                "the mistral chat format has no system role (message %d is one)", i + 1);
    MGT_REQUIRE(!m[i].reasoning || format == MGT_CHAT_CHATML,
                "message %d: reasoning_content is rendered by the chatml (Qwen 3) format only",
                i + 1);
  }
  switch (format) {
  case MGT_CHAT_LLAMA3: return llama3(m, n, bos, t);
  case MGT_CHAT_CHATML: return chatml(m, n, gen, t);
  case MGT_CHAT_LLAMA2: return llama2(m, n, bos, eos, t);
  default: return mistral(m, n, bos, eos, t);
  }
}

mgt_status mgt_chat_specials_of(const mgt_tokenizer *tok, mgt_chat_specials *out) {
  memset(out, 0, sizeof *out);
  const int32_t id[2] = {mgt_tok_bos(tok), mgt_tok_eod(tok)};
  char *dst[2] = {out->bos, out->eos};
  for (int k = 0; k < 2; k++) {
    const char *s;
    size_t n;
    if (id[k] < 0) continue;
    MGT_CHECK(mgt_tok_piece(tok, id[k], &s, &n));
    MGT_REQUIRE(n < sizeof out->bos, "the %s token is %zu bytes long: at most %zu are implemented",
                k ? "end-of-sequence" : "beginning-of-sequence", n, sizeof out->bos - 1);
    memcpy(dst[k], s, n);
  }
  return MGT_OK;
}

static mgt_status segments(const mgt_json *v, mgt_chat_text *t) {
  MGT_REQUIRE(v->type == MGT_JSON_ARRAY, "\"segments\" is not an array");
  for (size_t i = 0; i < v->len; i++) {
    const mgt_json *x = &v->items[i], *text = mgt_json_get(x, "text"), *loss = NULL;
    if (x->type == MGT_JSON_OBJECT) loss = mgt_json_get(x, "loss");
    MGT_REQUIRE(x->type == MGT_JSON_OBJECT && text && text->type == MGT_JSON_STRING,
                "segment %zu has no string \"text\"", i + 1);
    MGT_REQUIRE(!loss || loss->type == MGT_JSON_BOOL, "segment %zu: \"loss\" is not true or false",
                i + 1);
    const int train = loss && loss->number != 0;
    if (train) MGT_CHECK(mark(t));
    MGT_CHECK(put_n(t, text->str, text->len));
    if (train) MGT_CHECK(mark(t));
  }
  return MGT_OK;
}

/* OpenAI's content as a list of parts: their texts joined by newlines (vLLM's reading), into
 *out (malloc'd, *len bytes); a part that is not text is refused. */
static mgt_status text_parts(const mgt_json *content, size_t i, char **out, size_t *len) {
  size_t n = 0;
  for (size_t k = 0; k < content->len; k++) {
    const mgt_json *part = &content->items[k];
    const mgt_json *type = part->type == MGT_JSON_OBJECT ? mgt_json_get(part, "type") : NULL;
    const mgt_json *text = part->type == MGT_JSON_OBJECT ? mgt_json_get(part, "text") : NULL;
    MGT_REQUIRE(type && mgt_json_is(type, "text") && text && text->type == MGT_JSON_STRING,
                "message %zu: content part %zu is not {\"type\": \"text\", \"text\": ...} "
                "(images and audio are not implemented)",
                i + 1, k + 1);
    n += text->len + 1;
  }
  char *s = malloc(n + 1);
  MGT_REQUIRE(s, "message %zu: out of memory for its content", i + 1);
  size_t at = 0;
  for (size_t k = 0; k < content->len; k++) {
    const mgt_json *text = mgt_json_get(&content->items[k], "text");
    if (k) s[at++] = '\n';
    memcpy(s + at, text->str, text->len);
    at += text->len;
  }
  s[at] = 0;
  *out = s, *len = at;
  return MGT_OK;
}

mgt_status mgt_chat_from_json(const mgt_json *root, int format, const char *bos, const char *eos,
                              int gen, mgt_chat_text *t) {
  const mgt_json *v = root->type == MGT_JSON_OBJECT ? mgt_json_get(root, "messages") : NULL;
  const mgt_json *sg = root->type == MGT_JSON_OBJECT ? mgt_json_get(root, "segments") : NULL;
  MGT_REQUIRE(!v != !sg, "%s",
              v ? "both \"messages\" and \"segments\": one or the other"
                : "no \"messages\" (a conversation) or \"segments\"");
  t->n = t->n_train = 0;
  if (t->s) t->s[0] = 0;
  if (sg) return segments(sg, t);
  MGT_REQUIRE(v->type == MGT_JSON_ARRAY && v->len > 0 && v->len < 1000000,
              "\"messages\" is not a non-empty array");
  mgt_chat_message *m = NULL;
  char **joined = NULL; /* the text of content given as parts */
  MGT_CHECK(mgt_calloc(sizeof *m * v->len, "messages", (void **)&m));
  mgt_status st = mgt_calloc(sizeof *joined * v->len, "messages", (void **)&joined);
  for (size_t i = 0; st == MGT_OK && i < v->len; i++) {
    const mgt_json *x = &v->items[i];
    const mgt_json *role = x->type == MGT_JSON_OBJECT ? mgt_json_get(x, "role") : NULL;
    const mgt_json *content = x->type == MGT_JSON_OBJECT ? mgt_json_get(x, "content") : NULL;
    const mgt_json *r = x->type == MGT_JSON_OBJECT ? mgt_json_get(x, "reasoning_content") : NULL;
    if (!role || role->type != MGT_JSON_STRING)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "message %zu has no string \"role\"", i + 1);
    m[i].role = -1;
    for (int k = 0; k < 3; k++)
      if (mgt_json_is(role, role_names[k])) m[i].role = k;
    if (m[i].role < 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "message %zu: role \"%.40s\" is not system, user or assistant (tools are "
                    "not implemented)",
                    i + 1, role->str);
    /* null or [] are no calls (the templates test them as false) */
    const mgt_json *calls = mgt_json_get(x, "tool_calls");
    if (calls && calls->type != MGT_JSON_NULL && !(calls->type == MGT_JSON_ARRAY && !calls->len))
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "message %zu: tool_calls are not implemented", i + 1);
    size_t jl = 0;
    if (content && content->type == MGT_JSON_ARRAY)
      MGT_TRY(text_parts(content, i, &joined[i], &jl));
    if (!content || (content->type != MGT_JSON_STRING && !joined[i]))
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "message %zu has no string \"content\"", i + 1);
    m[i].content = joined[i] ? joined[i] : content->str;
    m[i].len = joined[i] ? jl : content->len;
    if (r && r->type != MGT_JSON_NULL) {
      if (r->type != MGT_JSON_STRING)
        MGT_GOTO_FAIL(MGT_ERR_INPUT, "message %zu: reasoning_content is not a string", i + 1);
      m[i].reasoning = r->str, m[i].reasoning_len = r->len;
    }
  }
  if (st == MGT_OK) st = mgt_chat_render(format, m, (int)v->len, gen, bos, eos, t);
done:
  for (size_t i = 0; joined && i < v->len; i++)
    free(joined[i]);
  mgt_free(joined);
  mgt_free(m);
  return st;
}

mgt_status mgt_chat_encode(mgt_tokenizer *tok, const mgt_chat_text *t, mgt_ids *ids, uint8_t **mask,
                           size_t *mask_cap) {
  mgt_ids ends = {0};
  const size_t k0 = ids->n;
  mgt_status st = mgt_tok_encode_ends(tok, t->s ? t->s : "", t->n, ids, &ends);
  if (st == MGT_OK && ids->n > *mask_cap) {
    size_t c = *mask_cap ? *mask_cap : 4096;
    while (c < ids->n)
      c *= 2;
    uint8_t *p = realloc(*mask, c);
    if (!p) st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory for the loss mask of %zu ids", ids->n);
    if (p) *mask = p, *mask_cap = c;
  }
  /* a token trains when it holds a byte of a trained range: tokens and ranges both rise (an
     empty range holds none) */
  for (size_t k = 0, r = 0, start = 0; st == MGT_OK && k < ends.n; k++) {
    const size_t end = (size_t)ends.ids[k];
    while (r + 1 < t->n_train && (t->train[r + 1] <= start || t->train[r] == t->train[r + 1]))
      r += 2;
    (*mask)[k0 + k] = r + 1 < t->n_train && start < t->train[r + 1] && end > t->train[r];
    start = end;
  }
  mgt_ids_free(&ends);
  return st;
}
