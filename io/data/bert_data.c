/* BERT's samples as Megatron-LM v2.5 builds them: see io/data/bert_data.h. The arithmetic follows
   the Python and C++ it comes from, down to the floating-point operations, so that the same
   seed gives the same samples. */
#include "bert_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- MT19937 and MT19937-64 (Matsumoto and Nishimura), as std:: and numpy have them ---- */

void mgt_mt19937_seed(mgt_mt19937 *g, uint32_t seed) {
  g->mt[0] = seed;
  for (int i = 1; i < 624; i++)
    g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
  g->i = 624;
}

uint32_t mgt_mt19937_next(mgt_mt19937 *g) {
  if (g->i >= 624) {
    for (int k = 0; k < 624; k++) {
      uint32_t y = (g->mt[k] & 0x80000000u) | (g->mt[(k + 1) % 624] & 0x7FFFFFFFu);
      g->mt[k] = g->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908B0DFu : 0u);
    }
    g->i = 0;
  }
  uint32_t y = g->mt[g->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9D2C5680u;
  y ^= (y << 15) & 0xEFC60000u;
  return y ^ (y >> 18);
}

void mgt_mt19937_64_seed(mgt_mt19937_64 *g, uint64_t seed) {
  g->mt[0] = seed;
  for (int i = 1; i < 312; i++)
    g->mt[i] = 6364136223846793005ull * (g->mt[i - 1] ^ (g->mt[i - 1] >> 62)) + (uint64_t)i;
  g->i = 312;
}

uint64_t mgt_mt19937_64_next(mgt_mt19937_64 *g) {
  if (g->i >= 312) {
    for (int k = 0; k < 312; k++) {
      uint64_t y = (g->mt[k] & 0xFFFFFFFF80000000ull) | (g->mt[(k + 1) % 312] & 0x7FFFFFFFull);
      g->mt[k] = g->mt[(k + 156) % 312] ^ (y >> 1) ^ ((y & 1u) ? 0xB5026F5AA96619E9ull : 0ull);
    }
    g->i = 0;
  }
  uint64_t x = g->mt[g->i++];
  x ^= (x >> 29) & 0x5555555555555555ull;
  x ^= (x << 17) & 0x71D67FFFEDA60000ull;
  x ^= (x << 37) & 0xFFF7EEE000000000ull;
  return x ^ (x >> 43);
}

/* ---- numpy.random.RandomState (legacy) ---- */

double mgt_np_random(mgt_mt19937 *g) {
  uint32_t a = mgt_mt19937_next(g) >> 5, b = mgt_mt19937_next(g) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

static uint64_t mask_of(uint64_t max) {
  uint64_t m = max;
  m |= m >> 1, m |= m >> 2, m |= m >> 4, m |= m >> 8, m |= m >> 16, m |= m >> 32;
  return m;
}

int64_t mgt_np_interval(mgt_mt19937 *g, uint64_t max) {
  if (max == 0) return 0;
  const uint64_t m = mask_of(max); /* the ranges here are below 2^32 */
  uint64_t v;
  while ((v = mgt_mt19937_next(g) & m) > max) {
  }
  return (int64_t)v;
}

int64_t mgt_np_randint(mgt_mt19937 *g, int64_t lo, int64_t hi) {
  const uint64_t rng = (uint64_t)(hi - lo - 1);
  if (rng == 0) return lo; /* numpy draws nothing for a range of one */
  return lo + mgt_np_interval(g, rng);
}

/* ---- the samples mapping (helpers.cpp) ---- */

enum { LONG_SENTENCE = 512 };

static uint32_t target_len(mgt_mt19937 *g, int ratio, int max_len) {
  uint32_t r = mgt_mt19937_next(g);
  if (r % (uint32_t)ratio == 0) return 2 + r % (uint32_t)(max_len - 1);
  return (uint32_t)max_len;
}

mgt_status mgt_bert_mapping(const mgt_bert_corpus *c, int64_t a, int64_t b, int64_t needed,
                            int max_len, double short_seq_prob, int min_sentences, uint64_t seed,
                            const char *what, int64_t **rows, int64_t *n) {
  *rows = NULL;
  *n = 0;
  MGT_REQUIRE(max_len >= 2, "%s: --seq-length must leave room for 2 tokens beside [CLS] and [SEP]",
              what);
  const int ratio = (int)lround(1.0 / short_seq_prob);
  MGT_REQUIRE(short_seq_prob > 0 && ratio >= 1, "--short-seq-prob %g is not in (0, 1]",
              short_seq_prob);
  mgt_mt19937 g;
  mgt_mt19937_seed(&g, (uint32_t)seed);
  int64_t count = 0, cap = 0, *m = NULL;
  for (int epoch = 0; count < needed; epoch++) {
    if (epoch == 1 && count == 0) break; /* no document gives a sample: no second try */
    for (int64_t d = a; d < b; d++) {
      const int64_t first = c->doc_sent[d], last = c->doc_sent[d + 1];
      int64_t remain = last - first;
      int long_sentence = 0;
      for (int64_t s = first; remain > 1 && s < last && !long_sentence; s++)
        long_sentence = c->sent_off[s + 1] - c->sent_off[s] > LONG_SENTENCE;
      if (remain < min_sentences || long_sentence) continue;
      int64_t start = first, size = 0, sentences = 0;
      uint32_t target = target_len(&g, ratio, max_len);
      for (int64_t s = first; s < last; s++) {
        size += c->sent_off[s + 1] - c->sent_off[s];
        sentences++;
        remain--;
        if ((size >= target && remain > 1 && sentences >= min_sentences) || remain == 0) {
          if (count == cap) {
            int64_t *p = realloc(m, sizeof *p * 3 * (size_t)(cap = cap ? 2 * cap : 4096));
            if (!p) {
              free(m);
              MGT_FAIL(MGT_ERR_NOMEM, "%s: out of memory for %lld BERT samples", what,
                       (long long)count);
            }
            m = p;
          }
          m[3 * count] = start, m[3 * count + 1] = s + 1, m[3 * count + 2] = target;
          count++;
          start = s + 1;
          target = target_len(&g, ratio, max_len);
          size = sentences = 0;
        }
      }
    }
  }
  if (count == 0) {
    free(m);
    MGT_FAIL(MGT_ERR_INPUT,
             "%s: no BERT sample: no document of the split has %d sentences or more (was the "
             "dataset made with --split-sentences?)",
             what, min_sentences);
  }
  mgt_mt19937_64 h;
  mgt_mt19937_64_seed(&h, seed + 1);
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = (int64_t)(mgt_mt19937_64_next(&h) % (uint64_t)(i + 1));
    for (int k = 0; k < 3; k++) {
      int64_t t = m[3 * i + k];
      m[3 * i + k] = m[3 * j + k];
      m[3 * j + k] = t;
    }
  }
  *rows = m;
  *n = count;
  return MGT_OK;
}

/* ---- one sample (bert_dataset.py, dataset_utils.py) ---- */

typedef struct seq {
  int32_t *v;
  int64_t n;
} seq;

/* Pops from the front or the back of s. */
static void drop_one(seq *s, int front) {
  if (front) memmove(s->v, s->v + 1, sizeof *s->v * (size_t)(s->n - 1));
  s->n--;
}

mgt_status mgt_bert_sample(const mgt_bert_corpus *c, mgt_bert_token_fn token, const void *ctx,
                           const int64_t row[3], const mgt_bert_vocab *v, int T, double mask_prob,
                           int binary_head, uint64_t seed, uint64_t idx, int32_t *tokens,
                           int32_t *types, int32_t *labels, int32_t *length, int32_t *is_random) {
  const int64_t s0 = row[0], s1 = row[1], target = row[2], n_sent = s1 - s0;
  const int64_t n_tok = c->sent_off[s1] - c->sent_off[s0];
  MGT_REQUIRE(target + 3 <= T && n_sent >= 1, "a BERT sample of target %lld does not fit %d",
              (long long)target, T);
  mgt_mt19937 g;
  mgt_mt19937_seed(&g, (uint32_t)((seed + idx) % 4294967296ull));
  int32_t *buf = malloc(sizeof *buf * (size_t)(2 * n_tok + 8));
  int64_t *cand = malloc(sizeof *cand * (size_t)(2 * (T + 2)));
  int64_t *order = malloc(sizeof *order * (size_t)(T + 1));
  uint8_t *covered = calloc((size_t)T, 1);
  if (!buf || !cand || !order || !covered) {
    free(buf), free(cand), free(order), free(covered);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory building a BERT sample");
  }
  /* segments A and B: a random cut between sentences, swapped half of the time */
  int64_t a_end = n_sent;
  *is_random = 0;
  if (binary_head) {
    a_end = 1;
    if (n_sent >= 3) a_end = mgt_np_randint(&g, 1, n_sent);
  }
  const int64_t cut = c->sent_off[s0 + a_end] - c->sent_off[s0];
  seq A = {buf, cut}, B = {buf + n_tok + 4, n_tok - cut};
  for (int64_t i = 0; i < n_tok; i++) {
    int32_t t = token(ctx, c->sent_off[s0] + i);
    if (i < cut)
      A.v[i] = t;
    else
      B.v[i - cut] = t;
  }
  if (binary_head && mgt_np_random(&g) < 0.5) {
    seq t = A;
    A = B, B = t;
    *is_random = 1;
  }
  /* truncate to the target, from the longer segment, at a random end */
  while (A.n + B.n > target) {
    seq *s = A.n > B.n ? &A : &B;
    drop_one(s, mgt_np_random(&g) < 0.5);
  }
  /* [CLS] A [SEP] B [SEP] */
  int64_t n = 0;
  tokens[n] = v->cls, types[n++] = 0;
  for (int64_t i = 0; i < A.n; i++)
    tokens[n] = A.v[i], types[n++] = 0;
  tokens[n] = v->sep, types[n++] = 0;
  if (B.n > 0) {
    for (int64_t i = 0; i < B.n; i++)
      tokens[n] = B.v[i], types[n++] = 1;
    tokens[n] = v->sep, types[n++] = 1;
  }
  for (int64_t i = 0; i < T; i++)
    labels[i] = -1;
  /* Whole words: a "##" piece joins the word before it, across a [SEP] too ([CLS] and [SEP]
     are no candidates), so a word's positions need not be contiguous: word w is the positions
     pos[ws[w] .. ws[w+1]). */
  int64_t n_words = 0, n_pos = 0, *pos = cand, *ws = cand + T + 1;
  for (int64_t i = 0; i < n; i++) {
    if (tokens[i] == v->cls || tokens[i] == v->sep) continue;
    int cont = tokens[i] >= 0 && tokens[i] < v->size && v->continuation[tokens[i]];
    if (!cont || n_words == 0) ws[n_words++] = n_pos;
    pos[n_pos++] = i;
  }
  ws[n_words] = n_pos;
  /* the budget stays a double, as Python's min(0.15 * target, max(1, round(0.15 * len))) */
  const double by_len = fmax(1.0, rint((double)n * mask_prob)), by_target = mask_prob * target;
  const double budget = by_target < by_len ? by_target : by_len;
  /* the n-gram choice: p = (1/n) / sum(1/m), normalized twice as numpy's choice is given it */
  double p0[3] = {1.0, 1.0 / 2.0, 1.0 / 3.0}, s = (p0[0] + p0[1]) + p0[2];
  for (int k = 0; k < 3; k++)
    p0[k] /= s;
  s = (p0[0] + p0[1]) + p0[2];
  for (int k = 0; k < 3; k++)
    p0[k] /= s;
  double cdf[3] = {p0[0], p0[0] + p0[1], (p0[0] + p0[1]) + p0[2]};
  for (int k = 0; k < 3; k++)
    cdf[k] /= cdf[2];
  for (int64_t w = 0; w < n_words; w++)
    order[w] = w;
  for (int64_t i = n_words - 1; i > 0; i--) { /* np_rng.shuffle(ngram_indexes) */
    int64_t j = mgt_np_interval(&g, (uint64_t)i), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  int64_t masked = 0;
  for (int64_t k = 0; k < n_words; k++) {
    if ((double)masked >= budget) break;
    const int64_t w = order[k];
    const double u = mgt_np_random(&g);
    int64_t ng = 1 + (u >= cdf[0]) + (u >= cdf[1]); /* searchsorted(cdf, u, right) + 1 */
    /* the n-gram of words [w, w + ng) (fewer at the end), shortened while over budget */
    int64_t span, last;
    for (;;) {
      last = w + ng < n_words ? w + ng : n_words;
      span = ws[last] - ws[w];
      if ((double)(masked + span) <= budget || ng == 1) break;
      ng--;
    }
    if ((double)(masked + span) > budget) continue;
    int hit = 0;
    for (int64_t k2 = ws[w]; k2 < ws[last] && !hit; k2++)
      hit = covered[pos[k2]];
    if (hit) continue;
    for (int64_t k2 = ws[w]; k2 < ws[last]; k2++) {
      const int64_t i = pos[k2];
      covered[i] = 1;
      labels[i] = tokens[i];
      if (mgt_np_random(&g) < 0.8)
        tokens[i] = v->mask; /* 80% [MASK] */
      else if (mgt_np_random(&g) >= 0.5)
        tokens[i] = (int32_t)mgt_np_randint(&g, 0, v->size); /* 10% a random id */
      masked++;                                              /* 10% kept */
    }
  }
  for (int64_t i = n; i < T; i++)
    tokens[i] = v->pad, types[i] = v->pad;
  *length = (int32_t)n;
  free(buf), free(cand), free(order), free(covered);
  return MGT_OK;
}
