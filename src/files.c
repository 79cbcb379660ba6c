/* Durable publishing of finished files (checkpoints, datasets, exports). */
#define _POSIX_C_SOURCE 200809L /* O_DIRECTORY, fsync */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
