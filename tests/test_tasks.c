/* The fine-tuning readers (io/data/tasks.c) against hand-written records whose reading by
   Megatron-LM's Python (strip, split('\t'), universal newlines, clean_text) is worked out here by
   hand: the ids of each segment must equal the tokenizer's ids of the expected text. Then the row
   layout (Megatron-LM's build_tokens_types_paddings_from_ids, truncation included), malformed
   records (file:line errors, --skip-bad-records counts) and the training source (each example once
   per epoch, the same rows at any offset). Usage: test_tasks DATA_DIR; exits 77 without it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgt/data.h"
#include "mgt/tasks.h"
#include "mgt/tokenizer.h"
#include "testutil.h"

static char dir[256];
static mgt_tokenizer *tok;
static int32_t CLS, SEP, PAD;

static void put_file(const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(text, 1, strlen(text), f) != strlen(text)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static mgt_task_set *read_set(int task, const char *name, int skip) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  mgt_task_set *s = NULL;
  mgt_status st = mgt_task_set_read(task, path, tok, skip, NULL, &s);
  if (st != MGT_OK) {
    fprintf(stderr, "FAIL reading %s: %s\n", name, mgt_error_message());
    mgt_error_clear();
    t_failures++;
    return NULL;
  }
  return s;
}

/* The error reading `name` (must fail), or "" when it did not. */
static const char *read_error(int task, const char *name, int skip) {
  static char msg[1024];
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  mgt_task_set *s = NULL;
  msg[0] = 0;
  if (mgt_task_set_read(task, path, tok, skip, NULL, &s) != MGT_OK)
    snprintf(msg, sizeof msg, "%s", mgt_error_message());
  mgt_error_clear();
  mgt_task_set_destroy(&s);
  return msg;
}

/* Does the row's segment [from, from + n) of type `type` hold exactly the ids of `text`? */
static int segment_is(const int32_t *row, int T, int from, int n, int type, const char *text) {
  mgt_ids ids = {0};
  if (mgt_tok_encode(tok, text, strlen(text), &ids) != MGT_OK) return 0;
  int ok = (int)ids.n == n;
  for (int k = 0; ok && k < n; k++)
    ok = row[MGT_BERT_TOKENS * T + from + k] == ids.ids[k] &&
         row[MGT_BERT_TYPES * T + from + k] == type;
  if (!ok) {
    fprintf(stderr, "  expected %zu ids of \"%s\":", ids.n, text);
    for (size_t k = 0; k < ids.n; k++)
      fprintf(stderr, " %d", ids.ids[k]);
    fprintf(stderr, "\n  the row has %d:", n);
    for (int k = 0; k < n; k++)
      fprintf(stderr, " %d", row[MGT_BERT_TOKENS * T + from + k]);
    fprintf(stderr, "\n");
  }
  mgt_ids_free(&ids);
  return ok;
}

/* A pair row [CLS] a [SEP] b [SEP] pad: the texts a, b and the label, checked whole. */
static int pair_is(const int32_t *row, int T, const char *a, const char *b, int label) {
  const int32_t *id = row + MGT_BERT_TOKENS * T, *ty = row + MGT_BERT_TYPES * T,
                *lab = row + MGT_BERT_LABELS * T;
  const int len = row[mgt_bert_length_at(T)];
  int sep = 1;
  while (sep < len && id[sep] != SEP)
    sep++;
  int ok = id[0] == CLS && ty[0] == 0 && sep < len - 1 && id[sep] == SEP && ty[sep] == 0 &&
           id[len - 1] == SEP && ty[len - 1] == 1 && row[mgt_bert_random_at(T)] == label;
  ok = ok && segment_is(row, T, 1, sep - 1, 0, a) &&
       segment_is(row, T, sep + 1, len - sep - 2, 1, b);
  for (int t = 0; t < T; t++)
    ok = ok && lab[t] == -1 && (t < len || (id[t] == PAD && ty[t] == 0));
  return ok;
}

static void test_mnli(void) {
  const int T = 64;
  int32_t row[3 * 64 + 2];
  /* 12 columns as in train.tsv; CRLF endings; an NBSP and an ideographic space inside and at the
     ends of a field; quotes kept literally (GLUE's files are not CSV-quoted); " . " joined. */
  put_file("mnli_train.tsv",
           "index\tpromptID\tpairID\tgenre\tp1\tp2\tp3\tp4\tsentence1\tsentence2\tlabel1\tgold_"
           "label\r\n"
           "0\t1\t1e\tfiction\t(\t(\t(\t(\tThe cat  sat .  Then it slept.\t  A cat sat \tneutral\t"
           "neutral\r\n"
           "1\t2\t2c\tfiction\t(\t(\t(\t(\t\xe3\x80\x80Hello\xc2\xa0world  \xc2\xa0\t\"Quoted\" "
           "words\tentailment\tcontradiction\r\n"
           "\r\n"
           "2\t3\t3e\ttravel\t(\t(\t(\t(\tLine one\tLine two\tneutral\tentailment\r"
           "3\t4\t4n\ttravel\t(\t(\t(\t(\tMixed\tendings\tneutral\tneutral\n");
  mgt_task_set *s = read_set(MGT_TASK_MNLI, "mnli_train.tsv", 0);
  if (!s) return;
  T_CHECK(mgt_task_set_size(s) == 4 && mgt_task_set_skipped(s) == 0, "MNLI: %lld examples",
          (long long)mgt_task_set_size(s));
  static const char *const a[] = {"The cat sat. Then it slept.", "Hello world", "Line one",
                                  "Mixed"};
  static const char *const b[] = {"A cat sat", "\"Quoted\" words", "Line two", "endings"};
  static const int label[] = {2, 0, 1, 2}; /* the last column; contradiction/entailment/neutral */
  for (int i = 0; i < 4 && i < mgt_task_set_size(s); i++) {
    mgt_task_set_encode(s, i, T, row);
    T_CHECK(pair_is(row, T, a[i], b[i], label[i]), "MNLI example %d", i);
    T_CHECK(mgt_task_set_label(s, i) == label[i], "MNLI label %d", i);
  }
  mgt_task_set_destroy(&s);

  /* 16 columns (dev): gold_label is the last. 10 columns: test, every label 0. */
  put_file("mnli_dev.tsv", "i\t2\t3\t4\t5\t6\t7\t8\ts1\ts2\tl1\tl2\tl3\tl4\tl5\tgold\n"
                           "7\tx\tx\tx\tx\tx\tx\tx\tone\ttwo\tneutral\tneutral\tneutral\tneutral\t"
                           "neutral\tentailment\n");
  s = read_set(MGT_TASK_MNLI, "mnli_dev.tsv", 0);
  if (s) {
    T_CHECK(mgt_task_set_size(s) == 1 && mgt_task_set_label(s, 0) == 1, "MNLI dev gold_label");
    mgt_task_set_destroy(&s);
  }
  put_file("mnli_test.tsv", "index\t2\t3\t4\t5\t6\t7\t8\tsentence1\tsentence2\n"
                            "0\tx\tx\tx\tx\tx\tx\tx\tfirst\tsecond\n");
  s = read_set(MGT_TASK_MNLI, "mnli_test.tsv", 0);
  if (s) {
    mgt_task_set_encode(s, 0, T, row);
    T_CHECK(mgt_task_set_size(s) == 1 && pair_is(row, T, "first", "second", 0), "MNLI test file");
    mgt_task_set_destroy(&s);
  }

  /* Malformed records name file and line; skipping counts them. */
  put_file("mnli_bad.tsv", "i\t2\t3\t4\t5\t6\t7\t8\ts1\ts2\tl1\tgold\n"
                           "0\tx\tx\tx\tx\tx\tx\tx\tone\ttwo\tneutral\tneutral\n"
                           "\n"
                           "1\tx\tx\tx\tx\tx\tx\tx\tone\ttwo\tneutral\tmaybe\n"
                           "2\tx\tx\tx\tx\tx\tx\tx\tone\t\tneutral\tneutral\n"
                           "3\tx\tx\tone\ttwo\n"
                           "x\tx\tx\tx\tx\tx\tx\tx\tone\ttwo\tneutral\tneutral\n"
                           "4\tx\tx\tx\tx\tx\tx\tx\tthree\tfour\tneutral\tentailment\n");
  const char *e = read_error(MGT_TASK_MNLI, "mnli_bad.tsv", 0);
  T_CHECK(strstr(e, "mnli_bad.tsv:4:") && strstr(e, "contradiction, entailment or neutral"),
          "MNLI bad label: \"%s\"", e);
  s = read_set(MGT_TASK_MNLI, "mnli_bad.tsv", 1);
  if (s) {
    T_CHECK(mgt_task_set_size(s) == 2 && mgt_task_set_skipped(s) == 4,
            "MNLI skipping: %lld examples, %lld skipped", (long long)mgt_task_set_size(s),
            (long long)mgt_task_set_skipped(s));
    mgt_task_set_encode(s, 1, T, row);
    T_CHECK(pair_is(row, T, "three", "four", 1), "MNLI the record after the skipped ones");
    mgt_task_set_destroy(&s);
  }
  put_file("mnli_short_header.tsv", "a\tb\tc\n0\tx\ty\n");
  e = read_error(MGT_TASK_MNLI, "mnli_short_header.tsv", 0);
  T_CHECK(strstr(e, "mnli_short_header.tsv:1:") != NULL, "MNLI short header: \"%s\"", e);
  put_file("mnli_empty.tsv", "");
  e = read_error(MGT_TASK_MNLI, "mnli_empty.tsv", 0);
  T_CHECK(strstr(e, "empty") != NULL, "MNLI empty file: \"%s\"", e);
  put_file("mnli_header_only.tsv", "i\t2\t3\t4\t5\t6\t7\t8\ts1\ts2\tl1\tgold\n");
  e = read_error(MGT_TASK_MNLI, "mnli_header_only.tsv", 0);
  T_CHECK(strstr(e, "no MNLI examples") != NULL, "MNLI header only: \"%s\"", e);
  e = read_error(MGT_TASK_MNLI, "does_not_exist.tsv", 0);
  T_CHECK(strstr(e, "does_not_exist.tsv") != NULL, "MNLI missing file: \"%s\"", e);
  /* a test file's rows have its header's 10 columns; more than 32 is said as such */
  put_file("mnli_test11.tsv", "i\t2\t3\t4\t5\t6\t7\t8\ts1\ts2\n"
                              "0\tx\tx\tx\tx\tx\tx\tx\tfirst\tsecond\n"
                              "1\tx\tx\tx\tx\tx\tx\tx\tfirst\tsecond\tneutral\n");
  e = read_error(MGT_TASK_MNLI, "mnli_test11.tsv", 0);
  T_CHECK(strstr(e, "mnli_test11.tsv:3:") && strstr(e, "the header has 10 columns, this row 11"),
          "MNLI test row of 11 columns: \"%s\"", e);
  char wide[512] = "i\t2\t3\t4\t5\t6\t7\t8\ts1\ts2\tl1\tgold\n0";
  for (int k = 1; k < 33; k++)
    strcat(wide, k == 32 ? "\tneutral\n" : "\tx");
  put_file("mnli_wide.tsv", wide);
  e = read_error(MGT_TASK_MNLI, "mnli_wide.tsv", 0);
  T_CHECK(strstr(e, "mnli_wide.tsv:2:") && strstr(e, "more than 32 columns"),
          "MNLI row of 33 columns: \"%s\"", e);
}

static void test_qqp(void) {
  const int T = 32;
  int32_t row[3 * 32 + 2];
  /* Rows with another number of columns and empty questions are skipped with a count, as
     Megatron-LM does, whether or not bad records are skipped. */
  put_file("qqp_train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                            "10\t1\t2\tHow do I  learn C?\tWhat is C ?\t1\n"
                            "11\t3\t4\tA question\twith a tab\textra\t0\n"
                            "12\t5\t6\t \tempty first\t0\n"
                            "13\t7\t8\tIs it ?\tIt is . Yes\t0\n");
  mgt_task_set *s = read_set(MGT_TASK_QQP, "qqp_train.tsv", 0);
  if (s) {
    T_CHECK(mgt_task_set_size(s) == 2 && mgt_task_set_skipped(s) == 2, "QQP: %lld, skipped %lld",
            (long long)mgt_task_set_size(s), (long long)mgt_task_set_skipped(s));
    mgt_task_set_encode(s, 0, T, row);
    T_CHECK(pair_is(row, T, "How do I learn C?", "What is C ?", 1), "QQP example 0");
    mgt_task_set_encode(s, 1, T, row);
    T_CHECK(pair_is(row, T, "Is it ?", "It is. Yes", 0), "QQP example 1");
    mgt_task_set_destroy(&s);
  }
  put_file("qqp_test.tsv", "id\tquestion1\tquestion2\n5\tfirst q\tsecond q\n");
  s = read_set(MGT_TASK_QQP, "qqp_test.tsv", 0);
  if (s) {
    mgt_task_set_encode(s, 0, T, row);
    T_CHECK(mgt_task_set_size(s) == 1 && pair_is(row, T, "first q", "second q", 0), "QQP test");
    mgt_task_set_destroy(&s);
  }
  put_file("qqp_bad.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                          "1\t1\t2\ta\tb\t2\n"
                          "2\t1\t2\tc\td\t1\n");
  const char *e = read_error(MGT_TASK_QQP, "qqp_bad.tsv", 0);
  T_CHECK(strstr(e, "qqp_bad.tsv:2:") && strstr(e, "is_duplicate"), "QQP bad label: \"%s\"", e);
  /* test rows: 3 columns and both questions, or an error naming the line (Megatron-LM asserts) */
  put_file("qqp_test_bad.tsv", "id\tquestion1\tquestion2\n5\tfirst q\tsecond q\n6\tonly one\n");
  e = read_error(MGT_TASK_QQP, "qqp_test_bad.tsv", 0);
  T_CHECK(strstr(e, "qqp_test_bad.tsv:3:") && strstr(e, "3 columns, this one 2"),
          "QQP test row of 2 columns: \"%s\"", e);
  put_file("qqp_test_empty.tsv", "id\tquestion1\tquestion2\n5\t \tsecond q\n");
  e = read_error(MGT_TASK_QQP, "qqp_test_empty.tsv", 0);
  T_CHECK(strstr(e, "qqp_test_empty.tsv:2:") && strstr(e, "empty"),
          "QQP test empty question: \"%s\"", e);
  put_file("qqp_header.tsv", "id\tquestion1\n1\ta\n");
  e = read_error(MGT_TASK_QQP, "qqp_header.tsv", 0);
  T_CHECK(strstr(e, "qqp_header.tsv:1:") != NULL, "QQP header: \"%s\"", e);
}

static void test_race(void) {
  const int T = 40;
  const int W = mgt_bert_row_ints(T);
  int32_t rows[4 * (3 * 40 + 2)];
  char path[512];
  snprintf(path, sizeof path, "%s/race", dir);
  mkdir(path, 0700);
  /* Files read in name order (b.txt after a.txt), other names ignored; a question with "_" has
     the option in the blank, otherwise question and option joined by a space; article cleaned. */
  put_file("race/b.txt", "{\"article\": \"Second  passage.\", \"questions\": [\"Where?\"], "
                         "\"options\": [[\"here\", \"there\", \"nowhere\", \"everywhere\"]], "
                         "\"answers\": [\"D\"], \"id\": \"b\"}\n");
  put_file("race/a.txt", "{\"article\": \"Tom has a dog .\\nThe dog is red.\", \"questions\": "
                         "[\"Tom has a _ .\", \"What color is the dog?\"], \"options\": "
                         "[[\"cat\", \"dog\", \"fish\", \"bird\"], [\"red\", \"blue\", \"green\", "
                         "\"black\"]], \"answers\": [\"B\", \"A\"], \"id\": \"a\"}\r\n\r\n");
  put_file("race/notes.md", "not a passage\n");
  mgt_task_set *s = read_set(MGT_TASK_RACE, "race", 0);
  if (s) {
    T_CHECK(mgt_task_set_size(s) == 3, "RACE: %lld examples", (long long)mgt_task_set_size(s));
    static const char *const qa[3][4] = {
        {"Tom has a cat.", "Tom has a dog.", "Tom has a fish.", "Tom has a bird."},
        {"What color is the dog? red", "What color is the dog? blue",
         "What color is the dog? green", "What color is the dog? black"},
        {"Where? here", "Where? there", "Where? nowhere", "Where? everywhere"}};
    static const char *const art[3] = {"Tom has a dog. The dog is red.",
                                       "Tom has a dog. The dog is red.", "Second passage."};
    static const int label[3] = {1, 0, 3};
    for (int i = 0; i < 3 && i < mgt_task_set_size(s); i++) {
      mgt_task_set_encode(s, i, T, rows);
      for (int k = 0; k < 4; k++)
        T_CHECK(pair_is(rows + k * W, T, qa[i][k], art[i], label[i]), "RACE %d option %d", i, k);
    }
    mgt_task_set_destroy(&s);
  }
  put_file("race/c.txt",
           "{\"article\": \"x\", \"questions\": [\"q\"], \"options\": [[\"a\", "
           "\"b\", \"c\", \"d\"]], \"answers\": [\"A\"]}\n"
           "{\"article\": \"x\", \"questions\": [\"q\"], \"options\": [[\"a\", "
           "\"b\", \"c\"]], \"answers\": [\"A\"]}\n"
           "{\"article\": \"x\", \"questions\": [\"q\"], \"options\": [[\"a\", "
           "\"b\", \"c\", \"d\"]], \"answers\": [\"E\"]}\n"
           "{\"article\": \"x\", \"questions\": [\"q\", \"r\"], \"options\": [[\"a\", "
           "\"b\", \"c\", \"d\"]], \"answers\": [\"A\"]}\n"
           "{\"article\": \"x\", \"questions\": [\"q\"]\n"
           "[1, 2]\n");
  const char *e = read_error(MGT_TASK_RACE, "race", 0);
  T_CHECK(strstr(e, "race/c.txt:2:") && strstr(e, "4 string options"), "RACE 3 options: \"%s\"", e);
  s = read_set(MGT_TASK_RACE, "race", 1);
  if (s) {
    T_CHECK(mgt_task_set_size(s) == 4 && mgt_task_set_skipped(s) == 5,
            "RACE skipping: %lld examples, %lld skipped", (long long)mgt_task_set_size(s),
            (long long)mgt_task_set_skipped(s));
    mgt_task_set_destroy(&s);
  }
  snprintf(path, sizeof path, "%s/race_empty", dir);
  mkdir(path, 0700);
  e = read_error(MGT_TASK_RACE, "race_empty", 0);
  T_CHECK(strstr(e, "no *.txt") != NULL, "RACE empty directory: \"%s\"", e);
  e = read_error(MGT_TASK_RACE, "race_missing", 0);
  T_CHECK(strstr(e, "race_missing") != NULL, "RACE missing directory: \"%s\"", e);
}

/* Truncation as Megatron-LM's build_tokens_types_paddings_from_ids: a row of T ids or more is cut
   to T - 1 and closed with [SEP] (type 1); exactly T - 1 before the last [SEP] fits whole. */
static void test_truncation(void) {
  put_file("qqp_long.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                           "1\t1\t2\ta b c\td e f g h i j k l m n o p\t1\n");
  mgt_task_set *s = read_set(MGT_TASK_QQP, "qqp_long.tsv", 0);
  if (!s) return;
  /* 1 + 3 + 1 + 13 + 1 = 19 ids */
  for (int T = 16; T <= 22; T++) {
    int32_t row[3 * 22 + 2];
    mgt_task_set_encode(s, 0, T, row);
    const int32_t *id = row + MGT_BERT_TOKENS * T, *ty = row + MGT_BERT_TYPES * T;
    const int len = row[mgt_bert_length_at(T)];
    const int want = T < 19 ? T : 19;
    int ok = len == want && id[len - 1] == SEP && ty[len - 1] == 1 && id[4] == SEP && ty[4] == 0;
    ok = ok && segment_is(row, T, 1, 3, 0, "a b c");
    /* the b ids kept are the first len - 6 of "d e ... p" */
    static const char *const letters = "d e f g h i j k l m n o p";
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%.*s", 2 * (len - 6) - 1, letters);
    ok = ok && segment_is(row, T, 5, len - 6, 1, prefix);
    for (int t = len; t < T; t++)
      ok = ok && id[t] == PAD && ty[t] == 0;
    T_CHECK(ok, "truncation at T=%d: length %d, want %d", T, len, want);
  }
  mgt_task_set_destroy(&s);
}

/* Which example (set, index) a row block is, by its ids; -1 if none. */
static int which(mgt_task_set *const *sets, int n, const int32_t *rows, int T) {
  int32_t ref[3 * 32 + 2];
  int k = 0;
  for (int d = 0; d < n; d++)
    for (int64_t i = 0; i < mgt_task_set_size(sets[d]); i++, k++) {
      mgt_task_set_encode(sets[d], i, T, ref);
      if (!memcmp(ref, rows, sizeof ref)) return k;
    }
  return -1;
}

static void test_source(void) {
  const int T = 32, W = mgt_bert_row_ints(T);
  /* 5 + 7 distinct examples in two files */
  char text[4096];
  for (int f = 0; f < 2; f++) {
    int n = snprintf(text, sizeof text, "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n");
    for (int i = 0; i < (f ? 7 : 5); i++)
      n += snprintf(text + n, sizeof text - (size_t)n, "%d\t1\t2\tfile %d question %d\tq\t%d\n", i,
                    f, i, i & 1);
    put_file(f ? "src1.tsv" : "src0.tsv", text);
  }
  mgt_task_set *sets[2] = {read_set(MGT_TASK_QQP, "src0.tsv", 0),
                           read_set(MGT_TASK_QQP, "src1.tsv", 0)};
  if (!sets[0] || !sets[1]) return;
  /* per epoch 8 of 12 (the last partial batch of 4 dropped is not this case: 12 / 5 -> 10) */
  for (int per = 8; per <= 12; per += 4) {
    mgt_data a = {0}, b = {0};
    T_OK(mgt_task_train_source(sets, 2, MGT_TASK_QQP, 1234, per, &a));
    T_OK(mgt_task_train_source(sets, 2, MGT_TASK_QQP, 1234, per, &b));
    enum { EPOCHS = 3 };
    int32_t *all = malloc(sizeof(int32_t) * (size_t)W * EPOCHS * 12);
    T_OK(a.get(a.ctx, 0, EPOCHS * per, T, all));
    int order[EPOCHS][12];
    for (int e = 0; e < EPOCHS; e++) {
      int seen[12] = {0};
      for (int r = 0; r < per; r++) {
        int k = which(sets, 2, all + (size_t)(e * per + r) * W, T);
        order[e][r] = k;
        T_CHECK(k >= 0 && !seen[k], "per epoch %d: epoch %d sample %d is example %d", per, e, r, k);
        if (k >= 0) seen[k]++;
      }
    }
    int same = 1;
    for (int r = 0; r < per; r++)
      same = same && order[0][r] == order[1][r];
    T_CHECK(!same, "per epoch %d: epochs 0 and 1 in the same order", per);
    /* the rows at any offset, read in any order, are the same rows (resume) */
    int32_t part[5 * (3 * 32 + 2)];
    const uint64_t firsts[] = {(uint64_t)per + 3, 1, (uint64_t)(2 * per - 2)};
    for (int q = 0; q < 3; q++) {
      T_OK(b.get(b.ctx, firsts[q], 5, T, part));
      T_CHECK(!memcmp(part, all + firsts[q] * (uint64_t)W, sizeof part),
              "per epoch %d: rows at %llu", per, (unsigned long long)firsts[q]);
    }
    free(all);
    a.destroy(a.ctx);
    b.destroy(b.ctx);
  }
  mgt_data c = {0};
  mgt_status st = mgt_task_train_source(sets, 2, MGT_TASK_QQP, 1, 13, &c);
  T_CHECK(st != MGT_OK, "13 examples per epoch of 12 accepted");
  mgt_error_clear();
  mgt_task_set_destroy(&sets[0]);
  mgt_task_set_destroy(&sets[1]);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_tasks DATA_DIR\n");
    return 2;
  }
  char vocab[1024];
  snprintf(vocab, sizeof vocab, "%s/bert/bert-base-uncased-vocab.txt", argv[1]);
  struct stat sb;
  if (stat(vocab, &sb) != 0) {
    printf("test_tasks: %s missing, skipped\n", vocab);
    return 77;
  }
  snprintf(dir, sizeof dir, "/tmp/mgt_tasks_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  T_OK(mgt_tok_open(MGT_TOKENIZER_BERT_LOWER, vocab, NULL, &tok));
  CLS = mgt_tok_special(tok, "[CLS]");
  SEP = mgt_tok_special(tok, "[SEP]");
  PAD = mgt_tok_special(tok, "[PAD]");
  T_CHECK(CLS == 101 && SEP == 102 && PAD == 0, "special ids %d %d %d", CLS, SEP, PAD);
  test_mnli();
  test_qqp();
  test_race();
  test_truncation();
  test_source();
  mgt_tok_destroy(&tok);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return t_report("test_tasks");
}
