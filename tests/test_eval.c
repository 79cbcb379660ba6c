/* The pieces of the evaluations that need no model: the WikiText detokenizer on hand-written
   cases of every rule, the word count, the sliding-window arithmetic against a direct
   computation, LAMBADA's example construction and the sampler.
   With arguments `--detokenize IN OUT` it writes the detokenized IN to OUT (for the Python
   cross-check in tests/eval.sh) and prints the word count. */
#include <string.h>

#include "mgt/eval.h"
#include "mgt/generate.h"
#include "mgt/sample.h"
#include "mgt/tokenizer.h"
#include "testutil.h"

static void detok_case(const char *in, const char *want) {
  char *out = NULL;
  size_t n = 0;
  T_OK(mgt_wikitext_detokenize(in, strlen(in), &out, &n));
  T_CHECK(n == strlen(want) && memcmp(out, want, n) == 0,
          "detokenize \"%s\": got \"%s\", want \"%s\"", in, out, want);
  free(out);
}

static void test_detokenizer(void) {
  detok_case("the players ' union", "the players' union");
  detok_case("a /' 5/ b", "a /'[0-9]/ b");
  detok_case("1 @,@ 000 @.@ 5 km", "1,000.5 km");
  detok_case("well @-@ known", "well-known");
  detok_case("a : b ; c . d ! e ? f , g", "a: b; c. d! e? f, g");
  detok_case("x ( a b ) y [ c ] z { d }", "x (a b) y [c] z {d}");
  detok_case("he said \" hello there \" . Then", "he said \"hello there\". Then");
  detok_case("the ' quoted ' word", "the 'quoted' word");
  detok_case("( unclosed", "( unclosed");
  detok_case("( a ) ( b )", "(a) (b)");
  detok_case("( spans\n lines )", "(spans\nlines)");
  detok_case(" = = = Sub = = = \n", " === Sub ===\n");
  detok_case(" = = Section = = \n", " == Section ==\n");
  detok_case(" = = = = Deep = = = = \n", " ==== Deep ====\n");
  detok_case("at 40 \xC2\xB0 C", "at 40\xC2\xB0"
                                 "C");
  detok_case("end \n start", "end\nstart");
  detok_case("the N word", "the 1 word");
  detok_case("John 's book", "John's book");
  detok_case("", "");
  /* the rules compose in order: " , " after the numbers, " 's" last */
  detok_case("1 @,@ 2 , the man 's", "1,2, the man's");
  /* word count: split of the stripped text on single spaces */
  const char *w = "  a b  c\n d \n";
  T_CHECK(mgt_wikitext_word_count(w, strlen(w)) == 5, "word count %zu, want 5",
          mgt_wikitext_word_count(w, strlen(w)));
  T_CHECK(mgt_wikitext_word_count("x", 1) == 1, "one word");
  T_CHECK(mgt_wikitext_word_count("", 0) == 1, "empty text counts as one, as Python's split");
}

/* Megatron-LM's dataset, written out directly: window w starts at w * stride, a target t
   counts when its mask is set. Every target must count exactly once and agree with
   mgt_eval_window. */
static void test_windows(void) {
  for (size_t n = 2; n <= 70; n++)
    for (int seq = 1; seq <= 12; seq++)
      for (int stride = 1; stride <= seq; stride++) {
        size_t targets = n - 1;
        size_t want = 1;
        if (targets > (size_t)seq) want = (targets - (size_t)seq + (size_t)stride - 1) / stride + 1;
        size_t windows = mgt_eval_windows(n, seq, stride);
        T_CHECK(windows == want, "n %zu seq %d stride %d: %zu windows, want %zu", n, seq, stride,
                windows, want);
        int count[80] = {0};
        for (size_t w = 0; w < windows; w++) {
          int first, last;
          mgt_eval_window(n, seq, stride, w, &first, &last);
          for (int t = 0; t < seq; t++) {
            size_t target = w * (size_t)stride + (size_t)t + 1; /* token predicted at t */
            int real = target < n;
            int mask = real && (w == 0 || t >= seq - stride);
            int mine = t >= first && t < last;
            T_CHECK(mask == mine, "n %zu seq %d stride %d window %zu position %d: %d vs %d", n, seq,
                    stride, w, t, mine, mask);
            if (mine) count[target]++;
          }
          if (w == 0)
            T_CHECK(first == 0 && last == (int)(targets < (size_t)seq ? targets : (size_t)seq),
                    "the first window is complete");
        }
        for (size_t t = 1; t < n; t++)
          T_CHECK(count[t] == 1, "n %zu seq %d stride %d: target %zu scored %d times", n, seq,
                  stride, t, count[t]);
      }
  T_CHECK(mgt_eval_windows(1, 8, 8) == 0 && mgt_eval_windows(0, 8, 8) == 0, "no targets");
}

static void test_lambada(void) {
  mgt_tokenizer *tok = NULL;
  T_OK(mgt_tok_create_bytes(&tok));
  const char *text = "  she looked at the cat \n";
  int32_t *ids = NULL;
  int n = 0, nt = 0;
  T_OK(mgt_lambada_example(tok, text, strlen(text), 1, &ids, &n, &nt));
  const char *ctx = "she looked at the", *word = " cat";
  T_CHECK(n == (int)(strlen(ctx) + strlen(word)) && nt == (int)strlen(word),
          "strict: %d ids, %d target, want %zu and %zu", n, nt, strlen(ctx) + strlen(word),
          strlen(word));
  int ok = 1;
  for (size_t i = 0; i < strlen(ctx) && i < (size_t)n; i++)
    ok &= ids[i] == (unsigned char)ctx[i];
  for (size_t i = 0; i < strlen(word) && strlen(ctx) + i < (size_t)n; i++)
    ok &= ids[strlen(ctx) + i] == (unsigned char)word[i];
  T_CHECK(ok, "strict: context and ' ' + word are the ids");
  free(ids);
  T_OK(mgt_lambada_example(tok, text, strlen(text), 0, &ids, &n, &nt));
  T_CHECK(n == (int)strlen(text) && nt == 1, "non-strict: the whole text, last token");
  free(ids);
  mgt_status st = mgt_lambada_example(tok, "   ", 3, 1, &ids, &n, &nt);
  T_CHECK(st == MGT_ERR_INPUT, "a text without words is refused");
  /* words apart by Unicode whitespace as Python's split() has it: NBSP, U+3000, U+2005, NEL */
  const char *u = "\xe3\x80\x80"
                  "a\xc2\xa0"
                  "b\xe2\x80\x85"
                  "cat\xc2\x85";
  T_OK(mgt_lambada_example(tok, u, strlen(u), 1, &ids, &n, &nt));
  const char *uctx = "a\xc2\xa0"
                     "b";
  ok = n == (int)strlen(uctx) + 4 && nt == 4;
  for (size_t i = 0; ok && i < strlen(uctx); i++)
    ok &= ids[i] == (unsigned char)uctx[i];
  for (size_t i = 0; ok && i < 4; i++)
    ok &= ids[strlen(uctx) + i] == (unsigned char)" cat"[i];
  T_CHECK(ok, "strict: Unicode whitespace splits the last word off and is stripped");
  free(ids);
  mgt_tok_destroy(&tok);
}

/* The sampler's definition written plainly (sort everything), for large vocabularies. */
typedef struct rc {
  float l;
  int id;
} rc;
static int rc_cmp(const void *a, const void *b) {
  const rc *x = a, *y = b;
  if (x->l != y->l) return x->l > y->l ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}
static int ref_sample(const float *l, int n, double temp, int top_k, double top_p, double u) {
  rc *c = malloc(sizeof *c * (size_t)n);
  double *p = malloc(sizeof *p * (size_t)n);
  for (int i = 0; i < n; i++)
    c[i].l = l[i], c[i].id = i;
  qsort(c, (size_t)n, sizeof *c, rc_cmp);
  int k = top_k > 0 && top_k < n ? top_k : n;
  while (top_k > 1 && k < n && c[k].l == c[k - 1].l) /* the k-th's ties stay */
    k++;
  double sum = 0;
  for (int i = 0; i < k; i++)
    sum += (p[i] = exp(((double)c[i].l - c[0].l) / temp));
  if (top_p > 0) {
    double acc = 0;
    int keep = 0;
    while (keep < k && acc < top_p * sum)
      acc += p[keep++];
    k = keep, sum = acc;
  }
  double t = u * sum, acc = 0;
  int pick = c[k - 1].id;
  for (int i = 0; i < k; i++)
    if (t < (acc += p[i])) {
      pick = c[i].id;
      break;
    }
  free(c), free(p);
  return pick;
}

static void test_sampler_large(void) {
  enum { V = 5000 };
  static float l[V];
  int bad = 0, runs = 0;
  for (int rep = 0; rep < 20; rep++) {
    for (int i = 0; i < V; i++)
      l[i] = (float)(4.0 * t_randn());
    l[7] = l[4000]; /* a tie */
    const int ks[] = {1, 2, 40, 4999};
    const double ps[] = {0.1, 0.5, 0.9, 0.999};
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 4; b++) {
        double u = t_uniform(), temp = 0.5 + t_uniform();
        bad +=
            mgt_sample_token(l, V, 0, temp, ks[a], 0.0, u) != ref_sample(l, V, temp, ks[a], 0.0, u);
        bad += mgt_sample_token(l, V, 0, temp, 0, ps[b], u) != ref_sample(l, V, temp, 0, ps[b], u);
        bad += mgt_sample_token(l, V, 0, temp, ks[a], ps[b], u) !=
               ref_sample(l, V, temp, ks[a], ps[b], u);
        runs += 3;
      }
  }
  T_CHECK(bad == 0, "top-k/top-p sampling differs from the plain definition in %d of %d draws", bad,
          runs);
}

static void test_sampler(void) {
  const float logits[5] = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f};
  for (double u = 0; u < 1; u += 0.125) {
    T_CHECK(mgt_sample_token(logits, 5, 1, 1.0, 0, 0.0, u) == 1, "greedy takes the lowest of ties");
    T_CHECK(mgt_sample_token(logits, 5, 0, 1.0, 1, 0.0, u) == 1, "top-k 1 is greedy");
    int32_t k2 = mgt_sample_token(logits, 5, 0, 1.0, 2, 0.0, u);
    T_CHECK(k2 == 1 || k2 == 2, "top-k 2 keeps the two largest");
  }
  T_CHECK(mgt_sample_token(logits, 1, 0, 1.0, 0, 0.0, 0.9) == 0, "eligible ids only");
  { /* top-k keeps the k-th's ties (Megatron-LM's, Hugging Face's): {2, 1, 1, 1} at k = 2 draws
       each 1 with e / (e^2 + 3e) */
    enum { G = 100000 };
    const float lt[4] = {2.0f, 1.0f, 1.0f, 1.0f};
    int ct[4] = {0};
    for (int i = 0; i < G; i++)
      ct[mgt_sample_token(lt, 4, 0, 1.0, 2, 0.0, (i + 0.5) / G)]++;
    const double e = exp(1.0), z = e * e + 3 * e;
    for (int i = 0; i < 4; i++)
      T_CHECK(fabs(ct[i] / (double)G - (i ? e : e * e) / z) < 1e-4,
              "top-k 2 with ties: token %d drawn %.5f, want %.5f", i, ct[i] / (double)G,
              (i ? e : e * e) / z);
  }
  /* frequencies over a fine grid of u are the probabilities (within the grid step) */
  enum { G = 100000 };
  const float l3[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
  int cnt[3] = {0}, cnt_p[3] = {0}, cnt_t[3] = {0};
  for (int i = 0; i < G; i++) {
    double u = (i + 0.5) / G;
    cnt[mgt_sample_token(l3, 3, 0, 1.0, 0, 0.0, u)]++;
    cnt_p[mgt_sample_token(l3, 3, 0, 1.0, 0, 0.7, u)]++;
    cnt_t[mgt_sample_token(l3, 3, 0, 2.0, 0, 0.0, u)]++;
  }
  const double p[3] = {0.5, 0.3, 0.2}, pp[3] = {0.5 / 0.8, 0.3 / 0.8, 0};
  double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.2),
         pt[3] = {sqrt(0.5) / z, sqrt(0.3) / z, sqrt(0.2) / z};
  for (int k = 0; k < 3; k++) {
    T_CHECK(fabs(cnt[k] / (double)G - p[k]) < 1e-4, "softmax: %d drawn %g, want %g", k,
            cnt[k] / (double)G, p[k]);
    T_CHECK(fabs(cnt_p[k] / (double)G - pp[k]) < 1e-4, "top-p 0.7: %d drawn %g, want %g", k,
            cnt_p[k] / (double)G, pp[k]);
    T_CHECK(fabs(cnt_t[k] / (double)G - pt[k]) < 1e-4, "temperature 2: %d drawn %g, want %g", k,
            cnt_t[k] / (double)G, pt[k]);
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--detokenize") == 0) {
    char *text = NULL, *out = NULL;
    size_t n = 0, on = 0;
    T_OK(mgt_read_file("input", argv[2], &text, &n));
    T_OK(mgt_wikitext_detokenize(text, n, &out, &on));
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, 1, on, f) != on || fclose(f) != 0) return 1;
    printf("%zu\n", mgt_wikitext_word_count(text, n));
    free(text);
    free(out);
    return 0;
  }
  test_detokenizer();
  test_windows();
  test_lambada();
  test_sampler();
  test_sampler_large();
  return t_report("eval");
}
