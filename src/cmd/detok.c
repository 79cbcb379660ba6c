#define _GNU_SOURCE /* memmem */
/* WikiText detokenizer (Megatron-LM's zero-shot evaluation applies it before tokenizing), and
   the word count that normalizes the adjusted perplexity. Rules, in order, over the whole text:
     "s '" -> "s'"; "/' D/" (D a digit) -> "/'[0-9]/" (a literal replacement, as Megatron has it);
     " @-@ " -> "-", " @,@ " -> ",", " @.@ " -> ".";
     " : " " ; " " . " " ! " " ? " " , " lose their leading space;
     (..) [..] {..} ".." '..' pairs: whitespace just inside removed (first opener to the next
   closer, across lines, left to right);
     "= = = =" -> "====", "= = =" -> "===", "= =" -> "==";
     " ° " -> "°"; " \n" -> "\n"; "\n " -> "\n"; " N " -> " 1 "; " 's" -> "'s".
   Whitespace is Python's str.isspace(). */
#include <stdlib.h>
#include <string.h>

#include "mgt/eval.h"

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int put(buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->cap ? 2 * b->cap : 4096) + n;
    char *q = realloc(b->p, cap);
    if (!q) return 0;
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 1;
}

size_t mgt_space_at(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  unsigned c = s[0];
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  if (n >= 2 && c == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
  if (n >= 3 && c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3; /* U+1680 */
  if (n >= 3 && c == 0xE2 && s[1] == 0x80 &&
      ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
    return 3; /* U+2000-200A, 2028, 2029, 202F */
  if (n >= 3 && c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
  if (n >= 3 && c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

size_t mgt_space_before(const unsigned char *s, size_t n) {
  for (size_t k = 1; k <= 3 && k <= n; k++)
    if (mgt_space_at(s + n - k, k) == k) return k;
  return 0;
}

static int replace_all(buf *in, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to);
  buf out = {0};
  const char *s = in->p, *end = in->p + in->n;
  while (s < end) {
    const char *hit = (size_t)(end - s) >= fl ? memmem(s, (size_t)(end - s), from, fl) : NULL;
    if (!hit) {
      if (!put(&out, s, (size_t)(end - s))) return 0;
      break;
    }
    if (!put(&out, s, (size_t)(hit - s)) || !put(&out, to, tl)) return 0;
    s = hit + fl;
  }
  if (!out.p && !put(&out, "", 0)) return 0;
  free(in->p);
  *in = out;
  return 1;
}

/* "/' " digit "/" becomes the literal "/'[0-9]/". */
static int slash_rule(buf *in) {
  buf out = {0};
  const char *s = in->p;
  size_t n = in->n;
  for (size_t i = 0; i < n;) {
    if (i + 5 <= n && s[i] == '/' && s[i + 1] == '\'' && s[i + 2] == ' ' && s[i + 3] >= '0' &&
        s[i + 3] <= '9' && s[i + 4] == '/') {
      if (!put(&out, "/'[0-9]/", 8)) return 0;
      i += 5;
    } else {
      if (!put(&out, s + i, 1)) return 0;
      i++;
    }
  }
  if (!out.p && !put(&out, "", 0)) return 0;
  free(in->p);
  *in = out;
  return 1;
}

/* open ... close: strip the whitespace just inside the pair. */
static int pair_rule(buf *in, char open, char close) {
  buf out = {0};
  const unsigned char *s = (const unsigned char *)in->p;
  size_t n = in->n;
  for (size_t i = 0; i < n;) {
    const unsigned char *c =
        s[i] == (unsigned char)open ? memchr(s + i + 1, close, n - i - 1) : NULL;
    if (!c) {
      if (!put(&out, (const char *)s + i, 1)) return 0;
      i++;
      continue;
    }
    size_t a = i + 1, b = (size_t)(c - s), k;
    while (a < b && (k = mgt_space_at(s + a, b - a)) > 0)
      a += k;
    while (b > a && (k = mgt_space_before(s + a, b - a)) > 0)
      b -= k;
    if (!put(&out, &open, 1) || !put(&out, (const char *)s + a, b - a) || !put(&out, &close, 1))
      return 0;
    i = (size_t)(c - s) + 1;
  }
  if (!out.p && !put(&out, "", 0)) return 0;
  free(in->p);
  *in = out;
  return 1;
}

mgt_status mgt_wikitext_detokenize(const char *text, size_t n, char **out, size_t *out_n) {
  buf b = {0};
  if (!put(&b, text, n)) MGT_FAIL(MGT_ERR_NOMEM, "out of memory detokenizing %zu bytes", n);
  static const char *const pairs[][2] = {
      {"s '", "s'"}, {NULL, NULL},  {" @-@ ", "-"}, {" @,@ ", ","}, {" @.@ ", "."}, {" : ", ": "},
      {" ; ", "; "}, {" . ", ". "}, {" ! ", "! "},  {" ? ", "? "},  {" , ", ", "},
  };
  int ok = 1;
  for (size_t r = 0; ok && r < sizeof pairs / sizeof pairs[0]; r++)
    ok = pairs[r][0] ? replace_all(&b, pairs[r][0], pairs[r][1]) : slash_rule(&b);
  ok = ok && pair_rule(&b, '(', ')') && pair_rule(&b, '[', ']') && pair_rule(&b, '{', '}') &&
       pair_rule(&b, '"', '"') && pair_rule(&b, '\'', '\'');
  static const char *const tail[][2] = {
      {"= = = =", "===="}, {"= = =", "==="}, {"= =", "=="},  {" \xC2\xB0 ", "\xC2\xB0"},
      {" \n", "\n"},       {"\n ", "\n"},    {" N ", " 1 "}, {" 's", "'s"},
  };
  for (size_t r = 0; ok && r < sizeof tail / sizeof tail[0]; r++)
    ok = replace_all(&b, tail[r][0], tail[r][1]);
  if (!ok) {
    free(b.p);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory detokenizing %zu bytes", n);
  }
  *out = b.p;
  *out_n = b.n;
  return MGT_OK;
}

size_t mgt_wikitext_word_count(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  size_t a = 0, b = n, k;
  while (a < b && (k = mgt_space_at(s + a, b - a)) > 0)
    a += k;
  while (b > a && (k = mgt_space_before(s + a, b - a)) > 0)
    b -= k;
  size_t words = 1;
  for (size_t i = a; i < b; i++)
    words += s[i] == ' ';
  return words;
}
