/* A rule-based sentence splitter for English prose (include io/data/sentences.h). A sentence ends
   at a blank line, or at a run of . ! ? (with the closing quotes and brackets after it) that is
   followed by white space, unless
     - the next word starts with a lower-case letter ("e.g. this", "3 p.m. and");
     - the run is one period after an abbreviation that goes with the next word: titles such as
       Mr. Dr. St., and e.g. i.e. cf. vs. U.S.; references such as No. Fig. vol. pp. when a
       number follows (a digit, or a Roman numeral of two letters or more: "Vol. II"), as "no."
       and "p." also end sentences ("The answer is no. We left.");
     - the run is one period after an initial (one capital letter) and the next word is
       capitalized ("J. R. R. Tolkien").
   A period inside a word or a number (3.14, a.m, example.com) is no end: white space must
   follow. What it gets wrong: a sentence that really ends in an abbreviation or an initial
   ("... in the U.S. Then"), and sentences that start with a lower-case letter. */
#include "sentences.h"

#include <string.h>

/* Abbreviations that are no sentence end, lower case, without their final period: those that
   go with any next word, then those that go with a number only. */
static const char *const JOINING[] = {
    "mr",  "mrs", "ms",  "messrs", "dr",   "prof", "sr",     "jr",   "st",   "mt",
    "ft",  "rev", "hon", "gen",    "col",  "lt",   "sgt",    "capt", "cmdr", "adm",
    "gov", "sen", "rep", "pres",   "supt", "det",  "insp",   "vs",   "v",    "cf",
    "viz", "e.g", "i.e", "u.s",    "u.k",  "ca",   "approx", "op",   "cit",  NULL};
static const char *const NUMBERING[] = {"no",  "nos", "vol",  "vols", "ch", "chap",
                                        "sec", "fig", "figs", "p",    "pp", NULL};

static int is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_term(unsigned char c) { return c == '.' || c == '!' || c == '?'; }

/* Length of a closing quote or bracket at s (0 if none): ASCII, or ” ’ » in UTF-8. */
static size_t closing_at(const unsigned char *s, size_t n) {
  if (n >= 1 && (s[0] == '"' || s[0] == '\'' || s[0] == ')' || s[0] == ']' || s[0] == '}'))
    return 1;
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 && (s[2] == 0x9D || s[2] == 0x99)) return 3;
  if (n >= 2 && s[0] == 0xC2 && s[1] == 0xBB) return 2;
  return 0;
}

/* Length of an opening quote or bracket at s (0 if none): ASCII, or “ ‘ « in UTF-8. */
static size_t opening_at(const unsigned char *s, size_t n) {
  if (n >= 1 && (s[0] == '"' || s[0] == '\'' || s[0] == '(' || s[0] == '[' || s[0] == '{'))
    return 1;
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 && (s[2] == 0x9C || s[2] == 0x98)) return 3;
  if (n >= 2 && s[0] == 0xC2 && s[1] == 0xAB) return 2;
  return 0;
}

/* Whether word w[0..n) is in the list, in any case. */
static int listed(const char *const *list, const unsigned char *w, size_t n) {
  char low[16];
  if (n == 0 || n >= sizeof low) return 0;
  for (size_t i = 0; i < n; i++)
    low[i] = (char)(w[i] >= 'A' && w[i] <= 'Z' ? w[i] + 32 : w[i]);
  low[n] = 0;
  for (int i = 0; list[i]; i++)
    if (strcmp(low, list[i]) == 0) return 1;
  return 0;
}

static int roman(unsigned char c) { return strchr("IVXLCDM", c) && c; }

/* Whether s[j..n) starts with a number: a digit, or two or more Roman numerals ending the
   word. */
static int number_at(const unsigned char *s, size_t n, size_t j) {
  if (j < n && s[j] >= '0' && s[j] <= '9') return 1;
  size_t e = j;
  while (e < n && roman(s[e]))
    e++;
  return e - j >= 2 && (e == n || !((s[e] | 32) >= 'a' && (s[e] | 32) <= 'z'));
}

/* Whether the terminator run [t, r) of s, followed by white space at `after`, ends a
   sentence. */
static int ends_sentence(const unsigned char *s, size_t n, size_t t, size_t r, size_t after) {
  size_t j = after;
  while (j < n && is_space(s[j]))
    j++;
  if (j == n) return 1;
  for (size_t o; (o = opening_at(s + j, n - j)) > 0;)
    j += o;
  if (j < n && s[j] >= 'a' && s[j] <= 'z') return 0; /* the next word is lower case */
  if (r - t != 1 || s[t] != '.') return 1;           /* ! ? and ellipses end here */
  size_t w = t;                                      /* the word before the period */
  while (w > 0 && !is_space(s[w - 1]))
    w--;
  for (size_t o; w < t && (o = opening_at(s + w, t - w)) > 0;)
    w += o;
  if (listed(JOINING, s + w, t - w)) return 0;
  if (listed(NUMBERING, s + w, t - w) && number_at(s, n, j)) return 0;
  int next_upper = j < n && s[j] >= 'A' && s[j] <= 'Z';
  if (t - w == 1 && s[w] >= 'A' && s[w] <= 'Z' && next_upper) return 0; /* an initial */
  return 1;
}

static size_t emit(const unsigned char *s, size_t b, size_t e, mgt_span *out, size_t cap,
                   size_t k) {
  while (b < e && is_space(s[b]))
    b++;
  while (e > b && is_space(s[e - 1]))
    e--;
  if (e == b) return k;
  if (k < cap) out[k].begin = b, out[k].end = e;
  return k + 1;
}

size_t mgt_split_sentences(const char *text, size_t n, mgt_span *out, size_t cap) {
  const unsigned char *s = (const unsigned char *)text;
  size_t k = 0, start = 0;
  for (size_t i = 0; i < n;) {
    if (s[i] == '\n') { /* a blank line ends a paragraph, and its sentence */
      size_t j = i + 1;
      while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r'))
        j++;
      if (j < n && s[j] == '\n') {
        k = emit(s, start, i, out, cap, k);
        start = j;
        i = j;
        continue;
      }
      i++;
      continue;
    }
    if (!is_term(s[i])) {
      i++;
      continue;
    }
    size_t r = i;
    while (r < n && is_term(s[r]))
      r++;
    size_t close = r;
    for (size_t c; (c = closing_at(s + close, n - close)) > 0;)
      close += c;
    if (close < n && is_space(s[close]) && ends_sentence(s, n, i, r, close)) {
      k = emit(s, start, close, out, cap, k);
      start = close;
    }
    i = close > r ? close : r;
  }
  return emit(s, start, n, out, cap, k);
}
