/* The GPT-2 tokenizer against independent references: the 294 reference encodings (made
   with OpenAI's encoder and checked against tiktoken), whole-file id streams (count and
   SHA-256), a naive BPE written here for long pieces, and decode(encode(x)) == x on random
   bytes. Usage: test_tokenizer DATA_DIR (../shared/data); exits 77 (skipped) without it. */
#define _POSIX_C_SOURCE 200809L /* strtok_r under -std=c11 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "mgt/json.h"
#include "mgt/sha256.h"
#include "mgt/tokenizer.h"
#include "testutil.h"
#include "unicode.h"

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static void test_reference(mgt_tokenizer *tok, const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s/gpt2/reference-encodings.jsonl", dir);
  size_t len;
  char *text = t_slurp(path, &len);
  T_CHECK(text != NULL, "cannot read %s", path);
  if (!text) return;
  mgt_json_parser *jp = NULL;
  T_OK(mgt_json_parser_create(&jp));
  int cases = 0, exact = 0;
  for (char *line = text; *line;) {
    char *nl = strchr(line, '\n');
    size_t ll = nl ? (size_t)(nl - line) : strlen(line);
    const mgt_json *root;
    T_OK(mgt_json_parse(jp, line, ll, &root));
    const mgt_json *hex = mgt_json_get(root, "utf8_hex"), *ids = mgt_json_get(root, "ids"),
                   *txt = mgt_json_get(root, "text");
    size_t n = hex->len / 2;
    char *bytes = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
      bytes[i] = (char)(hexval(hex->str[2 * i]) << 4 | hexval(hex->str[2 * i + 1]));
    /* the JSON text and the hex spelling must agree: checks the JSON reader too */
    T_CHECK(txt->len == n && memcmp(txt->str, bytes, n) == 0, "case %d: text and utf8_hex differ",
            cases);
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, bytes, n, &out));
    int same = out.n == ids->len;
    for (size_t i = 0; same && i < out.n; i++)
      same = out.ids[i] == (int32_t)ids->items[i].number;
    exact += same;
    T_CHECK(same, "reference case %d (%s): %zu ids, expected %zu", cases,
            mgt_json_get(root, "category")->str, out.n, ids->len);
    char *dec = NULL;
    size_t dl = 0, dc = 0;
    T_OK(mgt_tok_decode(tok, out.ids, out.n, &dec, &dl, &dc));
    T_CHECK(dl == n && (n == 0 || memcmp(dec, bytes, n) == 0), "case %d: decode differs", cases);
    free(dec);
    free(bytes);
    mgt_ids_free(&out);
    cases++;
    if (!nl) break;
    line = nl + 1;
  }
  printf("reference encodings: %d of %d exact\n", exact, cases);
  T_CHECK(cases == 294, "expected 294 reference cases, read %d", cases);
  mgt_json_parser_destroy(&jp);
  free(text);
}

static void test_files(mgt_tokenizer *tok, const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s/gpt2/reference-file-encodings.json", dir);
  size_t len;
  char *meta = t_slurp(path, &len);
  T_CHECK(meta != NULL, "cannot read %s", path);
  if (!meta) return;
  mgt_json_parser *jp = NULL;
  const mgt_json *root;
  T_OK(mgt_json_parser_create(&jp));
  T_OK(mgt_json_parse(jp, meta, len, &root));
  const mgt_json *files = mgt_json_get(root, "files");
  for (size_t f = 0; files && f < files->len; f++) {
    const mgt_json *e = &files->items[f];
    snprintf(path, sizeof path, "%s/%s", dir, files->keys[f]);
    size_t n;
    char *text = t_slurp(path, &n);
    T_CHECK(text != NULL, "cannot read %s", path);
    if (!text) continue;
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, text, n, &out));
    mgt_sha256 h;
    unsigned char d[32];
    char hex[65];
    mgt_sha256_init(&h);
    for (size_t i = 0; i < out.n; i++) {
      unsigned char le[2] = {(unsigned char)out.ids[i], (unsigned char)(out.ids[i] >> 8)};
      mgt_sha256_update(&h, le, 2);
    }
    mgt_sha256_final(&h, d);
    mgt_sha256_hex(d, hex);
    size_t want = (size_t)mgt_json_get(e, "n_tokens")->number;
    const char *sha = mgt_json_get(e, "sha256_u16le")->str;
    T_CHECK(out.n == want && strcmp(hex, sha) == 0,
            "%s: %zu tokens sha256 %.12s, expected %zu %.12s", files->keys[f], out.n, hex, want,
            sha);
    printf("%s: %zu tokens, stream sha256 %s\n", files->keys[f], out.n,
           strcmp(hex, sha) == 0 ? "matches" : "DIFFERS");
    mgt_ids_free(&out);
    free(text);
  }
  mgt_json_parser_destroy(&jp);
  free(meta);
}

/* ---- a naive BPE from the merges file, for long single-class pieces ---- */
typedef struct naive {
  char **merge_a, **merge_b;
  int n;
  mgt_json_parser *jp;
  const mgt_json *vocab;
} naive;

/* GPT-2 spelling of a byte */
static void spell(unsigned char b, char *out) {
  int n = 0, cp = -1;
  for (int x = 0; x < 256; x++) {
    int pr = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    int c = pr ? x : 256 + n;
    if (!pr) n++;
    if (x == b) cp = c;
  }
  if (cp < 0x80) {
    out[0] = (char)cp, out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
  }
}

static int naive_rank(const naive *nv, const char *a, const char *b) {
  for (int r = 0; r < nv->n; r++)
    if (!strcmp(nv->merge_a[r], a) && !strcmp(nv->merge_b[r], b)) return r;
  return -1;
}

/* encoder.py's bpe(): merge every occurrence of the lowest-ranked pair until none is left */
static int naive_encode(const naive *nv, const unsigned char *s, size_t n, int32_t *ids) {
  char **sym = malloc(n * sizeof *sym);
  size_t m = n;
  for (size_t i = 0; i < n; i++) {
    sym[i] = malloc(4);
    spell(s[i], sym[i]);
  }
  for (;;) {
    int best = -1;
    for (size_t i = 0; i + 1 < m; i++) {
      int r = naive_rank(nv, sym[i], sym[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r;
    }
    if (best < 0) break;
    size_t j = 0;
    for (size_t i = 0; i < m;) {
      if (i + 1 < m && !strcmp(sym[i], nv->merge_a[best]) &&
          !strcmp(sym[i + 1], nv->merge_b[best])) {
        char *c = malloc(strlen(sym[i]) + strlen(sym[i + 1]) + 1);
        strcpy(c, sym[i]);
        strcat(c, sym[i + 1]);
        free(sym[i]), free(sym[i + 1]);
        sym[j++] = c;
        i += 2;
      } else {
        sym[j++] = sym[i++];
      }
    }
    m = j;
  }
  for (size_t i = 0; i < m; i++) {
    const mgt_json *id = mgt_json_get(nv->vocab, sym[i]);
    ids[i] = id ? (int32_t)id->number : -1;
    free(sym[i]);
  }
  free(sym);
  return (int)m;
}

static void test_long_pieces(mgt_tokenizer *tok, const char *dir) {
  char path[1024];
  size_t ml, vl;
  snprintf(path, sizeof path, "%s/gpt2/gpt2-merges.txt", dir);
  char *merges = t_slurp(path, &ml);
  snprintf(path, sizeof path, "%s/gpt2/gpt2-vocab.json", dir);
  char *vocab = t_slurp(path, &vl);
  if (!merges || !vocab) return;
  naive nv = {0};
  nv.merge_a = malloc(50001 * sizeof(char *));
  nv.merge_b = malloc(50001 * sizeof(char *));
  char *save = NULL;
  for (char *line = strtok_r(merges, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "#version", 8) == 0) continue;
    char *sp = strchr(line, ' ');
    *sp = 0;
    nv.merge_a[nv.n] = line;
    nv.merge_b[nv.n++] = sp + 1;
  }
  T_OK(mgt_json_parser_create(&nv.jp));
  T_OK(mgt_json_parse(nv.jp, vocab, vl, &nv.vocab));
  /* single-class pieces of 30 to 130 bytes, so the library's heap path runs */
  const char *alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "etaoinshr", "0123456789", "!?.,;:-*#",
                             "aeiouy"};
  int checked = 0, agree = 0;
  for (int trial = 0; trial < 30; trial++) {
    const char *al = alphabets[trial % 5];
    size_t n = 30 + t_next() % 100, na = strlen(al);
    unsigned char *s = malloc(n);
    for (size_t i = 0; i < n; i++)
      s[i] = (unsigned char)al[t_next() % na];
    int32_t *ref = malloc(n * sizeof *ref);
    int m = naive_encode(&nv, s, n, ref);
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, (const char *)s, n, &out));
    int same = (size_t)m == out.n;
    for (int i = 0; same && i < m; i++)
      same = ref[i] == out.ids[i];
    T_CHECK(same, "long piece of %zu bytes ('%.20s...'): %zu ids, naive BPE %d", n, s, out.n, m);
    agree += same;
    checked++;
    mgt_ids_free(&out);
    free(ref), free(s);
  }
  printf("long pieces: %d of %d agree with the naive BPE\n", agree, checked);
  mgt_json_parser_destroy(&nv.jp);
  free(nv.merge_a), free(nv.merge_b), free(merges), free(vocab);
}

static void test_roundtrip(mgt_tokenizer *tok, const char *name) {
  int bad = 0;
  for (int trial = 0; trial < 2000; trial++) {
    size_t n = t_next() % 300;
    unsigned char *s = malloc(n + 1);
    int mode = trial % 4;
    for (size_t i = 0; i < n; i++) {
      uint64_t r = t_next();
      if (mode == 0)
        s[i] = (unsigned char)r; /* any bytes */
      else if (mode == 1)
        s[i] = " \n\t'sabc1\xc3\xa9\xe2\x80\xa8"[r % 15];
      else if (mode == 2)
        s[i] = (unsigned char)(0x80 + r % 64); /* lone continuations */
      else
        s[i] = (unsigned char)(r % 2 ? ' ' : "aZ9!\xf0\x9f\x98\x80"[r % 8]);
    }
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, (const char *)s, n, &out));
    char *d = NULL;
    size_t dl = 0, dc = 0;
    T_OK(mgt_tok_decode(tok, out.ids, out.n, &d, &dl, &dc));
    if (dl != n || (n && memcmp(d, s, n) != 0)) bad++;
    free(d), free(s);
    mgt_ids_free(&out);
  }
  T_CHECK(bad == 0, "%s: %d of 2000 random byte strings did not round-trip", name, bad);
}

/* Objects of every size (small ones are searched, large ones hashed): each key finds the
   value of its last occurrence, as Python's json; absent keys and near misses find nothing. */
static void test_json_objects(void) {
  mgt_json_parser *jp = NULL;
  T_OK(mgt_json_parser_create(&jp));
  const int sizes[] = {0, 1, 15, 16, 17, 40, 3000};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    const int n = sizes[s], kinds = n / 2 + 1;
    int *last = malloc(sizeof(int) * (size_t)kinds);
    char *text = malloc(32 * (size_t)n + 8), *o = text;
    for (int k = 0; k < kinds; k++)
      last[k] = -1;
    o += sprintf(o, "{");
    for (int i = 0; i < n; i++) { /* about half the keys repeat */
      const int k = (int)(t_next() % (uint64_t)kinds);
      last[k] = i;
      o += sprintf(o, "%s\"key%d\": %d", i ? ", " : "", k, i);
    }
    sprintf(o, "}");
    const mgt_json *root;
    T_OK(mgt_json_parse(jp, text, strlen(text), &root));
    int bad = 0;
    for (int k = 0; k < kinds + 3; k++) {
      char key[32];
      snprintf(key, sizeof key, "key%d", k);
      const mgt_json *v = mgt_json_get(root, key);
      const int want = k < kinds ? last[k] : -1;
      bad += want < 0 ? v != NULL : !v || v->number != want;
    }
    bad += mgt_json_get(root, "key") != NULL || mgt_json_get(root, "") != NULL;
    T_CHECK(bad == 0, "JSON object of %d members: %d lookups wrong", n, bad);
    free(text);
    free(last);
  }
  mgt_json_parser_destroy(&jp);
}

/* mgt_json_is takes all of a string ("\u0000" inside does not end it); the cap on values counts
   every value, nested ones included, and says it was the cause. */
static void test_json_is_and_cap(void) {
  mgt_json_parser *jp = NULL;
  T_OK(mgt_json_parser_create(&jp));
  const char *text = "{\"a\": \"user\", \"b\": \"user\\u0000x\", \"c\": \"use\", \"d\": 1}";
  const mgt_json *root;
  T_OK(mgt_json_parse(jp, text, strlen(text), &root));
  T_CHECK(mgt_json_is(mgt_json_get(root, "a"), "user") &&
              !mgt_json_is(mgt_json_get(root, "b"), "user") &&
              !mgt_json_is(mgt_json_get(root, "c"), "user") &&
              !mgt_json_is(mgt_json_get(root, "d"), "user") && !mgt_json_is(NULL, "user"),
          "mgt_json_is");
  const char *doc = "{\"x\": [1, [2, 3], {\"y\": 4}]}"; /* 8 values */
  mgt_json_parser_limit(jp, 8);
  T_OK(mgt_json_parse(jp, doc, strlen(doc), &root));
  T_CHECK(!mgt_json_parser_over(jp), "a document of 8 values under a cap of 8");
  mgt_json_parser_limit(jp, 7);
  T_CHECK(mgt_json_parse(jp, doc, strlen(doc), &root) != MGT_OK && mgt_json_parser_over(jp),
          "a document of 8 values under a cap of 7");
  mgt_error_clear();
  T_CHECK(mgt_json_parse(jp, "[1", 2, &root) != MGT_OK && !mgt_json_parser_over(jp),
          "malformed, not over the cap");
  mgt_error_clear();
  mgt_json_parser_destroy(&jp);
}

/* Clones (mgt_tok_clone) encoding at once on their own threads, while the original decodes on
   a third: each stream must be the original's, encoded alone before. */
typedef struct clone_job {
  mgt_tokenizer *tok;
  const char *text;
  size_t len;
  mgt_ids out;
  mgt_status st;
} clone_job;

static void *clone_encode(void *arg) {
  clone_job *j = arg;
  for (int rep = 0; rep < 3 && j->st == MGT_OK; rep++) { /* again: the clone's cache warm */
    j->out.n = 0;
    j->st = mgt_tok_encode(j->tok, j->text, j->len, &j->out);
  }
  return NULL;
}

static void test_clones(mgt_tokenizer *tok, const char *name, const char *path) {
  size_t n;
  char *text = t_slurp(path, &n);
  T_CHECK(text != NULL, "cannot read %s", path);
  if (!text) return;
  if (n > (1u << 20)) n = 1u << 20;
  mgt_ids want = {0};
  T_OK(mgt_tok_encode(tok, text, n, &want));
  clone_job jobs[2];
  pthread_t th[2];
  for (int k = 0; k < 2; k++) { /* the second clone on the text's second half */
    memset(&jobs[k], 0, sizeof jobs[k]);
    T_OK(mgt_tok_clone(tok, &jobs[k].tok));
    jobs[k].text = text + (k ? n / 2 : 0), jobs[k].len = k ? n - n / 2 : n;
    T_CHECK(pthread_create(&th[k], NULL, clone_encode, &jobs[k]) == 0, "a thread");
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  T_OK(mgt_tok_decode(tok, want.ids, want.n, &buf, &len, &cap)); /* meanwhile, on the original */
  for (int k = 0; k < 2; k++)
    pthread_join(th[k], NULL);
  mgt_ids half = {0};
  T_OK(mgt_tok_encode(tok, text + n / 2, n - n / 2, &half));
  const int same0 = jobs[0].st == MGT_OK && jobs[0].out.n == want.n &&
                    !memcmp(jobs[0].out.ids, want.ids, sizeof(int32_t) * want.n);
  const int same1 = jobs[1].st == MGT_OK && jobs[1].out.n == half.n &&
                    !memcmp(jobs[1].out.ids, half.ids, sizeof(int32_t) * half.n);
  T_CHECK(same0 && same1, "%s: clones encoding at once differ from the original", name);
  printf("%s: two clones encoding at once on their threads give the original's %zu and %zu ids\n",
         name, want.n, half.n);
  for (int k = 0; k < 2; k++) {
    mgt_ids_free(&jobs[k].out);
    mgt_tok_destroy(&jobs[k].tok);
  }
  mgt_ids_free(&want), mgt_ids_free(&half);
  free(buf), free(text);
}

/* Member names chosen to collide under an unkeyed hash (FNV-1a, the parser's before it was
   keyed) must not pile into one run of the member table: with a keyed hash they spread as any
   names do. A run of all 2000 members made each lookup and insertion scan them all. */
static void test_json_collisions(void) {
  enum { N = 2000, MASK = 4095 }; /* 2000 members: a table of 4096 slots */
  char *text = malloc(32 * (size_t)N + 8), *o = text;
  o += sprintf(o, "{");
  for (uint64_t c = 0, found = 0; found < N; c++) {
    char name[16];
    const int n = snprintf(name, sizeof name, "k%08llx", (unsigned long long)c);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
      h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    if (((h ^ (h >> 29)) & MASK) != 0) continue;
    o += sprintf(o, "%s\"%s\":%llu", found ? "," : "", name, (unsigned long long)found);
    found++;
  }
  sprintf(o, "}");
  mgt_json_parser *jp = NULL;
  T_OK(mgt_json_parser_create(&jp));
  const mgt_json *root;
  T_OK(mgt_json_parse(jp, text, strlen(text), &root));
  T_CHECK(root->hash && root->hash_mask == MASK, "a table of %d slots", MASK + 1);
  size_t run = 0, longest = 0, members = 0;
  for (size_t j = 0; root->hash && j <= 2 * root->hash_mask + 1; j++) { /* twice: runs wrap */
    run = root->hash[j & root->hash_mask] ? run + 1 : 0;
    longest = run > longest ? run : longest;
    members += j <= root->hash_mask && root->hash[j];
  }
  T_CHECK(members == N && longest < 200,
          "2000 names colliding under FNV-1a: %zu members in the table, longest run of occupied "
          "slots %zu (keyed hashing spreads them: below 200)",
          members, longest);
  int bad = 0;
  for (size_t i = 0; i < root->len; i++) {
    const mgt_json *v = mgt_json_get(root, root->keys[i]);
    bad += !v || v->number != (double)i;
  }
  T_CHECK(bad == 0, "colliding names: %d of %d lookups wrong", bad, N);
  printf("json: 2000 names colliding under FNV-1a: longest run %zu of 4096 slots\n", longest);
  mgt_json_parser_destroy(&jp);
  free(text);
}

/* A class per value: 0 (a starter) for one in four, else 1-254. */
static int toy_class(uint32_t c) { return c % 4 == 0 ? 0 : (int)(c >> 2) % 254 + 1; }

/* mgt_canonical_order (counting sort of long runs) against neighbour swaps over whole runs. */
static void test_canonical_order(void) {
  uint32_t u[400], v[400], tmp[400];
  uint64_t r = 7;
  for (int t = 0; t < 300; t++) {
    const size_t n = (size_t)(t % 400);
    const int starters = t % 3; /* 0: one run of marks only */
    for (size_t i = 0; i < n; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t c = (uint32_t)(r >> 33) % 40; /* few classes: many equal ones to keep in order */
      if (!starters && c % 4 == 0) c++;
      if (starters == 1 && c % 4 == 0 && (r >> 20) % 8) c++; /* long runs */
      u[i] = v[i] = c + 1000 * (uint32_t)i; /* the index tells equal classes apart */
    }
    mgt_canonical_order(u, n, toy_class, tmp);
    for (size_t i = 1; i < n; i++)
      for (size_t j = i; j > 0 && toy_class(v[j]) && toy_class(v[j - 1]) > toy_class(v[j]); j--) {
        const uint32_t x = v[j];
        v[j] = v[j - 1], v[j - 1] = x;
      }
    T_CHECK(!memcmp(u, v, n * sizeof *u), "canonical order of %zu code points (case %d)", n, t);
  }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/data";
  test_canonical_order();
  test_json_objects();
  test_json_is_and_cap();
  test_json_collisions();
  mgt_tokenizer *bytes = NULL;
  T_OK(mgt_tok_create_bytes(&bytes));
  test_roundtrip(bytes, "bytes");
  T_CHECK(mgt_tok_vocab_size(bytes) == 257 && mgt_tok_eod(bytes) == 256, "byte tokenizer sizes");
  mgt_tok_destroy(&bytes);

  char vocab[1024], merges[1024];
  snprintf(vocab, sizeof vocab, "%s/gpt2/gpt2-vocab.json", dir);
  snprintf(merges, sizeof merges, "%s/gpt2/gpt2-merges.txt", dir);
  struct stat st;
  if (stat(vocab, &st) != 0) {
    printf("test_tokenizer: %s not found: GPT-2 checks skipped\n", vocab);
    return t_failures ? 1 : 77;
  }
  mgt_tokenizer *tok = NULL;
  T_OK(mgt_tok_load_gpt2(vocab, merges, &tok));
  T_CHECK(mgt_tok_vocab_size(tok) == 50257 && mgt_tok_eod(tok) == 50256, "GPT-2 sizes: %d, eod %d",
          mgt_tok_vocab_size(tok), mgt_tok_eod(tok));
  test_reference(tok, dir);
  test_files(tok, dir);
  test_long_pieces(tok, dir);
  test_roundtrip(tok, "gpt2");
  char path[1024];
  snprintf(path, sizeof path, "%s/wikitext103/wiki.valid.tokens", dir);
  test_clones(tok, "gpt2", path);
  mgt_tokenizer *clone = NULL;
  T_OK(mgt_tok_clone(tok, &clone));
  test_files(clone, dir); /* the whole-file streams again, by a clone */
  mgt_tok_destroy(&clone);
  snprintf(vocab, sizeof vocab, "%s/hf-tokenizers/llama3/tokenizer.json", dir);
  mgt_tokenizer *hf = NULL;
  if (stat(vocab, &st) == 0) {
    T_OK(mgt_tok_load_hf(vocab, &hf));
    test_clones(hf, "llama3", path);
    mgt_tok_destroy(&hf);
  }
  snprintf(vocab, sizeof vocab, "%s/bert/bert-base-uncased-vocab.txt", dir);
  if (stat(vocab, &st) == 0) {
    T_OK(mgt_tok_load_wordpiece(vocab, 1, &hf));
    test_clones(hf, "wordpiece", path);
    mgt_tok_destroy(&hf);
  }
  /* bad files are refused with the file's name */
  mgt_tokenizer *bad = NULL;
  mgt_status s = mgt_tok_load_gpt2(merges, merges, &bad);
  T_CHECK(s == MGT_ERR_INPUT && strstr(mgt_error_message(), "--vocab-file"),
          "a merges file as vocabulary: %s", mgt_error_message());
  s = mgt_tok_load_gpt2("/nonexistent/vocab.json", merges, &bad);
  T_CHECK(s == MGT_ERR_INPUT && strstr(mgt_error_message(), "cannot open"), "missing file: %s",
          mgt_error_message());
  mgt_tok_destroy(&tok);
  return t_report("test_tokenizer");
}
