/* Durable publishing of finished files (checkpoints, datasets, exports). */
#define _GNU_SOURCE /* fallocate, O_DIRECTORY */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "mgt/common.h"

mgt_status mgt_publish_file(const char *tmp, const char *final) {
  int fd = open(tmp, O_RDONLY);
  MGT_REQUIRE(fd >= 0, "%s: cannot reopen to sync: %s", tmp, strerror(errno));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) MGT_FAIL(MGT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (rename(tmp, final) != 0)
    MGT_FAIL(MGT_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
  char dir[4096 + 64];
  snprintf(dir, sizeof dir, "%s", final);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return MGT_OK;
}

mgt_status mgt_check_space(const char *dir, uint64_t bytes, const char *what) {
  struct statvfs vs;
  if (statvfs(dir, &vs) != 0) return MGT_OK; /* nothing known: the writes will tell */
  uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
  if (avail < bytes)
    MGT_FAIL(MGT_ERR_IO, "%s: %.1f MB needed, %.1f MB free in %s: No space left on device", what,
             bytes / 1e6, avail / 1e6, dir);
  return MGT_OK;
}

mgt_status mgt_read_file(const char *flag, const char *path, char **out, size_t *n) {
  struct stat sb; /* a FIFO would block the open */
  MGT_REQUIRE(stat(path, &sb) == 0, "%s %s: cannot open: %s", flag, path, strerror(errno));
  MGT_REQUIRE(S_ISREG(sb.st_mode), "%s %s: not a regular file", flag, path);
  FILE *f = fopen(path, "rb");
  MGT_REQUIRE(f, "%s %s: cannot open: %s", flag, path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  char *b = malloc((size_t)(len > 0 ? len : 0) + 1);
  size_t got = b ? fread(b, 1, (size_t)(len > 0 ? len : 0), f) : 0;
  fclose(f);
  if (!b || got != (size_t)(len > 0 ? len : 0)) {
    free(b);
    MGT_FAIL(MGT_ERR_IO, "%s %s: read failed", flag, path);
  }
  b[got] = 0;
  *out = b;
  *n = got;
  return MGT_OK;
}

/* Reserves the blocks of the file's `bytes` (and room for the metadata written at close), so
   that no collective write can fail for want of space on one rank only: HDF5's collective
   calls do not survive that (the failing rank leaves while the others wait). File systems
   without fallocate are written without a reservation. Not collective. */
mgt_status mgt_reserve_file(const char *tmp, uint64_t bytes) {
  int fd = open(tmp, O_WRONLY);
  if (fd < 0) MGT_FAIL(MGT_ERR_IO, "%s: cannot open to reserve space: %s", tmp, strerror(errno));
  const off_t want = (off_t)(bytes + bytes / 64 + (1u << 20));
  int rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, want), err = errno;
  close(fd);
  if (rc != 0 && (err == EOPNOTSUPP || err == ENOSYS)) return MGT_OK;
  if (rc != 0)
    MGT_FAIL(MGT_ERR_IO, "%s: cannot reserve %.1f MB: %s", tmp, want / 1e6, strerror(err));
  return MGT_OK;
}

mgt_status mgt_make_dirs(const char *flag, const char *dir) {
  char p[MGT_PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *c = p + 1; *c; c++) {
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      MGT_FAIL(MGT_ERR_INPUT, "%s %s: cannot create %s: %s", flag, dir, p, strerror(errno));
    *c = '/';
  }
  if (mkdir(p, 0755) != 0 && errno != EEXIST)
    MGT_FAIL(MGT_ERR_INPUT, "%s %s: cannot create: %s", flag, dir, strerror(errno));
  struct stat sb;
  MGT_REQUIRE(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode), "%s %s: not a directory", flag, dir);
  return MGT_OK;
}
