/* Durable publishing of finished files (checkpoints, datasets, exports). */
#define _GNU_SOURCE /* fallocate, O_DIRECTORY */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "mgt/common.h"

/* Syncs the directory holding path, so that a rename or an unlink in it survives a crash. */
static void sync_dir_of(const char *path) {
  char dir[4096 + 64];
  snprintf(dir, sizeof dir, "%s", path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

mgt_status mgt_publish_file(const char *tmp, const char *final) {
  int fd = open(tmp, O_RDWR);
  if (fd < 0) fd = open(tmp, O_RDONLY);
  MGT_REQUIRE(fd >= 0, "%s: cannot reopen to sync: %s", tmp, strerror(errno));
  /* the blocks mgt_reserve_file kept past the end are released (ext4 and XFS keep them until
     a truncate, even to the same size): the file takes its own size on disk */
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) (void)!ftruncate(fd, sb.st_size);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) MGT_FAIL(MGT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (rename(tmp, final) != 0)
    MGT_FAIL(MGT_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
  sync_dir_of(final);
  return MGT_OK;
}

mgt_status mgt_remove_file(const char *path) {
  if (unlink(path) != 0) {
    if (errno == ENOENT) return MGT_OK;
    MGT_FAIL(MGT_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
  }
  sync_dir_of(path);
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

/* O_NONBLOCK: opening a FIFO (or a device) must not wait for the other end; its type is
   checked on the open descriptor, so nothing can swap it in between. */
static mgt_status open_regular(const char *flag, const char *path, int flags, int *fd) {
  *fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (*fd < 0 && errno == ENXIO) /* a FIFO nobody reads */
    MGT_FAIL(MGT_ERR_INPUT, "%s %s: not a regular file", flag, path);
  MGT_REQUIRE(*fd >= 0, "%s %s: cannot open%s: %s", flag, path,
              (flags & O_ACCMODE) == O_RDONLY ? "" : " for writing", strerror(errno));
  struct stat sb;
  if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(*fd);
    *fd = -1;
    MGT_FAIL(MGT_ERR_INPUT, "%s %s: not a regular file", flag, path);
  }
  (void)fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
  return MGT_OK;
}

static mgt_status as_file(const char *flag, const char *path, int fd, const char *mode,
                          FILE **out) {
  *out = fdopen(fd, mode);
  if (!*out) {
    close(fd);
    MGT_FAIL(MGT_ERR_NOMEM, "%s %s: cannot open: %s", flag, path, strerror(errno));
  }
  return MGT_OK;
}

mgt_status mgt_open_file(const char *flag, const char *path, int *fd) {
  return open_regular(flag, path, O_RDONLY, fd);
}

mgt_status mgt_fopen_file(const char *flag, const char *path, FILE **out) {
  int fd;
  MGT_CHECK(open_regular(flag, path, O_RDONLY, &fd));
  return as_file(flag, path, fd, "rb", out);
}

mgt_status mgt_create_fd(const char *flag, const char *path, int append, int *fd) {
  return open_regular(flag, path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), fd);
}

mgt_status mgt_create_file(const char *flag, const char *path, int append, FILE **out) {
  int fd;
  MGT_CHECK(mgt_create_fd(flag, path, append, &fd));
  return as_file(flag, path, fd, append ? "ab" : "wb", out);
}

int mgt_remove_stale(const char *path, double min_age_s, FILE *log) {
  struct stat sb;
  if (lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return 0;
  if (difftime(time(NULL), sb.st_mtime) < min_age_s) return 0;
  if (unlink(path) != 0) return 0;
  if (log)
    fprintf(log, "note: removed %s (%.1f MB), a temporary file left by an interrupted run\n", path,
            (double)sb.st_size / 1e6);
  return 1;
}

int mgt_pid_alive(long long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

mgt_status mgt_read_file(const char *flag, const char *path, char **out, size_t *n) {
  FILE *f;
  MGT_CHECK(mgt_fopen_file(flag, path, &f));
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

mgt_status mgt_write_file(const char *flag, const char *path, const void *data, size_t n) {
  char tmp[MGT_PATH_MAX + 128];
  MGT_REQUIRE(strlen(path) + 5 < sizeof tmp, "%s %s: the path is too long", flag, path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = -1;
  MGT_CHECK(mgt_create_fd(flag, tmp, 0, &fd));
  const char *b = data;
  mgt_status st = MGT_OK;
  while (n && st == MGT_OK) {
    const ssize_t w = write(fd, b, n);
    if (w <= 0)
      st = MGT_ERROR(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    else
      b += w, n -= (size_t)w;
  }
  if (close(fd) != 0 && st == MGT_OK)
    st = MGT_ERROR(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  if (st == MGT_OK) st = mgt_publish_file(tmp, path);
  if (st != MGT_OK) unlink(tmp);
  return st;
}
