/* Hugging Face's tokenizer.json: added tokens split out first (leftmost, longest), then each
   piece of text between them normalized (NFC through utf8proc; Prepend and Replace), split by
   the pre-tokenizer's regex (PCRE2, which reads the Oniguruma-style patterns: \p{L}, \p{N},
   lookahead, scoped case-insensitivity) and byte-level mapped, and merged by the BPE model
   (rank order, as GPT-2's files; whole words first with ignore_merges; characters missing from
   the vocabulary as <0xNN> byte pieces with byte_fallback). Hugging Face's Tokenizers.js is
   the reference (tests/hf_tokenizer.sh). This file reads the file; hf_encode.c encodes. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "mgt/json.h"
#include "mgt/sha256.h"
#include "hf_tok_impl.h"

/* The GPT-2 pattern of a ByteLevel pre-tokenizer with use_regex. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void mgt_hf_free(mgt_hf_tok **ph) {
  mgt_hf_tok *h = *ph;
  if (!h) return;
  if (h->md) pcre2_match_data_free(h->md);
  if (!h->clone) {
    free(h->path);
    mgt_free(h->trie_end);
    mgt_free(h->trie_child);
    mgt_free(h->trie_key);
    free(h->keys);
    mgt_free(h->key_off);
    mgt_free(h->key_len);
    mgt_free(h->slot);
    if (h->split) pcre2_code_free(h->split);
    mgt_free(h->added);
    mgt_free(h->added_text);
  }
  free(h->buf);
  free(h->ids);
  free(h->map);
  free(h->map2);
  free(h->nbuf);
  free(h->u32);
  free(h->u32b);
  free(h->pbuf);
  mgt_free(h);
  *ph = NULL;
}

mgt_status mgt_hf_clone(const mgt_hf_tok *src, mgt_hf_tok **out) {
  *out = NULL;
  mgt_hf_tok *h = NULL;
  MGT_CHECK(mgt_calloc(sizeof *h, "tokenizer", (void **)&h));
  *h = *src;
  h->clone = 1;
  h->md = NULL, h->buf = NULL, h->buf_cap = 0, h->ids = NULL, h->ids_cap = 0;
  h->ends = NULL, h->map = h->map2 = NULL, h->map_cap = 0, h->nbuf = NULL, h->nbuf_cap = 0;
  h->u32 = h->u32b = NULL, h->u32_cap = h->u32b_cap = 0, h->pbuf = NULL, h->pbuf_cap = 0;
  if (src->split) { /* a compiled pattern is shared; match data is per thread */
    h->md = pcre2_match_data_create_from_pattern(src->split, NULL);
    if (!h->md) {
      mgt_hf_free(&h);
      MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a tokenizer's regex");
    }
  }
  *out = h;
  return MGT_OK;
}

int32_t mgt_hf_find_key(const mgt_hf_tok *h, const unsigned char *s, size_t n) {
  for (size_t i = mgt_tok_hash_bytes(s, n) & h->mask;; i = (i + 1) & h->mask) {
    int32_t id = h->slot[i];
    if (id < 0) return -1;
    if (h->key_len[id] == n && memcmp(h->keys + h->key_off[id], s, n) == 0) return id;
  }
}

mgt_status mgt_hf_grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return MGT_OK;
  size_t c = *cap ? *cap : 256;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu bytes", need);
  *p = q, *cap = c;
  return MGT_OK;
}

/* Gives id the key s[0..n): a key the vocabulary lists twice is its last id's (as serde's map
   and a JavaScript object read it), an added token's text the vocabulary holds stays the
   vocabulary's (`last` 0). */
static mgt_status set_key(mgt_hf_tok *h, int32_t id, const unsigned char *s, size_t n, int last) {
  MGT_CHECK(mgt_hf_grow((void **)&h->keys, &h->keys_cap, h->keys_used + n + 1, 1));
  memcpy(h->keys + h->keys_used, s, n);
  h->key_off[id] = (uint32_t)h->keys_used, h->key_len[id] = (uint32_t)n;
  h->keys_used += n;
  size_t i = mgt_tok_hash_bytes(s, n) & h->mask;
  while (h->slot[i] >= 0) {
    const int32_t o = h->slot[i];
    if (h->key_len[o] == n && memcmp(h->keys + h->key_off[o], s, n) == 0) {
      if (last) h->slot[i] = id;
      return MGT_OK;
    }
    i = (i + 1) & h->mask;
  }
  h->slot[i] = id;
  return MGT_OK;
}

/* ---- loading ---- */

typedef struct loader {
  const char *path;
  mgt_tokenizer *t;
  mgt_hf_tok *h;
  int16_t u2b[324];
} loader;

/* o's string `key` when it is one without a NUL inside (a type, a name), else NULL. */
static const char *str_of(const mgt_json *o, const char *key) {
  const mgt_json *v = o ? mgt_json_get(o, key) : NULL;
  return v && v->type == MGT_JSON_STRING && strlen(v->str) == v->len ? v->str : NULL;
}

/* o's string `key` and its length, NULs and all (a token's content, a pattern), or NULL. */
static const char *text_of(const mgt_json *o, const char *key, size_t *len) {
  const mgt_json *v = o ? mgt_json_get(o, key) : NULL;
  if (!v || v->type != MGT_JSON_STRING) return NULL;
  *len = v->len;
  return v->str;
}

static int flag_of(const mgt_json *o, const char *key, int dflt) {
  const mgt_json *v = o ? mgt_json_get(o, key) : NULL;
  return v && v->type == MGT_JSON_BOOL ? (int)v->number : dflt;
}

/* \s as Hugging Face reads it (Unicode's White_Space, as Oniguruma and Tokenizers.js match
   it): PCRE2's also holds U+180E, which Unicode 6.3 made a format character. */
static const char white_space[] = "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
                                  "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* Hugging Face runs a pre-tokenizer's regex with Oniguruma (Ruby's syntax); PCRE2 reads most
   of it the same way. What differs is spelt here in PCRE2's terms:
   - \s and \S: as white_space (inside a class, \s as its members);
   - \h and \H: a hexadecimal digit and its complement (to PCRE2, horizontal space);
   - \w, \W, \b, \B: Oniguruma's word characters, Letter, Mark, Number, Connector_Punctuation
     (PCRE2 10.42's \w has no marks), and the boundaries between them and the rest;
   - \uHHHH: the code point (PCRE2 has no \u);
   - the option m of (?m) and (?m:...): Ruby's "dot matches a newline", PCRE2's s; ^ and $ are
     always line anchors in Ruby, so the pattern is compiled multiline (compile());
   - a class intersection [a&&b] is refused, as \S, \H and \W inside a class: no PCRE2
     spelling.
   *out is malloc'ed, *out_len its length (a NUL in the pattern stays a NUL). */
static const char hex_class[] = "0-9a-fA-F";
static const char word_class[] = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

static mgt_status hf_pattern(const loader *L, const char *p, size_t n, char **out,
                             size_t *out_len) {
  const size_t grow_by = sizeof white_space + 4;
  char *o = malloc(n * grow_by + 1);
  if (!o) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the regex of %s", L->path);
  size_t k = 0;
  int in_class = 0, options = 0; /* options: inside "(?" and its letters */
  const char *refused = NULL;
  for (size_t i = 0; i < n && !refused; i++) {
    const char c = p[i], e = i + 1 < n ? p[i + 1] : 0;
    if (options && (c == 'm' || c == 'i' || c == 'x' || c == '-')) {
      o[k++] = c == 'm' ? 's' : c;
      continue;
    }
    options = 0;
    if (c == '\\' && (e == 's' || e == 'S' || e == 'h' || e == 'H')) {
      const int space = e == 's' || e == 'S', neg = e == 'S' || e == 'H';
      if (in_class && neg) {
        refused = e == 'S' ? "\\S inside a character class" : "\\H inside a character class";
        break;
      }
      const char *members = space ? white_space : hex_class;
      k += (size_t)sprintf(o + k, in_class ? "%s" : neg ? "[^%s]" : "[%s]", members);
      i++;
      continue;
    }
    if (c == '\\' && (e == 'w' || e == 'W')) {
      if (in_class && e == 'W') {
        refused = "\\W inside a character class";
        break;
      }
      k += (size_t)sprintf(o + k, in_class ? "%s" : e == 'W' ? "[^%s]" : "[%s]", word_class);
      i++;
      continue;
    }
    if (c == '\\' && (e == 'b' || e == 'B') && !in_class) { /* in a class, \b is a backspace */
      const char *w = word_class;
      k += (size_t)(e == 'b'
                        ? sprintf(o + k, "(?:(?<=[%s])(?![%s])|(?<![%s])(?=[%s]))", w, w, w, w)
                        : sprintf(o + k, "(?:(?<=[%s])(?=[%s])|(?<![%s])(?![%s]))", w, w, w, w));
      i++;
      continue;
    }
    if (c == '\\' && e == 'u' && i + 5 < n) {
      int ok = 1;
      for (size_t j = i + 2; j < i + 6; j++)
        ok &= (p[j] >= '0' && p[j] <= '9') || (p[j] >= 'a' && p[j] <= 'f') ||
              (p[j] >= 'A' && p[j] <= 'F');
      if (ok) {
        k += (size_t)sprintf(o + k, "\\x{%.4s}", p + i + 2);
        i += 5;
        continue;
      }
    }
    if (c == '\\' && i + 1 < n) { /* any other escape, as it is */
      o[k++] = p[i++];
      o[k++] = p[i];
      continue;
    }
    if (!in_class && c == '(' && e == '?' && i + 2 < n &&
        (p[i + 2] == 'm' || p[i + 2] == 'i' || p[i + 2] == 'x' || p[i + 2] == '-')) {
      o[k++] = p[i++];
      o[k++] = p[i];
      options = 1;
      continue;
    }
    if (in_class && c == '&' && e == '&') {
      refused = "a class intersection (&&)";
      break;
    }
    if (c == '[' && !in_class)
      in_class = 1;
    else if (c == ']' && in_class)
      in_class = 0;
    o[k++] = c;
  }
  if (refused) {
    free(o);
    MGT_FAIL(MGT_ERR_INPUT, "%s: the pre-tokenizer's regex has %s: not implemented", L->path,
             refused);
  }
  o[k] = 0;
  *out = o, *out_len = k;
  return MGT_OK;
}

static mgt_status compile(loader *L, const char *given, size_t given_len) {
  int err;
  PCRE2_SIZE at;
  mgt_hf_tok *h = L->h;
  char *pattern = NULL;
  size_t len = 0;
  MGT_CHECK(hf_pattern(L, given, given_len, &pattern, &len));
  h->split = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err,
                           &at, NULL);
  free(pattern);
  if (!h->split) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    MGT_FAIL(MGT_ERR_INPUT, "%s: the pre-tokenizer's regex does not compile at offset %zu: %s",
             L->path, (size_t)at, (const char *)msg);
  }
  pcre2_jit_compile(h->split, PCRE2_JIT_COMPLETE); /* where PCRE2 has a JIT; else interpreted */
  h->md = pcre2_match_data_create_from_pattern(h->split, NULL);
  if (!h->md) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the regex of %s", L->path);
  return MGT_OK;
}

static mgt_status one_normalizer(loader *L, const mgt_json *n) {
  const char *type = str_of(n, "type");
  if (type && !strcmp(type, "NFC")) {
    L->h->nfc = 1;
    return MGT_OK;
  }
  if (type && !strcmp(type, "Prepend") && str_of(n, "prepend") &&
      !strcmp(str_of(n, "prepend"), "\xE2\x96\x81")) {
    L->h->prepend = 1;
    return MGT_OK;
  }
  const mgt_json *pat = n ? mgt_json_get(n, "pattern") : NULL;
  if (type && !strcmp(type, "Replace") && str_of(pat, "String") &&
      !strcmp(str_of(pat, "String"), " ") && str_of(n, "content") &&
      !strcmp(str_of(n, "content"), "\xE2\x96\x81")) {
    L->h->spaces = 1;
    return MGT_OK;
  }
  MGT_FAIL(
      MGT_ERR_INPUT,
      "%s: normalizer %s is not implemented (NFC, Prepend \"\xE2\x96\x81\" and Replace \" \" by "
      "\"\xE2\x96\x81\" are)",
      L->path, type ? type : "(no type)");
}

static mgt_status normalizer(loader *L, const mgt_json *n) {
  if (!n || n->type == MGT_JSON_NULL) return MGT_OK;
  const char *type = str_of(n, "type");
  const mgt_json *list = mgt_json_get(n, "normalizers");
  if (!type || strcmp(type, "Sequence") != 0 || !list || list->type != MGT_JSON_ARRAY)
    return one_normalizer(L, n);
  for (size_t i = 0; i < list->len; i++)
    MGT_CHECK(one_normalizer(L, &list->items[i]));
  return MGT_OK;
}

static mgt_status one_pretokenizer(loader *L, const mgt_json *p) {
  const char *type = str_of(p, "type");
  mgt_hf_tok *h = L->h;
  if (type && !strcmp(type, "ByteLevel")) {
    const mgt_json *aps = mgt_json_get(p, "add_prefix_space");
    MGT_REQUIRE(aps && aps->type == MGT_JSON_BOOL,
                "%s: a ByteLevel pre-tokenizer without add_prefix_space true or false (Hugging "
                "Face's tokenizers refuses it, Tokenizers.js reads false)",
                L->path);
    h->byte_level = 1;
    h->prefix_space = flag_of(p, "add_prefix_space", 0);
    /* Hugging Face gives each piece of an earlier Split its own space */
    MGT_REQUIRE(!h->prefix_space || !h->split,
                "%s: ByteLevel with add_prefix_space after a Split (a space before each piece) is "
                "not implemented",
                L->path);
    if (flag_of(p, "use_regex", 1)) {
      MGT_REQUIRE(!h->split, "%s: two splitting pre-tokenizers are not implemented", L->path);
      MGT_CHECK(compile(L, gpt2_pattern, strlen(gpt2_pattern)));
    }
    return MGT_OK;
  }
  const mgt_json *pat = p ? mgt_json_get(p, "pattern") : NULL;
  size_t re_len = 0;
  const char *re = text_of(pat, "Regex", &re_len), *behavior = str_of(p, "behavior");
  if (type && !strcmp(type, "Split") && re && behavior && !strcmp(behavior, "Isolated") &&
      !flag_of(p, "invert", 0)) {
    MGT_REQUIRE(!h->split, "%s: two splitting pre-tokenizers are not implemented", L->path);
    MGT_REQUIRE(!h->byte_level,
                "%s: a Split after ByteLevel (over its byte spelling, Ġ for a space) is not "
                "implemented",
                L->path);
    return compile(L, re, re_len);
  }
  MGT_FAIL(MGT_ERR_INPUT,
           "%s: pre-tokenizer %s is not implemented (ByteLevel, and Split by a regex with behavior "
           "Isolated are)",
           L->path, type ? type : "(no type)");
}

static mgt_status pretokenizer(loader *L, const mgt_json *p) {
  if (!p || p->type == MGT_JSON_NULL) return MGT_OK;
  const char *type = str_of(p, "type");
  const mgt_json *list = mgt_json_get(p, "pretokenizers");
  if (!type || strcmp(type, "Sequence") != 0 || !list || list->type != MGT_JSON_ARRAY)
    return one_pretokenizer(L, p);
  for (size_t i = 0; i < list->len; i++)
    MGT_CHECK(one_pretokenizer(L, &list->items[i]));
  return MGT_OK;
}

/* The model's string of a vocabulary token as the model matches it: raw bytes for a byte-level
   model (from GPT-2's printable spelling), else as written. Returns the length or -1. */
static long model_key(const loader *L, const char *s, size_t n, unsigned char *out) {
  if (L->h->byte_level) return mgt_tok_unspell(L->u2b, (const unsigned char *)s, n, out);
  memcpy(out, s, n);
  return (long)n;
}

/* What decoding an id gives: its bytes (byte level), or its piece with "▁" as a space and
   <0xNN> as byte NN (Llama 2's decoder, without the final Strip of one leading space). */
static int hex_digit(unsigned char c) {
  return c >= '0' && c <= '9' ? c - '0' : (c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1);
}

static size_t decoded(const loader *L, const unsigned char *key, size_t n, unsigned char *out) {
  if (!L->h->byte_level && n == 6 && !memcmp(key, "<0x", 3) && key[5] == '>' &&
      hex_digit(key[3]) >= 0 && hex_digit(key[4]) >= 0) { /* key is not NUL-terminated */
    out[0] = (unsigned char)(hex_digit(key[3]) * 16 + hex_digit(key[4]));
    return 1;
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (!L->h->byte_level && i + 2 < n && key[i] == 0xE2 && key[i + 1] == 0x96 &&
        key[i + 2] == 0x81) {
      out[o++] = ' ';
      i += 2;
    } else {
      out[o++] = key[i];
    }
  }
  return o;
}

/* The child of trie node `node` by byte c, or -1. */
int32_t mgt_hf_trie_step(const mgt_hf_tok *h, int32_t node, unsigned char c) {
  const uint64_t key = ((uint64_t)node << 8 | c) + 1;
  for (size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & h->trie_mask;;
       i = (i + 1) & h->trie_mask) {
    if (h->trie_key[i] == key) return h->trie_child[i];
    if (!h->trie_key[i]) return -1;
  }
}

/* The trie of the added tokens (text_len bytes in all); of two with the same content, the first
   in the file is matched. */
static mgt_status build_trie(loader *L, size_t text_len) {
  mgt_hf_tok *h = L->h;
  size_t cap = 64;
  while (cap < 2 * (text_len + 1))
    cap <<= 1;
  h->trie_mask = cap - 1;
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * (text_len + 1), "added tokens", (void **)&h->trie_end));
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * cap, "added tokens", (void **)&h->trie_child));
  MGT_CHECK(mgt_calloc(sizeof(uint64_t) * cap, "added tokens", (void **)&h->trie_key));
  h->trie_end[0] = -1;
  int32_t nodes = 1;
  for (int k = 0; k < h->n_added; k++) {
    int32_t node = 0;
    for (size_t j = 0; j < h->added[k].n; j++) {
      const unsigned char c = h->added[k].s[j];
      int32_t next = mgt_hf_trie_step(h, node, c);
      if (next < 0) {
        const uint64_t key = ((uint64_t)node << 8 | c) + 1;
        size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & h->trie_mask;
        while (h->trie_key[i])
          i = (i + 1) & h->trie_mask;
        next = nodes++;
        h->trie_key[i] = key, h->trie_child[i] = next, h->trie_end[next] = -1;
      }
      node = next;
    }
    if (h->trie_end[node] < 0) h->trie_end[node] = k;
  }
  return MGT_OK;
}

static mgt_status model(loader *L, const mgt_json *m, const mgt_json *added) {
  mgt_hf_tok *h = L->h;
  mgt_tokenizer *t = L->t;
  const char *type = str_of(m, "type");
  MGT_REQUIRE(type && !strcmp(type, "BPE"),
              "%s: model %s is not implemented (BPE is: Llama, Qwen, GPT-2, Mistral)", L->path,
              type ? type : "(no type)");
  size_t cont_len = 0, eow_len = 0;
  text_of(m, "continuing_subword_prefix", &cont_len), text_of(m, "end_of_word_suffix", &eow_len);
  MGT_REQUIRE(cont_len == 0 && eow_len == 0,
              "%s: BPE with a continuing_subword_prefix or end_of_word_suffix is not implemented",
              L->path);
  const mgt_json *drop = mgt_json_get(m, "dropout");
  MGT_REQUIRE(!drop || drop->type == MGT_JSON_NULL ||
                  (drop->type == MGT_JSON_NUMBER && drop->number == 0),
              "%s: BPE dropout is for training tokenizers, not implemented", L->path);
  const mgt_json *vocab = mgt_json_get(m, "vocab"), *merges = mgt_json_get(m, "merges");
  MGT_REQUIRE(vocab && vocab->type == MGT_JSON_OBJECT && vocab->len > 0 && merges &&
                  merges->type == MGT_JSON_ARRAY,
              "%s: the BPE model has no vocab object or merges list", L->path);
  h->ignore_merges = flag_of(m, "ignore_merges", 0);
  h->byte_fallback = flag_of(m, "byte_fallback", 0);
  h->fuse_unk = flag_of(m, "fuse_unk", 0);
  /* ids: the vocabulary's and the added tokens' */
  int64_t n = 0;
  for (size_t i = 0; i < vocab->len; i++) {
    const mgt_json *v = &vocab->items[i];
    MGT_REQUIRE(v->type == MGT_JSON_NUMBER && v->number >= 0 && v->number < (1 << 30) &&
                    v->number == (double)(int32_t)v->number,
                "%s: vocabulary entry %zu has no id in [0, 2^30)", L->path, i);
    if (v->number + 1 > n) n = (int64_t)v->number + 1;
  }
  size_t text_len = 0; /* the added tokens' bytes */
  for (size_t i = 0; added && i < added->len; i++) {
    const mgt_json *id = mgt_json_get(&added->items[i], "id");
    size_t cl = 0;
    const char *c = text_of(&added->items[i], "content", &cl);
    MGT_REQUIRE(id && id->type == MGT_JSON_NUMBER && id->number >= 0 && id->number < (1 << 30) &&
                    id->number == (double)(int32_t)id->number && c && cl > 0,
                "%s: added token %zu has no id in [0, 2^30) or no content", L->path, i);
    MGT_REQUIRE(cl <= ADDED_MAX,
                "%s: added token %zu is %zu bytes long: at most %d are implemented", L->path, i, cl,
                ADDED_MAX);
    if (id->number + 1 > n) n = (int64_t)id->number + 1;
    text_len += cl;
  }
  /* the tables are as large as the largest id: ids may leave gaps, but not more than the file
     has tokens (a few bytes of JSON must not ask for gigabytes) */
  const int64_t tokens = (int64_t)vocab->len + (added ? (int64_t)added->len : 0);
  MGT_REQUIRE(n <= 2 * tokens + 256,
              "%s: token id %lld is far beyond the %lld tokens the file has (ids may leave gaps, "
              "but the largest must be below twice the tokens plus 256)",
              L->path, (long long)n - 1, (long long)tokens);
  t->n_vocab = (int)n;
  size_t cap = 1, blob = 0;
  while (cap < 2 * (size_t)n)
    cap <<= 1;
  for (size_t i = 0; i < vocab->len; i++)
    blob += vocab->key_lens[i];
  blob += text_len;
  h->mask = cap - 1;
  MGT_CHECK(mgt_calloc(cap * sizeof(int32_t), "vocabulary index", (void **)&h->slot));
  MGT_CHECK(mgt_calloc((size_t)n * sizeof(uint32_t), "vocabulary", (void **)&h->key_off));
  MGT_CHECK(mgt_calloc((size_t)n * sizeof(uint32_t), "vocabulary", (void **)&h->key_len));
  MGT_CHECK(mgt_calloc(blob + 1, "vocabulary", (void **)&t->blob));
  MGT_CHECK(mgt_calloc((size_t)n * sizeof(uint32_t), "vocabulary", (void **)&t->tok_off));
  MGT_CHECK(mgt_calloc((size_t)n * sizeof(uint32_t), "vocabulary", (void **)&t->tok_len));
  for (size_t i = 0; i < cap; i++)
    h->slot[i] = -1;
  for (int64_t i = 0; i < n; i++)
    h->key_len[i] = UINT32_MAX;
  size_t used = 0;
  unsigned char *k = malloc(blob + 1);
  if (!k) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", L->path);
  mgt_status st = MGT_OK;
  for (size_t i = 0; i < vocab->len && st == MGT_OK; i++) {
    const int32_t id = (int32_t)vocab->items[i].number;
    long kl = model_key(L, vocab->keys[i], vocab->key_lens[i], k);
    if (kl < 0 || h->key_len[id] != UINT32_MAX) {
      st = MGT_ERROR(MGT_ERR_INPUT, "%s: vocabulary entry %zu is %s", L->path, i,
                     kl < 0 ? "not a byte-level token" : "a second token of its id");
      break;
    }
    st = set_key(h, id, k, (size_t)kl, 1);
    t->tok_off[id] = (uint32_t)used;
    t->tok_len[id] = (uint32_t)decoded(L, k, (size_t)kl, t->blob + used);
    used += t->tok_len[id];
  }
  free(k);
  MGT_CHECK(st);
  /* added tokens: matched in the raw text, decoded as their content */
  h->n_added = added ? (int)added->len : 0;
  size_t text_used = 0;
  MGT_CHECK(
      mgt_calloc(sizeof *h->added * (size_t)(h->n_added + 1), "added tokens", (void **)&h->added));
  MGT_CHECK(mgt_calloc(text_len + 1, "added tokens", (void **)&h->added_text));
  for (int i = 0; i < h->n_added; i++) {
    const mgt_json *a = &added->items[i];
    size_t cl = 0;
    const char *c = text_of(a, "content", &cl);
    const int32_t id = (int32_t)mgt_json_get(a, "id")->number;
    MGT_REQUIRE(!flag_of(a, "single_word", 0) && !flag_of(a, "lstrip", 0) &&
                    !flag_of(a, "rstrip", 0) && !flag_of(a, "normalized", 0),
                "%s: added token %.*s is single_word, lstrip, rstrip or normalized: not "
                "implemented",
                L->path, (int)(cl < 60 ? cl : 60), c);
    if (h->key_len[id] == UINT32_MAX) { /* a token of its own, beyond the model's vocabulary */
      MGT_CHECK(set_key(h, id, (const unsigned char *)c, cl, 0));
      t->tok_off[id] = (uint32_t)used;
      t->tok_len[id] = (uint32_t)cl;
      memcpy(t->blob + used, c, cl);
      used += cl;
    }
    memcpy(h->added_text + text_used, c, cl);
    h->added[i] = (added_token){h->added_text + text_used, cl, id};
    text_used += cl;
    h->first_byte[(unsigned char)c[0]] = 1;
  }
  MGT_CHECK(build_trie(L, text_len));
  /* merges: "a b" strings or [a, b] pairs */
  MGT_CHECK(mgt_tok_merges_alloc(t, merges->len));
  unsigned char a[1024], b[1024], ab[2048];
  for (size_t r = 0; r < merges->len; r++) {
    const mgt_json *e = &merges->items[r];
    const char *sa = NULL, *sb = NULL;
    size_t la = 0, lb = 0;
    if (e->type == MGT_JSON_STRING) {
      const char *sp = memchr(e->str, ' ', e->len);
      if (sp) sa = e->str, la = (size_t)(sp - e->str), sb = sp + 1, lb = e->len - la - 1;
    } else if (e->type == MGT_JSON_ARRAY && e->len == 2 && e->items[0].type == MGT_JSON_STRING &&
               e->items[1].type == MGT_JSON_STRING) {
      sa = e->items[0].str, la = e->items[0].len, sb = e->items[1].str, lb = e->items[1].len;
    }
    long ka = sa && la < sizeof a ? model_key(L, sa, la, a) : -1;
    long kb = sb && lb < sizeof b ? model_key(L, sb, lb, b) : -1;
    int32_t ia = ka > 0 ? mgt_hf_find_key(h, a, (size_t)ka) : -1,
            ib = kb > 0 ? mgt_hf_find_key(h, b, (size_t)kb) : -1;
    int32_t im = -1;
    if (ia >= 0 && ib >= 0) {
      memcpy(ab, a, (size_t)ka);
      memcpy(ab + ka, b, (size_t)kb);
      im = mgt_hf_find_key(h, ab, (size_t)(ka + kb));
    }
    MGT_REQUIRE(im >= 0, "%s: merge %zu is not of two vocabulary tokens into a third", L->path, r);
    mgt_tok_merge_add(t, ia, ib, (uint32_t)r, im);
  }
  /* the symbols text starts from */
  size_t unk_len = 0;
  const char *unk = text_of(m, "unk_token", &unk_len);
  h->unk = unk ? mgt_hf_find_key(h, (const unsigned char *)unk, unk_len) : -1;
  for (int c = 0; c < 256; c++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", c);
    h->fallback[c] = mgt_hf_find_key(h, (const unsigned char *)name, 6);
    MGT_REQUIRE(!h->byte_fallback || h->fallback[c] >= 0, "%s: byte_fallback without a %s token",
                L->path, name);
    unsigned char by = (unsigned char)c;
    t->byte_id[c] = h->byte_level ? mgt_hf_find_key(h, &by, 1) : -1;
    MGT_REQUIRE(!h->byte_level || t->byte_id[c] >= 0,
                "%s: byte 0x%02x has no token, so some text cannot be encoded", L->path, c);
  }
  return MGT_OK;
}

/* The end-of-document token: tokenizer_config.json's eos_token (a string or {"content": ...}),
   beside tokenizer.json; its bos_token too, where it has one. */
/* tokenizer_config.json beside the tokenizer.json at `file`. */
static void config_path(const char *file, char *out, size_t n) {
  char dir[MGT_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  snprintf(out, n, "%s/tokenizer_config.json", slash ? (*slash = 0, dir) : ".");
}

const char *mgt_tok_config_file(const mgt_tokenizer *t, char *out, size_t n) {
  if (t->kind != KIND_HF || !t->hf->path) return NULL;
  config_path(t->hf->path, out, n);
  return out;
}

static mgt_status eos_of(loader *L) {
  char path[MGT_PATH_MAX + 32];
  config_path(L->path, path, sizeof path);
  char *text = NULL;
  size_t len = 0;
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL;
  mgt_status st = mgt_read_file("--tokenizer-model", path, &text, &len);
  if (st == MGT_OK) st = mgt_json_parser_create(&jp);
  if (st == MGT_OK) st = mgt_json_parse(jp, text, len, &root);
  if (st == MGT_OK) {
    const mgt_json *e = root->type == MGT_JSON_OBJECT ? mgt_json_get(root, "eos_token") : NULL;
    const mgt_json *b = root->type == MGT_JSON_OBJECT ? mgt_json_get(root, "bos_token") : NULL;
    size_t sl = 0, bl = 0;
    const char *s =
        e && e->type == MGT_JSON_STRING ? (sl = e->len, e->str) : text_of(e, "content", &sl);
    const char *bs =
        b && b->type == MGT_JSON_STRING ? (bl = b->len, b->str) : text_of(b, "content", &bl);
    const int32_t id = s ? mgt_hf_find_key(L->h, (const unsigned char *)s, sl) : -1;
    L->h->bos = bs ? mgt_hf_find_key(L->h, (const unsigned char *)bs, bl) : -1;
    if (id < 0)
      st = MGT_ERROR(MGT_ERR_INPUT, "%s: no eos_token of the vocabulary to end documents with",
                     path);
    L->t->eod = id;
  }
  mgt_json_parser_destroy(&jp);
  free(text);
  return st;
}

mgt_status mgt_tok_load_hf(const char *path, mgt_tokenizer **out) {
  *out = NULL;
  /* a model's folder, as Hugging Face's AutoTokenizer and Megatron-LM's recipes give it */
  char file[MGT_PATH_MAX + 32];
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    path = file;
  }
  mgt_tokenizer *t = NULL;
  char *text = NULL;
  size_t len = 0;
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_calloc(sizeof *t, "tokenizer", (void **)&t));
  t->kind = KIND_HF;
  t->type = MGT_TOKENIZER_HF;
  MGT_TRY(mgt_calloc(sizeof *t->hf, "tokenizer", (void **)&t->hf));
  loader L = {path, t, t->hf, {0}};
  t->hf->path = strdup(path);
  if (!t->hf->path) MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", path);
  uint32_t b2u[256];
  mgt_tok_byte_tables(b2u, L.u2b);
  MGT_TRY(mgt_read_file("--tokenizer-model", path, &text, &len));
  MGT_TRY(mgt_json_parser_create(&jp));
  if (mgt_json_parse(jp, text, len, &root) != MGT_OK) { /* the parser's reason and offset */
    char why[256];
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: not a tokenizer.json: %s", path, why);
  }
  if (root->type != MGT_JSON_OBJECT)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: not a tokenizer.json (a JSON object)", path);
  MGT_TRY(normalizer(&L, mgt_json_get(root, "normalizer")));
  MGT_TRY(pretokenizer(&L, mgt_json_get(root, "pre_tokenizer")));
  const mgt_json *added = mgt_json_get(root, "added_tokens");
  MGT_TRY(model(&L, mgt_json_get(root, "model"),
                added && added->type == MGT_JSON_ARRAY ? added : NULL));
  MGT_TRY(eos_of(&L));
  MGT_TRY(mgt_tok_alloc_common(t));
  mgt_sha256 h; /* the file is everything that made the ids */
  unsigned char d[32];
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, text, len);
  mgt_sha256_final(&h, d);
  mgt_sha256_hex(d, t->hash);
  *out = t;
  t = NULL;
done:
  mgt_json_parser_destroy(&jp);
  free(text);
  mgt_tok_destroy(&t);
  return st;
}

int32_t mgt_tok_bos(const mgt_tokenizer *t) { return t->kind == KIND_HF ? t->hf->bos : -1; }
