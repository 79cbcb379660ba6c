/* Progress of long work (preprocessing, evaluation, checkpoint save and load): on a terminal a
   line rewritten in place (at most 5 times a second) with the amount done, the rate and the
   time left; in a log (stream not a terminal) a plain line every few seconds (the caller's
   interval, else MGT_PROGRESS_SECONDS, else 10); nothing at all when the work is done before
   the first line is due. */
#pragma once

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_progress {
  FILE *f; /* NULL: off (ranks other than 0) */
  int tty;
  const char *what, *unit; /* "preprocess", "MB" */
  double total, scale;     /* amount to do (in unit after scale), and unit per count */
  double t0, last, every;
  int printed;  /* on a terminal: a line is showing */
  long lines;   /* lines printed */
  double shown; /* the amount of the last one */
} mgt_progress;

/* Starts reporting on f (NULL: silent) the work `what` of `total` counts, shown in `unit`
   after multiplying by `scale` (e.g. bytes shown as MB: scale 1e-6); `every` seconds between
   plain lines (0: the default). */
void mgt_progress_start(mgt_progress *p, FILE *f, const char *what, double total, const char *unit,
                        double scale, double every);
/* `done` counts so far; `extra` (may be NULL) is appended, e.g. "1234 documents". Cheap when
   no line is due: call it as often as convenient. */
void mgt_progress_update(mgt_progress *p, double done, const char *extra);
/* Ends the report at `done` counts: in a log that has shown any line, a last one with the final
   amount (so the log ends at the total); on a terminal the line is cleared (the caller prints
   its own summary after). */
void mgt_progress_end(mgt_progress *p, double done, const char *extra);

#ifdef __cplusplus
}
#endif
