#include "mgt/common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FRAMES = 32, FRAME_LEN = 256, MSG_LEN = 1024 };

/* One record per thread: failures are reported up the call chain of the failing thread. */
static _Thread_local struct {
  mgt_status status;
  char message[MSG_LEN];
  char frames[MAX_FRAMES][FRAME_LEN];
  int n_frames;
} err;

static int err_rank = -1;

void mgt_error_set_rank(int rank) { err_rank = rank; }

static const char *short_path(const char *file) {
  /* Keep paths relative to the source tree so messages read the same on every machine. */
  const char *roots[] = {"/src/", "/kernels/", "/io/", "/tests/", "/bench/"};
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
    const char *p = strstr(file, roots[i]);
    if (p) return p + 1;
  }
  return file;
}

void mgt_error_set(mgt_status st, const char *file, int line, const char *func, const char *fmt,
                   ...) {
  err.status = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err.message, sizeof err.message, fmt, ap);
  va_end(ap);
  err.n_frames = 0;
  mgt_error_push(file, line, func, "");
}

void mgt_error_push(const char *file, int line, const char *func, const char *call) {
  if (err.n_frames >= MAX_FRAMES) return;
  snprintf(err.frames[err.n_frames++], FRAME_LEN, "%s:%d %s%s%s", short_path(file), line, func,
           call[0] ? ": " : "", call);
}

const char *mgt_error_message(void) { return err.message; }
mgt_status mgt_error_status(void) { return err.status; }

void mgt_error_clear(void) {
  err.status = MGT_OK;
  err.message[0] = '\0';
  err.n_frames = 0;
}

void mgt_error_print(FILE *f) {
  fprintf(f, "mgt: error: %s\n", err.message[0] ? err.message : "unknown failure");
  if (err.status == MGT_ERR_INPUT) return;
  for (int i = 0; i < err.n_frames; i++) {
    if (err_rank >= 0)
      fprintf(f, "  [rank %d] %s\n", err_rank, err.frames[i]);
    else
      fprintf(f, "  %s\n", err.frames[i]);
  }
}

mgt_status mgt_calloc(size_t n, const char *what, void **out) {
  *out = NULL;
  if (n == 0) n = 64;
  size_t rounded = (n + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded);
  if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
  memset(p, 0, rounded);
  *out = p;
  return MGT_OK;
}

void mgt_free(void *p) { free(p); }
