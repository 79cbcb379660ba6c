/* GPT-2 byte-level BPE. Pre-tokenization follows GPT-2's pattern
     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   written out by hand over UTF-8 code points; each piece is then merged by rank, all
   occurrences of the best pair at once, as OpenAI's encoder.py does. */
#include "mgt/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/json.h"
#include "mgt/sha256.h"
#include "tokenizer_impl.h"
#include "unicode.h"
#include "unicode_tables.h"

/* ---- small hash helpers ---- */

uint64_t mgt_tok_hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = mgt_fmix64(h ^ w);
    p += 8, n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, p, n);
  return mgt_fmix64(h ^ w ^ 0x5bd1e995ull);
}

static const uint64_t NO_MERGE = ~0ull;

static uint64_t merge_lookup(const mgt_tokenizer *t, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (size_t i = mgt_fmix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
    if (t->mkey[i] == key) return t->mval[i];
    if (t->mkey[i] == NO_MERGE) return NO_MERGE;
  }
}

mgt_status mgt_tok_merges_alloc(mgt_tokenizer *t, size_t n) {
  size_t mcap = 1;
  while (mcap < 2 * (n + 1))
    mcap <<= 1;
  t->mmask = mcap - 1;
  MGT_CHECK(mgt_calloc(mcap * sizeof(uint64_t), "merges", (void **)&t->mkey));
  MGT_CHECK(mgt_calloc(mcap * sizeof(uint64_t), "merges", (void **)&t->mval));
  for (size_t i = 0; i < mcap; i++)
    t->mkey[i] = NO_MERGE;
  return MGT_OK;
}

void mgt_tok_merge_add(mgt_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t m) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t h = mgt_fmix64(key) & t->mmask;
  while (t->mkey[h] != NO_MERGE && t->mkey[h] != key)
    h = (h + 1) & t->mmask;
  /* a pair listed twice takes its last rank, as encoder.py's dict, Hugging Face's HashMap and
     Tokenizers.js's Map read the list */
  t->mkey[h] = key;
  t->mval[h] = (uint64_t)rank << 32 | (uint32_t)m;
}

/* ---- code points ---- */

/* Unicode White_Space (the \s of Rust's and Python's regex engines). */
static int is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

static int class_slow(uint32_t cp) {
  if (is_space(cp)) return C_SPACE;
  if (mgt_in_ranges(mgt_unicode_letters, sizeof mgt_unicode_letters / sizeof mgt_unicode_letters[0],
                    cp))
    return C_LETTER;
  if (mgt_in_ranges(mgt_unicode_numbers, sizeof mgt_unicode_numbers / sizeof mgt_unicode_numbers[0],
                    cp))
    return C_NUMBER;
  return C_OTHER;
}

/* Decodes one code point at s[0..n); invalid or truncated sequences are one byte of class
   "other". Returns the length in bytes. */
static size_t next_cp(const mgt_tokenizer *t, const unsigned char *s, size_t n, int *cls) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cls = t->cls[c];
    return 1;
  }
  uint32_t cp;
  size_t len;
  if (c >= 0xC2 && c <= 0xDF)
    cp = c & 0x1F, len = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    cp = c & 0x0F, len = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    cp = c & 0x07, len = 4;
  else {
    *cls = C_OTHER;
    return 1;
  }
  if (len > n) {
    *cls = C_OTHER;
    return 1;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cls = C_OTHER;
      return 1;
    }
    cp = cp << 6 | (s[i] & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    *cls = C_OTHER;
    return 1;
  }
  *cls = cp < 0x10000 ? t->cls[cp] : class_slow(cp);
  return len;
}

/* ---- BPE of one piece ---- */

static mgt_status ensure_work(mgt_tokenizer *t, size_t n) {
  if (n <= t->work_cap) return MGT_OK;
  size_t cap = n * 2;
  int32_t *a = realloc(t->work, cap * sizeof *a), *b = NULL;
  if (a) t->work = a;
  if (a) b = realloc(t->work2, cap * sizeof *b);
  if (b) t->work2 = b;
  if (!a || !b) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing a piece of %zu bytes", n);
  t->work_cap = cap;
  return MGT_OK;
}

/* Two readings of BPE, the same for merges listed in the order training made them (every
   published file): GPT-2's encoder.py (and Megatron-LM's copy) merges every occurrence of the
   lowest-ranked pair, left to right, before looking again; Hugging Face's tokenizers (and
   Tokenizers.js) merge the leftmost lowest-ranked pair one at a time, so a pair a merge makes
   may go before the rest of the first pair's occurrences. `all` chooses encoder.py's. */

/* Short pieces: merge the lowest-ranked pair (every occurrence, or the leftmost), repeat. */
static size_t bpe_small(const mgt_tokenizer *t, int32_t *ids, int32_t *tmp, size_t n, int all) {
  while (n > 1) {
    uint64_t best = NO_MERGE;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < n; i++) {
      uint64_t v = merge_lookup(t, ids[i], ids[i + 1]);
      if (v < best) best = v, bi = i;
    }
    if (best == NO_MERGE) break;
    int32_t a = ids[bi], b = ids[bi + 1], merged = (int32_t)(uint32_t)best;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && ids[i] == a && ids[i + 1] == b && (all || i == bi)) {
        tmp[j++] = merged;
        i += 2;
      } else {
        tmp[j++] = ids[i++];
      }
    }
    memcpy(ids, tmp, j * sizeof *ids);
    n = j;
  }
  return n;
}

/* Long pieces: a heap of pairs by (rank, position) over a linked list, O(n log n): the
   leftmost lowest-ranked pair merged one at a time; with `all`, the pairs the merges of one
   rank make wait until every occurrence of that rank is merged. */
typedef struct heap_item {
  uint64_t rank;
  uint32_t pos;
  int32_t a, b;
} heap_item;

static int heap_less(const heap_item *x, const heap_item *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(heap_item *h, size_t *n, heap_item it) {
  size_t i = (*n)++;
  h[i] = it;
  while (i > 0 && heap_less(&h[i], &h[(i - 1) / 2])) {
    heap_item tmp = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = tmp;
    i = (i - 1) / 2;
  }
}

static heap_item heap_pop(heap_item *h, size_t *n) {
  heap_item top = h[0];
  h[0] = h[--*n];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && heap_less(&h[l], &h[m])) m = l;
    if (r < *n && heap_less(&h[r], &h[m])) m = r;
    if (m == i) break;
    heap_item tmp = h[i];
    h[i] = h[m];
    h[m] = tmp;
    i = m;
  }
  return top;
}

/* A pair a merge made: into the heap, or (`all`) into the wait list until its rank is done. */
static void made_pair(const mgt_tokenizer *t, heap_item *heap, size_t *hn, heap_item *wait,
                      size_t *wn, int all, const int32_t *ids, int32_t l, int32_t r) {
  const uint64_t v = merge_lookup(t, ids[l], ids[r]);
  if (v == NO_MERGE) return;
  const heap_item made = {v, (uint32_t)l, ids[l], ids[r]};
  if (all)
    wait[(*wn)++] = made;
  else
    heap_push(heap, hn, made);
}

static mgt_status bpe_large(const mgt_tokenizer *t, int32_t *ids, size_t *np, int all) {
  size_t n = *np;
  int32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
  heap_item *heap = malloc(4 * n * sizeof *heap); /* each merge pushes at most two */
  if (!next || !prev || !heap) {
    free(next), free(prev), free(heap);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing a piece of %zu bytes", n);
  }
  heap_item *wait = heap + 2 * n; /* `all`: the pairs made at the current rank */
  size_t hn = 0, wn = 0;
  uint64_t cur = NO_MERGE;
  for (size_t i = 0; i < n; i++) {
    next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    prev[i] = (int32_t)i - 1;
    if (i + 1 < n) {
      uint64_t v = merge_lookup(t, ids[i], ids[i + 1]);
      if (v != NO_MERGE) heap_push(heap, &hn, (heap_item){v, (uint32_t)i, ids[i], ids[i + 1]});
    }
  }
  for (;;) {
    if (wn && (!hn || heap[0].rank != cur)) { /* that rank is done */
      for (size_t k = 0; k < wn; k++)
        heap_push(heap, &hn, wait[k]);
      wn = 0;
    }
    if (!hn) break;
    heap_item it = heap_pop(heap, &hn);
    cur = it.rank;
    int32_t p = (int32_t)it.pos, q = next[p];
    /* stale: the node was merged away or its pair changed */
    if (ids[p] != it.a || q < 0 || ids[q] != it.b || prev[p] == -2) continue;
    ids[p] = (int32_t)(uint32_t)it.rank;
    int32_t r = next[q];
    next[p] = r;
    if (r >= 0) prev[r] = p;
    prev[q] = -2; /* dead */
    ids[q] = -1;
    if (prev[p] >= 0) made_pair(t, heap, &hn, wait, &wn, all, ids, prev[p], p);
    if (r >= 0) made_pair(t, heap, &hn, wait, &wn, all, ids, p, r);
  }
  size_t j = 0;
  for (int32_t i = 0; i >= 0; i = next[i])
    ids[j++] = ids[i];
  *np = j;
  free(next), free(prev), free(heap);
  return MGT_OK;
}

mgt_status mgt_tok_merge_ids(mgt_tokenizer *t, int32_t *ids, size_t *n) {
  const int all = t->hf == NULL;
  if (*n >= HEAP_MIN) return bpe_large(t, ids, n, all);
  MGT_CHECK(ensure_work(t, *n));
  *n = bpe_small(t, ids, t->work2, *n, all);
  return MGT_OK;
}

/* Stored value of a merge: rank in the high half, merged id in the low half. The heap
   orders by the whole value, which orders by rank. */
mgt_status mgt_tok_encode_piece(mgt_tokenizer *t, const unsigned char *s, size_t n, mgt_ids *out) {
  if (n == 1) return mgt_ids_push(out, t->byte_id[s[0]]);
  uint64_t h = 0;
  cache_slot *slot = NULL;
  if (n <= CACHE_MAX_PIECE) {
    h = mgt_tok_hash_bytes(s, n);
    size_t mask = ((size_t)1 << t->cache_bits) - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      cache_slot *c = &t->slots[i];
      if (c->key_len == 0) {
        slot = c;
        break;
      }
      if (c->hash == h && c->key_len == n && memcmp(t->ckeys + c->key_off, s, n) == 0) {
        for (size_t k = 0; k < c->n_ids; k++)
          MGT_CHECK(mgt_ids_push(out, t->cids[c->ids_off + k]));
        return MGT_OK;
      }
    }
  }
  MGT_CHECK(ensure_work(t, n));
  int32_t *ids = t->work;
  for (size_t i = 0; i < n; i++)
    ids[i] = t->byte_id[s[i]];
  size_t m = n;
  if (n < HEAP_MIN) {
    m = bpe_small(t, ids, t->work2, n, t->hf == NULL);
  } else {
    /* the heap orders pairs by the stored value; the merged id rides in it */
    MGT_CHECK(bpe_large(t, ids, &m, t->hf == NULL));
  }
  for (size_t k = 0; k < m; k++)
    MGT_CHECK(mgt_ids_push(out, ids[k]));
  if (slot) {
    /* a full cache starts over: pieces repeat locally in text */
    if (t->n_cached * 2 >= ((size_t)1 << t->cache_bits)) {
      memset(t->slots, 0, sizeof(cache_slot) << t->cache_bits);
      t->n_cached = t->ckeys_used = t->cids_used = 0;
      return MGT_OK;
    }
    slot->hash = h;
    slot->key_off = (uint32_t)t->ckeys_used;
    slot->key_len = (uint16_t)n;
    slot->ids_off = (uint32_t)t->cids_used;
    slot->n_ids = (uint16_t)m;
    memcpy(t->ckeys + t->ckeys_used, s, n);
    memcpy(t->cids + t->cids_used, ids, m * sizeof *ids);
    t->ckeys_used += n;
    t->cids_used += m;
    t->n_cached++;
  }
  return MGT_OK;
}

/* ---- pre-tokenization ---- */

static size_t run_of(const mgt_tokenizer *t, const unsigned char *s, size_t n, size_t i, int cls) {
  while (i < n) {
    int c;
    size_t l = next_cp(t, s + i, n - i, &c);
    if (c != cls) break;
    i += l;
  }
  return i;
}

/* Length of the contraction at s (after the apostrophe is checked), or 0. */
static size_t contraction(const unsigned char *s, size_t n) {
  if (n >= 2 && (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd')) return 2;
  if (n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                 (s[1] == 'l' && s[2] == 'l')))
    return 3;
  return 0;
}

mgt_status mgt_tok_encode(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out) {
  const unsigned char *s = (const unsigned char *)text;
  if (t->kind == KIND_WORDPIECE) return mgt_wp_encode(t->wp, text, len, out);
  if (t->kind == KIND_HF) return mgt_hf_encode(t, text, len, out);
  if (t->kind == KIND_BYTES) {
    for (size_t i = 0; i < len; i++)
      MGT_CHECK(mgt_ids_push(out, s[i]));
    return MGT_OK;
  }
  size_t i = 0;
  while (i < len) {
    size_t end;
    int c0;
    size_t l0 = next_cp(t, s + i, len - i, &c0);
    size_t k = s[i] == '\'' ? contraction(s + i, len - i) : 0;
    if (k) {
      end = i + k;
    } else if (c0 != C_SPACE) {
      end = run_of(t, s, len, i, c0);
    } else {
      int c1 = C_SPACE;
      if (i + l0 < len) next_cp(t, s + i + l0, len - i - l0, &c1);
      if (s[i] == ' ' && i + l0 < len && c1 != C_SPACE) {
        end = run_of(t, s, len, i + l0, c1); /* " ?" then a run */
      } else {
        /* whitespace: all of a run that ends the text or is followed by whitespace; before
           anything else, the run minus its last character (unless that leaves nothing) */
        size_t j = i, last = i;
        while (j < len) {
          int c;
          size_t l = next_cp(t, s + j, len - j, &c);
          if (c != C_SPACE) break;
          last = j;
          j += l;
        }
        end = (j < len && last > i) ? last : j;
      }
    }
    MGT_CHECK(mgt_tok_encode_piece(t, s + i, end - i, out));
    i = end;
  }
  return MGT_OK;
}

/* ---- decoding ---- */

mgt_status mgt_tok_decode(const mgt_tokenizer *t, const int32_t *ids, size_t n, char **buf,
                          size_t *len, size_t *cap) {
  if (t->kind == KIND_WORDPIECE) return mgt_wp_decode(t->wp, ids, n, buf, len, cap);
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    MGT_REQUIRE(id >= 0 && id < t->n_vocab, "token id %d is outside the vocabulary [0, %d)", id,
                t->n_vocab);
    const unsigned char *p;
    unsigned char byte = (unsigned char)id;
    size_t l;
    if (t->kind == KIND_BYTES) {
      if (id == t->eod) continue;
      p = &byte;
      l = 1;
    } else {
      p = t->blob + t->tok_off[id];
      l = t->tok_len[id];
    }
    if (*len + l + 1 > *cap) {
      size_t nc = (*cap ? *cap * 2 : 256) + l;
      char *nb = realloc(*buf, nc);
      if (!nb) MGT_FAIL(MGT_ERR_NOMEM, "out of memory decoding %zu tokens", n);
      *buf = nb;
      *cap = nc;
    }
    memcpy(*buf + *len, p, l);
    *len += l;
    (*buf)[*len] = 0;
  }
  return MGT_OK;
}

/* ---- loading ---- */

mgt_status mgt_ids_push(mgt_ids *v, int32_t id) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 1024;
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory holding %zu token ids", v->n);
    v->ids = p;
    v->cap = cap;
  }
  v->ids[v->n++] = id;
  return MGT_OK;
}

void mgt_ids_free(mgt_ids *v) {
  free(v->ids);
  memset(v, 0, sizeof *v);
}

/* GPT-2 spells every byte as a printable code point: printable Latin-1 bytes stand for
   themselves, the other 68 are shifted to 256 + k in byte order. */
void mgt_tok_byte_tables(uint32_t b2u[256], int16_t u2b[324]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
  }
  for (int i = 0; i < 324; i++)
    u2b[i] = -1;
  for (int b = 0; b < 256; b++)
    u2b[b2u[b]] = (int16_t)b;
}

/* Byte-level spelling (UTF-8) to raw bytes; returns the length or -1. */
long mgt_tok_unspell(const int16_t u2b[324], const unsigned char *s, size_t n, unsigned char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (s[i] < 0x80) {
      cp = s[i++];
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return -1;
    }
    if (cp >= 324 || u2b[cp] < 0) return -1;
    out[o++] = (unsigned char)u2b[cp];
  }
  return (long)o;
}

mgt_status mgt_tok_alloc_cache(mgt_tokenizer *t, int bits) {
  t->cache_bits = bits;
  MGT_CHECK(mgt_calloc(sizeof(cache_slot) << bits, "tokenizer cache", (void **)&t->slots));
  MGT_CHECK(
      mgt_calloc((size_t)CACHE_MAX_PIECE << (bits - 1), "tokenizer cache", (void **)&t->ckeys));
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * ((size_t)CACHE_MAX_PIECE << (bits - 1)), "tokenizer cache",
                       (void **)&t->cids));
  return MGT_OK;
}

mgt_status mgt_tok_alloc_common(mgt_tokenizer *t) {
  MGT_CHECK(mgt_calloc(0x10000, "code point classes", (void **)&t->cls));
  for (uint32_t cp = 0; cp < 0x10000; cp++)
    t->cls[cp] = (uint8_t)class_slow(cp);
  return mgt_tok_alloc_cache(t, CACHE_BITS);
}

mgt_status mgt_tok_clone(const mgt_tokenizer *src, mgt_tokenizer **out) {
  *out = NULL;
  mgt_tokenizer *t = NULL;
  MGT_CHECK(mgt_calloc(sizeof *t, "tokenizer", (void **)&t));
  *t = *src;
  t->clone = 1;
  t->wp = NULL, t->hf = NULL;
  t->slots = NULL, t->ckeys = NULL, t->cids = NULL;
  t->n_cached = t->ckeys_used = t->cids_used = 0;
  t->work = t->work2 = NULL, t->work_cap = 0;
  mgt_status st = MGT_OK;
  if (src->slots) st = mgt_tok_alloc_cache(t, CLONE_CACHE_BITS);
  if (st == MGT_OK && src->wp) st = mgt_wp_clone(src->wp, &t->wp);
  if (st == MGT_OK && src->hf) st = mgt_hf_clone(src->hf, &t->hf);
  if (st != MGT_OK) {
    mgt_tok_destroy(&t);
    return st;
  }
  *out = t;
  return MGT_OK;
}

mgt_status mgt_tok_create_bytes(mgt_tokenizer **out) {
  *out = NULL;
  mgt_tokenizer *t = NULL;
  MGT_CHECK(mgt_calloc(sizeof *t, "tokenizer", (void **)&t));
  t->kind = KIND_BYTES;
  t->type = MGT_TOKENIZER_BYTES;
  t->n_vocab = 257;
  for (int i = 0; i < 256; i++)
    t->bytes[i] = (char)i;
  t->eod = 256;
  unsigned char d[32];
  mgt_sha256 h;
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, "ByteTokenizer", 13);
  mgt_sha256_final(&h, d);
  mgt_sha256_hex(d, t->hash);
  *out = t;
  return MGT_OK;
}

static mgt_status load_vocab(mgt_tokenizer *t, const char *path, const char *text, size_t len,
                             const int16_t u2b[324]) {
  mgt_json_parser *jp = NULL;
  const mgt_json *root = NULL;
  MGT_CHECK(mgt_json_parser_create(&jp));
  mgt_status st = mgt_json_parse(jp, text, len, &root);
  if (st != MGT_OK) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", mgt_error_message());
    mgt_json_parser_destroy(&jp);
    MGT_FAIL(MGT_ERR_INPUT, "--vocab-file %s: %s", path, msg);
  }
  if (root->type != MGT_JSON_OBJECT || root->len == 0) {
    mgt_json_parser_destroy(&jp);
    MGT_FAIL(MGT_ERR_INPUT, "--vocab-file %s: expected a JSON object of token: id", path);
  }
  size_t n = root->len, blob = 0;
  for (size_t i = 0; i < n; i++)
    blob += root->key_lens[i];
  t->n_vocab = (int)n;
  if ((st = mgt_calloc(blob + 1, "vocabulary", (void **)&t->blob)) != MGT_OK ||
      (st = mgt_calloc(n * sizeof(uint32_t), "vocabulary", (void **)&t->tok_off)) != MGT_OK ||
      (st = mgt_calloc(n * sizeof(uint32_t), "vocabulary", (void **)&t->tok_len)) != MGT_OK) {
    mgt_json_parser_destroy(&jp);
    return st;
  }
  for (size_t i = 0; i < n; i++)
    t->tok_len[i] = UINT32_MAX;
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    const mgt_json *v = &root->items[i];
    double idd = v->number;
    long bytes = mgt_tok_unspell(u2b, (const unsigned char *)root->keys[i], root->key_lens[i],
                                 t->blob + used);
    if (v->type != MGT_JSON_NUMBER || idd < 0 || idd >= (double)n || idd != (double)(long)idd ||
        bytes < 0 || t->tok_len[(long)idd] != UINT32_MAX) {
      mgt_json_parser_destroy(&jp);
      MGT_FAIL(MGT_ERR_INPUT,
               "--vocab-file %s: entry %zu is not a byte-level token with a unique id in [0, %zu)",
               path, i, n);
    }
    t->tok_off[(long)idd] = (uint32_t)used;
    t->tok_len[(long)idd] = (uint32_t)bytes;
    used += (size_t)bytes;
  }
  mgt_json_parser_destroy(&jp);
  return MGT_OK;
}

/* Finds the id whose bytes are b[0..n), or -1 (linear probing over a temporary table). */
typedef struct vocab_index {
  int32_t *slot;
  size_t mask;
} vocab_index;

static int32_t vocab_find(const mgt_tokenizer *t, const vocab_index *ix, const unsigned char *b,
                          size_t n) {
  for (size_t i = mgt_tok_hash_bytes(b, n) & ix->mask;; i = (i + 1) & ix->mask) {
    int32_t id = ix->slot[i];
    if (id < 0) return -1;
    if (t->tok_len[id] == n && memcmp(t->blob + t->tok_off[id], b, n) == 0) return id;
  }
}

static mgt_status load_merges(mgt_tokenizer *t, const char *path, char *text, size_t len,
                              const int16_t u2b[324]) {
  vocab_index ix = {NULL, 0};
  size_t cap = 1;
  while (cap < 4 * (size_t)t->n_vocab)
    cap <<= 1;
  ix.mask = cap - 1;
  MGT_CHECK(mgt_calloc(cap * sizeof(int32_t), "vocabulary index", (void **)&ix.slot));
  for (size_t i = 0; i < cap; i++)
    ix.slot[i] = -1;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    size_t i = mgt_tok_hash_bytes(t->blob + t->tok_off[id], t->tok_len[id]) & ix.mask;
    while (ix.slot[i] >= 0)
      i = (i + 1) & ix.mask;
    ix.slot[i] = id;
  }
  mgt_status st = MGT_OK;
  size_t n_lines = 0;
  for (size_t i = 0; i < len; i++)
    n_lines += text[i] == '\n';
  MGT_TRY(mgt_tok_merges_alloc(t, n_lines));
  unsigned char a[512], b[512], ab[1024];
  uint32_t rank = 0;
  size_t line_no = 0;
  for (char *p = text, *e = text + len; p < e; line_no++) {
    char *nl = memchr(p, '\n', (size_t)(e - p));
    char *end = nl ? nl : e;
    size_t ll = (size_t)(end - p);
    if (ll && p[ll - 1] == '\r') ll--;
    if (ll == 0 || (line_no == 0 && ll >= 8 && memcmp(p, "#version", 8) == 0)) {
      p = nl ? nl + 1 : e;
      continue;
    }
    char *sp = memchr(p, ' ', ll);
    long la = -1, lb = -1;
    if (sp && (size_t)(sp - p) < 512 && ll - (size_t)(sp - p) - 1 < 512) {
      la = mgt_tok_unspell(u2b, (unsigned char *)p, (size_t)(sp - p), a);
      lb = mgt_tok_unspell(u2b, (unsigned char *)sp + 1, ll - (size_t)(sp - p) - 1, b);
    }
    int32_t ia = la > 0 ? vocab_find(t, &ix, a, (size_t)la) : -1;
    int32_t ib = lb > 0 ? vocab_find(t, &ix, b, (size_t)lb) : -1;
    int32_t im = -1;
    if (ia >= 0 && ib >= 0) {
      memcpy(ab, a, (size_t)la);
      memcpy(ab + la, b, (size_t)lb);
      im = vocab_find(t, &ix, ab, (size_t)(la + lb));
    }
    if (im < 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--merge-file %s: line %zu is not a merge of two vocabulary tokens into a "
                    "third",
                    path, line_no + 1);
    mgt_tok_merge_add(t, ia, ib, rank++, im);
    p = nl ? nl + 1 : e;
  }
  for (int bt = 0; bt < 256; bt++) {
    unsigned char c = (unsigned char)bt;
    t->byte_id[bt] = vocab_find(t, &ix, &c, 1);
    if (t->byte_id[bt] < 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--vocab-file: byte 0x%02x has no token, so some text cannot be encoded", bt);
  }
  t->eod = vocab_find(t, &ix, (const unsigned char *)"<|endoftext|>", 13);
  if (t->eod < 0) {
    st = MGT_ERROR(MGT_ERR_INPUT, "--vocab-file: no <|endoftext|> token to end documents with");
  }
done:
  mgt_free(ix.slot);
  return st;
}

mgt_status mgt_tok_load_gpt2(const char *vocab_file, const char *merge_file, mgt_tokenizer **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_tokenizer *t = NULL;
  char *vtext = NULL, *mtext = NULL;
  size_t vlen = 0, mlen = 0;
  uint32_t b2u[256];
  int16_t u2b[324];
  mgt_tok_byte_tables(b2u, u2b);
  MGT_TRY(mgt_calloc(sizeof *t, "tokenizer", (void **)&t));
  t->kind = KIND_GPT2;
  t->type = MGT_TOKENIZER_GPT2;
  MGT_TRY(mgt_read_file("--vocab-file", vocab_file, &vtext, &vlen));
  MGT_TRY(mgt_read_file("--merge-file", merge_file, &mtext, &mlen));
  MGT_TRY(load_vocab(t, vocab_file, vtext, vlen, u2b));
  MGT_TRY(load_merges(t, merge_file, mtext, mlen, u2b));
  MGT_TRY(mgt_tok_alloc_common(t));
  {
    mgt_sha256 h;
    unsigned char d[32];
    mgt_sha256_init(&h);
    mgt_sha256_update(&h, vtext, vlen);
    mgt_sha256_update(&h, "\n--merges--\n", 12);
    mgt_sha256_update(&h, mtext, mlen);
    mgt_sha256_final(&h, d);
    mgt_sha256_hex(d, t->hash);
  }
  *out = t;
  t = NULL;
done:
  free(vtext);
  free(mtext);
  mgt_tok_destroy(&t);
  return st;
}

mgt_status mgt_tok_load_wordpiece(const char *vocab_file, int lower, mgt_tokenizer **out) {
  *out = NULL;
  mgt_tokenizer *t = NULL;
  MGT_CHECK(mgt_calloc(sizeof *t, "tokenizer", (void **)&t));
  t->kind = KIND_WORDPIECE;
  t->type = lower ? MGT_TOKENIZER_BERT_LOWER : MGT_TOKENIZER_BERT_CASED;
  mgt_status st = mgt_wp_load(vocab_file, lower, &t->wp);
  char *text = NULL;
  size_t len = 0;
  if (st == MGT_OK) st = mgt_read_file("--vocab-file", vocab_file, &text, &len);
  if (st != MGT_OK) {
    mgt_tok_destroy(&t);
    return st;
  }
  t->n_vocab = mgt_wp_vocab_size(t->wp);
  t->eod = mgt_wp_special(t->wp, "[SEP]"); /* BERT has no end of document: [SEP] ends segments */
  mgt_sha256 h; /* the rules (cased or not) are part of what made the ids */
  unsigned char d[32];
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, mgt_tokenizer_names[t->type], strlen(mgt_tokenizer_names[t->type]));
  mgt_sha256_update(&h, "\n", 1);
  mgt_sha256_update(&h, text, len);
  mgt_sha256_final(&h, d);
  mgt_sha256_hex(d, t->hash);
  free(text);
  *out = t;
  return MGT_OK;
}

mgt_status mgt_tok_open(int type, const char *vocab_file, const char *merge_file,
                        mgt_tokenizer **out) {
  *out = NULL;
  switch (type) {
  case MGT_TOKENIZER_BYTES: return mgt_tok_create_bytes(out);
  case MGT_TOKENIZER_GPT2:
    MGT_REQUIRE(vocab_file && vocab_file[0] && merge_file && merge_file[0],
                "GPT2BPETokenizer needs --vocab-file and --merge-file");
    return mgt_tok_load_gpt2(vocab_file, merge_file, out);
  case MGT_TOKENIZER_BERT_LOWER:
  case MGT_TOKENIZER_BERT_CASED:
    MGT_REQUIRE(vocab_file && vocab_file[0], "%s needs --vocab-file (vocab.txt)",
                mgt_tokenizer_names[type]);
    return mgt_tok_load_wordpiece(vocab_file, type == MGT_TOKENIZER_BERT_LOWER, out);
  case MGT_TOKENIZER_HF:
    MGT_REQUIRE(vocab_file && vocab_file[0], "HuggingFaceTokenizer needs --tokenizer-model "
                                             "(tokenizer.json)");
    return mgt_tok_load_hf(vocab_file, out);
  case MGT_TOKENIZER_NULL: MGT_FAIL(MGT_ERR_INPUT, "%s", MGT_NULL_TOKENIZER_WHY);
  default: MGT_FAIL(MGT_ERR_INPUT, "unknown tokenizer type %d", type);
  }
}

void mgt_tok_destroy(mgt_tokenizer **tok) {
  mgt_tokenizer *t = *tok;
  if (!t) return;
  mgt_wp_free(&t->wp);
  mgt_hf_free(&t->hf);
  if (!t->clone) {
    mgt_free(t->blob);
    mgt_free(t->tok_off);
    mgt_free(t->tok_len);
    mgt_free(t->mkey);
    mgt_free(t->mval);
    mgt_free(t->cls);
  }
  mgt_free(t->slots);
  mgt_free(t->ckeys);
  mgt_free(t->cids);
  free(t->work);
  free(t->work2);
  mgt_free(t);
  *tok = NULL;
}

int mgt_tok_vocab_size(const mgt_tokenizer *t) { return t->n_vocab; }
int32_t mgt_tok_eod(const mgt_tokenizer *t) { return t->eod; }
const char *mgt_tok_name(const mgt_tokenizer *t) { return mgt_tokenizer_names[t->type]; }
int mgt_tok_type(const mgt_tokenizer *t) { return t->type; }

mgt_status mgt_tok_encode_ends(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out,
                               mgt_ids *ends) {
  MGT_REQUIRE(len <= INT32_MAX, "a text of %zu bytes is too long to place its tokens", len);
  MGT_REQUIRE(t->kind != KIND_WORDPIECE,
              "WordPiece cannot say where its tokens are in the text (it lower-cases and splits)");
  if (t->kind == KIND_HF) return mgt_hf_encode_ends(t, text, len, out, ends);
  const size_t k0 = out->n; /* GPT-2 and bytes: each id stands for its own bytes */
  MGT_CHECK(mgt_tok_encode(t, text, len, out));
  int64_t at = 0;
  for (size_t k = k0; k < out->n; k++) {
    at += t->kind == KIND_BYTES ? 1 : t->tok_len[out->ids[k]];
    MGT_CHECK(mgt_ids_push(ends, (int32_t)(at < (int64_t)len ? at : (int64_t)len)));
  }
  return MGT_OK;
}

mgt_status mgt_tok_piece(const mgt_tokenizer *t, int32_t id, const char **s, size_t *len) {
  MGT_REQUIRE(id >= 0 && id < t->n_vocab, "token id %d is outside the vocabulary [0, %d)", id,
              t->n_vocab);
  if (t->kind == KIND_WORDPIECE) return mgt_wp_piece(t->wp, id, s, len);
  if (t->kind == KIND_BYTES) {
    *s = id < 256 ? t->bytes + id : "";
    *len = id < 256 ? 1 : 0;
    return MGT_OK;
  }
  *s = (const char *)t->blob + t->tok_off[id];
  *len = t->tok_len[id];
  return MGT_OK;
}
const char *mgt_tok_hash(const mgt_tokenizer *t) { return t->hash; }
int32_t mgt_tok_special(const mgt_tokenizer *t, const char *name) {
  return t->kind == KIND_WORDPIECE ? mgt_wp_special(t->wp, name) : -1;
}
