/* Google BERT's tokenizer (google-research/bert tokenization.py, which Megatron-LM copies), over
   code points with the tables of io/text/unicode_bert.h:
     1. clean: delete U+0000, U+FFFD, Cc and Cf but tab/LF/CR; map those three and Zs to space;
     2. put spaces around CJK ideographs;
     3. split on white space (what is left of it: space, U+2028, U+2029);
     4. uncased only, per word: str.lower() (final sigma included), NFD, delete Mn;
     5. every punctuation character (P*, and the ASCII symbol ranges) becomes a word;
     6. WordPiece per word: over 200 code points is [UNK]; else the longest vocabulary piece
        from the left ("##" after the first), and a word with a position nothing matches is
        one [UNK]. */
#define _GNU_SOURCE
#include "wordpiece.h"

#include <stdlib.h>
#include <string.h>

#include "mgt/sha256.h"
#include "unicode.h"
#include "unicode_bert.h"

enum { MAX_WORD = 200 };
/* classes of a code point, looked up once per code point below 0x10000 */
enum { C_DROP = 1, C_SPACE = 2, C_PUNCT = 4, C_MN = 8, C_CJK = 16 };

struct mgt_wordpiece {
  int lower;
  int n_vocab;
  char *text;       /* the vocabulary file; pieces point into it */
  const char **tok; /* id -> piece (NUL-terminated) */
  uint32_t *tok_len;
  int32_t *slot; /* open addressing: piece -> id, -1 empty */
  size_t mask;
  int32_t unk;
  int max_cps;  /* longest piece, in code points, "##" included */
  uint8_t *cls; /* the classes of the basic multilingual plane */
  int clone;    /* mgt_wp_clone's: the tables above are its origin's */
  /* work space */
  uint32_t *cp, *cp2, *word;
  size_t cp_cap, cp2_cap, word_cap;
  unsigned char *key;
  uint32_t *key_off;
  size_t key_cap;
};

/* ---- Unicode ---- */

#define IN(tab, cp) mgt_in_ranges(tab, sizeof tab / sizeof tab[0], cp)

/* Index of cp in a table of rows of `width` words keyed by the first, or -1. */
static long find_row(const uint32_t *t, size_t words, size_t width, uint32_t cp) {
  size_t lo = 0, hi = words / width;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    uint32_t k = t[mid * width];
    if (cp < k)
      hi = mid;
    else if (cp > k)
      lo = mid + 1;
    else
      return (long)mid;
  }
  return -1;
}

static int is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_split_space(uint32_t c) { return c == ' ' || c == 0x2028 || c == 0x2029; }

static int class_slow(uint32_t c) {
  return (IN(mgt_bert_drop, c) ? C_DROP : 0) | (IN(mgt_bert_space, c) ? C_SPACE : 0) |
         (IN(mgt_bert_punct, c) ? C_PUNCT : 0) | (IN(mgt_bert_mn, c) ? C_MN : 0) |
         (is_cjk(c) ? C_CJK : 0);
}

static int class_of(const mgt_wordpiece *wp, uint32_t c) {
  return c < 0x10000 ? wp->cls[c] : class_slow(c);
}

static int ccc_of(uint32_t c) {
  long r = find_row(mgt_bert_ccc, sizeof mgt_bert_ccc / sizeof mgt_bert_ccc[0], 2, c);
  return r < 0 ? 0 : (int)mgt_bert_ccc[2 * r + 1];
}

/* Decodes one UTF-8 character; an invalid or truncated sequence is one byte read as U+FFFD.
   A surrogate (WTF-8: the JSON reader keeps a lone "\ud800" so) is that code point, as in the
   Python string Google's tokenizer sees: a letter of no class, whose word becomes [UNK]. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) return *cp = c, 1;
  size_t len =
      c >= 0xC2 && c <= 0xDF ? 2 : (c >= 0xE0 && c <= 0xEF ? 3 : (c >= 0xF0 && c <= 0xF4 ? 4 : 0));
  if (!len || len > n) return *cp = 0xFFFD, 1;
  uint32_t v = c & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return *cp = 0xFFFD, 1;
    v = v << 6 | (s[i] & 0x3F);
  }
  /* overlong forms and code points past U+10FFFF are not UTF-8 */
  if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
    return *cp = 0xFFFD, 1;
  return *cp = v, len;
}

static size_t utf8_put(uint32_t c, unsigned char *o) {
  if (c < 0x80) return o[0] = (unsigned char)c, 1;
  if (c < 0x800) {
    o[0] = (unsigned char)(0xC0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    o[0] = (unsigned char)(0xE0 | c >> 12), o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | c >> 18), o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F)), o[3] = (unsigned char)(0x80 | (c & 0x3F));
  return 4;
}

static mgt_status grow(uint32_t **p, size_t *cap, size_t need) {
  if (need <= *cap) return MGT_OK;
  size_t c = *cap ? *cap : 256;
  while (c < need)
    c *= 2;
  uint32_t *q = realloc(*p, c * sizeof *q);
  if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu characters", need);
  *p = q, *cap = c;
  return MGT_OK;
}

/* Python's str.lower() of w[0..n) into out (at most 3 n code points): the full mapping, and
   capital sigma final after a cased character unless a cased one follows (case-ignorable ones
   skipped on both sides). */
static size_t lower_word(const uint32_t *w, size_t n, uint32_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = w[i];
    if (c < 0x80) { /* ASCII: the common case */
      out[k++] = c >= 'A' && c <= 'Z' ? c + 32 : c;
      continue;
    }
    if (c == 0x03A3) {
      long j = (long)i - 1;
      while (j >= 0 && IN(mgt_bert_case_ignorable, w[j]))
        j--;
      int final = j >= 0 && IN(mgt_bert_cased, w[j]);
      if (final) {
        size_t m = i + 1;
        while (m < n && IN(mgt_bert_case_ignorable, w[m]))
          m++;
        final = m == n || !IN(mgt_bert_cased, w[m]);
      }
      out[k++] = final ? 0x03C2 : 0x03C3;
      continue;
    }
    long r = find_row(mgt_bert_lower, sizeof mgt_bert_lower / sizeof mgt_bert_lower[0], 4, c);
    if (r < 0) {
      out[k++] = c;
      continue;
    }
    for (int m = 1; m <= 3 && mgt_bert_lower[4 * r + m]; m++)
      out[k++] = mgt_bert_lower[4 * r + m];
  }
  return k;
}

/* NFD of w[0..n) into out (room for 4 n + 4: no canonical decomposition is longer), then
   combining marks in canonical order (tmp: room for as many); returns the length. */
static size_t nfd(const uint32_t *w, size_t n, uint32_t *out, uint32_t *tmp) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = w[i];
    if (c < 0xC0) { /* nothing below U+00C0 decomposes */
      out[k++] = c;
      continue;
    }
    if (c >= 0xAC00 && c <= 0xD7A3) { /* Hangul syllables, by arithmetic */
      uint32_t s = c - 0xAC00;
      out[k++] = 0x1100 + s / 588;
      out[k++] = 0x1161 + (s % 588) / 28;
      if (s % 28) out[k++] = 0x11A7 + s % 28;
      continue;
    }
    long r = find_row(mgt_bert_decomp, sizeof mgt_bert_decomp / sizeof mgt_bert_decomp[0], 3, c);
    if (r < 0) {
      out[k++] = c;
      continue;
    }
    for (uint32_t m = 0; m < mgt_bert_decomp[3 * r + 2]; m++)
      out[k++] = mgt_bert_decomp_cps[mgt_bert_decomp[3 * r + 1] + m];
  }
  mgt_canonical_order(out, k, ccc_of, tmp);
  return k;
}

/* ---- the vocabulary ---- */

static uint64_t piece_hash(const unsigned char *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001B3ull;
  return mgt_fmix64(h);
}

static int32_t lookup(const mgt_wordpiece *wp, const unsigned char *p, size_t n) {
  for (size_t s = piece_hash(p, n) & wp->mask;; s = (s + 1) & wp->mask) {
    int32_t id = wp->slot[s];
    if (id < 0) return -1;
    if (wp->tok_len[id] == n && memcmp(wp->tok[id], p, n) == 0) return id;
  }
}

static int is_strip_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

mgt_status mgt_wp_load(const char *vocab_file, int lower, mgt_wordpiece **out) {
  *out = NULL;
  mgt_wordpiece *wp = calloc(1, sizeof *wp);
  if (!wp) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the WordPiece vocabulary");
  mgt_status st = MGT_OK;
  size_t len = 0;
  MGT_TRY(mgt_read_file("--vocab-file", vocab_file, &wp->text, &len));
  wp->lower = lower;
  size_t lines = 0;
  for (size_t i = 0; i < len; i++)
    lines += wp->text[i] == '\n';
  lines += len && wp->text[len - 1] != '\n';
  wp->tok = calloc(lines + 1, sizeof *wp->tok);
  wp->tok_len = calloc(lines + 1, sizeof *wp->tok_len);
  size_t slots = 64;
  while (slots < 2 * lines)
    slots *= 2;
  wp->slot = malloc(slots * sizeof *wp->slot);
  if (!wp->tok || !wp->tok_len || !wp->slot)
    MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory for %s", vocab_file);
  memset(wp->slot, 0xFF, slots * sizeof *wp->slot);
  wp->mask = slots - 1;
  char *p = wp->text, *end = wp->text + len;
  int n = 0;
  while (p < end) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *e = nl ? nl : end;
    char *b = p; /* Python's strip(): the ASCII white space a vocabulary file holds */
    while (b < e && is_strip_space((unsigned char)*b))
      b++;
    while (e > b && is_strip_space((unsigned char)e[-1]))
      e--;
    *e = 0;
    wp->tok[n] = b;
    wp->tok_len[n] = (uint32_t)(e - b);
    size_t s = piece_hash((const unsigned char *)b, (size_t)(e - b)) & wp->mask;
    for (;; s = (s + 1) & wp->mask) { /* a later duplicate replaces the earlier */
      int32_t id = wp->slot[s];
      if (id < 0 ||
          (wp->tok_len[id] == (uint32_t)(e - b) && memcmp(wp->tok[id], b, (size_t)(e - b)) == 0))
        break;
    }
    wp->slot[s] = n;
    int cps = 0;
    for (char *c = b; c < e; c++)
      cps += ((unsigned char)*c & 0xC0) != 0x80;
    if (cps > wp->max_cps) wp->max_cps = cps;
    n++;
    p = nl ? nl + 1 : end;
  }
  wp->n_vocab = n;
  if (!(wp->cls = malloc(0x10000)))
    MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory for %s", vocab_file);
  for (uint32_t c = 0; c < 0x10000; c++)
    wp->cls[c] = (uint8_t)class_slow(c);
  wp->unk = lookup(wp, (const unsigned char *)"[UNK]", 5);
  if (wp->unk < 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--vocab-file %s: no [UNK] token: not a WordPiece vocabulary",
                  vocab_file);
  *out = wp;
  return MGT_OK;
done:
  mgt_wp_free(&wp);
  return st;
}

void mgt_wp_free(mgt_wordpiece **pw) {
  mgt_wordpiece *wp = *pw;
  if (!wp) return;
  if (!wp->clone) {
    free(wp->text);
    free(wp->cls);
    free(wp->tok);
    free(wp->tok_len);
    free(wp->slot);
  }
  free(wp->cp);
  free(wp->cp2);
  free(wp->word);
  free(wp->key);
  free(wp->key_off);
  free(wp);
  *pw = NULL;
}

mgt_status mgt_wp_clone(const mgt_wordpiece *src, mgt_wordpiece **out) {
  *out = NULL;
  mgt_wordpiece *wp = malloc(sizeof *wp);
  if (!wp) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a tokenizer");
  *wp = *src;
  wp->clone = 1;
  wp->cp = wp->cp2 = wp->word = NULL, wp->cp_cap = wp->cp2_cap = wp->word_cap = 0;
  wp->key = NULL, wp->key_off = NULL, wp->key_cap = 0;
  *out = wp;
  return MGT_OK;
}

int mgt_wp_vocab_size(const mgt_wordpiece *wp) { return wp->n_vocab; }

mgt_status mgt_wp_piece(const mgt_wordpiece *wp, int32_t id, const char **s, size_t *len) {
  MGT_REQUIRE(id >= 0 && id < wp->n_vocab, "token id %d is outside the vocabulary [0, %d)", id,
              wp->n_vocab);
  *s = wp->tok[id];
  *len = wp->tok_len[id];
  return MGT_OK;
}

int32_t mgt_wp_special(const mgt_wordpiece *wp, const char *name) {
  return lookup(wp, (const unsigned char *)name, strlen(name));
}

/* ---- encoding ---- */

/* WordPiece of one word (code points w[0..n)). */
static mgt_status wordpiece(mgt_wordpiece *wp, const uint32_t *w, size_t n, mgt_ids *out) {
  if (n > MAX_WORD) return mgt_ids_push(out, wp->unk);
  /* the word as UTF-8 with each code point's byte offset, and "##" + piece for lookups */
  if (wp->key_cap == 0) {
    wp->key = malloc(2 * (4 * MAX_WORD + 8));
    wp->key_off = malloc((MAX_WORD + 2) * sizeof *wp->key_off);
    if (!wp->key || !wp->key_off) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing");
    wp->key_cap = 4 * MAX_WORD + 8;
  }
  unsigned char *bytes = wp->key, *piece = wp->key + wp->key_cap;
  uint32_t *off = wp->key_off;
  size_t b = 0;
  for (size_t i = 0; i < n; i++) {
    off[i] = (uint32_t)b;
    b += utf8_put(w[i], bytes + b);
  }
  off[n] = (uint32_t)b;
  piece[0] = piece[1] = '#';
  const size_t first = out->n;
  for (size_t start = 0; start < n;) {
    size_t longest = (size_t)wp->max_cps;
    size_t end = n - start < longest ? n : start + longest;
    int32_t id = -1;
    for (; end > start; end--) {
      size_t nb = off[end] - off[start];
      if (start == 0) {
        id = lookup(wp, bytes, nb);
      } else { /* a continuation is looked up as "##" + piece */
        memcpy(piece + 2, bytes + off[start], nb);
        id = lookup(wp, piece, nb + 2);
      }
      if (id >= 0) break;
    }
    if (id < 0) { /* a position nothing matches: the whole word is unknown */
      out->n = first;
      return mgt_ids_push(out, wp->unk);
    }
    MGT_CHECK(mgt_ids_push(out, id));
    start = end;
  }
  return MGT_OK;
}

/* Lower case, NFD and accents off (uncased), then the punctuation split and WordPiece. */
static mgt_status encode_word(mgt_wordpiece *wp, const uint32_t *w, size_t n, mgt_ids *out) {
  if (wp->lower) {
    MGT_CHECK(grow(&wp->word, &wp->word_cap, 27 * n + 12));
    uint32_t *low = wp->word, *dec = low + 3 * n + 1, *tmp = dec + 12 * n + 4;
    size_t m = lower_word(w, n, low);
    m = nfd(low, m, dec, tmp);
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
      if (!(class_of(wp, dec[i]) & C_MN)) dec[k++] = dec[i];
    w = dec, n = k;
  }
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    int punct = i < n && (class_of(wp, w[i]) & C_PUNCT);
    if (i == n || punct) {
      if (i > start) MGT_CHECK(wordpiece(wp, w + start, i - start, out));
      if (punct) MGT_CHECK(wordpiece(wp, w + i, 1, out));
      start = i + 1;
    }
  }
  return MGT_OK;
}

mgt_status mgt_wp_encode(mgt_wordpiece *wp, const char *text, size_t len, mgt_ids *out) {
  /* clean and space the CJK ideographs: at most three code points per byte */
  MGT_CHECK(grow(&wp->cp, &wp->cp_cap, 3 * len + 1));
  const unsigned char *s = (const unsigned char *)text;
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    uint32_t c;
    i += utf8_next(s + i, len - i, &c);
    int k = class_of(wp, c);
    if (k & C_DROP) continue;
    if (k & C_SPACE) c = ' ';
    if (k & C_CJK) {
      wp->cp[n++] = ' ', wp->cp[n++] = c, wp->cp[n++] = ' ';
      continue;
    }
    wp->cp[n++] = c;
  }
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && !is_split_space(wp->cp[i])) continue;
    if (i > start) MGT_CHECK(encode_word(wp, wp->cp + start, i - start, out));
    start = i + 1;
  }
  return MGT_OK;
}

mgt_status mgt_wp_decode(const mgt_wordpiece *wp, const int32_t *ids, size_t n, char **buf,
                         size_t *len, size_t *cap) {
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    MGT_REQUIRE(id >= 0 && id < wp->n_vocab, "token id %d is outside the vocabulary [0, %d)", id,
                wp->n_vocab);
    const char *p = wp->tok[id];
    size_t l = wp->tok_len[id];
    int glue = *len > 0 && l >= 2 && p[0] == '#' && p[1] == '#';
    if (glue) p += 2, l -= 2;
    size_t need = *len + l + 2;
    if (need > *cap) {
      size_t nc = (*cap ? *cap * 2 : 256) + l;
      char *nb = realloc(*buf, nc);
      if (!nb) MGT_FAIL(MGT_ERR_NOMEM, "out of memory decoding %zu tokens", n);
      *buf = nb, *cap = nc;
    }
    if (*len > 0 && !glue) (*buf)[(*len)++] = ' ';
    memcpy(*buf + *len, p, l);
    *len += l;
    (*buf)[*len] = 0;
  }
  return MGT_OK;
}
