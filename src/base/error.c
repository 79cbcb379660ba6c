#define _DEFAULT_SOURCE
#include "mgt/common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { MAX_FRAMES = 32, FRAME_LEN = 256, MSG_LEN = 4096 };

/* One record per thread: failures are reported up the call chain of the failing thread. */
static _Thread_local struct {
  mgt_status status;
  char message[MSG_LEN];
  char frames[MAX_FRAMES][FRAME_LEN];
  int n_frames;
  int agreed; /* ranks that hold this same error (mgt_mpi_agree), 0 if only this one */
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
  err.agreed = 0;
  mgt_error_push(file, line, func, "");
}

void mgt_error_set_agreed(int nranks) { err.agreed = nranks; }
int mgt_error_agreed(void) { return err.agreed; }

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
  err.agreed = 0;
}

void mgt_error_print(FILE *f) {
  fprintf(f, "mgt: error: %s\n", err.message[0] ? err.message : "unknown failure");
  /* a traceback helps with a bug, not with a bad flag, a full disk or too little memory */
  if (err.status == MGT_ERR_INPUT || err.status == MGT_ERR_IO || err.status == MGT_ERR_NOMEM)
    return;
  for (int i = 0; i < err.n_frames; i++) {
    if (err_rank >= 0)
      fprintf(f, "  [rank %d] %s\n", err_rank, err.frames[i]);
    else
      fprintf(f, "  %s\n", err.frames[i]);
  }
}

/* Every block starts with a header that says how it was obtained. Large blocks come from
   mmap: the kernel hands out zeroed pages on first touch (no second pass of zeroing) and
   transparent huge pages cut page faults and TLB misses for the big buffers. */
enum { HEADER = 64, MMAP_MIN = 1 << 20 };
static const uint64_t MAGIC_HEAP = 0x6d67746865617021ull, MAGIC_MMAP = 0x6d67746d6d617021ull;

mgt_status mgt_calloc(size_t n, const char *what, void **out) {
  *out = NULL;
  if (n > SIZE_MAX - 2 * HEADER)
    MGT_FAIL(MGT_ERR_NOMEM, "allocation of %zu bytes for %s is too large", n, what);
  size_t total = (n + HEADER + 63) / 64 * 64;
  unsigned char *base;
  uint64_t magic;
  if (total >= MMAP_MIN) {
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      MGT_FAIL(MGT_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, total, MADV_HUGEPAGE);
#endif
    base = p;
    magic = MAGIC_MMAP;
  } else {
    base = aligned_alloc(64, total);
    if (!base) MGT_FAIL(MGT_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    memset(base, 0, total);
    magic = MAGIC_HEAP;
  }
  uint64_t hdr[2] = {magic, total};
  memcpy(base, hdr, sizeof hdr);
  *out = base + HEADER;
  return MGT_OK;
}

void mgt_free(void *p) {
  if (!p) return;
  unsigned char *base = (unsigned char *)p - HEADER;
  uint64_t hdr[2];
  memcpy(hdr, base, sizeof hdr);
  if (hdr[0] == MAGIC_MMAP)
    munmap(base, hdr[1]);
  else
    free(base);
}
