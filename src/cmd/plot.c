/* mgt plot: loss curves from --metrics-file JSON lines as a standalone SVG 1.1 picture.

   Each file is one run (a file that several runs appended to, a resumed run repeating
   iterations, keeps the last value of each iteration). The picture has two panels sharing the
   x axis: training loss (solid) and validation loss (dashed, with markers) above, the learning
   rate below, one colour per file and a legend on the right. The plot groups carry their axis
   ranges as attributes in the namespace PLOT_NS (x0, x1, y0, y1, log, left, top, width,
   height), so a program can map the points back to data. The same input gives the same bytes. */
#include "mgt/plot.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgt/flags.h"
#include "mgt/json.h"
#include "mgt/plot_impl.h"

const char *const plot_xaxes[] = {"iteration", "tokens", NULL};
const char *const plot_metrics[] = {"loss", "lm_loss", "sop_loss", NULL};

#define OFF(f) offsetof(mgt_plot_opts, f)
#define SZ(f) sizeof(((mgt_plot_opts *)0)->f)
static const mgt_flag flags[] = {
    {"--output", MGT_FLAG_STR, OFF(output), 0, 0, "the SVG file to write", NULL, SZ(output), 0},
    {"--labels", MGT_FLAG_STR, OFF(labels), 0, 0,
     "legend labels a,b,... one per file (default: the file names)", NULL, SZ(labels), 0},
    {"--title", MGT_FLAG_STR, OFF(title), 0, 0, "a title above the panels", NULL, SZ(title), 0},
    {"--x", MGT_FLAG_ENUM, OFF(x), 0, 0, "iteration, or tokens (tokens seen)", plot_xaxes, 0, 0},
    {"--metric", MGT_FLAG_ENUM, OFF(metric), 0, 0,
     "loss, or BERT's lm_loss or sop_loss (with their valid_ keys)", plot_metrics, 0, 0},
    {"--log-scale", MGT_FLAG_BOOL, OFF(log_scale), 0, 1, "a logarithmic loss axis", NULL, 0, 0},
    {"--width", MGT_FLAG_INT, OFF(width), 320, 20000, "picture width in pixels", NULL, 0, 0},
    {"--height", MGT_FLAG_INT, OFF(height), 240, 20000, "picture height in pixels", NULL, 0, 0},
    {"--seq-length", MGT_FLAG_INT, OFF(seq_length), 0, 1 << 24,
     "tokens per sample for --x tokens (default: from tokens_per_sec x ms_per_iteration)", NULL, 0,
     0},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_plot_defaults(mgt_plot_opts *o) {
  memset(o, 0, sizeof *o);
  o->width = 800, o->height = 600;
}

static const mgt_flag *find_flag(const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
  for (int i = 0; i < N_FLAGS; i++)
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, arg, len) == 0) return &flags[i];
  return NULL;
}

mgt_status mgt_plot_parse(mgt_plot_opts *o, int argc, char **argv, int first, int *help) {
  /* the flags (with the values that follow them) go to the flag parser, the rest are files */
  char **rest = malloc(sizeof *rest * (size_t)(argc > 0 ? argc : 1));
  if (!rest) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the command line");
  int n = 0;
  mgt_status st = MGT_OK;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) == 0 || strcmp(a, "-h") == 0) {
      rest[n++] = argv[i];
      const mgt_flag *f = find_flag(a);
      if (f && f->kind != MGT_FLAG_BOOL && !strchr(a, '=') && i + 1 < argc) rest[n++] = argv[++i];
      continue;
    }
    if (o->n_files == MGT_PLOT_MAX_FILES)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "more than %d metrics files (plot fewer at a time)",
                    MGT_PLOT_MAX_FILES);
    o->files[o->n_files++] = a;
  }
  MGT_TRY(mgt_flags_parse(flags, N_FLAGS, o, n, rest, 0, "plot", help));
done:
  free(rest);
  if (st != MGT_OK || *help) return st;
  MGT_REQUIRE(o->n_files > 0, "no metrics files (usage: mgt plot METRICS.jsonl... --output F.svg)");
  MGT_REQUIRE(o->output[0], "--output: missing (the SVG file to write)");
  if (o->labels[0]) {
    int k = 1;
    for (const char *c = o->labels; *c; c++)
      k += *c == ',';
    MGT_REQUIRE(k == o->n_files, "--labels: %d labels for %d metrics files", k, o->n_files);
  }
  return MGT_OK;
}

void mgt_plot_usage(FILE *f) {
  mgt_plot_opts d;
  mgt_plot_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "plot METRICS.jsonl...", f);
}

/* ---- the data of one run ---- */

/* Values beyond are drawn at it, and those nearer 0 than PLOT_MIN at 0: ranges, pads and ticks
   of larger ones overflow a double (a diverged run logs losses of 1e308), and the powers of ten
   that step the ticks of smaller ones too (1e-310: 10^310). */
#define PLOT_MAX 1e300
#define PLOT_MIN 1e-280

static double clamp(double v) {
  return fabs(v) > PLOT_MAX ? copysign(PLOT_MAX, v) : (fabs(v) < PLOT_MIN ? 0.0 : v);
}

static mgt_status push(series *s, double it, double y, size_t line) {
  if (!isfinite(y) || !isfinite(it)) return MGT_OK; /* not drawn, as a null */
  it = clamp(it), y = clamp(y);
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    point *p = realloc(s->p, sizeof *p * cap);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the metrics");
    s->p = p, s->cap = cap;
  }
  s->p[s->n++] = (point){it, it, y, line};
  return MGT_OK;
}

static int by_iteration(const void *a, const void *b) {
  const point *x = a, *y = b;
  if (x->it != y->it) return x->it < y->it ? -1 : 1;
  return x->line < y->line ? -1 : (x->line > y->line);
}

/* Sorts by iteration and keeps the last line of each. */
static void settle(series *s) {
  if (s->n == 0) return;
  qsort(s->p, s->n, sizeof *s->p, by_iteration);
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (k > 0 && s->p[k - 1].it == s->p[i].it)
      s->p[k - 1] = s->p[i];
    else
      s->p[k++] = s->p[i];
  }
  s->n = k;
}

static void run_free(run *r) {
  free(r->loss.p), free(r->lr.p), free(r->clock.p);
  for (int i = 0; i < r->n_sets; i++)
    free(r->valid[i].p);
}

/* A finite number, 0; null or absent, 1; anything else, -1. */
static int number_of(const mgt_json *obj, const char *key, double *v) {
  const mgt_json *j = mgt_json_get(obj, key);
  if (!j || j->type == MGT_JSON_NULL) return 1;
  if (j->type != MGT_JSON_NUMBER) return -1;
  *v = j->number;
  return isfinite(*v) ? 0 : 1;
}

/* The tokens seen by a training line: consumed_tokens if it has them, else consumed_samples
   times the tokens per sample: --seq-length, or the interval's tokens (tokens_per_sec x
   ms_per_iteration per iteration) over its samples, those consumed since the line before
   (`prev_it`, `prev_cs`: the interval's start, when earlier; else since iteration 0: a ramp's
   smaller batches make that average wrong, and files of this version carry consumed_tokens). */
static int tokens_of(const mgt_json *obj, double it, int seq_length, double prev_it, double prev_cs,
                     double *tokens) {
  double cs = 0, tps = 0, ms = 0;
  if (number_of(obj, "consumed_tokens", tokens) == 0) return 1;
  if (number_of(obj, "consumed_samples", &cs) != 0) return 0;
  if (seq_length > 0) {
    *tokens = cs * seq_length;
    return 1;
  }
  if (number_of(obj, "tokens_per_sec", &tps) != 0 || number_of(obj, "ms_per_iteration", &ms) != 0 ||
      it <= 0 || cs <= 0 || tps <= 0 || ms <= 0)
    return 0;
  if (!(prev_it < it && prev_cs < cs)) prev_it = prev_cs = 0;
  double per_sample = tps * ms / 1e3 / ((cs - prev_cs) / (it - prev_it)), whole = round(per_sample);
  if (fabs(per_sample - whole) <= 1e-6 * per_sample) per_sample = whole; /* printed to 9 digits */
  *tokens = cs * per_sample;
  return 1;
}

static mgt_status add_valid(run *r, const char *name, size_t name_len, double it, double y,
                            const char *path, size_t line) {
  int k = 0;
  while (k < r->n_sets && (strlen(r->set[k]) != name_len || memcmp(r->set[k], name, name_len)))
    k++;
  if (k == r->n_sets) {
    MGT_REQUIRE(k < MAX_SETS, "%s:%zu: more than %d validation sets", path, line, MAX_SETS);
    snprintf(r->set[k], NAME_LEN, "%.*s", (int)(name_len < NAME_LEN ? name_len : NAME_LEN - 1),
             name);
    r->n_sets++;
  }
  return push(&r->valid[k], it, y, line);
}

/* One metrics line into the run: a training line (loss, lr, tokens), a validation line of
   pretraining (valid_loss ...) or of fine-tuning (task, valid_data, loss). */
static mgt_status add_line(run *r, const mgt_json *obj, const mgt_plot_opts *o, const char *path,
                           size_t line) {
  MGT_REQUIRE(obj->type == MGT_JSON_OBJECT, "%s:%zu: not a JSON object", path, line);
  double it = 0, y = 0;
  int got = number_of(obj, "iteration", &it);
  if (got == 1) return MGT_OK; /* a line of some other kind */
  MGT_REQUIRE(got == 0 && it >= 0 && it == floor(it),
              "%s:%zu: \"iteration\" is not a non-negative integer", path, line);
  char key[64];
  const mgt_json *set = mgt_json_get(obj, "valid_data");
  const int task_valid = set || mgt_json_get(obj, "task");
  const int valid = task_valid || mgt_json_get(obj, "valid_loss") || mgt_json_get(obj, "valid_ppl");
  if (task_valid && o->metric != 0) return MGT_OK; /* fine-tuning has no BERT losses */
  snprintf(key, sizeof key, "%s%s", valid && !task_valid ? "valid_" : "", plot_metrics[o->metric]);
  got = number_of(obj, key, &y);
  MGT_REQUIRE(got >= 0, "%s:%zu: \"%s\" is not a number", path, line, key);
  if (valid) {
    const int named = set && set->type == MGT_JSON_STRING;
    if (got == 0)
      MGT_CHECK(add_valid(r, named ? set->str : "", named ? set->len : 0, it, y, path, line));
    return MGT_OK;
  }
  if (got == 0) MGT_CHECK(push(&r->loss, it, y, line));
  double lr = 0, tokens = 0;
  got = number_of(obj, "lr", &lr);
  MGT_REQUIRE(got >= 0, "%s:%zu: \"lr\" is not a number", path, line);
  if (got == 0) MGT_CHECK(push(&r->lr, it, lr, line));
  if (tokens_of(obj, it, o->seq_length, r->prev_it, r->prev_samples, &tokens))
    MGT_CHECK(push(&r->clock, it, tokens, line));
  r->prev_it = it;
  if (number_of(obj, "consumed_samples", &r->prev_samples) != 0) r->prev_samples = 0;
  return MGT_OK;
}

/* The tokens seen at iteration `it`: exact at a logged iteration, linear between two, in
   proportion to the iteration outside them. */
static double tokens_at(const series *c, double it) {
  const point *p = c->p;
  size_t lo = 0, hi = c->n;
  while (lo < hi) { /* first point with p.it >= it */
    size_t mid = (lo + hi) / 2;
    if (p[mid].it < it)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < c->n && p[lo].it == it) return p[lo].y;
  const point *e = lo == 0 ? &p[0] : (lo == c->n ? &p[c->n - 1] : NULL);
  if (e) return e->it > 0 ? it * e->y / e->it : e->y;
  const point *a = &p[lo - 1], *b = &p[lo];
  return a->y + (b->y - a->y) * (it - a->it) / (b->it - a->it);
}

static void place(series *s, const series *clock, int tokens) {
  for (size_t i = 0; i < s->n; i++)
    s->p[i].x = tokens ? tokens_at(clock, s->p[i].it) : s->p[i].it;
}

static mgt_status read_run(const char *path, const mgt_plot_opts *o, run *r) {
  char *buf = NULL;
  size_t n = 0, line = 0;
  mgt_json_parser *jp = NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_read_file("metrics file", path, &buf, &n));
  MGT_TRY(mgt_json_parser_create(&jp));
  for (size_t at = 0; at < n;) {
    const char *s = buf + at, *nl = memchr(s, '\n', n - at);
    size_t len = nl ? (size_t)(nl - s) : n - at;
    at += len + 1;
    line++;
    if (len && s[len - 1] == '\r') len--;
    size_t k = 0;
    while (k < len && (s[k] == ' ' || s[k] == '\t'))
      k++;
    if (k == len) continue;
    const mgt_json *root = NULL;
    if (mgt_json_parse(jp, s, len, &root) != MGT_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", mgt_error_message());
      mgt_error_clear();
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s:%zu: not a JSON line: %s", path, line, why);
    }
    MGT_TRY(add_line(r, root, o, path, line));
  }
  settle(&r->loss), settle(&r->lr), settle(&r->clock);
  size_t points = r->loss.n;
  for (int i = 0; i < r->n_sets; i++) {
    settle(&r->valid[i]);
    points += r->valid[i].n;
  }
  if (points == 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "%s: none of its %zu lines has \"%s\" or a validation %s to plot (a "
                  "--metrics-file of mgt train?)",
                  path, line, plot_metrics[o->metric], plot_metrics[o->metric]);
  if (o->x == 1 && r->clock.n == 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "%s: --x tokens: none of its %zu lines gives the tokens seen (consumed_samples "
                  "with tokens_per_sec and ms_per_iteration; or give --seq-length)",
                  path, line);
  place(&r->loss, &r->clock, o->x == 1), place(&r->lr, &r->clock, o->x == 1);
  for (int i = 0; i < r->n_sets; i++)
    place(&r->valid[i], &r->clock, o->x == 1);
done:
  mgt_json_parser_destroy(&jp);
  free(buf);
  return st;
}

mgt_status mgt_plot_run(const mgt_plot_opts *o, FILE *out) {
  mgt_status st = MGT_OK;
  run *runs = calloc((size_t)o->n_files, sizeof *runs);
  FILE *f = NULL;
  char tmp[MGT_PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", o->output);
  if (!runs) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the metrics");
  struct stat so;
  const int exists = stat(o->output, &so) == 0;
  if (exists && S_ISDIR(so.st_mode))
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--output %s: is a directory", o->output);
  for (int i = 0; i < o->n_files; i++) {
    struct stat si;
    if (exists && stat(o->files[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "--output %s: is the metrics file %s", o->output, o->files[i]);
    MGT_TRY(read_run(o->files[i], o, &runs[i]));
  }
  plot_make_labels(o, runs);
  size_t train = 0, valid = 0;
  for (int i = 0; i < o->n_files; i++) {
    train += runs[i].loss.n;
    for (int k = 0; k < runs[i].n_sets; k++)
      valid += runs[i].valid[k].n;
    if (!o->log_scale) continue;
    int positive = 0;
    for (size_t j = 0; j < runs[i].loss.n && !positive; j++)
      positive = runs[i].loss.p[j].y > 0;
    for (int k = 0; k < runs[i].n_sets && !positive; k++)
      for (size_t j = 0; j < runs[i].valid[k].n && !positive; j++)
        positive = runs[i].valid[k].p[j].y > 0;
    if (!positive)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "--log-scale: %s has no positive %s", o->files[i],
                    plot_metrics[o->metric]);
  }
  MGT_TRY(mgt_create_file("--output", tmp, 0, &f));
  plot_write_svg(f, o, runs, o->n_files);
  const int bad = ferror(f);
  const int closed = fclose(f) == 0;
  f = NULL;
  if (bad || !closed) {
    st = MGT_ERROR(MGT_ERR_IO, "--output %s: write failed: %s", o->output, strerror(errno));
    remove(tmp);
    goto done;
  }
  MGT_TRY(mgt_publish_file(tmp, o->output));
  fprintf(out, "mgt plot: wrote %s: %d run%s, %zu training and %zu validation points against %s\n",
          o->output, o->n_files, o->n_files == 1 ? "" : "s", train, valid,
          o->x == 1 ? "tokens seen" : "iterations");
done:
  if (f) {
    fclose(f);
    remove(tmp);
  }
  for (int i = 0; runs && i < o->n_files; i++)
    run_free(&runs[i]);
  free(runs);
  return st;
}
