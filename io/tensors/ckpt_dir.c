/* The checkpoint directory of a run: --load resolved in it, its lock (one run saves into a
   directory at a time; a lock of a dead process on this host is taken over), the temporary
   files interrupted saves left, and pruning to the newest --keep-last checkpoints. */
#define _GNU_SOURCE
#include "mgt/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5util.h"
#include "mgt/log.h"
#include "mgt/progress.h"
#include "mgt/sha256.h"

typedef struct lock_owner {
  char host[256];
  long long pid;
  char job[64];
} lock_owner;

static void lock_me(lock_owner *o) {
  memset(o, 0, sizeof *o);
  gethostname(o->host, sizeof o->host - 1);
  o->pid = (long long)getpid();
  const char *job = getenv("SLURM_JOB_ID"); /* the scheduler's: a requeued job keeps it */
  snprintf(o->job, sizeof o->job, "%s", job && *job ? job : "-");
}

/* 1: read; 0: missing, or not readable as a lock (half written); -1: not a regular file (a
   FIFO, which must not be waited on, or a directory). */
static int lock_read(const char *path, lock_owner *o) {
  memset(o, 0, sizeof *o);
  struct stat sb;
  if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ELOOP ? -1 : 0;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return -1;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return 0;
  }
  int ok = fscanf(f, "%255s %lld %63s", o->host, &o->pid, o->job) == 3;
  fclose(f);
  return ok;
}

/* Whether the lock `o` may be taken over by `me`: its process is gone from this host, or it
   is this Slurm job on another host (its run before a requeue, or a start that failed; on this
   host its process must be gone: two steps of one allocation save into one directory
   otherwise), or it cannot be read (a lock half written). */
static int lock_stale(const lock_owner *o, int readable, const lock_owner *me) {
  if (!readable) return 1;
  if (strcmp(o->host, me->host) != 0)
    return strcmp(o->job, "-") != 0 && strcmp(o->job, me->job) == 0;
  if (o->pid == me->pid) return 0;
  if (kill((pid_t)o->pid, 0) != 0 && errno == ESRCH) return 1;
  /* a killed process not reaped yet is a zombie: gone all the same */
  char stat_path[64], line[512];
  snprintf(stat_path, sizeof stat_path, "/proc/%lld/stat", o->pid);
  FILE *f = fopen(stat_path, "r");
  if (!f) return 0;
  const char *close_paren = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
  fclose(f);
  return close_paren && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

static mgt_status lock_take(const char *dir) {
  char path[MGT_PATH_MAX + 16], tmp[MGT_PATH_MAX + 48];
  snprintf(path, sizeof path, "%s/mgt.lock", dir);
  lock_owner me, other;
  lock_me(&me);
  snprintf(tmp, sizeof tmp, "%s/mgt.lock.%lld", dir, me.pid);
  struct stat sb;
  MGT_REQUIRE(lstat(path, &sb) != 0 || S_ISREG(sb.st_mode),
              "--save %s: %s is not a regular file: remove it", dir, path);
  FILE *f = NULL;
  if (mgt_create_file("--save", tmp, 0, &f) != MGT_OK) {
    const char *why = mgt_error_message();
    MGT_FAIL(MGT_ERR_INPUT, "--save %s: not writable: %s", dir,
             strstr(why, ": ") ? strstr(why, ": ") + 2 : why);
  }
  int ok = fprintf(f, "%s %lld %s\n", me.host, me.pid, me.job) > 0;
  ok &= fclose(f) == 0;
  if (!ok) {
    unlink(tmp);
    MGT_FAIL(MGT_ERR_IO, "--save %s: cannot write %s: %s", dir, tmp, strerror(errno));
  }
  /* link() fails if the lock exists: taking it is atomic, on NFS too, and a lock is never seen
     half written. File systems without hard links fall back to an exclusive create. */
  for (int attempt = 0; attempt < 2; attempt++) {
    int rc = link(tmp, path), err = errno;
    if (rc != 0 && (err == EPERM || err == EOPNOTSUPP || err == ENOSYS)) {
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
      rc = fd >= 0 ? 0 : -1, err = errno;
      if (fd >= 0) {
        rc = dprintf(fd, "%s %lld %s\n", me.host, me.pid, me.job) > 0 ? 0 : -1;
        close(fd);
      }
    }
    if (rc == 0) {
      unlink(tmp);
      return MGT_OK;
    }
    if (err != EEXIST) break;
    const int readable = lock_read(path, &other);
    if (readable < 0) {
      unlink(tmp);
      MGT_FAIL(MGT_ERR_INPUT, "--save %s: %s is not a regular file: remove it", dir, path);
    }
    if (!lock_stale(&other, readable, &me)) {
      unlink(tmp);
      MGT_FAIL(MGT_ERR_INPUT,
               "--save %s is in use by another job (host %s, pid %lld, Slurm job %s); if that job "
               "is gone, remove %s",
               dir, other.host, other.pid, other.job, path);
    }
    unlink(path); /* stale: the next attempt takes it */
    errno = err;
  }
  int err = errno;
  unlink(tmp);
  MGT_FAIL(MGT_ERR_IO, "--save %s: cannot take the lock %s: %s", dir, path, strerror(err));
}

/* Under the lock, what an interrupted save left in dir: iter_N.h5.tmp (as large as a
   checkpoint) and latest.tmp; and lock attempts mgt.lock.PID of processes gone from this host
   (one lives for microseconds while a lock is taken). */
static void remove_stale_saves(const char *dir, FILE *log) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[MGT_PATH_MAX + 300];
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *c = e->d_name;
    snprintf(path, sizeof path, "%s/%s", dir, c);
    if (!strcmp(c, "latest.tmp")) {
      mgt_remove_stale(path, 0, log);
    } else if (!strncmp(c, "iter_", 5)) {
      size_t k = 5;
      while (c[k] >= '0' && c[k] <= '9')
        k++;
      if (k > 5 && !strcmp(c + k, ".h5.tmp")) mgt_remove_stale(path, 0, log);
    } else if (!strncmp(c, "mgt.lock.", 9)) {
      char *end = NULL;
      const long long pid = strtoll(c + 9, &end, 10);
      if (end != c + 9 && !*end && !mgt_pid_alive(pid)) mgt_remove_stale(path, 60, log);
    }
  }
  closedir(d);
}

mgt_status mgt_ckpt_prepare_dir(const char *dir, MPI_Comm world, uint64_t bytes, int *lock) {
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  *lock = 0;
  mgt_status st = MGT_OK;
  if (rank == 0) {
    st = mgt_make_dirs("--save", dir);
    if (st == MGT_OK) st = lock_take(dir);
    if (st == MGT_OK) {
      *lock = 1;
      remove_stale_saves(dir, stderr);
      char what[MGT_PATH_MAX + 32];
      snprintf(what, sizeof what, "--save %s", dir);
      st = mgt_check_space(dir, bytes, what);
      if (st != MGT_OK) mgt_ckpt_unlock(dir, lock);
    }
  }
  return mgt_mpi_agree(world, st);
}

void mgt_ckpt_unlock(const char *dir, int *lock) {
  if (!*lock) return;
  *lock = 0;
  char path[MGT_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/mgt.lock", dir);
  lock_owner me, o;
  lock_me(&me);
  if (lock_read(path, &o) > 0 && o.pid == me.pid && strcmp(o.host, me.host) == 0) unlink(path);
}

static int by_iteration_desc(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x < y) - (x > y);
}

/* The iteration in a 'latest' file: digits, then nothing but white space (a damaged "3.9e5" or
   "3garbage" is not iteration 3); -1 when it holds anything else. */
static long long read_latest(FILE *f) {
  char buf[64];
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  const char *s = buf;
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
    s++;
  if (*s < '0' || *s > '9' || n == sizeof buf - 1) return -1;
  char *end;
  errno = 0;
  const long long it = strtoll(s, &end, 10);
  if (errno) return -1;
  while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
    end++;
  return *end || (size_t)(end - buf) != n ? -1 : it;
}

mgt_status mgt_ckpt_prune(const char *dir, int keep, FILE *log) {
  if (keep <= 0) return MGT_OK;
  long long latest = -1;
  char path[MGT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = NULL;
  if (mgt_fopen_file("--save", path, &f) != MGT_OK) mgt_error_clear(); /* none: prune them all */
  if (f) {
    latest = read_latest(f);
    fclose(f);
  }
  DIR *d = opendir(dir);
  if (!d) MGT_FAIL(MGT_ERR_IO, "--save %s: cannot list: %s", dir, strerror(errno));
  long long *its = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    /* exactly iter_<digits>.h5: a .tmp being written does not match */
    const char *c = e->d_name;
    if (strncmp(c, "iter_", 5) != 0) continue;
    c += 5;
    long long it = 0;
    int digits = 0;
    for (; *c >= '0' && *c <= '9' && digits < 18; c++, digits++)
      it = 10 * it + (*c - '0');
    if (digits < 7 || strcmp(c, ".h5") != 0) continue;
    if (n == cap) {
      long long *p = realloc(its, sizeof *p * (cap = cap ? 2 * cap : 64));
      if (!p) break;
      its = p;
    }
    its[n++] = it;
  }
  closedir(d);
  qsort(its, n, sizeof *its, by_iteration_desc);
  for (size_t i = (size_t)keep; i < n; i++) {
    if (its[i] == latest) continue;
    snprintf(path, sizeof path, "%s/iter_%07lld.h5", dir, its[i]);
    if (unlink(path) == 0 && log)
      fprintf(log, "removed checkpoint %s (--keep-last %d)\n", path, keep);
  }
  free(its);
  return MGT_OK;
}

/* What a directory holds besides `latest`: checkpoints of ours (iter_N..., not a temporary
   file), or Megatron-LM's tracker file. */
static void dir_holds(const char *dir, int *ours, int *megatron) {
  *ours = *megatron = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    const char *c = e->d_name;
    const size_t n = strlen(c);
    if (!strncmp(c, "iter_", 5) && !(n > 4 && !strcmp(c + n - 4, ".tmp"))) *ours = 1;
    if (!strcmp(c, "latest_checkpointed_iteration.txt")) *megatron = 1;
  }
  if (d) closedir(d);
}

int mgt_ckpt_none_yet(const char *src) {
  struct stat sb;
  if (stat(src, &sb) != 0) {
    const size_t n = strlen(src);
    return errno == ENOENT && !(n >= 3 && strcmp(src + n - 3, ".h5") == 0);
  }
  if (!S_ISDIR(sb.st_mode)) return 0;
  char latest[MGT_PATH_MAX + 16];
  snprintf(latest, sizeof latest, "%s/latest", src);
  if (lstat(latest, &sb) == 0 || errno != ENOENT) return 0;
  /* checkpoints without `latest` are not nothing: a run from scratch would overwrite them */
  int ours, megatron;
  dir_holds(src, &ours, &megatron);
  return !ours && !megatron;
}

/* A --load path: a checkpoint file, or a directory (its `latest`, or iter_NNNNNNN.h5). */
mgt_status mgt_ckpt_resolve(const char *src, int64_t iteration, char *path, size_t n) {
  struct stat sb;
  MGT_REQUIRE(stat(src, &sb) == 0, "--load %s: %s", src, strerror(errno));
  MGT_REQUIRE(S_ISDIR(sb.st_mode) || S_ISREG(sb.st_mode),
              "--load %s: neither a directory nor a regular file", src); /* a FIFO would block */
  if (!S_ISDIR(sb.st_mode)) {
    snprintf(path, n, "%s", src);
    return MGT_OK;
  }
  if (iteration < 0) {
    char latest[MGT_PATH_MAX + 16];
    snprintf(latest, sizeof latest, "%s/latest", src);
    MGT_REQUIRE(stat(latest, &sb) != 0 || S_ISREG(sb.st_mode),
                "--load %s: %s is not a regular file", src, latest);
    const int fd = open(latest, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
      const int why = errno;
      int ours, megatron;
      dir_holds(src, &ours, &megatron);
      MGT_REQUIRE(!megatron,
                  "--load %s: Megatron-LM's checkpoints (latest_checkpointed_iteration.txt), "
                  "which mgt does not read: give mgt another directory",
                  src);
      MGT_REQUIRE(!ours,
                  "--load %s: iter_* checkpoints but no 'latest' file: name one with "
                  "--ckpt-iteration N (a run from scratch would overwrite them)",
                  src);
      MGT_FAIL(MGT_ERR_INPUT, "--load %s: no 'latest' file (%s): no checkpoint was completed there",
               src, strerror(why));
    }
    const long long it = read_latest(f);
    fclose(f);
    MGT_REQUIRE(it >= 0, "--load %s: 'latest' does not hold an iteration number alone", src);
    iteration = it;
  }
  snprintf(path, n, "%s/iter_%07lld.h5", src, (long long)iteration);
  MGT_REQUIRE(stat(path, &sb) == 0, "--load %s: %s: %s", src, path, strerror(errno));
  MGT_REQUIRE(S_ISREG(sb.st_mode), "--load %s: %s is not a regular file", src, path);
  return MGT_OK;
}
