/* Encoding with a Hugging Face tokenizer.json (read by hf_tokenizer.c): added tokens split out,
   each piece of text between them normalized, pre-tokenized and modelled; and, for
   mgt_tok_encode_ends, where each id ends in the text (the normalizations keep a map of
   positions back to it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "hf_tok_impl.h"
#include "unicode.h"
#include "mgt/json.h"

/* The bytes at s[0..n) (not a valid character) that one U+FFFD replaces: the maximal subpart
   (mgt_utf8_bad_len), and an encoded surrogate (JSON's lone "\ud800", kept as WTF-8 by the
   reader) whole, as Tokenizers.js reads such a string. */
static size_t bad_len(const unsigned char *s, size_t n) {
  if (s[0] == 0xED && n >= 3 && s[1] >= 0xA0 && s[1] <= 0xBF && s[2] >= 0x80 && s[2] <= 0xBF)
    return 3;
  return mgt_utf8_bad_len(s, n);
}

/* Valid UTF-8 for the regex: each invalid part (bad_len) becomes U+FFFD; n is updated.
   Returns s itself when it was valid. */
static const unsigned char *valid_utf8(mgt_hf_tok *h, const unsigned char *s, size_t *n,
                                       mgt_status *st) {
  size_t i = 0, len = *n;
  while (i < len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    if (l < 0) break;
    i += (size_t)l;
  }
  if (i == len) return s;
  *st = mgt_hf_grow((void **)&h->buf, &h->buf_cap, 3 * len + 1, 1);
  if (*st != MGT_OK) return NULL;
  size_t o = 0;
  for (i = 0; i < len;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    if (l < 0) {
      memcpy(h->buf + o, "\xEF\xBF\xBD", 3), o += 3, i += bad_len(s + i, len - i);
    } else {
      memcpy(h->buf + o, s + i, (size_t)l), o += (size_t)l, i += (size_t)l;
    }
  }
  *n = o;
  return h->buf;
}

/* The bytes of the character at s[0..n) (1 for a byte that starts none). */
static size_t char_len(const unsigned char *s, size_t n) {
  utf8proc_int32_t cp;
  const utf8proc_ssize_t l = utf8proc_iterate(s, (utf8proc_ssize_t)n, &cp);
  return l > 0 ? (size_t)l : 1;
}

/* One piece of the pre-tokenizer's output through the model. */
static mgt_status model_piece(mgt_tokenizer *t, const unsigned char *s, size_t n, mgt_ids *out) {
  mgt_hf_tok *h = t->hf;
  if (n == 0) return MGT_OK;
  if (h->ignore_merges) {
    const int32_t id = mgt_hf_find_key(h, s, n);
    if (id >= 0) return mgt_ids_push(out, id);
  }
  if (h->byte_level) return mgt_tok_encode_piece(t, s, n, out);
  /* characters, those missing from the vocabulary as bytes (or unknown), then merged */
  MGT_CHECK(mgt_hf_grow((void **)&h->ids, &h->ids_cap, 4 * n + 1, sizeof *h->ids));
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    const size_t cl = char_len(s + i, n - i);
    const int32_t id = mgt_hf_find_key(h, s + i, cl);
    if (id >= 0) {
      h->ids[m++] = id;
    } else if (h->byte_fallback) {
      for (size_t k = 0; k < cl; k++)
        h->ids[m++] = h->fallback[s[i + k]];
    } else {
      MGT_REQUIRE(h->unk >= 0, "text holds a character the vocabulary has no token for, and no "
                               "unk_token");
      if (!(h->fuse_unk && m > 0 && h->ids[m - 1] == h->unk)) h->ids[m++] = h->unk;
    }
    i += cl;
  }
  MGT_CHECK(mgt_tok_merge_ids(t, h->ids, &m));
  for (size_t k = 0; k < m; k++)
    MGT_CHECK(mgt_ids_push(out, h->ids[k]));
  return MGT_OK;
}

/* ---- where ids end (mgt_tok_encode_ends) ---- */

static mgt_status maps_for(mgt_hf_tok *h, size_t need) {
  if (need <= h->map_cap) return MGT_OK;
  size_t c = h->map_cap ? h->map_cap : 256;
  while (c < need)
    c *= 2;
  size_t *a = realloc(h->map, c * sizeof *a);
  if (a) h->map = a;
  size_t *b = a ? realloc(h->map2, c * sizeof *b) : NULL;
  if (b) h->map2 = b;
  if (!a || !b) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu bytes", need);
  h->map_cap = c;
  return MGT_OK;
}

/* utf8proc_map's NFC */
#define NFC_OPTS ((utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE))

static int ccc(uint32_t c) { return utf8proc_get_property((utf8proc_int32_t)c)->combining_class; }

/* NFC of valid UTF-8 s[0..n), the bytes utf8proc_map(NFC_OPTS) gives, in linear time: each
   character decomposed alone, the marks put in canonical order here (utf8proc's own ordering
   swaps neighbours, quadratic in a run of marks), then composed by utf8proc. *out (UTF-8) lies
   in h->u32 until the next call. */
static mgt_status nfc(mgt_hf_tok *h, const unsigned char *s, size_t n, const unsigned char **out,
                      size_t *outn) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    utf8proc_int32_t cp, d[32];
    const utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
    MGT_REQUIRE(l > 0, "NFC: not UTF-8 at byte %zu", i);
    const utf8proc_ssize_t m = utf8proc_decompose_char(cp, d, 32, NFC_OPTS, NULL);
    MGT_REQUIRE(m >= 0 && m <= 32, "NFC: U+%04X decomposes into %zd code points", (unsigned)cp,
                (ptrdiff_t)m);
    MGT_CHECK(mgt_hf_grow((void **)&h->u32, &h->u32_cap, k + (size_t)m + 1, sizeof *h->u32));
    for (utf8proc_ssize_t j = 0; j < m; j++)
      h->u32[k++] = (uint32_t)d[j];
    i += (size_t)l;
  }
  MGT_CHECK(mgt_hf_grow((void **)&h->u32b, &h->u32b_cap, k + 1, sizeof *h->u32b));
  mgt_canonical_order(h->u32, k, ccc, h->u32b);
  /* composed and written as UTF-8 over the code points (4 bytes each hold one's UTF-8) */
  const utf8proc_ssize_t r =
      k ? utf8proc_reencode((utf8proc_int32_t *)h->u32, (utf8proc_ssize_t)k, NFC_OPTS) : 0;
  MGT_REQUIRE(r >= 0, "NFC of %zu bytes: %s", n, utf8proc_errmsg(r));
  *out = (const unsigned char *)h->u32, *outn = (size_t)r;
  return MGT_OK;
}

/* Whether NFC of s[0..a + b) is NFC of s[0..a) then NFC of s[a..a + b): nothing composes or
   reorders across a. */
static mgt_status nfc_apart(mgt_hf_tok *h, const unsigned char *s, size_t a, size_t b, int *apart) {
  const unsigned char *d;
  size_t l1, l2, l;
  MGT_CHECK(nfc(h, s, a, &d, &l1));
  MGT_CHECK(mgt_hf_grow((void **)&h->pbuf, &h->pbuf_cap, 2 * (a + b) + 16, 1));
  memcpy(h->pbuf, d, l1);
  MGT_CHECK(nfc(h, s + a, b, &d, &l2));
  MGT_CHECK(mgt_hf_grow((void **)&h->pbuf, &h->pbuf_cap, l1 + l2 + 1, 1));
  memcpy(h->pbuf + l1, d, l2);
  MGT_CHECK(nfc(h, s, a + b, &d, &l));
  *apart = l == l1 + l2 && !memcmp(d, h->pbuf, l);
  return MGT_OK;
}

/* Maps the NFC of s[a, b), l bytes, into map[0..l): unchanged, byte for byte; changed, in
   proportion (a token made of part of it holds its part of the input). */
static void map_part(const unsigned char *s, size_t a, size_t b, const unsigned char *d, size_t l,
                     size_t *map) {
  const int same = l == b - a && !memcmp(d, s + a, l);
  for (size_t k = 0; k < l; k++)
    map[k] = a + (same ? k : k * (b - a) / l);
}

/* The map of a piece s[i, e) whose NFC, want[0..wn), differs from it: cut before each starter
   that stays apart from the text since the last such cut (nfc_apart), each part mapped alone
   (map_part), so that a part NFC changes moves no token's end outside it. *fine 0: the parts'
   NFCs joined are not the piece's, nothing mapped. */
static mgt_status nfc_parts(mgt_hf_tok *h, const unsigned char *s, size_t i, size_t e,
                            const unsigned char *want, size_t wn, size_t *map, int *fine) {
  *fine = 0;
  size_t unit = i, part = i, q = 0;
  for (size_t p = i + char_len(s + i, e - i); p <= e;) {
    const size_t cl = p < e ? char_len(s + p, e - p) : 0;
    int cut = p == e;
    if (!cut) {
      utf8proc_int32_t cp;
      (void)utf8proc_iterate(s + p, (utf8proc_ssize_t)(e - p), &cp);
      if (!ccc((uint32_t)cp)) {
        /* a unit grows only while starters compose or reorder with it (Hangul's jamo, a few
           at most; Tibetan vowels that decompose into marks, without end): past 256 bytes,
           the piece is mapped whole, so that the cost stays linear */
        if (p - unit > 256) return MGT_OK;
        MGT_CHECK(nfc_apart(h, s + unit, p - unit, cl, &cut));
        if (cut) unit = p; /* else it composed: the unit goes on */
      }
    }
    if (cut) {
      const unsigned char *d;
      size_t l;
      MGT_CHECK(nfc(h, s + part, p - part, &d, &l));
      if (q + l > wn || memcmp(d, want + q, l)) return MGT_OK;
      map_part(s, part, p, d, l, map + q);
      q += l, part = p;
    }
    if (p == e) break;
    p += cl;
  }
  *fine = q == wn;
  return MGT_OK;
}

/* NFC with h->map[k] the input position of normalized position k. The text is composed in
   pieces that each start at an ASCII byte: no character composes with or reorders across a
   following ASCII character, so the pieces compose as the whole does. A piece NFC changes is
   mapped part by part (nfc_parts), or, where the parts do not compose as it does, whole. */
static mgt_status nfc_mapped(mgt_hf_tok *h, const unsigned char *s, size_t n, size_t *outn) {
  MGT_CHECK(mgt_hf_grow((void **)&h->nbuf, &h->nbuf_cap, 3 * n + 1, 1));
  MGT_CHECK(maps_for(h, 3 * n + 2));
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t e = i + 1;
    while (e < n && s[e] >= 0x80)
      e++;
    const unsigned char *d = s + i;
    size_t l = e - i;
    if (e - i > 1 || s[i] >= 0x80) MGT_CHECK(nfc(h, s + i, e - i, &d, &l));
    if (l == e - i && memcmp(d, s + i, e - i) == 0) {
      for (size_t k = i; k < e; k++)
        h->nbuf[o] = s[k], h->map[o++] = k;
    } else {
      /* NFC may grow a piece: 3x bounds UTF-8 here */
      MGT_REQUIRE(o + l + 1 <= h->nbuf_cap, "NFC grew %zu bytes past the bound", e - i);
      memcpy(h->nbuf + o, d, l);
      int fine;
      MGT_CHECK(nfc_parts(h, s, i, e, h->nbuf + o, l, h->map + o, &fine));
      if (!fine) map_part(s, i, e, h->nbuf + o, l, h->map + o);
      o += l;
    }
    i = e;
  }
  h->map[o] = n;
  *outn = o;
  return MGT_OK;
}

/* The length in the normalized text of id, found at s[0..left). */
static size_t id_len(const mgt_hf_tok *h, int32_t id, const unsigned char *s, size_t left) {
  if (left == 0) return 0;
  if (h->byte_fallback && h->fallback[s[0]] == id) return 1;
  if (id == h->unk && !h->byte_level && !h->byte_fallback) {
    size_t l = char_len(s, left), cl;
    if (mgt_hf_find_key(h, s, l) < 0) { /* the characters it stands for: one, or a fused run */
      while (h->fuse_unk && l < left &&
             mgt_hf_find_key(h, s + l, cl = char_len(s + l, left - l)) < 0)
        l += cl;
      return l;
    }
  }
  const size_t l = h->key_len[id] == UINT32_MAX ? left : h->key_len[id];
  return l < left ? l : left;
}

/* The ends of ids[k0..) that the model made of normalized s[a, b). */
static mgt_status piece_ends(mgt_hf_tok *h, const unsigned char *s, size_t a, size_t b,
                             const mgt_ids *out, size_t k0, size_t base) {
  for (size_t k = k0, pos = a; k < out->n; k++) {
    pos += id_len(h, out->ids[k], s + pos, b - pos);
    if (k + 1 == out->n) pos = b;
    MGT_CHECK(mgt_ids_push(h->ends, (int32_t)(base + h->map[pos])));
  }
  return MGT_OK;
}

/* One piece through the model, and where its ids end when asked. */
static mgt_status model_at(mgt_tokenizer *t, const unsigned char *s, size_t a, size_t b,
                           mgt_ids *out, size_t base) {
  const size_t k0 = out->n;
  MGT_CHECK(model_piece(t, s + a, b - a, out));
  return t->hf->ends ? piece_ends(t->hf, s, a, b, out, k0, base) : MGT_OK;
}

/* Text between added tokens: normalized, pre-tokenized, modelled. `base`: where s starts in
   the text (for the ends). */
static mgt_status segment(mgt_tokenizer *t, const unsigned char *s, size_t n, mgt_ids *out,
                          size_t base) {
  mgt_hf_tok *h = t->hf;
  if (n == 0) return MGT_OK;
  unsigned char *norm = NULL;
  if (h->ends) { /* the identity map, then each normalization's */
    MGT_CHECK(maps_for(h, n + 1));
    for (size_t k = 0; k <= n; k++)
      h->map[k] = k;
  }
  if (h->nfc && h->ends) {
    size_t l;
    MGT_CHECK(nfc_mapped(h, s, n, &l));
    s = h->nbuf, n = l;
  } else if (h->nfc) {
    const unsigned char *d;
    size_t l;
    MGT_CHECK(nfc(h, s, n, &d, &l));
    norm = malloc(l + 1);
    if (!norm) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu bytes", n);
    memcpy(norm, d, l);
    s = norm, n = l;
  }
  mgt_status st = MGT_OK;
  if (h->prepend || h->spaces || (h->byte_level && h->prefix_space && s[0] != ' ')) {
    /* "▁" before the text, every space as "▁"; or ByteLevel's prefix space */
    unsigned char *b = malloc(3 * n + 4);
    st = b && h->ends ? maps_for(h, 3 * n + 5) : MGT_OK;
    if (!b || st != MGT_OK) {
      free(norm);
      free(b);
      MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu bytes", n);
    }
    size_t o = 0, *m2 = h->map2, *m = h->map;
    if (h->prepend) {
      memcpy(b, "\xE2\x96\x81", 3), o = 3;
      if (h->ends) m2[0] = m2[1] = m2[2] = m[0];
    }
    if (h->byte_level && h->prefix_space && s[0] != ' ') {
      if (h->ends) m2[o] = m[0];
      b[o++] = ' ';
    }
    for (size_t i = 0; i < n; i++)
      if (h->spaces && s[i] == ' ') {
        if (h->ends) m2[o] = m[i], m2[o + 1] = m2[o + 2] = m[i + 1];
        memcpy(b + o, "\xE2\x96\x81", 3), o += 3;
      } else {
        if (h->ends) m2[o] = m[i];
        b[o++] = s[i];
      }
    if (h->ends) m2[o] = m[n], h->map = m2, h->map2 = m;
    free(norm);
    norm = b, s = b, n = o;
  }
  if (!h->split) {
    st = model_at(t, s, 0, n, out, base);
    free(norm);
    return st;
  }
  /* Isolated: every match a piece, and the text between matches too */
  size_t at = 0, gap = 0;
  while (at <= n && st == MGT_OK) {
    int rc = pcre2_match(h->split, s, n, at, PCRE2_NO_UTF_CHECK, h->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) { /* a limit of the matcher (backtracking, depth): this text, not the file */
      PCRE2_UCHAR msg[120];
      pcre2_get_error_message(rc, msg, sizeof msg);
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "%s: the pre-tokenizer's regex gives up on this text (PCRE2: %s; Hugging "
                     "Face's Oniguruma has such limits too)",
                     h->path ? h->path : "tokenizer.json", (const char *)msg);
      break;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(h->md);
    size_t b0 = ov[0], b1 = ov[1];
    if (b1 == b0) { /* an empty match ends the text before it, as Hugging Face splits there */
      if (b0 > gap) st = model_at(t, s, gap, b0, out, base), gap = b0;
      at = b0 + 1;
      while (at < n && (s[at] & 0xC0) == 0x80)
        at++;
      continue;
    }
    st = model_at(t, s, gap, b0, out, base);
    if (st == MGT_OK) st = model_at(t, s, b0, b1, out, base);
    at = gap = b1;
  }
  if (st == MGT_OK) st = model_at(t, s, gap, n, out, base);
  free(norm);
  return st;
}

/* Where byte k of the text, made valid UTF-8, came from: a part replaced by U+FFFD is 3. */
static mgt_status valid_map(const unsigned char *text, size_t len, size_t **out) {
  size_t *m = malloc((3 * len + 1) * sizeof *m);
  if (!m) MGT_FAIL(MGT_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(text + i, (utf8proc_ssize_t)(len - i), &cp);
    const size_t out_l = l < 0 ? 3 : (size_t)l,
                 in_l = l < 0 ? bad_len(text + i, len - i) : (size_t)l;
    for (size_t k = 0; k < out_l; k++)
      m[o++] = k ? i + in_l : i;
    i += in_l;
  }
  m[o] = len;
  *out = m;
  return MGT_OK;
}

mgt_status mgt_hf_encode(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out) {
  mgt_hf_tok *h = t->hf;
  mgt_status st = MGT_OK;
  const size_t len0 = len;
  const unsigned char *s = valid_utf8(h, (const unsigned char *)text, &len, &st);
  MGT_CHECK(st);
  size_t *vmap = NULL; /* the text was not valid UTF-8: where its bytes went */
  mgt_ids *ends = h->ends;
  if (ends && s != (const unsigned char *)text)
    MGT_CHECK(valid_map((const unsigned char *)text, len0, &vmap));
  const size_t first_end = ends ? ends->n : 0;
  size_t seg = 0;
  for (size_t i = 0; i < len;) {
    int found = -1; /* the longest added token at i */
    for (int32_t node = 0, j = 0; h->first_byte[s[i]] && i + (size_t)j < len; j++) {
      node = mgt_hf_trie_step(h, node, s[i + (size_t)j]);
      if (node < 0) break;
      if (h->trie_end[node] >= 0) found = h->trie_end[node];
    }
    if (found < 0) {
      i++;
      continue;
    }
    MGT_TRY(segment(t, s + seg, i - seg, out, seg));
    MGT_TRY(mgt_ids_push(out, h->added[found].id));
    i += h->added[found].n;
    if (ends) MGT_TRY(mgt_ids_push(ends, (int32_t)i));
    seg = i;
  }
  MGT_TRY(segment(t, s + seg, len - seg, out, seg));
  if (vmap) /* the ends were positions in the valid text */
    for (size_t k = first_end; k < ends->n; k++)
      ends->ids[k] = (int32_t)vmap[ends->ids[k]];
done:
  free(vmap);
  return st;
}

mgt_status mgt_hf_encode_ends(mgt_tokenizer *t, const char *text, size_t len, mgt_ids *out,
                              mgt_ids *ends) {
  t->hf->ends = ends;
  mgt_status st = mgt_hf_encode(t, text, len, out);
  t->hf->ends = NULL;
  return st;
}
