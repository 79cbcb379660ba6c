#define _GNU_SOURCE
#include "mgt/json.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { MAX_DEPTH = 64 };

/* Chunked arena: values, strings and key tables of one document. */
typedef struct chunk {
  struct chunk *next;
  size_t cap, used;
  unsigned char data[];
} chunk;

struct mgt_json_parser {
  chunk *chunks;
  const char *s, *end, *begin;
  char err[160];
  /* scratch stacks for children while an array/object is being read */
  mgt_json *stack;
  const char **kstack;
  size_t *lstack;
  size_t stack_cap, stack_len;
  size_t max_values, values; /* mgt_json_parser_limit's cap (0: none), and this parse's count */
};

static void *arena_take(mgt_json_parser *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  chunk *c = p->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > (1u << 16) ? n : (1u << 16);
    chunk *nc = malloc(sizeof *nc + cap);
    if (!nc) return NULL;
    nc->cap = cap;
    nc->used = 0;
    nc->next = c;
    p->chunks = nc;
    c = nc;
  }
  void *r = c->data + c->used;
  c->used += n;
  return r;
}

static void arena_reset(mgt_json_parser *p) {
  /* keep the newest chunk, free the rest */
  chunk *c = p->chunks;
  if (!c) return;
  chunk *rest = c->next;
  c->next = NULL;
  c->used = 0;
  while (rest) {
    chunk *n = rest->next;
    free(rest);
    rest = n;
  }
}

mgt_status mgt_json_parser_create(mgt_json_parser **out) {
  MGT_CHECK(mgt_calloc(sizeof **out, "JSON parser", (void **)out));
  return MGT_OK;
}

void mgt_json_parser_destroy(mgt_json_parser **pp) {
  mgt_json_parser *p = *pp;
  if (!p) return;
  arena_reset(p);
  free(p->chunks);
  free(p->stack);
  free(p->kstack);
  free(p->lstack);
  mgt_free(p);
  *pp = NULL;
}

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    snprintf(p->err, sizeof p->err, __VA_ARGS__);                                                  \
    return 0;                                                                                      \
  } while (0)

static void skip_ws(mgt_json_parser *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
    p->s++;
}

static int push(mgt_json_parser *p, const mgt_json *v, const char *key, size_t klen) {
  if (p->stack_len == p->stack_cap) {
    size_t cap = p->stack_cap ? 2 * p->stack_cap : 64;
    mgt_json *ns = realloc(p->stack, cap * sizeof *ns);
    const char **nk = realloc(p->kstack, cap * sizeof *nk);
    size_t *nl = realloc(p->lstack, cap * sizeof *nl);
    if (ns) p->stack = ns;
    if (nk) p->kstack = nk;
    if (nl) p->lstack = nl;
    if (!ns || !nk || !nl) FAIL("out of memory");
    p->stack_cap = cap;
  }
  p->stack[p->stack_len] = *v;
  p->kstack[p->stack_len] = key;
  p->lstack[p->stack_len] = klen;
  p->stack_len++;
  return 1;
}

static int hex4(mgt_json_parser *p, unsigned *out) {
  if (p->end - p->s < 4) FAIL("truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      FAIL("bad \\u escape");
  }
  p->s += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(unsigned char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Reads a string at p->s (on the opening quote) into the arena. */
static int parse_string(mgt_json_parser *p, const char **out, size_t *olen) {
  p->s++;
  const char *q = p->s;
  size_t raw = 0;
  while (q < p->end && *q != '"') {
    if (*q == '\\') q++;
    q++;
    raw++;
  }
  if (q >= p->end) FAIL("unterminated string");
  /* escapes never expand: \uXXXX (6 bytes) becomes at most 4, a surrogate pair 12 -> 4 */
  unsigned char *o = arena_take(p, (size_t)(q - p->s) + 1);
  if (!o) FAIL("out of memory");
  size_t n = 0;
  while (*p->s != '"') {
    unsigned char c = (unsigned char)*p->s;
    if (c < 0x20) FAIL("control character in string");
    if (c != '\\') {
      o[n++] = c;
      p->s++;
      continue;
    }
    p->s++;
    char e = *p->s++;
    switch (e) {
    case '"': o[n++] = '"'; break;
    case '\\': o[n++] = '\\'; break;
    case '/': o[n++] = '/'; break;
    case 'b': o[n++] = '\b'; break;
    case 'f': o[n++] = '\f'; break;
    case 'n': o[n++] = '\n'; break;
    case 'r': o[n++] = '\r'; break;
    case 't': o[n++] = '\t'; break;
    case 'u': {
      unsigned cp;
      if (!hex4(p, &cp)) return 0;
      if (cp >= 0xD800 && cp < 0xDC00 && p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u') {
        const char *save = p->s;
        unsigned lo;
        p->s += 2;
        if (!hex4(p, &lo)) return 0;
        if (lo >= 0xDC00 && lo < 0xE000)
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        else
          p->s = save; /* lone high surrogate; the next escape stands alone */
      }
      n += put_utf8(o + n, cp); /* lone surrogates are kept as WTF-8 */
      break;
    }
    default: FAIL("bad escape '\\%c'", e);
    }
  }
  p->s++;
  o[n] = 0;
  *out = (const char *)o;
  *olen = n;
  (void)raw;
  return 1;
}

static int parse_value(mgt_json_parser *p, mgt_json *v, int depth);

enum { HASH_MIN = 16 }; /* objects with fewer members are searched linearly */

/* Member names are hashed by SipHash-1-3 under a key drawn once per process from the kernel's
   random source: names that collide cannot be prepared in advance, so a hostile document costs
   what an ordinary one of its size does (the defence of Python's and Rust's tables). */
static uint64_t sip_key[2];
static pthread_once_t sip_once = PTHREAD_ONCE_INIT;

static void sip_init(void) {
  if (getrandom(sip_key, sizeof sip_key, 0) == (ssize_t)sizeof sip_key) return;
  struct timespec ts; /* no random source (a sandbox without getrandom): the clock and addresses */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  sip_key[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&ts;
  sip_key[1] = (uint64_t)ts.tv_sec ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)sip_key;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
static void sip_round(uint64_t *v) {
  v[0] += v[1], v[1] = ROTL(v[1], 13), v[1] ^= v[0], v[0] = ROTL(v[0], 32);
  v[2] += v[3], v[3] = ROTL(v[3], 16), v[3] ^= v[2];
  v[0] += v[3], v[3] = ROTL(v[3], 21), v[3] ^= v[0];
  v[2] += v[1], v[1] = ROTL(v[1], 17), v[1] ^= v[2], v[2] = ROTL(v[2], 32);
}

static size_t key_hash(const char *k, size_t n) {
  pthread_once(&sip_once, sip_init);
  const unsigned char *s = (const unsigned char *)k;
  uint64_t v[4] = {sip_key[0] ^ 0x736f6d6570736575ull, sip_key[1] ^ 0x646f72616e646f6dull,
                   sip_key[0] ^ 0x6c7967656e657261ull, sip_key[1] ^ 0x7465646279746573ull};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t m = 0;
    for (int b = 0; b < 8; b++)
      m |= (uint64_t)s[i + (size_t)b] << (8 * b);
    v[3] ^= m, sip_round(v), v[0] ^= m;
  }
  uint64_t m = (uint64_t)n << 56;
  for (int b = 0; i + (size_t)b < n; b++)
    m |= (uint64_t)s[i + (size_t)b] << (8 * b);
  v[3] ^= m, sip_round(v), v[0] ^= m;
  v[2] ^= 0xff;
  sip_round(v), sip_round(v), sip_round(v);
  return (size_t)(v[0] ^ v[1] ^ v[2] ^ v[3]);
}

/* The member table of a large object: a later duplicate replaces the earlier one. */
static int build_hash(mgt_json_parser *p, mgt_json *v) {
  size_t cap = 64;
  while (cap < 2 * v->len)
    cap *= 2;
  unsigned *h = arena_take(p, cap * sizeof *h);
  if (!h || v->len >= 0xffffffffu) FAIL("out of memory");
  memset(h, 0, cap * sizeof *h);
  for (size_t i = 0; i < v->len; i++) {
    size_t j = key_hash(v->keys[i], v->key_lens[i]) & (cap - 1);
    while (h[j]) {
      size_t o = h[j] - 1;
      if (v->key_lens[o] == v->key_lens[i] && !memcmp(v->keys[o], v->keys[i], v->key_lens[i]))
        break;
      j = (j + 1) & (cap - 1);
    }
    h[j] = (unsigned)(i + 1);
  }
  v->hash = h;
  v->hash_mask = cap - 1;
  return 1;
}

static int parse_container(mgt_json_parser *p, mgt_json *v, int depth, int object) {
  if (depth >= MAX_DEPTH) FAIL("nesting deeper than %d", MAX_DEPTH);
  char close = object ? '}' : ']';
  p->s++;
  size_t base = p->stack_len;
  skip_ws(p);
  if (p->s < p->end && *p->s == close) {
    p->s++;
  } else {
    for (;;) {
      const char *key = NULL;
      size_t klen = 0;
      skip_ws(p);
      if (object) {
        if (p->s >= p->end || *p->s != '"') FAIL("expected a member name");
        if (!parse_string(p, &key, &klen)) return 0;
        skip_ws(p);
        if (p->s >= p->end || *p->s != ':') FAIL("expected ':' after a member name");
        p->s++;
      }
      mgt_json child;
      if (!parse_value(p, &child, depth + 1)) return 0;
      if (!push(p, &child, key, klen)) return 0;
      skip_ws(p);
      if (p->s < p->end && *p->s == ',') {
        p->s++;
        continue;
      }
      if (p->s < p->end && *p->s == close) {
        p->s++;
        break;
      }
      FAIL("expected ',' or '%c'", close);
    }
  }
  size_t n = p->stack_len - base;
  memset(v, 0, sizeof *v);
  v->type = object ? MGT_JSON_OBJECT : MGT_JSON_ARRAY;
  v->len = n;
  mgt_json *items = arena_take(p, n * sizeof *items + 1);
  if (!items) FAIL("out of memory");
  if (n) memcpy(items, p->stack + base, n * sizeof *items); /* the stack is NULL before use */
  v->items = items;
  if (object) {
    const char **keys = arena_take(p, n * sizeof *keys + 1);
    size_t *lens = arena_take(p, n * sizeof *lens + 1);
    if (!keys || !lens) FAIL("out of memory");
    if (n) memcpy(keys, p->kstack + base, n * sizeof *keys);
    if (n) memcpy(lens, p->lstack + base, n * sizeof *lens);
    v->keys = keys;
    v->key_lens = lens;
    if (n >= HASH_MIN && !build_hash(p, v)) return 0;
  }
  p->stack_len = base;
  return 1;
}

static int literal(mgt_json_parser *p, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0) FAIL("unexpected character");
  p->s += n;
  return 1;
}

static int parse_value(mgt_json_parser *p, mgt_json *v, int depth) {
  skip_ws(p);
  memset(v, 0, sizeof *v);
  if (p->s >= p->end) FAIL("unexpected end of input");
  if (p->max_values && ++p->values > p->max_values) FAIL("more than %zu values", p->max_values);
  char c = *p->s;
  if (c == '{') return parse_container(p, v, depth, 1);
  if (c == '[') return parse_container(p, v, depth, 0);
  if (c == '"') {
    v->type = MGT_JSON_STRING;
    return parse_string(p, &v->str, &v->len);
  }
  if (c == 't' || c == 'f') {
    v->type = MGT_JSON_BOOL;
    v->number = c == 't';
    return literal(p, c == 't' ? "true" : "false");
  }
  if (c == 'n') {
    v->type = MGT_JSON_NULL;
    return literal(p, "null");
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    const char *q = p->s;
    if (*q == '-') q++;
    if (q >= p->end || *q < '0' || *q > '9') FAIL("bad number");
    if (*q == '0' && q + 1 < p->end && q[1] >= '0' && q[1] <= '9') FAIL("leading zero in number");
    while (q < p->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' ||
                          *q == '+' || *q == '-'))
      q++;
    char buf[64];
    size_t n = (size_t)(q - p->s);
    if (n >= sizeof buf) FAIL("number too long");
    memcpy(buf, p->s, n);
    buf[n] = 0;
    char *e = NULL;
    v->number = strtod(buf, &e);
    if (*e != 0 || !isfinite(v->number)) FAIL("bad number");
    v->type = MGT_JSON_NUMBER;
    v->len = strpbrk(buf, ".eE") != NULL; /* Python's json reads it as a float, not an int */
    p->s = q;
    return 1;
  }
  if (c < 0x20 || c > 0x7E) FAIL("unexpected byte 0x%02X", (unsigned)(unsigned char)c);
  FAIL("unexpected character '%c'", c);
}

void mgt_json_parser_limit(mgt_json_parser *p, size_t max_values) { p->max_values = max_values; }

int mgt_json_parser_over(const mgt_json_parser *p) {
  return p->max_values && p->values > p->max_values;
}

mgt_status mgt_json_parse(mgt_json_parser *p, const char *text, size_t len, const mgt_json **root) {
  arena_reset(p);
  p->stack_len = 0, p->values = 0;
  p->s = p->begin = text;
  p->end = text + len;
  p->err[0] = 0;
  mgt_json *v = arena_take(p, sizeof *v);
  if (!v) MGT_FAIL(MGT_ERR_NOMEM, "out of memory parsing JSON");
  if (!parse_value(p, v, 0))
    MGT_FAIL(MGT_ERR_INPUT, "malformed JSON at byte %zu: %s", (size_t)(p->s - p->begin), p->err);
  skip_ws(p);
  if (p->s != p->end)
    MGT_FAIL(MGT_ERR_INPUT, "malformed JSON at byte %zu: text after the value",
             (size_t)(p->s - p->begin));
  *root = v;
  return MGT_OK;
}

const mgt_json *mgt_json_get(const mgt_json *obj, const char *key) {
  if (!obj || obj->type != MGT_JSON_OBJECT) return NULL;
  size_t kl = strlen(key);
  if (obj->hash) {
    for (size_t j = key_hash(key, kl) & obj->hash_mask; obj->hash[j];
         j = (j + 1) & obj->hash_mask) {
      size_t i = obj->hash[j] - 1;
      if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return &obj->items[i];
    }
    return NULL;
  }
  for (size_t i = obj->len; i-- > 0;) /* the last of duplicate keys wins, as in Python */
    if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return &obj->items[i];
  return NULL;
}

int mgt_json_is(const mgt_json *v, const char *s) {
  const size_t n = strlen(s);
  return v && v->type == MGT_JSON_STRING && v->len == n && memcmp(v->str, s, n) == 0;
}

void mgt_json_write_string(FILE *f, const char *s) {
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

/* The length of the UTF-8 character at s[0..n), or 0 where the bytes are not one (a stray
   continuation byte, 0xC0, 0xC1, 0xF5-0xFF, a cut sequence, an overlong form, a surrogate, a
   code point beyond U+10FFFF). */
static size_t utf8_char(const unsigned char *s, size_t n) {
  const unsigned c = s[0];
  const size_t len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
  if (!len || len > n) return 0;
  for (size_t k = 1; k < len; k++)
    if ((s[k] & 0xC0) != 0x80) return 0;
  if (len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0;
  if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
  return len;
}

size_t mgt_utf8_bad_len(const unsigned char *s, size_t n) {
  const unsigned c = s[0];
  unsigned lo = 0x80, hi = 0xBF, need;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 1;
  }
  size_t k = 1;
  while (k <= need && k < n && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xBF))
    k++;
  return k;
}

void mgt_json_write_bytes(FILE *f, const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    const size_t len = utf8_char(s + i, n - i);
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7F)
      fprintf(f, "\\u%04x", c);
    else if (len)
      fwrite(s + i, 1, len, f);
    else
      fputs("\xEF\xBF\xBD", f); /* U+FFFD, the replacement character */
    i += len ? len : mgt_utf8_bad_len(s + i, n - i);
  }
  fputc('"', f);
}
