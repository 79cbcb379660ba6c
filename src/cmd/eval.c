/* mgt eval: the Megatron-LM paper's zero-shot evaluations of a checkpoint, on any layout.
   lm          loss and perplexity of token ids (--input-ids) or a text file (--text)
   wikitext103 the WikiText detokenizer, GPT-2 BPE, a sliding window advancing by
               --overlapping-eval; perplexity per subword token and adjusted to the original
               word-level tokens
   lambada     last-word accuracy, greedy under teacher forcing (--strict-lambada: every
               token of ' ' + word must be predicted)
   RACE, MNLI, QQP  a BERT fine-tuned by mgt finetune: accuracy (and QQP's F1) on each
               --valid-data set, as the run's own validation computes it */
#include "mgt/eval.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/progress.h"
#include "mgt/session.h"
#include "mgt/cli.h"
#include "mgt/flags.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/json.h"
#include "mgt/tasks.h"
#include "mgt/tokenizer.h"
#include "mgt/train.h"

enum { TASK_LM, TASK_WIKITEXT, TASK_LAMBADA, TASK_RACE, TASK_MNLI, TASK_QQP };
static const char *const tasks[] = {"lm", "wikitext103", "lambada", "RACE", "MNLI", "QQP", NULL};
/* The fine-tuning task (MGT_TASK_*) of an eval task, 0 for the GPT ones. */
static int finetuned(int task) { return task >= TASK_RACE ? task - TASK_RACE + MGT_TASK_RACE : 0; }

#define OFF(f) offsetof(mgt_eval_opts, f)
#define SZ(f) sizeof(((mgt_eval_opts *)0)->f)
static const mgt_flag flags[] = {
    {"--task", MGT_FLAG_ENUM, OFF(task), 0, 0,
     "lm, wikitext103, lambada (GPT); RACE, MNLI, QQP (a fine-tuned BERT)", tasks, 0, 0},
    MGT_CHECKPOINT_FLAGS(mgt_eval_opts),
    {"--valid-data", MGT_FLAG_LIST, OFF(valid_data), 0, 0,
     "wikitext103: wiki.test.tokens; lambada: lambada_test.jsonl; RACE, MNLI, QQP: the sets, "
     "each scored on its own",
     NULL, SZ(valid_data), 0},
    {"--skip-bad-records", MGT_FLAG_BOOL, OFF(skip_bad_records), 0, 1,
     "RACE, MNLI, QQP: count and skip malformed records instead of stopping", NULL, 0, 0},
    {"--input-ids", MGT_FLAG_STR, OFF(input_ids), 0, 0, "lm: file of whitespace-separated ids",
     NULL, SZ(input_ids), 0},
    {"--text", MGT_FLAG_STR, OFF(text), 0, 0, "lm: a text file, tokenized whole", NULL, SZ(text),
     0},
    {"--overlapping-eval", MGT_FLAG_INT, OFF(overlapping_eval), 1, 1 << 20,
     "window stride: lm default the sequence length, wikitext103 32", NULL, 0, 0},
    {"--strict-lambada", MGT_FLAG_BOOL, OFF(strict_lambada), 0, 1,
     "lambada: all tokens of the last word must be right", NULL, 0, 0},
    {"--seq-length", MGT_FLAG_INT, OFF(seq_length), 1, 1 << 20,
     "window length (default: the checkpoint's sequence length)", NULL, 0, 0},
    {"--micro-batch-size", MGT_FLAG_INT, OFF(micro_batch_size), 1, 1 << 16,
     "windows or examples per forward pass", NULL, 0, 0},
    {"--tensor-model-parallel-size", MGT_FLAG_INT, OFF(tensor_model_parallel_size), 1, 1 << 16,
     "ranks that split each layer; the rest of the ranks share the windows", NULL, 0, 0},
    MGT_TOKENIZER_FLAGS(mgt_eval_opts, " (default: the checkpoint's)"),
    MGT_DEVICE_FLAG(mgt_eval_opts),
    MGT_PRECISION_FLAGS(mgt_eval_opts),
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_eval_defaults(mgt_eval_opts *o) {
  memset(o, 0, sizeof *o);
  o->ckpt_iteration = -1;
  o->tensor_model_parallel_size = 1;
  o->micro_batch_size = 4;
  o->tokenizer_type = -1;
  o->cpu_gemm = -1;
}

mgt_status mgt_eval_parse(mgt_eval_opts *o, int argc, char **argv, int first, int *help) {
  MGT_CHECK(mgt_flags_parse(flags, N_FLAGS, o, argc, argv, first, "eval", help));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->load[0], "--load: give the checkpoint to evaluate");
  if (o->task == TASK_LM)
    MGT_REQUIRE((o->input_ids[0] != 0) + (o->text[0] != 0) == 1,
                "--task lm needs one of --input-ids and --text");
  else
    MGT_REQUIRE(o->valid_data[0], "--task %s needs --valid-data", tasks[o->task]);
  /* a flag of another task would be ignored: the run would not be the one asked for */
  MGT_REQUIRE(o->task == TASK_LM || (!o->input_ids[0] && !o->text[0]),
              "--input-ids and --text are for --task lm (--task %s reads --valid-data)",
              tasks[o->task]);
  MGT_REQUIRE(o->task != TASK_LM || !o->valid_data[0],
              "--valid-data: --task lm reads --input-ids or --text");
  MGT_REQUIRE(o->task == TASK_LAMBADA || !o->strict_lambada,
              "--strict-lambada is for --task lambada");
  MGT_REQUIRE(o->task == TASK_LM || o->task == TASK_WIKITEXT || !o->overlapping_eval,
              "--overlapping-eval is for --task lm and wikitext103 (windows over a text)");
  MGT_REQUIRE(finetuned(o->task) || !o->skip_bad_records,
              "--skip-bad-records is for --task RACE, MNLI and QQP");
  MGT_REQUIRE(finetuned(o->task) || !strchr(o->valid_data, '\n'),
              "--valid-data: --task %s reads one file", tasks[o->task]);
  return MGT_OK;
}

void mgt_eval_usage(FILE *f) {
  mgt_eval_opts d;
  mgt_eval_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "eval", f);
}

/* ---- windows ---- */

size_t mgt_eval_windows(size_t n, int seq_len, int stride) {
  if (n < 2) return 0;
  size_t targets = n - 1;
  if (targets <= (size_t)seq_len) return 1;
  return 1 + (targets - (size_t)seq_len + (size_t)stride - 1) / (size_t)stride;
}

void mgt_eval_window(size_t n, int seq_len, int stride, size_t w, int *first, int *last) {
  size_t start = w * (size_t)stride, avail = n - 1 - start;
  *last = avail < (size_t)seq_len ? (int)avail : seq_len;
  *first = w == 0 ? 0 : seq_len - stride;
}

/* ---- inputs ---- */

mgt_status mgt_read_ids(const char *path, int vocab, int32_t **out, size_t *n) {
  FILE *f;
  MGT_CHECK(mgt_fopen_file("--input-ids", path, &f));
  size_t cap = 1 << 16, k = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  long long v;
  int oom = 0;
  while (ids && fscanf(f, "%lld", &v) == 1) {
    if (v < 0 || v >= vocab) {
      fclose(f);
      free(ids);
      if (v == LLONG_MAX) /* what fscanf gives for any number beyond it */
        MGT_FAIL(MGT_ERR_INPUT, "--input-ids %s: number %zu is too large for an id", path, k + 1);
      MGT_FAIL(MGT_ERR_INPUT,
               "--input-ids %s: id %lld (number %zu) is outside the vocabulary [0, %d)", path, v,
               k + 1, vocab);
    }
    if (k == cap) {
      int32_t *p = realloc(ids, 2 * cap * sizeof *ids);
      if (!p) {
        oom = 1;
        break;
      }
      ids = p, cap *= 2;
    }
    ids[k++] = (int32_t)v;
  }
  int bad = !feof(f);
  fclose(f);
  if (!ids || oom) {
    free(ids);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", path);
  }
  if (bad) {
    free(ids);
    MGT_FAIL(MGT_ERR_INPUT, "--input-ids %s: after %zu ids, something that is not an integer", path,
             k);
  }
  *out = ids;
  *n = k;
  return MGT_OK;
}

/* One LAMBADA example: context ids and the ids of the last word. */
typedef struct example {
  int32_t *ids;
  int n, n_target;
} example;

/* Megatron-LM's construction: the last word is the last whitespace-separated field; strict
   mode tokenizes the text before it (stripped) and ' ' + word apart, the other mode tokenizes
   the whole text and takes its last token as the target. */
mgt_status mgt_lambada_example(mgt_tokenizer *tok, const char *text, size_t len, int strict,
                               int32_t **ids, int *n, int *n_target) {
  mgt_ids all = {0}, tgt = {0};
  mgt_status st = MGT_OK;
  *ids = NULL;
  if (!strict) {
    MGT_TRY(mgt_tok_encode(tok, text, len, &all));
    MGT_GOTO_REQUIRE(all.n >= 2, "a LAMBADA text of fewer than two tokens");
    *n = (int)all.n;
    *n_target = 1;
    *ids = all.ids;
    return MGT_OK;
  }
  /* Python's str.split() and strip(): Unicode whitespace, as Megatron-LM splits */
  const unsigned char *u = (const unsigned char *)text;
  size_t e = len, b, ce, cb = 0, k;
  while (e > 0 && (k = mgt_space_before(u, e)) > 0)
    e -= k;
  for (b = e; b > 0 && !mgt_space_before(u, b);)
    b--;
  MGT_GOTO_REQUIRE(e > b, "a LAMBADA text without words");
  /* rfind of the word in the text is its last occurrence, which starts at b */
  for (ce = b; ce > 0 && (k = mgt_space_before(u, ce)) > 0;)
    ce -= k;
  while (cb < ce && (k = mgt_space_at(u + cb, ce - cb)) > 0)
    cb += k;
  MGT_TRY(mgt_tok_encode(tok, text + cb, ce - cb, &all));
  MGT_GOTO_REQUIRE(all.n > 0, "a LAMBADA text without context before its last word");
  char *word = malloc(e - b + 2);
  if (!word) MGT_GOTO_FAIL(MGT_ERR_NOMEM, "out of memory");
  word[0] = ' ';
  memcpy(word + 1, text + b, e - b);
  st = mgt_tok_encode(tok, word, e - b + 1, &tgt);
  free(word);
  MGT_TRY(st);
  for (size_t i = 0; i < tgt.n; i++)
    MGT_TRY(mgt_ids_push(&all, tgt.ids[i]));
  *n = (int)all.n;
  *n_target = (int)tgt.n;
  *ids = all.ids;
  all.ids = NULL;
done:
  mgt_ids_free(&all);
  mgt_ids_free(&tgt);
  return st;
}

/* Perplexity from a mean loss, capped at e^20 as Megatron-LM's; a NaN loss stays NaN. */
static double ppl_of(double loss) { return isnan(loss) ? loss : exp(loss < 20 ? loss : 20); }

/* "key": value, as JSON has it: a NaN or an infinity (a loss that overflowed) as null. */
static void json_num(FILE *out, const char *key, double v) {
  if (isfinite(v))
    fprintf(out, "\"%s\": %.9g, ", key, v);
  else
    fprintf(out, "\"%s\": null, ", key);
}

/* ---- the run ---- */

typedef struct ctx {
  const mgt_eval_opts *o;
  mgt_gpt *m;
  const mgt_grid *g;
  int B, T;
  int32_t *tokens; /* B (T+1) */
  float *losses;   /* B T */
  int32_t *pred;   /* B T */
} ctx;

/* Batches before bt are done in every data-parallel group (they go round-robin). */
static void progress_of(mgt_progress *pr, size_t bt, const ctx *c, size_t n) {
  const size_t done = bt * (size_t)c->B;
  mgt_progress_update(pr, (double)(done < n ? done : n), NULL);
}

/* Scores a token stream in windows; sums[0] += loss of the scored targets, sums[1] += their
   count. Batches of B windows go round-robin to the data-parallel groups. */
static mgt_status score_stream(ctx *c, const int32_t *ids, size_t n, int stride, double sums[2]) {
  size_t windows = mgt_eval_windows(n, c->T, stride);
  size_t batches = (windows + (size_t)c->B - 1) / (size_t)c->B;
  mgt_progress pr;
  mgt_progress_start(&pr, c->g->rank == 0 ? stderr : NULL, "eval", (double)windows, "windows", 1,
                     0);
  for (size_t bt = (size_t)c->g->dp_rank; bt < batches; bt += (size_t)c->g->dp) {
    progress_of(&pr, bt, c, windows);
    int first[64], last[64];
    for (int r = 0; r < c->B; r++) {
      size_t w = bt * (size_t)c->B + (size_t)r;
      int32_t *row = c->tokens + (size_t)r * (c->T + 1);
      memset(row, 0, sizeof(int32_t) * (size_t)(c->T + 1));
      first[r] = last[r] = 0;
      if (w >= windows) continue;
      mgt_eval_window(n, c->T, stride, w, &first[r], &last[r]);
      memcpy(row, ids + w * (size_t)stride, sizeof(int32_t) * (size_t)(last[r] + 1));
    }
    MGT_CHECK(mgt_gpt_forward_losses(c->m, c->tokens, c->losses));
    for (int r = 0; r < c->B; r++)
      for (int t = first[r]; t < last[r]; t++)
        sums[0] += c->losses[(size_t)r * c->T + t];
    for (int r = 0; r < c->B; r++)
      sums[1] += last[r] - first[r];
  }
  mgt_progress_end(&pr, (double)windows, NULL);
  return MGT_OK;
}

static void free_examples(example *ex, size_t n) {
  for (size_t e = 0; ex && e < n; e++)
    free(ex[e].ids);
  free(ex);
}

/* Reads LAMBADA's JSON lines ({"text": ...}) into examples whose target fits a window of T. */
static mgt_status load_lambada(const mgt_eval_opts *o, mgt_tokenizer *tok, int T, example **out,
                               size_t *out_n) {
  char *text = NULL;
  size_t len = 0;
  MGT_CHECK(mgt_read_file("--valid-data", o->valid_data, &text, &len));
  mgt_json_parser *jp = NULL;
  example *ex = NULL;
  size_t n_ex = 0, cap = 0;
  mgt_status st = mgt_json_parser_create(&jp);
  size_t line = 0;
  for (char *p = text, *end = text + len; st == MGT_OK && p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p), blank = 0;
    while (blank < ll && p[blank] && strchr(" \t\r\f\v", p[blank]))
      blank++;
    line++;
    const mgt_json *root = NULL, *t = NULL;
    if (blank < ll) { /* one example; its input errors named by file and line below */
      st = mgt_json_parse(jp, p, ll, &root);
      if (st == MGT_OK) t = mgt_json_get(root, "text");
      if (st == MGT_OK && (!t || t->type != MGT_JSON_STRING))
        st = MGT_ERROR(MGT_ERR_INPUT, "no string \"text\"");
      if (st == MGT_OK && n_ex == cap) {
        example *q = realloc(ex, (cap ? 2 * cap : 1024) * sizeof *ex);
        if (q) ex = q, cap = cap ? 2 * cap : 1024;
        if (!q) st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory");
      }
      if (st == MGT_OK)
        st = mgt_lambada_example(tok, t->str, t->len, o->strict_lambada, &ex[n_ex].ids, &ex[n_ex].n,
                                 &ex[n_ex].n_target);
      if (st == MGT_OK && ex[n_ex++].n_target > T)
        st = MGT_ERROR(MGT_ERR_INPUT,
                       "the last word is %d tokens, more than the window of %d (--seq-length): it "
                       "cannot be scored whole",
                       ex[n_ex - 1].n_target, T);
      if (st == MGT_ERR_INPUT) {
        char why[512];
        snprintf(why, sizeof why, "%s", mgt_error_message());
        mgt_error_set(st, __FILE__, __LINE__, __func__, "%s:%zu: %s", o->valid_data, line, why);
      }
    }
    if (!nl) break;
    p = nl + 1;
  }
  mgt_json_parser_destroy(&jp);
  free(text);
  if (st == MGT_OK && n_ex == 0) {
    st = MGT_ERROR(MGT_ERR_INPUT, "%s: no examples", o->valid_data);
  }
  if (st != MGT_OK) {
    free_examples(ex, n_ex);
    return st;
  }
  *out = ex;
  *out_n = n_ex;
  return MGT_OK;
}

/* Greedy accuracy under teacher forcing; out = {correct, examples}. */
static mgt_status score_lambada(ctx *c, const example *ex, size_t n_ex, double out[2]) {
  mgt_status st = MGT_OK;
  double correct = 0, total = 0;
  size_t batches = (n_ex + (size_t)c->B - 1) / (size_t)c->B;
  mgt_progress pr;
  mgt_progress_start(&pr, c->g->rank == 0 ? stderr : NULL, "eval", (double)n_ex, "examples", 1, 0);
  for (size_t bt = (size_t)c->g->dp_rank; st == MGT_OK && bt < batches; bt += (size_t)c->g->dp) {
    progress_of(&pr, bt, c, n_ex);
    int first[64], last[64], off[64];
    for (int r = 0; r < c->B; r++) {
      size_t e = bt * (size_t)c->B + (size_t)r;
      int32_t *row = c->tokens + (size_t)r * (c->T + 1);
      memset(row, 0, sizeof(int32_t) * (size_t)(c->T + 1));
      first[r] = last[r] = off[r] = 0;
      if (e >= n_ex) continue;
      /* keep the end of a long example: its target must be in the window */
      int keep = ex[e].n < c->T + 1 ? ex[e].n : c->T + 1;
      off[r] = ex[e].n - keep;
      memcpy(row, ex[e].ids + off[r], sizeof(int32_t) * (size_t)keep);
      last[r] = keep - 1;
      first[r] = last[r] - ex[e].n_target;
      if (first[r] < 0) first[r] = 0;
    }
    st = mgt_gpt_forward_predict(c->m, c->tokens, c->losses, c->pred);
    for (int r = 0; st == MGT_OK && r < c->B; r++) {
      if (bt * (size_t)c->B + (size_t)r >= n_ex) continue;
      const int32_t *row = c->tokens + (size_t)r * (c->T + 1);
      int ok = 1;
      for (int t = first[r]; t < last[r]; t++)
        ok &= c->pred[(size_t)r * c->T + t] == row[t + 1];
      correct += ok;
      total += 1;
    }
  }
  mgt_progress_end(&pr, (double)n_ex, NULL);
  MGT_CHECK(st);
  out[0] += correct, out[1] += total;
  return MGT_OK;
}

/* A fine-tuned BERT on each --valid-data set: what the fine-tuning run's validation reports. */
static mgt_status eval_finetuned(const mgt_eval_opts *o, MPI_Comm world, FILE *out) {
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  const int task = finetuned(o->task);
  mgt_session ses;
  const mgt_session_opts so = {.load = o->load,
                               .ckpt_iteration = o->ckpt_iteration,
                               .tensor_parallel = o->tensor_model_parallel_size,
                               .seq_length = o->seq_length,
                               .micro_batch_size = o->micro_batch_size,
                               .device = o->device,
                               .task = task,
                               .tokenizer_type = o->tokenizer_type,
                               .vocab_file = o->vocab_file,
                               .bf16 = o->bf16,
                               .fp16 = o->fp16,
                               .cpu_gemm = o->cpu_gemm};
  MGT_CHECK(mgt_session_open_config(&ses, &so, world));
  mgt_tokenizer *tok = NULL; /* a vocabulary larger than the model's, refused before reading */
  mgt_status st = mgt_mpi_agree(world, mgt_open_tokenizer(-1, "", "", &ses.cfg, &tok));
  mgt_tok_destroy(&tok);
  if (st != MGT_OK) return st;
  mgt_config rc = ses.cfg; /* the sets read with the checkpoint's tokenizer unless overridden */
  snprintf(rc.valid_data, sizeof rc.valid_data, "%s", o->valid_data);
  rc.train_data[0] = 0;
  rc.skip_bad_records = o->skip_bad_records;
  mgt_task_data d;
  st = mgt_mpi_agree(world, mgt_task_data_open(&rc, NULL, &d));
  if (st != MGT_OK) return st;
  MGT_TRY(mgt_session_open_model(&ses, world));
  if (rank == 0)
    fprintf(out,
            "checkpoint %s (iteration %lld), %d ranks = tensor-parallel %d x data-parallel %d\n",
            ses.path, (long long)ses.state.iteration, ses.grid->size, ses.grid->tp, ses.grid->dp);
  int64_t all = 0, right = 0;
  for (int i = 0; i < d.n_valid; i++) {
    mgt_task_score sc;
    MGT_TRY(mgt_task_score_set(ses.model, ses.grid, ses.dev.comm, d.valid[i], &sc));
    all += sc.examples, right += sc.correct;
    if (rank != 0) continue;
    const char *path = mgt_task_set_path(d.valid[i]);
    fprintf(out,
            " %s %s | examples: %lld | skipped: %lld | correct: %lld | accuracy: %.4f | loss: %.6f",
            tasks[o->task], path, (long long)sc.examples,
            (long long)mgt_task_set_skipped(d.valid[i]), (long long)sc.correct, sc.accuracy,
            sc.loss);
    if (isfinite(sc.f1)) fprintf(out, " | F1: %.4f", sc.f1);
    fprintf(out, "\n{\"task\": \"%s\", \"valid_data\": ", tasks[o->task]);
    mgt_json_write_string(out, path);
    fprintf(out,
            ", \"examples\": %lld, \"skipped\": %lld, \"correct\": %lld, \"accuracy\": %.9g, "
            "\"loss\": %.9g",
            (long long)sc.examples, (long long)mgt_task_set_skipped(d.valid[i]),
            (long long)sc.correct, sc.accuracy, sc.loss);
    if (isfinite(sc.f1)) fprintf(out, ", \"f1\": %.9g", sc.f1);
    fprintf(out, ", \"seq_length\": %d, \"iteration\": %lld, \"checkpoint\": ", ses.cfg.seq_length,
            (long long)ses.state.iteration);
    mgt_json_write_string(out, ses.path);
    fprintf(out, "}\n");
  }
  if (rank == 0 && d.n_valid > 1)
    fprintf(out, " %s overall | examples: %lld | correct: %lld | accuracy: %.4f\n", tasks[o->task],
            (long long)all, (long long)right, (double)right / (double)all);
  if (rank == 0) fflush(out);
done:
  mgt_task_data_close(&d);
  mgt_session_close(&ses);
  return st;
}

mgt_status mgt_eval_run(const mgt_eval_opts *o, MPI_Comm world, FILE *out) {
  if (finetuned(o->task)) return eval_finetuned(o, world, out);
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  mgt_session ses;
  const mgt_session_opts so = {.load = o->load,
                               .ckpt_iteration = o->ckpt_iteration,
                               .tensor_parallel = o->tensor_model_parallel_size,
                               .seq_length = o->seq_length,
                               .micro_batch_size = o->micro_batch_size,
                               .device = o->device,
                               .tokenizer_type = -1,
                               .vocab_file = "",
                               .bf16 = o->bf16,
                               .fp16 = o->fp16,
                               .cpu_gemm = o->cpu_gemm};
  MGT_REQUIRE(o->micro_batch_size <= 64, "--micro-batch-size: at most 64 for evaluation");
  MGT_CHECK(mgt_session_open_config(&ses, &so, world));
  const mgt_config cfg = ses.cfg;
  const char *path = ses.path;
  mgt_status st = MGT_OK;
  int stride = o->overlapping_eval        ? o->overlapping_eval
               : o->task != TASK_WIKITEXT ? cfg.seq_length
               : cfg.seq_length < 32      ? cfg.seq_length
                                          : 32;
  MGT_REQUIRE(stride <= cfg.seq_length, "--overlapping-eval %d exceeds the window of %d tokens",
              stride, cfg.seq_length);

  int32_t *ids = NULL;
  size_t n = 0, words = 0;
  char *text = NULL, *detok = NULL;
  size_t text_n = 0, detok_n = 0;
  mgt_tokenizer *tok = NULL;
  example *ex = NULL;
  size_t n_ex = 0;
  ctx c;
  memset(&c, 0, sizeof c);
  /* inputs first, so that bad input stops every rank before anything is allocated */
  if (o->task == TASK_LM && o->input_ids[0]) {
    st = mgt_read_ids(o->input_ids, cfg.vocab_size, &ids, &n);
  } else {
    st = mgt_open_tokenizer(o->tokenizer_type, o->vocab_file, o->merge_file, &ses.saved, &tok);
    if (st == MGT_OK && o->task == TASK_LAMBADA)
      st = load_lambada(o, tok, cfg.seq_length, &ex, &n_ex);
    else if (st == MGT_OK) {
      const char *file = o->task == TASK_LM ? o->text : o->valid_data;
      st = mgt_read_file(o->task == TASK_LM ? "--text" : "--valid-data", file, &text, &text_n);
      const char *src = text;
      size_t src_n = text_n;
      if (st == MGT_OK && o->task == TASK_WIKITEXT) {
        words = mgt_wikitext_word_count(text, text_n);
        st = mgt_wikitext_detokenize(text, text_n, &detok, &detok_n);
        src = detok, src_n = detok_n;
      }
      mgt_ids v = {0};
      if (st == MGT_OK) st = mgt_tok_encode(tok, src, src_n, &v);
      ids = v.ids, n = v.n;
    }
  }
  if (st == MGT_OK && o->task != TASK_LAMBADA && n < 2) {
    const int by_ids = o->task == TASK_LM && o->input_ids[0];
    st = MGT_ERROR(MGT_ERR_INPUT, "%s %s: fewer than two tokens to score",
                   by_ids ? "--input-ids" : (o->task == TASK_LM ? "--text" : "--valid-data"),
                   by_ids ? o->input_ids : (o->task == TASK_LM ? o->text : o->valid_data));
  } else if (st == MGT_OK && o->task == TASK_WIKITEXT && words < 2) {
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--valid-data %s: fewer than two whitespace-separated tokens (the adjusted "
                   "perplexity divides by their count - 1)",
                   o->valid_data);
  }
  MGT_TRY(mgt_mpi_agree(world, st));
  MGT_TRY(mgt_session_open_model(&ses, world));
  const mgt_grid *grid = ses.grid;
  c.o = o, c.m = ses.model, c.g = grid, c.B = cfg.micro_batch_size, c.T = cfg.seq_length;
  MGT_TRY(mgt_calloc(sizeof(int32_t) * (size_t)c.B * (c.T + 1), "tokens", (void **)&c.tokens));
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)c.B * c.T, "losses", (void **)&c.losses));
  MGT_TRY(mgt_calloc(sizeof(int32_t) * (size_t)c.B * c.T, "predictions", (void **)&c.pred));
  double sums[3] = {0, 0, 0};
  if (o->task == TASK_LAMBADA)
    MGT_TRY(score_lambada(&c, ex, n_ex, sums));
  else
    MGT_TRY(score_stream(&c, ids, n, stride, sums));
  MGT_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, grid->dp_comm));
  if (rank == 0) {
    fprintf(out,
            "checkpoint %s (iteration %lld), %d ranks = tensor-parallel %d x data-parallel %d, "
            "%s\n",
            path, (long long)ses.state.iteration, grid->size, grid->tp, grid->dp, ses.precision);
    if (o->task == TASK_LAMBADA) {
      double acc = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
      fprintf(out, " lambada%s | examples: %.0f | correct: %.0f | accuracy: %.4f\n",
              o->strict_lambada ? " (strict)" : "", sums[1], sums[0], acc);
      fprintf(out,
              "{\"task\": \"lambada\", \"strict\": %s, \"examples\": %.0f, \"correct\": %.0f, "
              "\"accuracy\": %.9g, \"seq_length\": %d, \"iteration\": %lld, \"checkpoint\": ",
              o->strict_lambada ? "true" : "false", sums[1], sums[0], acc, c.T,
              (long long)ses.state.iteration);
    } else {
      double avg = sums[0] / sums[1];
      fprintf(out, " %s | tokens scored: %.0f | window %d, stride %d | avg loss: %.6f | ppl: %.4f",
              tasks[o->task], sums[1], c.T, stride, avg, ppl_of(avg));
      if (o->task == TASK_WIKITEXT) {
        /* Megatron-LM's normalization: loss over the T - 1 subword targets, rescaled to the
           T_o - 1 original tokens */
        double ratio = ((double)n - 1) / ((double)words - 1), adj = avg * ratio;
        fprintf(out, " | adjusted ppl: %.4f (T %zu subword tokens, T_o %zu original tokens)",
                ppl_of(adj), n, words);
        fprintf(out, "\n{\"task\": \"wikitext103\", \"T\": %zu, \"T_o\": %zu, ", n, words);
        json_num(out, "avg_loss", avg), json_num(out, "ppl", ppl_of(avg));
        json_num(out, "adjusted_ppl", ppl_of(adj));
        json_num(out, "token_ratio", ratio);
      } else {
        fprintf(out, "\n{\"task\": \"lm\", ");
        json_num(out, "avg_loss", avg), json_num(out, "ppl", ppl_of(avg));
      }
      fprintf(out,
              "\"tokens\": %.0f, \"seq_length\": %d, \"overlapping_eval\": %d, "
              "\"iteration\": %lld, \"checkpoint\": ",
              sums[1], c.T, stride, (long long)ses.state.iteration);
    }
    mgt_json_write_string(out, path);
    fprintf(out, "}\n");
    fflush(out);
  }
done:
  mgt_free(c.tokens);
  mgt_free(c.losses);
  mgt_free(c.pred);
  mgt_session_close(&ses);
  mgt_tok_destroy(&tok);
  free_examples(ex, n_ex);
  free(ids);
  free(text);
  free(detok);
  return st;
}
