#define _GNU_SOURCE
/* Raw sequential write speed of a disk: pwrite in 16 MiB blocks, then fsync, optionally while
   holding (allocated and touched) as much memory as a training process does, because the
   kernel throttles writers sooner when less memory is free.
   Usage: bench_write FILE BYTES [HOLD_BYTES]   prints GB/s */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgt/log.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_write FILE BYTES [HOLD_BYTES]\n");
    return 2;
  }
  size_t total = strtoull(argv[2], NULL, 10), hold = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
  const size_t chunk = (size_t)16 << 20;
  char *h = hold ? malloc(hold) : NULL, *b = malloc(chunk);
  if ((hold && !h) || !b) return 1;
  if (h) memset(h, 1, hold);
  for (size_t i = 0; i < chunk; i++)
    b[i] = (char)(i * 7 + 1);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  double t0 = mgt_now();
  for (size_t off = 0; off < total; off += chunk) {
    size_t n = total - off < chunk ? total - off : chunk;
    if (pwrite(fd, b, n, (off_t)off) != (ssize_t)n) return 1;
  }
  if (fsync(fd) != 0) return 1;
  double dt = mgt_now() - t0;
  close(fd);
  unlink(argv[1]);
  printf("raw write of %.3f GB (pwrite 16 MiB blocks + fsync) holding %.1f GB: %.2f s, %.2f GB/s\n",
         total / 1e9, hold / 1e9, dt, total / dt / 1e9);
  free(h);
  free(b);
  return 0;
}
