#define _POSIX_C_SOURCE 200809L /* fileno, clock_gettime under -std=c11 */
#include "mgt/progress.h"

#include <stdlib.h>
#include <unistd.h>

#include "mgt/log.h"

void mgt_progress_start(mgt_progress *p, FILE *f, const char *what, double total, const char *unit,
                        double scale, double every) {
  p->f = f, p->what = what, p->unit = unit, p->total = total, p->scale = scale;
  p->tty = f && isatty(fileno(f));
  const char *e = getenv("MGT_PROGRESS_SECONDS");
  if (every <= 0) every = e ? atof(e) : 10.0;
  p->every = p->tty ? 0.2 : (every > 0 ? every : 10.0);
  p->t0 = p->last = mgt_now();
  p->printed = 0;
  p->lines = 0;
  p->shown = -1;
}

/* 1h02m, 3m05s, 12s */
static void duration(char *out, size_t n, double s) {
  const long t = s < 0 ? 0 : (long)(s + 0.5);
  if (t >= 3600)
    snprintf(out, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
  else
    snprintf(out, n, "%lds", t);
}

static void print_line(mgt_progress *p, double done, const char *extra, double now) {
  p->last = now;
  const double el = now - p->t0, rate = el > 0 ? done / el : 0;
  char left[32] = "?";
  if (rate > 0 && p->total >= done) duration(left, sizeof left, (p->total - done) / rate);
  char took[32];
  duration(took, sizeof took, el);
  fprintf(p->f, "%s%s: %.1f of %.1f %s (%.0f%%), %.2f %s/s, %s elapsed, %s left%s%s%s",
          p->tty ? "\r" : "", p->what, done * p->scale, p->total * p->scale, p->unit,
          p->total > 0 ? 100.0 * done / p->total : 100.0, rate * p->scale, p->unit, took, left,
          extra ? ", " : "", extra ? extra : "", p->tty ? "\033[K" : "\n");
  fflush(p->f);
  p->printed = p->tty;
  p->lines++;
  p->shown = done;
}

void mgt_progress_update(mgt_progress *p, double done, const char *extra) {
  if (!p->f) return;
  const double now = mgt_now();
  if (now - p->last >= p->every) print_line(p, done, extra, now);
}

void mgt_progress_end(mgt_progress *p, double done, const char *extra) {
  if (!p->f) return;
  if (!p->tty && p->lines > 0 && p->shown != done) print_line(p, done, extra, mgt_now());
  if (p->printed) {
    fputs("\r\033[K", p->f);
    fflush(p->f);
  }
  p->printed = 0;
}
