/* Status codes, error tracebacks and the checking macros every module uses. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_status {
  MGT_OK = 0,
  MGT_ERR_INPUT,    /* bad flag, configuration, file or data from the user */
  MGT_ERR_NOMEM,    /* an allocation failed or would not fit */
  MGT_ERR_MPI,      /* an MPI call failed */
  MGT_ERR_IO,       /* a file could not be read or written */
  MGT_ERR_BACKEND,  /* a compute backend call failed */
  MGT_ERR_INTERNAL, /* a broken invariant: a bug */
} mgt_status;

enum { MGT_PATH_MAX = 4096 }; /* longest path a flag or file name may hold */

#define MGT_NODISCARD __attribute__((warn_unused_result))
#define MGT_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Records the first error of a failure: its status, where, and a message for the user.
   The record is per thread; a later set replaces it. Not collective. */
void mgt_error_set(mgt_status st, const char *file, int line, const char *func, const char *fmt,
                   ...) MGT_PRINTF(5, 6);
/* Adds one frame ("file:line func: call") to the traceback of the current error. */
void mgt_error_push(const char *file, int line, const char *func, const char *call);
/* The message of the current error ("" if none). The pointer stays valid until the next set. */
const char *mgt_error_message(void);
mgt_status mgt_error_status(void);
/* Marks the current error as held by `nranks` ranks alike (mgt_mpi_agree), and reads it back
   (0: only this rank has it), so that the caller knows whether one rank may report for all. */
void mgt_error_set_agreed(int nranks);
int mgt_error_agreed(void);
/* Prints "mgt: error: message" and, for internal, MPI and backend errors, the traceback. */
void mgt_error_print(FILE *f);
void mgt_error_clear(void);
/* The rank printed in tracebacks; set once by main after MPI_Init. */
void mgt_error_set_rank(int rank);

/* Returns from the calling function, which must return mgt_status, if `call` fails. */
#define MGT_CHECK(call)                                                                            \
  do {                                                                                             \
    mgt_status mgt_st_ = (call);                                                                   \
    if (mgt_st_ != MGT_OK) {                                                                       \
      mgt_error_push(__FILE__, __LINE__, __func__, #call);                                         \
      return mgt_st_;                                                                              \
    }                                                                                              \
  } while (0)

/* Like MGT_CHECK, but stores the status in `st` and jumps to the function's `done:` label. */
#define MGT_TRY(call)                                                                              \
  do {                                                                                             \
    st = (call);                                                                                   \
    if (st != MGT_OK) {                                                                            \
      mgt_error_push(__FILE__, __LINE__, __func__, #call);                                         \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* Records an error where it is found and evaluates to `code`, for code that collects a status
   before agreeing on it: st = MGT_ERROR(MGT_ERR_INPUT, "...", ...). */
#define MGT_ERROR(code, ...)                                                                       \
  (mgt_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__), (code))

/* Like MGT_FAIL, in a function with a `done:` label: records the error, stores `code` in `st`
   and jumps there, so that what the function holds is released. */
#define MGT_GOTO_FAIL(code, ...)                                                                   \
  do {                                                                                             \
    st = (code);                                                                                   \
    mgt_error_set(st, __FILE__, __LINE__, __func__, __VA_ARGS__);                                  \
    goto done;                                                                                     \
  } while (0)

/* MGT_REQUIRE in a function with a `done:` label. */
#define MGT_GOTO_REQUIRE(cond, ...)                                                                \
  do {                                                                                             \
    if (!(cond)) MGT_GOTO_FAIL(MGT_ERR_INPUT, __VA_ARGS__);                                        \
  } while (0)

/* Fails with status `code` and a user-facing message. */
#define MGT_FAIL(code, ...)                                                                        \
  do {                                                                                             \
    mgt_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__);                              \
    return (code);                                                                                 \
  } while (0)

/* Always-on check of user input (flags, files, checkpoints): one actionable message. */
#define MGT_REQUIRE(cond, ...)                                                                     \
  do {                                                                                             \
    if (!(cond)) MGT_FAIL(MGT_ERR_INPUT, __VA_ARGS__);                                             \
  } while (0)

/* Internal invariant, checked in debug builds only. */
#ifdef NDEBUG
#define MGT_ASSERT(cond) ((void)0)
#else
#define MGT_ASSERT(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d %s: internal assertion failed: %s\n", __FILE__, __LINE__, __func__,   \
              #cond);                                                                              \
      __builtin_trap();                                                                            \
    }                                                                                              \
  } while (0)
#endif

/* Allocates `n` zeroed bytes aligned to 64, or fails with MGT_ERR_NOMEM naming `what`. */
MGT_NODISCARD mgt_status mgt_calloc(size_t n, const char *what, void **out);
void mgt_free(void *p);

/* Makes a finished temporary file durable (fsync), gives it its final name (rename, atomic on
   one file system) and syncs the directory, so that a crash leaves either the old file or the
   whole new one. The one way every output of the project is published. Not collective. */
MGT_NODISCARD mgt_status mgt_publish_file(const char *tmp, const char *final);

/* Removes the file `path` (none there is no error) and syncs its directory, so that the removal
   survives a crash. Not collective. */
MGT_NODISCARD mgt_status mgt_remove_file(const char *path);

/* Writes n bytes to `path` through a temporary file published with mgt_publish_file; errors
   name `flag`. Not collective. */
MGT_NODISCARD mgt_status mgt_write_file(const char *flag, const char *path, const void *data,
                                        size_t n);

/* Fails with MGT_ERR_IO ("... No space left on device") when the file system of directory
   `dir` has less than `bytes` free for this user; `what` names the output. A check before a
   file is created, so that a full disk is a clean refusal rather than a failure inside a
   collective write. Not collective. */
MGT_NODISCARD mgt_status mgt_check_space(const char *dir, uint64_t bytes, const char *what);

/* Reserves the blocks of a file of `bytes` being written (and room for metadata) with
   fallocate(FALLOC_FL_KEEP_SIZE), so that collective writes into it cannot run out of space on
   one rank only; file systems without fallocate are left as they are. Not collective. */
MGT_NODISCARD mgt_status mgt_reserve_file(const char *path, uint64_t bytes);

/* Reads a whole regular file into a malloc'd, NUL-terminated buffer (*n bytes, free with
   free); errors name the flag (or other origin) `flag`. Not collective. */
MGT_NODISCARD mgt_status mgt_read_file(const char *flag, const char *path, char **buf, size_t *n);

/* Opens an existing regular file for reading (a descriptor, or a FILE in "rb"). Never blocks:
   a FIFO, a device or a directory is refused ("FLAG PATH: not a regular file"), as is a
   missing file; errors name the flag (or other origin) `flag`. Not collective. */
MGT_NODISCARD mgt_status mgt_open_file(const char *flag, const char *path, int *fd);
MGT_NODISCARD mgt_status mgt_fopen_file(const char *flag, const char *path, FILE **f);
/* Creates (or truncates; with `append`, appends to) a regular file for writing, without
   blocking on a FIFO or device found at `path`, which is refused. Not collective. */
MGT_NODISCARD mgt_status mgt_create_file(const char *flag, const char *path, int append, FILE **f);
MGT_NODISCARD mgt_status mgt_create_fd(const char *flag, const char *path, int append, int *fd);

/* Removes `path`, a temporary file of this project's naming left by an interrupted run, when
   it was last modified at least min_age_s seconds ago, and says so on log (NULL: quietly).
   Returns 1 if it removed it. Not collective. */
int mgt_remove_stale(const char *path, double min_age_s, FILE *log);
/* Whether process `pid` runs on this host (a temporary file named after it may be in use). */
int mgt_pid_alive(long long pid);

/* mkdir -p: creates directory `dir` and any missing parents (0755). A part that cannot be
   created, or a `dir` that is not a directory, fails with MGT_ERR_INPUT naming the flag (or
   other origin) `flag`, the part and why. Not collective. */
MGT_NODISCARD mgt_status mgt_make_dirs(const char *flag, const char *dir);

#ifdef __cplusplus
}
#endif
