/* Sampling the next token from logits (src/mgt/sample.h): mgt generate's and the serving
   engine's one sampler. */
#include "mgt/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
  float logit;
  int32_t id;
} cand;

/* Descending logits, ascending ids among equals: a total order, so results do not depend on
   the sort. */
static int by_logit(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Min-heap on the candidate order (the root is the worst kept), for top-k selection. */
static void sift_down(cand *h, int k, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, w = i;
    if (l < k && by_logit(&h[l], &h[w]) > 0) w = l;
    if (r < k && by_logit(&h[r], &h[w]) > 0) w = r;
    if (w == i) return;
    cand t = h[i];
    h[i] = h[w], h[w] = t;
    i = w;
  }
}

/* The k best of n logits, sorted, and every other equal to the k-th (Megatron-LM's and Hugging
   Face's top-k keep ties: logits below the k-th are removed), c holding n: O(n log k) instead
   of sorting all n. */
static int select_top_k(const float *logits, int n, int k, cand *c) {
  for (int i = 0; i < k; i++)
    c[i].logit = logits[i], c[i].id = i;
  for (int i = k / 2 - 1; i >= 0; i--)
    sift_down(c, k, i);
  for (int i = k; i < n; i++) {
    cand x = {logits[i], i};
    if (by_logit(&x, &c[0]) < 0) { /* better than the worst kept */
      c[0] = x;
      sift_down(c, k, 0);
    }
  }
  qsort(c, (size_t)k, sizeof *c, by_logit);
  const float last = c[k - 1].logit;
  int kept = 0; /* of the equals to the k-th, the lowest ids are in */
  for (int i = 0; i < k; i++)
    kept += c[i].logit == last;
  for (int i = 0; i < n; i++)
    if (logits[i] == last && kept-- <= 0) c[k++] = (cand){logits[i], i};
  return k;
}

int32_t mgt_sample_token(const float *logits, int n, int greedy, double temperature, int top_k,
                         double top_p, double u) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  if (greedy || n <= 1) return best;
  cand *c = malloc(sizeof *c * (size_t)n);
  double *p = malloc(sizeof *p * (size_t)n);
  if (!c || !p) {
    free(c), free(p);
    return best; /* out of memory: the mode is still a valid token */
  }
  const double mx = logits[best];
  int k = n;
  double sum = 0.0;
  if (top_k == 1) { /* greedy, as Megatron-LM's, whatever ties the mode has */
    free(c), free(p);
    return best;
  }
  if (top_k > 0 && top_k < n) {
    k = select_top_k(logits, n, top_k, c);
    for (int i = 0; i < k; i++)
      sum += (p[i] = exp(((double)c[i].logit - mx) / temperature));
  } else {
    for (int i = 0; i < n; i++) {
      c[i].logit = logits[i], c[i].id = i;
      sum += (p[i] = exp(((double)logits[i] - mx) / temperature));
    }
    if (top_p > 0) {
      /* The nucleus is a prefix of the sorted candidates, so it lies within any set of the
         most likely tokens whose mass reaches top_p: sort only such a set, found by lowering
         a probability threshold. */
      double t = 1e-3;
      int m = n;
      for (; t > 1e-12; t *= 1e-3) {
        double mass = 0.0;
        m = 0;
        for (int i = 0; i < n; i++)
          if (p[i] >= t) mass += p[i], m++;
        if (mass >= top_p * sum * (1.0 + 1e-9)) break; /* clear of rounding */
      }
      if (t <= 1e-12) m = n, t = -1.0; /* no threshold: sort everything */
      int w = 0;
      for (int i = 0; i < n; i++)
        if (p[i] >= t) c[w++] = c[i];
      qsort(c, (size_t)m, sizeof *c, by_logit);
      for (int i = 0; i < m; i++)
        p[i] = exp(((double)c[i].logit - mx) / temperature);
      k = m;
    }
  }
  if (top_p > 0) {
    /* the smallest prefix of the sorted candidates whose probability reaches top_p */
    double acc = 0.0;
    int keep = 0;
    while (keep < k && acc < top_p * sum)
      acc += p[keep++];
    k = keep > 0 ? keep : 1;
    sum = 0.0;
    for (int i = 0; i < k; i++)
      sum += p[i];
  }
  double target = u * sum, acc = 0.0;
  int32_t pick = c[k - 1].id;
  for (int i = 0; i < k; i++) {
    acc += p[i];
    if (target < acc) {
      pick = c[i].id;
      break;
    }
  }
  free(c);
  free(p);
  return pick;
}
