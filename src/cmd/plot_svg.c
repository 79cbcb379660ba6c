/* mgt plot's picture: round-number axes (linear or log) and the SVG 1.1 document (panels,
   curves, markers, legend; the axis ranges as attributes in PLOT_NS). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/plot_impl.h"

/* ---- axes ---- */

enum { MAX_TICKS = 64 };

typedef struct axis {
  double lo, hi; /* the data range the panel spans */
  int log;
  double ticks[MAX_TICKS];
  int n_ticks;
  double step;        /* between ticks; 0 on a log axis with a tick per round number */
  double unit;        /* tick labels in units of 1, 1e3 (k), 1e6 (M), 1e9 (B), 1e12 (T) */
  const char *suffix; /* of the unit */
} axis;

/* Tick labels of numbers up to `big` in thousands (k), millions (M), billions (B) or
   trillions (T) from 10^4 to 10^15 (beyond, in powers of ten). */
static void axis_unit(axis *a, double big) {
  static const struct {
    double unit;
    const char *suffix;
  } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
  a->unit = 1, a->suffix = "";
  for (int i = 0; i < 4 && big >= 1e4 && big < 1e15; i++)
    if (big >= units[i].unit) {
      a->unit = units[i].unit, a->suffix = units[i].suffix;
      return;
    }
}

/* Ticks at round numbers (1, 2 or 5 times a power of ten apart), about `target` of them, the
   range widened to the ticks around [mn, mx]. */
static void axis_linear(axis *a, double mn, double mx, int target) {
  if (!(mx - mn > 1e-12 * fmax(fabs(mn), fabs(mx)))) {
    double pad = mn != 0 ? fabs(mn) * 0.1 : 1.0;
    mn -= pad, mx += pad;
  }
  const double raw = (mx - mn) / target;
  const int e = (int)floor(log10(raw));
  const double f = raw / pow(10, e);
  const int m = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  /* tick k is k*m*10^e, divided by an exact power of ten below 1: the nearest double */
  const double p = pow(10, e < 0 ? -e : e), step = e < 0 ? m / p : m * p;
  const double k0 = floor(mn / step + 1e-9), k1 = ceil(mx / step - 1e-9);
  a->log = 0, a->step = step, a->n_ticks = 0;
  for (double k = k0; k <= k1 && a->n_ticks < MAX_TICKS; k++)
    a->ticks[a->n_ticks++] = k == 0 ? 0.0 : (e < 0 ? k * m / p : k * m * p);
  a->lo = e < 0 ? k0 * m / p : k0 * m * p, a->hi = e < 0 ? k1 * m / p : k1 * m * p;
  axis_unit(a, fmax(fabs(a->lo), fabs(a->hi)));
}

/* A log axis from the round numbers of each decade below mn to the one above mx: 1, 2, 5
   times a power of ten (1 alone over 3 or more decades, every digit under one decade). */
static void axis_log(axis *a, double mn, double mx) {
  if (mx / mn < 1.000001) mn /= 1.5, mx *= 1.5;
  static const double all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, some[] = {1, 2, 5};
  const double span = log10(mx / mn);
  const double *d = span >= 1 && span < 3 ? some : all;
  const int nd = span >= 3 ? 1 : (span >= 1 ? 3 : 9);
  const int k0 = (int)floor(log10(mn)), k1 = (int)ceil(log10(mx));
  const int every = (k1 - k0) / 12 + 1; /* decades between ticks on a very long axis */
  a->log = 1, a->unit = 1, a->suffix = "", a->step = 0, a->lo = 0, a->hi = 0, a->n_ticks = 0;
  for (int k = k0; k <= k1; k++) {
    const double p = pow(10, k < 0 ? -k : k);
    for (int i = 0; i < nd; i++) {
      const double v = k < 0 ? d[i] / p : d[i] * p;
      if (v <= mn * (1 + 1e-12)) a->lo = v;
      if (v >= mx * (1 - 1e-12) && a->hi == 0) a->hi = v;
    }
  }
  for (int k = k0; k <= k1; k++) {
    const double p = pow(10, k < 0 ? -k : k);
    for (int i = 0; i < nd && a->n_ticks < MAX_TICKS; i++) {
      const double v = k < 0 ? d[i] / p : d[i] * p;
      if (v >= a->lo * (1 - 1e-12) && v <= a->hi * (1 + 1e-12) && (k - k0) % every == 0)
        a->ticks[a->n_ticks++] = v;
    }
  }
  if (a->n_ticks < 4) { /* a short axis: round numbers evenly spaced, as a linear one's */
    axis l;
    axis_linear(&l, a->lo, a->hi, 5);
    a->step = l.step, a->n_ticks = 0;
    for (int i = 0; i < l.n_ticks; i++)
      if (l.ticks[i] >= a->lo * (1 - 1e-12) && l.ticks[i] <= a->hi * (1 + 1e-12))
        a->ticks[a->n_ticks++] = l.ticks[i];
  }
}

/* Where v falls on the axis, 0 at lo and 1 at hi. */
static double axis_frac(const axis *a, double v) {
  if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
  return (v - a->lo) / (a->hi - a->lo);
}

/* "0", "250", "1.5k", "0.25", "5e-5": as many digits as the spacing of the ticks needs, in
   powers of ten where that would take more than 4 decimals. */
static void tick_label(const axis *a, double v, char *b, size_t n) {
  const double step = a->step > 0 ? a->step : pow(10, floor(log10(v) + 1e-9));
  axis u = *a;
  if (a->log) axis_unit(&u, v); /* a log axis chooses the unit of each tick */
  if (v == 0 || fabs(v) < 1e-9 * step) {
    snprintf(b, n, "0");
    return;
  }
  const double w = v / u.unit, s = step / u.unit;
  const int decimals = s >= 1 ? 0 : (int)ceil(-log10(s) - 1e-9);
  if (decimals <= 4 && fabs(w) < 1e6) {
    snprintf(b, n, "%.*f%s", decimals, w, u.suffix);
    return;
  }
  const int sig = (int)floor(log10(fabs(w)) + 1e-9) - (int)floor(log10(s) + 1e-9) + 1;
  char t[40];
  snprintf(t, sizeof t, "%.*e", sig < 1 ? 0 : (sig > 15 ? 14 : sig - 1), w);
  /* 1.50e-05 to 1.5e-5: no trailing zeros in the mantissa, none leading in the exponent */
  char *e = strchr(t, 'e');
  const int ex = e ? atoi(e + 1) : 0;
  if (e) *e = '\0';
  if (strchr(t, '.')) {
    size_t l = strlen(t);
    while (t[l - 1] == '0')
      t[--l] = '\0';
    if (t[l - 1] == '.') t[--l] = '\0';
  }
  snprintf(b, n, "%se%d%s", t, ex, u.suffix);
}

/* ---- SVG ---- */

/* The shortest decimal that reads back as v. */
static const char *exact(double v, char b[32]) {
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(b, 32, "%.*g", digits, v);
    if (strtod(b, NULL) == v) break;
  }
  return b;
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
enum { N_COLOURS = sizeof palette / sizeof palette[0] };

/* The next character of s: its code point and bytes in *len, or -1 for a byte that does not
   start well-formed UTF-8 (*len 1). */
static long utf8_next(const unsigned char *s, size_t *len) {
  static const long least[] = {0, 0, 0x80, 0x800, 0x10000};
  const unsigned c = s[0];
  size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  *len = 1;
  if (l == 0) return -1;
  long cp = l == 1 ? c : (long)(c & (0x7f >> l));
  for (size_t i = 1; i < l; i++) {
    if ((s[i] & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < least[l] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  *len = l;
  return cp;
}

static size_t utf8_chars(const char *s) {
  size_t n = 0, l = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p += l, n++)
    utf8_next(p, &l);
  return n;
}

/* Writes s as XML text or attribute value: & < > " ' as entities, what XML may not hold
   (control characters, bytes that are not UTF-8, U+FFFE, U+FFFF) as U+FFFD; at most `max`
   characters (0: all), a longer text cut with an ellipsis. */
static void xml_text(FILE *f, const char *s, size_t max) {
  const size_t total = utf8_chars(s), keep = max && total > max ? max - 1 : total;
  size_t l = 0, i = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && i < keep; p += l, i++) {
    const long cp = utf8_next(p, &l);
    if (cp < 0x20 || cp == 0xfffe || cp == 0xffff)
      fputs("&#xFFFD;", f);
    else if (cp == '&')
      fputs("&amp;", f);
    else if (cp == '<')
      fputs("&lt;", f);
    else if (cp == '>')
      fputs("&gt;", f);
    else if (cp == '"')
      fputs("&quot;", f);
    else if (cp == '\'')
      fputs("&apos;", f);
    else
      fwrite(p, 1, l, f);
  }
  if (keep < total) fputs("&#x2026;", f);
}

typedef struct panel {
  const char *id, *ylabel;
  double left, top, width, height;
  axis x, y;
} panel;

static double px(const panel *p, double x) { return p->left + axis_frac(&p->x, x) * p->width; }
static double py(const panel *p, double y) {
  return p->top + p->height - axis_frac(&p->y, y) * p->height;
}

/* A point is drawn when the axis can show it (a log axis has no place for y <= 0). */
static int shown(const panel *p, const point *q) { return !p->y.log || q->y > 0; }

static void marker(FILE *f, int shape, double x, double y, const char *colour) {
  switch (shape % 4) {
  case 0: fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"", x, y); break;
  case 1: fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"6\" height=\"6\"", x - 3, y - 3); break;
  case 2:
    fprintf(f, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\"", x, y - 3.5, x - 3.5, y + 3,
            x + 3.5, y + 3);
    break;
  default:
    fprintf(f, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f\"", x, y - 4, x + 4, y, x,
            y + 4, x - 4, y);
  }
  fprintf(f, " fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.8\"/>\n", colour);
}

/* A polyline through the shown points of s ("class" and the run in its attributes). */
static void curve(FILE *f, const panel *p, const series *s, const char *cls, int run_index,
                  const char *dash) {
  const char *colour = palette[run_index % N_COLOURS];
  size_t drawn = 0;
  for (size_t i = 0; i < s->n; i++)
    drawn += shown(p, &s->p[i]);
  if (drawn == 0) return;
  fprintf(f,
          "<polyline class=\"%s\" mgt:run=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"",
          cls, run_index, colour, dash ? "1.5" : "1.8");
  if (dash) fprintf(f, " stroke-dasharray=\"%s\"", dash);
  fputs(" stroke-linejoin=\"round\" points=\"", f);
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (shown(p, &s->p[i]))
      fprintf(f, "%s%.2f,%.2f", k++ ? " " : "", px(p, s->p[i].x), py(p, s->p[i].y));
  fputs("\"/>\n", f);
  if (drawn == 1 && !dash) /* one point makes no line */
    for (size_t i = 0; i < s->n; i++)
      if (shown(p, &s->p[i]))
        fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", px(p, s->p[i].x),
                py(p, s->p[i].y), colour);
}

/* The panel's group: its ranges as attributes, frame, grid, tick labels, y label. The
   caller draws the curves and closes the group. */
static void panel_open(FILE *f, const panel *p) {
  char n[8][32];
  fprintf(f,
          "<g id=\"%s\" mgt:x0=\"%s\" mgt:x1=\"%s\" mgt:y0=\"%s\" mgt:y1=\"%s\" mgt:log=\"%d\" "
          "mgt:left=\"%s\" mgt:top=\"%s\" mgt:width=\"%s\" mgt:height=\"%s\">\n",
          p->id, exact(p->x.lo, n[0]), exact(p->x.hi, n[1]), exact(p->y.lo, n[2]),
          exact(p->y.hi, n[3]), p->y.log, exact(p->left, n[4]), exact(p->top, n[5]),
          exact(p->width, n[6]), exact(p->height, n[7]));
  fprintf(f,
          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#ffffff\" "
          "stroke=\"none\"/>\n",
          p->left, p->top, p->width, p->height);
  char b[64];
  fputs("<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n", f);
  for (int i = 0; i < p->x.n_ticks; i++)
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", px(p, p->x.ticks[i]),
            p->top, px(p, p->x.ticks[i]), p->top + p->height);
  for (int i = 0; i < p->y.n_ticks; i++)
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", p->left,
            py(p, p->y.ticks[i]), p->left + p->width, py(p, p->y.ticks[i]));
  fputs("</g>\n", f);
  fprintf(f,
          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
          "stroke=\"#333333\" stroke-width=\"1\"/>\n",
          p->left, p->top, p->width, p->height);
  fputs("<g class=\"xticks\" text-anchor=\"middle\">\n", f);
  for (int i = 0; i < p->x.n_ticks; i++) {
    tick_label(&p->x, p->x.ticks[i], b, sizeof b);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" mgt:value=\"%s\">%s</text>\n", px(p, p->x.ticks[i]),
            p->top + p->height + 15, exact(p->x.ticks[i], n[0]), b);
  }
  fputs("</g>\n", f);
  fputs("<g class=\"yticks\" text-anchor=\"end\">\n", f);
  for (int i = 0; i < p->y.n_ticks; i++) {
    tick_label(&p->y, p->y.ticks[i], b, sizeof b);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" mgt:value=\"%s\">%s</text>\n", p->left - 5,
            py(p, p->y.ticks[i]) + 4, exact(p->y.ticks[i], n[0]), b);
  }
  fputs("</g>\n", f);
  const double lx = p->left - 52, ly = p->top + p->height / 2;
  fprintf(f,
          "<text class=\"ylabel\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
          "transform=\"rotate(-90 %.2f %.2f)\">%s</text>\n",
          lx, ly, lx, ly, p->ylabel);
}

static const char *basename_of(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The legend labels: --labels, else the file names, with their directory where two files
   share a name. */
void plot_make_labels(const mgt_plot_opts *o, run *runs) {
  const char *l = o->labels;
  for (int i = 0; i < o->n_files; i++) {
    if (o->labels[0]) {
      const char *c = strchr(l, ',');
      size_t n = c ? (size_t)(c - l) : strlen(l);
      snprintf(runs[i].label, sizeof runs[i].label, "%.*s", (int)n, l);
      l += n + (c != NULL);
      continue;
    }
    const char *b = basename_of(o->files[i]);
    int shared = 0;
    for (int j = 0; j < o->n_files; j++)
      shared |= j != i && strcmp(b, basename_of(o->files[j])) == 0;
    if (shared && b != o->files[i]) { /* back to the directory before the name */
      const char *d = b - 1;
      while (d > o->files[i] && d[-1] != '/')
        d--;
      b = d;
    }
    snprintf(runs[i].label, sizeof runs[i].label, "%s", b);
  }
}

/* One row of the legend: a line sample (dashed with a marker for a validation set). */
static void legend_row(FILE *f, double x, double y, const char *colour, int set, const char *text,
                       size_t max) {
  fprintf(f,
          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
          "stroke-width=\"%s\"%s/>\n",
          x, y, x + 26, y, colour, set >= 0 ? "1.5" : "1.8",
          set >= 0 ? " stroke-dasharray=\"6,4\"" : "");
  if (set >= 0) marker(f, set, x + 13, y, colour);
  fprintf(f, "<text x=\"%.2f\" y=\"%.2f\">", x + 32, y + 4);
  xml_text(f, text, max);
  fputs("</text>\n", f);
}

void plot_write_svg(FILE *f, const mgt_plot_opts *o, const run *runs, int n) {
  const double W = o->width, H = o->height;
  size_t longest = 10;
  for (int i = 0; i < n; i++) {
    size_t c = utf8_chars(runs[i].label);
    for (int k = 0; runs[i].n_sets > 1 && k < runs[i].n_sets; k++)
      if (utf8_chars(basename_of(runs[i].set[k])) + 1 > c)
        c = utf8_chars(basename_of(runs[i].set[k])) + 1;
    if (c > longest) longest = c;
  }
  const double legend_w = fmin(fmax(7.0 * longest + 48, 110), 0.4 * W);
  const size_t max_chars = (size_t)fmax(4, (legend_w - 40) / 7.0);
  const double top = o->title[0] ? 40 : 16, left = 70, bottom = 44, gap = 30;
  const double plot_w = W - left - legend_w - 16, avail = H - top - bottom - gap;
  panel loss = {.id = "loss",
                .ylabel = plot_metrics[o->metric],
                .left = left,
                .top = top,
                .width = plot_w,
                .height = round(0.68 * avail)};
  panel lr = {.id = "lr",
              .ylabel = "learning rate",
              .left = left,
              .top = top + loss.height + gap,
              .width = plot_w,
              .height = avail - loss.height};
  if (o->log_scale)
    loss.ylabel = o->metric == 0
                      ? "loss (log scale)"
                      : (o->metric == 1 ? "lm_loss (log scale)" : "sop_loss (log scale)");

  /* data ranges: of the points the axes will show */
  loss.y.log = o->log_scale;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, lrmax = 0;
  for (int i = 0; i < n; i++) {
    const run *r = &runs[i];
    for (int k = -1; k < r->n_sets; k++) {
      const series *s = k < 0 ? &r->loss : &r->valid[k];
      for (size_t j = 0; j < s->n; j++)
        if (shown(&loss, &s->p[j])) {
          xmin = fmin(xmin, s->p[j].x), xmax = fmax(xmax, s->p[j].x);
          ymin = fmin(ymin, s->p[j].y), ymax = fmax(ymax, s->p[j].y);
        }
    }
    for (size_t j = 0; j < r->lr.n; j++) {
      xmin = fmin(xmin, r->lr.p[j].x), xmax = fmax(xmax, r->lr.p[j].x);
      lrmax = fmax(lrmax, r->lr.p[j].y);
    }
  }
  const int xt = (int)fmin(10, fmax(3, plot_w / 90));
  axis_linear(&loss.x, xmin >= 0 && xmin <= 0.5 * xmax ? 0 : xmin, xmax, xt); /* from 0 */
  lr.x = loss.x;
  /* a little room above and below the curves, so that none runs along the frame */
  const double pad = 0.02 * (ymax - ymin);
  if (o->log_scale)
    axis_log(&loss.y, ymin / 1.01, ymax * 1.01);
  else
    axis_linear(&loss.y, ymin >= 0 ? fmax(0, ymin - pad) : ymin - pad, ymax + pad,
                (int)fmin(8, fmax(3, loss.height / 45)));
  axis_linear(&lr.y, 0, lrmax > 0 ? 1.03 * lrmax : 1, (int)fmin(5, fmax(2, lr.height / 35)));

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:mgt=\"" PLOT_NS "\" version=\"1.1\" "
          "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, "
          "Helvetica, sans-serif\" font-size=\"12\" fill=\"#222222\" mgt:x=\"%s\">\n",
          o->width, o->height, o->width, o->height, plot_xaxes[o->x]);
  fputs("<title>", f);
  xml_text(f, o->title[0] ? o->title : "training curves", 0);
  fputs("</title>\n", f);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", o->width,
          o->height);
  if (o->title[0]) {
    fprintf(f,
            "<text class=\"title\" x=\"%.2f\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" "
            "font-weight=\"bold\">",
            left + plot_w / 2);
    xml_text(f, o->title, 0);
    fputs("</text>\n", f);
  }

  panel_open(f, &loss);
  for (int i = 0; i < n; i++) {
    const run *r = &runs[i];
    curve(f, &loss, &r->loss, "train", i, NULL);
    for (int k = 0; k < r->n_sets; k++) {
      fprintf(f, "<g class=\"valid\" mgt:run=\"%d\" mgt:set=\"", i);
      xml_text(f, r->set[k], 0);
      fputs("\">\n", f);
      curve(f, &loss, &r->valid[k], "valid", i, "6,4");
      for (size_t j = 0; j < r->valid[k].n; j++)
        if (shown(&loss, &r->valid[k].p[j]))
          marker(f, k, px(&loss, r->valid[k].p[j].x), py(&loss, r->valid[k].p[j].y),
                 palette[i % N_COLOURS]);
      fputs("</g>\n", f);
    }
  }
  fputs("</g>\n", f);
  panel_open(f, &lr);
  for (int i = 0; i < n; i++)
    curve(f, &lr, &runs[i].lr, "lr", i, NULL);
  fputs("</g>\n", f);
  fprintf(f, "<text class=\"xlabel\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
          left + plot_w / 2, H - 8, o->x == 1 ? "tokens seen" : "iteration");

  /* the legend: a row per run (and per validation set where a run has several), then the key */
  const double lx = left + plot_w + 14;
  double ly = top + 10;
  fputs("<g id=\"legend\">\n", f);
  for (int i = 0; i < n; i++) {
    const char *colour = palette[i % N_COLOURS];
    fprintf(f, "<g class=\"entry\" mgt:run=\"%d\">\n", i);
    legend_row(f, lx, ly, colour, -1, runs[i].label, max_chars);
    ly += 18;
    for (int k = 0; runs[i].n_sets > 1 && k < runs[i].n_sets; k++, ly += 18)
      legend_row(f, lx + 8, ly, colour, k, basename_of(runs[i].set[k]), max_chars - 1);
    fputs("</g>\n", f);
  }
  ly += 8;
  fputs("<g class=\"key\" fill=\"#555555\">\n", f);
  legend_row(f, lx, ly, "#555555", -1, "training", max_chars);
  legend_row(f, lx, ly + 18, "#555555", 0, "validation", max_chars);
  fputs("</g>\n</g>\n</svg>\n", f);
}
