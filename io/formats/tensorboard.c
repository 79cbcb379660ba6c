/* TensorBoard event files: see src/mgt/tensorboard.h. The protobuf wire format is written by
   hand: a key is (field << 3 | wire type), wire type 0 a varint, 1 eight little-endian bytes,
   2 a varint length and the bytes, 5 four little-endian bytes. */
#define _GNU_SOURCE
#include "mgt/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TB_SUMMARY_MAX = 1 << 16, TB_FRAME = 16 }; /* bytes of values; framing per record */

struct mgt_tb {
  FILE *f;
  char path[MGT_PATH_MAX + 320];
  size_t n;                             /* bytes of Summary.Value entries in summary */
  uint8_t summary[TB_SUMMARY_MAX];      /* repeated Value value = 1, as serialized */
  uint8_t record[TB_SUMMARY_MAX + 128]; /* one framed Event */
};

uint32_t mgt_crc32c(const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

static uint32_t masked_crc(const uint8_t *p, size_t n) {
  const uint32_t c = mgt_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static size_t put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
  return (size_t)bytes;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7)
    p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7)
    n++;
  return n;
}

/* A length-delimited field (wire type 2). */
static size_t put_bytes(uint8_t *p, int field, const void *b, size_t len) {
  size_t n = put_varint(p, (uint64_t)field << 3 | 2);
  n += put_varint(p + n, len);
  memcpy(p + n, b, len);
  return n + len;
}

/* One framed record of an Event at `step` (wall time now) with the summary values pending
   and, if given, a file_version; written and flushed. */
static mgt_status write_event(mgt_tb *w, int64_t step, const char *version) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  uint64_t bits;
  memcpy(&bits, &wall, sizeof bits);
  uint8_t *d = w->record + 12, *r = w->record;
  size_t n = 0;
  d[n++] = 1 << 3 | 1; /* wall_time = 1, double */
  n += put_le(d + n, bits, 8);
  d[n++] = 2 << 3 | 0; /* step = 2, int64 */
  n += put_varint(d + n, (uint64_t)step);
  if (version) n += put_bytes(d + n, 3, version, strlen(version)); /* file_version = 3 */
  if (w->n) n += put_bytes(d + n, 5, w->summary, w->n);            /* summary = 5 */
  put_le(r, n, 8);
  put_le(r + 8, masked_crc(r, 8), 4);
  put_le(d + n, masked_crc(d, n), 4);
  w->n = 0;
  if (fwrite(r, 1, n + TB_FRAME, w->f) != n + TB_FRAME || fflush(w->f) != 0)
    MGT_FAIL(MGT_ERR_IO, "--tensorboard-dir: writing %s failed: %s", w->path, strerror(errno));
  return MGT_OK;
}

mgt_status mgt_tb_check_dir(const char *dir) {
  MGT_CHECK(mgt_make_dirs("--tensorboard-dir", dir));
  char probe[MGT_PATH_MAX + 64];
  snprintf(probe, sizeof probe, "%s/.mgt-tensorboard-probe-XXXXXX", dir);
  int fd = mkstemp(probe);
  MGT_REQUIRE(fd >= 0, "--tensorboard-dir %s: cannot create files in it: %s", dir, strerror(errno));
  close(fd);
  unlink(probe);
  return MGT_OK;
}

mgt_status mgt_tb_create(const char *dir, mgt_tb **out) {
  *out = NULL;
  MGT_CHECK(mgt_make_dirs("--tensorboard-dir", dir));
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  mgt_tb *w = NULL;
  MGT_CHECK(mgt_calloc(sizeof *w, "TensorBoard writer", (void **)&w));
  mgt_status st = MGT_OK;
  const long long now = (long long)time(NULL);
  int fd = -1;
  for (int k = 0; fd < 0 && k < 100; k++) { /* another writer may have taken this second */
    int len = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s", dir, now, host);
    if (k) snprintf(w->path + len, sizeof w->path - (size_t)len, ".%d", k);
    fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    st = MGT_ERR_INPUT;
    mgt_error_set(st, __FILE__, __LINE__, __func__, "--tensorboard-dir %s: cannot create %s: %s",
                  dir, w->path, strerror(errno));
    goto done;
  }
  w->f = fdopen(fd, "wb");
  if (!w->f) {
    st = MGT_ERR_IO;
    mgt_error_set(st, __FILE__, __LINE__, __func__, "--tensorboard-dir %s: cannot open %s: %s", dir,
                  w->path, strerror(errno));
    close(fd);
    goto done;
  }
  MGT_TRY(write_event(w, 0, "brain.Event:2"));
done:
  if (st != MGT_OK) mgt_tb_destroy(&w);
  *out = w;
  return st;
}

void mgt_tb_destroy(mgt_tb **w) {
  if (!*w) return;
  if ((*w)->f) fclose((*w)->f);
  mgt_free(*w);
  *w = NULL;
}

const char *mgt_tb_path(const mgt_tb *w) { return w->path; }

mgt_status mgt_tb_add(mgt_tb *w, const char *tag, double value) {
  const size_t tl = strlen(tag);
  const size_t vl = 1 + varint_size(tl) + tl + 5; /* tag = 1; simple_value = 2, float */
  if (w->n + 1 + varint_size(vl) + vl > TB_SUMMARY_MAX)
    MGT_FAIL(MGT_ERR_INTERNAL, "TensorBoard event of more than %d bytes (tag %s)", TB_SUMMARY_MAX,
             tag);
  uint8_t *p = w->summary + w->n;
  size_t n = put_varint(p, 1 << 3 | 2); /* Summary.value = 1 */
  n += put_varint(p + n, vl);
  n += put_bytes(p + n, 1, tag, tl);
  p[n++] = 2 << 3 | 5;
  const float f = (float)value;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  n += put_le(p + n, bits, 4);
  w->n += n;
  return MGT_OK;
}

mgt_status mgt_tb_commit(mgt_tb *w, int64_t step) {
  if (!w->n) return MGT_OK;
  return write_event(w, step, NULL);
}
