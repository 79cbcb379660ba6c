/* mgt preprocess: documents in, one HDF5 token file out, written in parallel.

   The inputs are seen as one byte stream (files in order). Rank r owns the documents that
   start in bytes [r T / N, (r+1) T / N) of it: a JSON-lines document starts at a line start,
   a plain-text file is one document starting at its first byte. Ranks tokenize their
   documents, an exclusive scan gives each its offsets, and collective hyperslab writes put
   tokens and document offsets in place, so the file is the same for any N. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5util.h"
#include "mgt/dataset.h"
#include "mgt/agree.h"
#include "mgt/chat.h"
#include "mgt/json.h"
#include "mgt/log.h"
#include "mgt/progress.h"
#include "mgt/tokenizer.h"
#include "mmidx.h"
#include "sentences.h"

/* ---- inputs ---- */

typedef struct input {
  char path[MGT_PATH_MAX];
  int jsonl;
  uint64_t size, start; /* start: offset in the concatenated stream */
} input;

static int is_jsonl(const char *p) {
  size_t n = strlen(p);
  return (n > 6 && strcmp(p + n - 6, ".jsonl") == 0) || (n > 5 && strcmp(p + n - 5, ".json") == 0);
}

static mgt_status list_inputs(const char *list, input **out, int *count) {
  int n = 1;
  for (const char *c = list; *c; c++)
    n += *c == '\n';
  input *in = NULL;
  MGT_CHECK(mgt_calloc(sizeof *in * (size_t)n, "input list", (void **)&in));
  uint64_t at = 0;
  int k = 0;
  for (const char *s = list; *s; k++) {
    const char *e = strchr(s, '\n');
    size_t l = e ? (size_t)(e - s) : strlen(s);
    snprintf(in[k].path, sizeof in[k].path, "%.*s", (int)l, s);
    struct stat st;
    const int found = stat(in[k].path, &st) == 0, err = errno;
    const char *why = !found                     ? strerror(err)
                      : S_ISDIR(st.st_mode)      ? "is a directory"
                      : !S_ISREG(st.st_mode)     ? "not a regular file"
                      : access(in[k].path, R_OK) ? strerror(errno)
                                                 : NULL;
    if (why) {
      mgt_free(in);
      MGT_FAIL(MGT_ERR_INPUT, "--input %.*s: %s", (int)l, s, why);
    }
    in[k].jsonl = is_jsonl(in[k].path);
    in[k].size = (uint64_t)st.st_size;
    in[k].start = at;
    at += in[k].size;
    s += l + (e ? 1 : 0);
  }
  *out = in;
  *count = k;
  return MGT_OK;
}

/* 1-based line number of byte `off` in a file (counted only when reporting an error). */
static uint64_t line_of(const char *path, uint64_t off) {
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* the error being reported stays */
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f && fd >= 0) close(fd);
  uint64_t line = 1, pos = 0;
  if (!f) return 0;
  char buf[65536];
  size_t n;
  while (pos < off && (n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n && pos < off; i++, pos++)
      line += buf[i] == '\n';
  fclose(f);
  return line;
}

/* ---- tokenizing this rank's share ---- */

typedef struct share {
  mgt_ids tokens;
  int64_t *doc_len;
  size_t n_docs, cap_docs;
  int64_t *sent_len; /* --split-sentences */
  size_t n_sents, cap_sents;
  mgt_span *spans;
  size_t cap_spans;
  uint64_t bad_lines, bytes_done;
  int32_t max_id;
  /* conversations: the format, its bos/eos texts, the rendering, and a loss mask per token */
  int chat;
  mgt_chat_specials sp;
  mgt_chat_text text;
  uint8_t *mask;
  size_t mask_cap;
  int64_t trained;
} share;

static mgt_status push_len(int64_t **v, size_t *n, size_t *cap, size_t len) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 1024;
    int64_t *p = realloc(*v, c * sizeof *p);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory holding %zu lengths", *n);
    *v = p, *cap = c;
  }
  (*v)[(*n)++] = (int64_t)len;
  return MGT_OK;
}

static mgt_status add_doc(share *sh, size_t n_tokens) {
  return push_len(&sh->doc_len, &sh->n_docs, &sh->cap_docs, n_tokens);
}

/* A document as sentences, each tokenized apart; one without a sentence is an empty document, as
   Megatron-LM's tools/preprocess_data.py writes it, and --append-eod ends the last sentence. */
static mgt_status encode_sentences(mgt_tokenizer *tok, share *sh, const char *text, size_t len,
                                   int append_eod) {
  size_t n = mgt_split_sentences(text, len, sh->spans, sh->cap_spans);
  if (n > sh->cap_spans) {
    mgt_span *p = realloc(sh->spans, n * sizeof *p);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory splitting a document of %zu bytes", len);
    sh->spans = p, sh->cap_spans = n;
    n = mgt_split_sentences(text, len, sh->spans, sh->cap_spans);
  }
  size_t before = sh->tokens.n, kept = 0;
  for (size_t i = 0; i < n; i++) {
    size_t b = sh->tokens.n;
    MGT_CHECK(mgt_tok_encode(tok, text + sh->spans[i].begin, sh->spans[i].end - sh->spans[i].begin,
                             &sh->tokens));
    if (sh->tokens.n == b) continue; /* nothing a token survives: no sentence */
    MGT_CHECK(push_len(&sh->sent_len, &sh->n_sents, &sh->cap_sents, sh->tokens.n - b));
    kept++;
  }
  if (kept && append_eod) {
    MGT_CHECK(mgt_ids_push(&sh->tokens, mgt_tok_eod(tok)));
    sh->sent_len[sh->n_sents - 1]++;
  }
  for (size_t i = before; i < sh->tokens.n; i++)
    if (sh->tokens.ids[i] > sh->max_id) sh->max_id = sh->tokens.ids[i];
  return add_doc(sh, kept ? sh->tokens.n - before : 0);
}

static mgt_status encode_doc(const mgt_preprocess_opts *o, mgt_tokenizer *tok, share *sh,
                             const char *text, size_t len) {
  if (o->split_sentences) return encode_sentences(tok, sh, text, len, o->append_eod);
  size_t before = sh->tokens.n;
  MGT_CHECK(mgt_tok_encode(tok, text, len, &sh->tokens));
  /* no token, no end of document: an empty document, as Megatron-LM's preprocess_data.py */
  if (o->append_eod && sh->tokens.n > before)
    MGT_CHECK(mgt_ids_push(&sh->tokens, mgt_tok_eod(tok)));
  for (size_t i = before; i < sh->tokens.n; i++)
    if (sh->tokens.ids[i] > sh->max_id) sh->max_id = sh->tokens.ids[i];
  return add_doc(sh, sh->tokens.n - before);
}

/* A conversation: rendered, tokenized as one text, each token's loss mask beside it; a line
   the format refuses leaves nothing behind. */
static mgt_status encode_chat(mgt_tokenizer *tok, share *sh, const mgt_json *root) {
  const size_t before = sh->tokens.n;
  mgt_status st = mgt_chat_from_json(root, sh->chat - 1, sh->sp.bos, sh->sp.eos, 0, &sh->text);
  if (st == MGT_OK) st = mgt_chat_encode(tok, &sh->text, &sh->tokens, &sh->mask, &sh->mask_cap);
  if (st != MGT_OK) {
    sh->tokens.n = before;
    return st;
  }
  for (size_t i = before; i < sh->tokens.n; i++) {
    if (sh->tokens.ids[i] > sh->max_id) sh->max_id = sh->tokens.ids[i];
    sh->trained += sh->mask[i];
  }
  return add_doc(sh, sh->tokens.n - before);
}

/* Progress over all ranks without holding any back: each rank starts a non-blocking sum of
   (bytes, documents) done each time it passes another 1/STEPS of its share, so every rank
   starts the same STEPS sums in the same order; the k-th completes once every rank has done
   k/STEPS of its share, and rank 0 shows the latest completed. */
enum { STEPS = 200 };
typedef struct progress {
  mgt_progress line; /* rank 0's */
  MPI_Comm world;
  uint64_t share; /* this rank's bytes */
  int64_t mine[STEPS][2], sum[STEPS][2];
  MPI_Request req[STEPS];
  int posted, shown;
} progress;

static void report(progress *p, const share *sh) {
  const int due = p->share ? (int)((double)STEPS * (double)sh->bytes_done / (double)p->share) : 0;
  while (p->posted < (due < STEPS ? due : STEPS)) {
    int64_t *m = p->mine[p->posted];
    m[0] = (int64_t)sh->bytes_done, m[1] = (int64_t)sh->n_docs;
    MPI_Iallreduce(m, p->sum[p->posted], 2, MPI_INT64_T, MPI_SUM, p->world, &p->req[p->posted]);
    p->posted++;
  }
  int done = 1;
  while (p->shown < p->posted && done) {
    MPI_Test(&p->req[p->shown], &done, MPI_STATUS_IGNORE);
    p->shown += done;
  }
  if (p->shown > 0) {
    char docs[64];
    snprintf(docs, sizeof docs, "%lld documents", (long long)p->sum[p->shown - 1][1]);
    mgt_progress_update(&p->line, (double)p->sum[p->shown - 1][0], docs);
  }
}

/* The sums this rank has not started yet, and the wait for all (showing them come in). */
static void report_finish(progress *p, share *sh) {
  sh->bytes_done = p->share;
  report(p, sh);
  while (p->posted < STEPS) {
    int64_t *m = p->mine[p->posted];
    m[0] = (int64_t)sh->bytes_done, m[1] = (int64_t)sh->n_docs;
    MPI_Iallreduce(m, p->sum[p->posted], 2, MPI_INT64_T, MPI_SUM, p->world, &p->req[p->posted]);
    p->posted++;
  }
  while (p->shown < STEPS) {
    report(p, sh);
    if (p->shown < STEPS) usleep(20000);
  }
  char docs[64];
  snprintf(docs, sizeof docs, "%lld documents", (long long)p->sum[STEPS - 1][1]);
  mgt_progress_end(&p->line, (double)p->sum[STEPS - 1][0], docs);
}

static mgt_status read_text_doc(const mgt_preprocess_opts *o, mgt_tokenizer *tok, share *sh,
                                const input *in) {
  FILE *f;
  MGT_CHECK(mgt_fopen_file("--input", in->path, &f));
  char *buf = malloc(in->size + 1);
  size_t got = buf ? fread(buf, 1, in->size, f) : 0;
  fclose(f);
  if (!buf) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", in->path);
  if (got != in->size) {
    free(buf);
    MGT_FAIL(MGT_ERR_IO, "--input %s: read %zu of %llu bytes", in->path, got,
             (unsigned long long)in->size);
  }
  size_t k = 0; /* a file of white space only is no document, as a blank JSON line is none */
  while (k < got && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r'))
    k++;
  mgt_status st = k < got ? encode_doc(o, tok, sh, buf, got) : MGT_OK;
  free(buf);
  sh->bytes_done += got;
  if (st == MGT_ERR_INPUT) { /* a text the tokenizer refuses: name the file */
    char why[512];
    snprintf(why, sizeof why, "%s", mgt_error_message());
    MGT_FAIL(st, "--input %s: %s", in->path, why);
  }
  return st;
}

/* Lines of a JSON-lines file that start in [a, b) (offsets within the file). */
static mgt_status read_jsonl(const mgt_preprocess_opts *o, mgt_tokenizer *tok, mgt_json_parser *jp,
                             share *sh, const input *in, uint64_t a, uint64_t b, progress *pr) {
  FILE *f;
  MGT_CHECK(mgt_fopen_file("--input", in->path, &f));
  mgt_status st = MGT_OK;
  char *line = NULL;
  size_t cap = 0;
  uint64_t pos = a;
  if (a > 0) { /* the first line that starts at or after a */
    fseeko(f, (off_t)(a - 1), SEEK_SET);
    int c = fgetc(f);
    pos = a;
    if (c != '\n') {
      ssize_t n = getline(&line, &cap, f);
      pos = n > 0 ? a + (uint64_t)n : in->size;
    }
  }
  while (pos < b) {
    ssize_t n = getline(&line, &cap, f);
    if (n <= 0) break;
    uint64_t start = pos;
    pos += (uint64_t)n;
    sh->bytes_done += (uint64_t)n;
    size_t len = (size_t)n;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      len--;
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t'))
      k++;
    if (k == len) continue; /* blank line */
    const mgt_json *root = NULL, *v = NULL;
    mgt_status ps = mgt_json_parse(jp, line, len, &root);
    if (ps == MGT_OK && !sh->chat) v = mgt_json_get(root, o->json_keys);
    mgt_status es = MGT_ERR_INPUT; /* the line's: MGT_OK, or why it is bad */
    if (ps == MGT_OK && sh->chat) {
      es = encode_chat(tok, sh, root);
      if (es != MGT_OK && es != MGT_ERR_INPUT) MGT_TRY(es);
      v = root; /* the reason is the error's */
    } else if (ps == MGT_OK && v && v->type == MGT_JSON_STRING) {
      const size_t tokens = sh->tokens.n, sents = sh->n_sents;
      es = encode_doc(o, tok, sh, v->str, v->len);
      if (es != MGT_OK && es != MGT_ERR_INPUT) MGT_TRY(es);
      if (es != MGT_OK) /* a text the tokenizer refuses (its regex gave up): nothing kept */
        sh->tokens.n = tokens, sh->n_sents = sents;
    }
    if (es == MGT_OK) {
      report(pr, sh);
      continue;
    }
    if (o->skip_bad_lines) {
      sh->bad_lines++;
      mgt_error_clear();
    } else {
      char why[512];
      if (ps != MGT_OK || sh->chat || (v && v->type == MGT_JSON_STRING))
        snprintf(why, sizeof why, "%s", mgt_error_message());
      else if (!v)
        snprintf(why, sizeof why, "no \"%s\" key (--json-keys)", o->json_keys);
      else
        snprintf(why, sizeof why, "\"%s\" is not a string", o->json_keys);
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s:%llu: %s (use --skip-bad-lines to skip such lines)",
                    in->path, (unsigned long long)line_of(in->path, start), why);
    }
    report(pr, sh);
  }
done:
  free(line);
  fclose(f);
  return st;
}

static mgt_status tokenize_share(const mgt_preprocess_opts *o, const input *in, int n_in, int rank,
                                 int size, MPI_Comm world, share *sh, FILE *log) {
  mgt_status st = MGT_OK;
  mgt_tokenizer *tok = NULL;
  mgt_json_parser *jp = NULL;
  uint64_t total = n_in ? in[n_in - 1].start + in[n_in - 1].size : 0;
  uint64_t lo = total * (uint64_t)rank / (uint64_t)size;
  uint64_t hi = total * (uint64_t)(rank + 1) / (uint64_t)size;
  /* set up before anything can fail: every rank must start all the sums */
  static progress prog; /* one preprocess per process; large for a stack */
  progress *pr = &prog;
  memset(pr, 0, sizeof *pr);
  pr->world = world, pr->share = hi - lo;
  mgt_progress_start(&pr->line, rank == 0 && log ? stderr : NULL, "preprocess", (double)total, "MB",
                     1e-6, o->log_interval_s);
  MGT_TRY(mgt_tok_open(o->tokenizer_type, o->vocab_file, o->merge_file, &tok));
  MGT_TRY(mgt_json_parser_create(&jp));
  if (o->chat_template[0]) {
    int f;
    MGT_TRY(mgt_chat_format_resolve(o->chat_template, tok, &f));
    sh->chat = 1 + f;
    MGT_TRY(mgt_chat_specials_of(tok, &sh->sp));
  }
  for (int i = 0; i < n_in; i++) {
    if (!in[i].jsonl && sh->chat)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "--input %s: conversations come as JSON lines (.jsonl)",
                    in[i].path);
    uint64_t fs = in[i].start, fe = fs + in[i].size;
    if (!in[i].jsonl) {
      /* one document starting at fs; a document at the very end belongs to the last rank */
      if ((fs >= lo && fs < hi) || (rank == size - 1 && fs == total))
        MGT_TRY(read_text_doc(o, tok, sh, &in[i]));
      report(pr, sh);
      continue;
    }
    uint64_t a = fs > lo ? fs : lo, b = fe < hi ? fe : hi;
    if (a < b) MGT_TRY(read_jsonl(o, tok, jp, sh, &in[i], a - fs, b - fs, pr));
  }
done:
  report_finish(pr, sh); /* on errors too: the other ranks wait for these sums */
  mgt_json_parser_destroy(&jp);
  mgt_tok_destroy(&tok);
  return st;
}

/* ---- writing ---- */

typedef struct totals {
  int64_t tok_before, doc_before, sent_before, n_tokens, n_docs, n_sents, max_id, bad_lines;
  int64_t n_trained; /* conversations: the tokens whose loss mask is 1 */
  int64_t n_empty;   /* documents without tokens */
  int64_t longest;   /* the most tokens of a document */
} totals;

/* The tokenizer facts written as attributes; every rank computes the same. */
typedef struct tok_meta {
  char name[64], hash[65];
  int64_t vocab_size, eod;
} tok_meta;

static mgt_status create_1d(hid_t file, const char *name, hid_t ftype, hsize_t total,
                            const char *what) {
  mgt_status st = MGT_OK;
  hid_t space = -1, dcpl = -1, dset = -1;
  MGT_H5_TRY(space = H5Screate_simple(1, &total, NULL), what);
  MGT_H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), what);
  MGT_H5_TRY(H5Pset_layout(dcpl, H5D_CONTIGUOUS), what);
  MGT_H5_TRY(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), what); /* sizes the file now */
  MGT_H5_TRY(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), what);   /* every byte is written */
  MGT_H5_TRY(dset = H5Dcreate2(file, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), what);
done:
  if (dset >= 0) H5Dclose(dset);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  return st;
}

static mgt_status write_1d(hid_t file, const char *name, hid_t mtype, hsize_t start, hsize_t count,
                           const void *buf, const char *what) {
  mgt_status st = MGT_OK;
  hid_t dset = -1, fspace = -1, mspace = -1, dxpl = -1;
  MGT_H5_TRY(dset = H5Dopen2(file, name, H5P_DEFAULT), what);
  MGT_H5_TRY(fspace = H5Dget_space(dset), what);
  hsize_t one = count ? count : 1;
  MGT_H5_TRY(mspace = H5Screate_simple(1, &one, NULL), what);
  if (count) {
    MGT_H5_TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL), what);
  } else {
    MGT_H5_TRY(H5Sselect_none(fspace), what);
    MGT_H5_TRY(H5Sselect_none(mspace), what);
  }
  MGT_H5_TRY(dxpl = H5Pcreate(H5P_DATASET_XFER), what);
  MGT_H5_TRY(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), what);
  /* memory type equal to the file type: a conversion would turn collective I/O off */
  MGT_H5_TRY(H5Dwrite(dset, mtype, mspace, fspace, dxpl, buf), what);
done:
  if (dxpl >= 0) H5Pclose(dxpl);
  if (mspace >= 0) H5Sclose(mspace);
  if (fspace >= 0) H5Sclose(fspace);
  if (dset >= 0) H5Dclose(dset);
  return st;
}

static mgt_status write_attrs(hid_t file, const mgt_preprocess_opts *o, const totals *t,
                              const tok_meta *meta, const char *chat, const char *what) {
  /* a loss mask is format 2: an earlier reader refuses it rather than train on every token */
  MGT_CHECK(
      mgt_h5_write_str(file, "format", chat ? "megatron-c tokens 2" : "megatron-c tokens 1", what));
  if (chat) {
    MGT_CHECK(mgt_h5_write_str(file, "chat_template", chat, what));
    MGT_CHECK(mgt_h5_write_i64(file, "n_trained", t->n_trained, what));
  }
  MGT_CHECK(mgt_h5_write_str(file, "tokenizer", meta->name, what));
  MGT_CHECK(mgt_h5_write_str(file, "vocab_hash", meta->hash, what));
  MGT_CHECK(mgt_h5_write_i64(file, "vocab_size", meta->vocab_size, what));
  MGT_CHECK(mgt_h5_write_i64(file, "eod_id", meta->eod, what));
  MGT_CHECK(mgt_h5_write_i64(file, "append_eod", o->append_eod, what));
  MGT_CHECK(mgt_h5_write_str(file, "json_key", o->json_keys, what));
  MGT_CHECK(mgt_h5_write_i64(file, "n_tokens", t->n_tokens, what));
  MGT_CHECK(mgt_h5_write_i64(file, "n_documents", t->n_docs, what));
  MGT_CHECK(mgt_h5_write_i64(file, "max_token_id", t->max_id, what));
  if (o->split_sentences) MGT_CHECK(mgt_h5_write_i64(file, "n_sentences", t->n_sents, what));
  MGT_CHECK(mgt_h5_write_i64(file, "complete", 1, what)); /* last */
  MGT_H5(H5Fflush(file, H5F_SCOPE_GLOBAL), what);
  if (H5Fget_obj_count(file, H5F_OBJ_ALL) != 1)
    MGT_FAIL(MGT_ERR_INTERNAL, "%s: HDF5 objects left open before closing", what);
  return MGT_OK;
}

/* Every rank writes its share, in phases agreed before the next (as checkpoints are written,
   io/tensors/checkpoint.c): create, reserve the space, write, attributes. */
static mgt_status write_file(const mgt_preprocess_opts *o, const char *tmp, MPI_Comm world,
                             const share *sh, const totals *t, const tok_meta *meta) {
  const char *chat = sh->chat ? mgt_chat_names[sh->chat - 1] : NULL;
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  hid_t fapl = -1, file = -1;
  void *buf = NULL;
  int64_t *offs = NULL, *soffs = NULL;
  const int wide = meta->vocab_size > 65536, sents = o->split_sentences;
  const char *what = tmp;
  const size_t n = sh->tokens.n;
  /* document i spans tokens [offsets[i], offsets[i+1]); the last rank adds the total */
  const size_t nd = sh->n_docs + (rank == size - 1), ns = sh->n_sents + (rank == size - 1);
  mgt_status st = mgt_calloc((n ? n : 1) * (wide ? 4 : 2), "token buffer", &buf);
  if (st == MGT_OK)
    st = mgt_calloc((nd ? nd : 1) * sizeof(int64_t), "document offsets", (void **)&offs);
  if (st == MGT_OK)
    st = mgt_calloc((ns ? ns : 1) * sizeof(int64_t), "sentence offsets", (void **)&soffs);
  if (st == MGT_OK) {
    for (size_t i = 0; i < n; i++) {
      if (wide)
        ((uint32_t *)buf)[i] = (uint32_t)sh->tokens.ids[i];
      else
        ((uint16_t *)buf)[i] = (uint16_t)sh->tokens.ids[i];
    }
    int64_t at = t->tok_before;
    for (size_t i = 0; i < sh->n_docs; i++) {
      offs[i] = at;
      at += sh->doc_len[i];
    }
    if (rank == size - 1) offs[sh->n_docs] = t->n_tokens;
    at = t->tok_before; /* sentence i spans tokens [sentence_offsets[i], ...[i+1]) */
    for (size_t i = 0; i < sh->n_sents; i++) {
      soffs[i] = at;
      at += sh->sent_len[i];
    }
    if (rank == size - 1) soffs[sh->n_sents] = t->n_tokens;
    if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
        H5Pset_fapl_mpio(fapl, world, MPI_INFO_NULL) < 0 ||
        H5Pset_coll_metadata_write(fapl, 1) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0)
      st = mgt_h5_status(-1, what, __FILE__, __LINE__, __func__, "H5Pcreate");
  }
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK) {
    file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    st = mgt_mpi_agree(world, mgt_h5_status(file, what, __FILE__, __LINE__, __func__, "H5Fcreate"));
  }
  if (st == MGT_OK) {
    st =
        create_1d(file, "tokens", wide ? H5T_STD_U32LE : H5T_STD_U16LE, (hsize_t)t->n_tokens, what);
    if (st == MGT_OK)
      st = create_1d(file, "document_offsets", H5T_STD_I64LE, (hsize_t)t->n_docs + 1, what);
    if (st == MGT_OK && sents)
      st = create_1d(file, "sentence_offsets", H5T_STD_I64LE, (hsize_t)t->n_sents + 1, what);
    if (st == MGT_OK && chat)
      st = create_1d(file, "loss_mask", H5T_STD_U8LE, (hsize_t)t->n_tokens, what);
    st = mgt_mpi_agree(world, st);
  }
  const uint64_t bytes = (uint64_t)t->n_tokens * (wide ? 4 : 2) +
                         (chat ? (uint64_t)t->n_tokens : 0) +
                         8 * ((uint64_t)t->n_docs + 1 + (sents ? (uint64_t)t->n_sents + 1 : 0));
  if (st == MGT_OK) st = mgt_h5_reserve(file, tmp, world, bytes, what);
  if (st == MGT_OK) {
    st = write_1d(file, "tokens", wide ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT16,
                  (hsize_t)t->tok_before, (hsize_t)n, buf, what);
    if (st == MGT_OK)
      st = write_1d(file, "document_offsets", H5T_NATIVE_INT64, (hsize_t)t->doc_before, (hsize_t)nd,
                    offs, what);
    if (st == MGT_OK && sents)
      st = write_1d(file, "sentence_offsets", H5T_NATIVE_INT64, (hsize_t)t->sent_before,
                    (hsize_t)ns, soffs, what);
    if (st == MGT_OK && chat)
      st = write_1d(file, "loss_mask", H5T_NATIVE_UINT8, (hsize_t)t->tok_before, (hsize_t)n,
                    sh->mask ? (const void *)sh->mask : (const void *)"", what);
    st = mgt_mpi_agree(world, st);
  }
  if (st == MGT_OK) st = mgt_mpi_agree(world, write_attrs(file, o, t, meta, chat, what));
  st = mgt_h5_close(file, tmp, world, st, what);
  if (fapl >= 0) H5Pclose(fapl);
  mgt_free(buf);
  mgt_free(offs);
  mgt_free(soffs);
  return mgt_mpi_agree(world, st);
}

/* Megatron-LM's format of this rank's share: a sequence per document, or per sentence with
   --split-sentences (then each document's sentence count from the lengths); an empty document
   has no sequence. */
static mgt_status write_megatron(const char *prefix, MPI_Comm world, int split, const share *sh,
                                 const tok_meta *meta) {
  int64_t *per_doc = NULL, *docs = NULL;
  size_t n_seq = split ? sh->n_sents : 0;
  mgt_status st =
      mgt_calloc(sizeof(int64_t) * (sh->n_docs + 1), "document sizes", (void **)&per_doc);
  if (st == MGT_OK && !split)
    st = mgt_calloc(sizeof(int64_t) * (sh->n_docs + 1), "document sizes", (void **)&docs);
  for (size_t d = 0, s = 0; st == MGT_OK && d < sh->n_docs; d++) {
    int64_t left = sh->doc_len[d];
    per_doc[d] = !split && left > 0;
    if (!split && left > 0) docs[n_seq++] = left;
    while (split && left > 0 && s < sh->n_sents)
      left -= sh->sent_len[s++], per_doc[d]++;
  }
  const int64_t *seq = split ? sh->sent_len : docs;
  st = mgt_mpi_agree(world, st);
  /* the loss mask (a uint8 dataset of the same sequences) before the tokens: tokens published
     without their mask would read as plain text and train on every token */
  char mp[MGT_PATH_MAX + 320];
  snprintf(mp, sizeof mp, "%s_loss_mask", prefix);
  if (st == MGT_OK && sh->chat) {
    int32_t *m = NULL;
    st = mgt_calloc(sizeof *m * (sh->tokens.n + 1), "loss mask", (void **)&m);
    for (size_t i = 0; st == MGT_OK && i < sh->tokens.n; i++)
      m[i] = sh->mask[i];
    st = mgt_mpi_agree(world, st);
    if (st == MGT_OK)
      st = mgt_mmidx_write(mp, world, MGT_MM_U8, m, (int64_t)sh->tokens.n, seq, (int64_t)n_seq,
                           per_doc, (int64_t)sh->n_docs);
    mgt_free(m);
  }
  if (st == MGT_OK) {
    const int had_tokens = mgt_mmidx_exists(prefix); /* the same answer on every rank */
    st = mgt_mmidx_write(prefix, world, meta->vocab_size < 65500 ? MGT_MM_U16 : MGT_MM_I32,
                         sh->tokens.ids, (int64_t)sh->tokens.n, seq, (int64_t)n_seq, per_doc,
                         (int64_t)sh->n_docs);
    int rank;
    MPI_Comm_rank(world, &rank);
    /* no mask left without its tokens; beside earlier tokens (an overwrite that failed) the new
       mask stays: it does not fit them, and reading refuses the pair, where tokens without a
       mask would train on every token */
    if (st != MGT_OK && sh->chat && rank == 0 && !had_tokens) {
      char f[sizeof mp + 8];
      snprintf(f, sizeof f, "%s.idx", mp), unlink(f);
      snprintf(f, sizeof f, "%s.bin", mp), unlink(f);
    }
  }
  mgt_free(per_doc);
  mgt_free(docs);
  return st;
}

/* --seq-length: how the documents, in the input's order, pack whole into samples of seq + 1
   tokens as mgt train --sft packs them (next fit; a longer one truncated), on rank 0. */
static mgt_status report_packing(const share *sh, int seq, MPI_Comm world, FILE *log) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  int *counts = NULL, *displs = NULL;
  int64_t *all = NULL;
  int mine = (int)sh->n_docs;
  mgt_status st = MGT_OK;
  if (rank == 0) {
    st = mgt_calloc(sizeof(int) * (size_t)size * 2, "document counts", (void **)&counts);
    if (st == MGT_OK) displs = counts + size;
  }
  MGT_MPI(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, world));
  int64_t total = 0;
  for (int r = 0; rank == 0 && r < size; r++)
    displs[r] = (int)total, total += counts[r];
  if (rank == 0 && st == MGT_OK)
    st = mgt_calloc(sizeof(int64_t) * (size_t)(total + 1), "document lengths", (void **)&all);
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK)
    MGT_MPI(
        MPI_Gatherv(sh->doc_len, mine, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, world));
  if (st == MGT_OK && rank == 0 && log) {
    const int64_t slots = seq + 1;
    int64_t samples = 0, fill = slots, placed = 0, longer = 0, cut = 0;
    for (int64_t d = 0; d < total; d++) {
      int64_t len = all[d];
      if (len == 0) continue;
      if (len > slots) longer++, cut += len - slots, len = slots;
      if (fill + len > slots) samples++, fill = 0;
      fill += len, placed += len;
    }
    fprintf(log,
            "preprocess: packed whole into samples of %lld tokens (--sft, in the input's order): "
            "%lld samples, %.1f%% of the slots filled; %lld documents longer (truncated: %lld "
            "tokens cut)\n",
            (long long)slots, (long long)samples,
            samples ? 100.0 * (double)placed / (double)(samples * slots) : 0.0, (long long)longer,
            (long long)cut);
  }
  mgt_free(counts);
  mgt_free(all);
  return st;
}

mgt_status mgt_preprocess_run(const mgt_preprocess_opts *o, MPI_Comm world, FILE *log) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  mgt_h5_quiet();
  double t0 = mgt_now();
  input *in = NULL;
  int n_in = 0;
  share sh;
  memset(&sh, 0, sizeof sh);
  sh.max_id = -1;
  tok_meta meta;
  memset(&meta, 0, sizeof meta);
  char final[MGT_PATH_MAX + 320], tmp[MGT_PATH_MAX + 16], mm[MGT_PATH_MAX + 300];
  snprintf(final, sizeof final, "%s.h5", o->output_prefix);
  snprintf(tmp, sizeof tmp, "%s.h5.tmp", o->output_prefix);
  snprintf(mm, sizeof mm, "%s_%s_%s", o->output_prefix, o->json_keys,
           o->split_sentences ? "sentence" : "document");
  if (o->dataset_impl) snprintf(final, sizeof final, "%s.bin", mm);

  mgt_status st = list_inputs(o->input, &in, &n_in);
  if (st == MGT_OK) {
    /* the output directory must exist and be writable before hours of tokenizing */
    char dir[sizeof final];
    snprintf(dir, sizeof dir, "%s", final);
    char *d = dirname(dir);
    if (access(d, W_OK) != 0) {
      st = MGT_ERROR(MGT_ERR_INPUT, "--output-prefix %s: directory %s is not writable: %s",
                     o->output_prefix, d, strerror(errno));
    }
    /* and the outputs' names free for files: a directory or FIFO there fails only at the end */
    char idx[sizeof mm + 8];
    snprintf(idx, sizeof idx, "%s.idx", mm);
    const char *outs[2] = {final, o->dataset_impl ? idx : NULL};
    for (int k = 0; k < 2 && st == MGT_OK && outs[k]; k++) {
      struct stat sb;
      if (lstat(outs[k], &sb) == 0 && !S_ISREG(sb.st_mode))
        st = MGT_ERROR(MGT_ERR_INPUT, "--output-prefix %s: %s exists and is not a regular file",
                       o->output_prefix, outs[k]);
    }
  }
  if (st == MGT_OK && rank == 0) { /* this run's own temporary names: an interrupted one's */
    char t2[sizeof mm + 16];
    mgt_remove_stale(tmp, 0, log);
    snprintf(t2, sizeof t2, "%s.bin.tmp", mm);
    mgt_remove_stale(t2, 0, log);
    snprintf(t2, sizeof t2, "%s.idx.tmp", mm);
    mgt_remove_stale(t2, 0, log);
  }
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK) {
    if (rank == 0 && log) {
      uint64_t total = in[n_in - 1].start + in[n_in - 1].size;
      fprintf(log, "preprocess: %d input file(s), %.1f MB, %d rank(s), %s\n", n_in, total / 1e6,
              size, mgt_tokenizer_names[o->tokenizer_type]);
      fflush(log);
    }
    st = tokenize_share(o, in, n_in, rank, size, world, &sh, log);
  }
  st = mgt_mpi_agree(world, st);
  totals t;
  memset(&t, 0, sizeof t);
  if (st == MGT_OK) {
    int64_t mine[3] = {(int64_t)sh.tokens.n, (int64_t)sh.n_docs, (int64_t)sh.n_sents},
            before[3] = {0, 0, 0}, sum[6],
            loc[6] = {mine[0], mine[1], mine[2], (int64_t)sh.bad_lines, sh.trained, 0},
            mx[2] = {sh.max_id, 0};
    for (size_t d = 0; d < sh.n_docs; d++) {
      loc[5] += sh.doc_len[d] == 0;
      mx[1] = sh.doc_len[d] > mx[1] ? (int64_t)sh.doc_len[d] : mx[1];
    }
    MGT_MPI(MPI_Exscan(mine, before, 3, MPI_INT64_T, MPI_SUM, world));
    if (rank == 0) before[0] = before[1] = before[2] = 0; /* Exscan leaves rank 0's undefined */
    MGT_MPI(MPI_Allreduce(loc, sum, 6, MPI_INT64_T, MPI_SUM, world));
    MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_INT64_T, MPI_MAX, world));
    t.n_empty = sum[5], t.longest = mx[1];
    t.tok_before = before[0], t.doc_before = before[1], t.sent_before = before[2];
    t.n_tokens = sum[0], t.n_docs = sum[1], t.n_sents = sum[2], t.bad_lines = sum[3];
    t.max_id = mx[0];
    t.n_trained = sum[4];
    mgt_tokenizer *tok = NULL;
    st = mgt_tok_open(o->tokenizer_type, o->vocab_file, o->merge_file, &tok);
    if (st == MGT_OK) {
      snprintf(meta.name, sizeof meta.name, "%s", mgt_tok_name(tok));
      snprintf(meta.hash, sizeof meta.hash, "%s", mgt_tok_hash(tok));
      meta.vocab_size = mgt_tok_vocab_size(tok);
      meta.eod = mgt_tok_eod(tok);
    }
    mgt_tok_destroy(&tok);
  }
  if (st == MGT_OK && t.n_docs == 0) {
    mgt_error_set(
        MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
        "--input: no documents (the input is empty, or blank lines and white space only)");
    st = MGT_ERR_INPUT;
  }
  if (st == MGT_OK && o->dataset_impl && t.longest > INT32_MAX) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--dataset-impl mmap: a document of %lld tokens; Megatron-LM's index holds "
                  "sizes below 2^31 (split the input, or write our HDF5 format)",
                  (long long)t.longest);
    st = MGT_ERR_INPUT;
  }
  if (st == MGT_OK && t.n_tokens == 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--input: no tokens (its %lld documents are empty once tokenized)",
                  (long long)t.n_docs);
    st = MGT_ERR_INPUT;
  }
  if (st == MGT_OK && rank == 0) {
    char dir[sizeof final];
    snprintf(dir, sizeof dir, "%s", final);
    /* the tokens (Megatron-LM's files: uint16 below a vocabulary of 65500, else int32; ours
       uint16 to 65536), a loss mask's byte each, the indices */
    const int wide = o->dataset_impl ? meta.vocab_size >= 65500 : meta.vocab_size > 65536;
    uint64_t need = (1u << 20) + (uint64_t)t.n_tokens * (wide ? 4 : 2) +
                    (sh.chat ? (uint64_t)t.n_tokens : 0) + ((uint64_t)t.n_docs + 1) * 8 +
                    ((uint64_t)t.n_sents + 1) * 8;
    if (o->dataset_impl)
      need += ((uint64_t)t.n_docs + (uint64_t)t.n_sents) * 12 * (sh.chat ? 2 : 1);
    st = mgt_check_space(dirname(dir), need, final);
  }
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK && rank == 0 && log && sh.chat)
    fprintf(log,
            "preprocess: %lld conversations as the %s chat format: %lld tokens, %lld (%.1f%%) "
            "trained (loss mask 1)\n",
            (long long)t.n_docs, mgt_chat_names[sh.chat - 1], (long long)t.n_tokens,
            (long long)t.n_trained,
            t.n_tokens ? 100.0 * (double)t.n_trained / (double)t.n_tokens : 0.0);
  if (st == MGT_OK && o->seq_length > 0) st = report_packing(&sh, o->seq_length, world, log);
  if (st == MGT_OK && o->dataset_impl) {
    st = write_megatron(mm, world, o->split_sentences, &sh, &meta);
    char bad[64] = "";
    if (t.bad_lines) snprintf(bad, sizeof bad, "; %lld bad lines skipped", (long long)t.bad_lines);
    if (st == MGT_OK && rank == 0 && log)
      fprintf(log,
              "preprocess: wrote %s.bin and %s.idx%s (Megatron-LM's mmap format, %s): %lld "
              "documents, %lld %s, %lld tokens%s; train with --data-path %s\n",
              mm, mm, sh.chat ? " and the loss mask's _loss_mask.bin/.idx" : "",
              meta.vocab_size < 65500 ? "uint16" : "int32", (long long)t.n_docs,
              (long long)(o->split_sentences ? t.n_sents : t.n_docs - t.n_empty),
              o->split_sentences ? "sentences" : "sequences", (long long)t.n_tokens, bad, mm);
    goto out;
  }
  if (st == MGT_OK) st = write_file(o, tmp, world, &sh, &t, &meta);
  if (st == MGT_OK) {
    MGT_MPI(MPI_Barrier(world));
    mgt_status ps = rank == 0 ? mgt_publish_file(tmp, final) : MGT_OK;
    st = mgt_mpi_agree(world, ps);
  }
  if (st != MGT_OK && rank == 0) unlink(tmp); /* never leave a partial file behind */
  if (st == MGT_OK && rank == 0 && log) {
    double dt = mgt_now() - t0;
    uint64_t total = n_in ? in[n_in - 1].start + in[n_in - 1].size : 0;
    char sents[48] = "";
    if (o->split_sentences) snprintf(sents, sizeof sents, "%lld sentences, ", (long long)t.n_sents);
    fprintf(log,
            "preprocess: wrote %s: %lld documents, %s%lld tokens (%s), max id %lld, "
            "%lld bad lines skipped; %.1f s, %.2f MB/s\n",
            final, (long long)t.n_docs, sents, (long long)t.n_tokens,
            meta.vocab_size > 65536 ? "uint32" : "uint16", (long long)t.max_id,
            (long long)t.bad_lines, dt, total / 1e6 / (dt > 0 ? dt : 1));
  }
out:
  mgt_ids_free(&sh.tokens);
  mgt_chat_text_free(&sh.text);
  free(sh.mask);
  free(sh.doc_len);
  free(sh.sent_len);
  free(sh.spans);
  mgt_free(in);
  return st;
}
