/* Megatron-LM's MMIDIDX datasets: reading (memory-mapped) and writing (io/data/mmidx.h). */
#define _GNU_SOURCE
#include "mmidx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mgt/agree.h"

static const char MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { HEADER = 9 + 8 + 1 + 8 + 8 };

static int elem_of(int dtype) {
  switch (dtype) {
  case MGT_MM_U8:
  case MGT_MM_I8: return 1;
  case MGT_MM_I16:
  case MGT_MM_U16: return 2;
  case MGT_MM_I32: return 4;
  case MGT_MM_I64:
  case MGT_MM_F64:
  case MGT_MM_D64: return 8;
  default: return 0;
  }
}

const char *mgt_mmidx_dtype_name(int dtype) {
  static const char *const names[] = {"?",     "uint8",   "int8",       "int16", "int32",
                                      "int64", "float64", "float32/64", "uint16"};
  return dtype >= 1 && dtype <= 8 ? names[dtype] : "?";
}

int mgt_mmidx_exists(const char *prefix) {
  char p[MGT_PATH_MAX + 8];
  snprintf(p, sizeof p, "%s.idx", prefix);
  return access(p, F_OK) == 0;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

void mgt_mmidx_close(mgt_mmidx *x) {
  if (x->map) munmap(x->map, x->map_len);
  mgt_free(x->seq_off);
  mgt_free(x->doc_seq);
  memset(x, 0, sizeof *x);
}

/* Maps an index read-only: nothing is read before its magic is checked, and a large file
   that is not an index costs no memory (*buf NULL when shorter than a header). */
static mgt_status map_index(const char *path, unsigned char **buf, size_t *len, struct stat *st) {
  int fd;
  *buf = NULL;
  MGT_CHECK(mgt_open_file("--data-path", path, &fd));
  if (fstat(fd, st) != 0) {
    close(fd);
    MGT_FAIL(MGT_ERR_IO, "--data-path %s: %s", path, strerror(errno));
  }
  *len = (size_t)st->st_size;
  void *m = *len >= HEADER ? mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (m == MAP_FAILED)
    MGT_FAIL(MGT_ERR_IO, "--data-path %s: mmap failed: %s", path, strerror(errno));
  *buf = m;
  return MGT_OK;
}

/* The index's arrays into x (element offsets), every rule of the format checked. */
static mgt_status parse_index(mgt_mmidx *x, const unsigned char *b, size_t len) {
  const char *p = x->idx_path;
  MGT_REQUIRE(len >= HEADER && memcmp(b, MAGIC, 9) == 0,
              "--data-path %s: not a Megatron-LM MMIDIDX index (magic)", p);
  const uint64_t version = le64(b + 9);
  MGT_REQUIRE(version == 1, "--data-path %s: index version %llu (only version 1 exists)", p,
              (unsigned long long)version);
  x->dtype = b[17];
  x->elem = elem_of(x->dtype);
  MGT_REQUIRE(x->elem > 0, "--data-path %s: unknown dtype code %d", p, x->dtype);
  const uint64_t n = le64(b + 18), m = le64(b + 26);
  MGT_REQUIRE(n < (1ull << 40) && m >= 1 && m < (1ull << 40) &&
                  (uint64_t)len == HEADER + 12 * n + 8 * m,
              "--data-path %s: %zu bytes, but %llu sequences and %llu document entries need %llu "
              "(truncated or damaged)",
              p, len, (unsigned long long)n, (unsigned long long)m,
              (unsigned long long)(HEADER + 12 * n + 8 * m));
  x->n_seq = (int64_t)n;
  x->n_doc = (int64_t)m - 1;
  MGT_CHECK(mgt_calloc(sizeof(int64_t) * (n + 1), "sequence offsets", (void **)&x->seq_off));
  MGT_CHECK(mgt_calloc(sizeof(int64_t) * m, "document starts", (void **)&x->doc_seq));
  const unsigned char *sizes = b + HEADER, *ptrs = sizes + 4 * n, *docs = ptrs + 8 * n;
  int64_t at = 0;
  if (x->dtype == MGT_MM_D64) { /* Megatron-Core's float32, its legacy reader's float64: the
                                   first pointer past a token tells (none: the .bin's size) */
    x->elem = 0;
    for (uint64_t i = 0, before = 0; i < n && !x->elem; i++) {
      const uint64_t ptr = le64(ptrs + 8 * i);
      if (before) x->elem = ptr == before * 4 ? 4 : 8;
      int32_t sz;
      memcpy(&sz, sizes + 4 * i, 4);
      before += sz > 0 ? (uint64_t)sz : 0;
    }
  }
  for (uint64_t i = 0; i < n; i++) {
    int32_t sz;
    memcpy(&sz, sizes + 4 * i, 4);
    const uint64_t ptr = le64(ptrs + 8 * i);
    MGT_REQUIRE(sz >= 0 && ptr == (uint64_t)at * (uint64_t)x->elem,
                "--data-path %s: sequence %llu: size %d at byte %llu, expected byte %llu (the "
                "sequences must lie back to back)",
                p, (unsigned long long)i, sz, (unsigned long long)ptr,
                (unsigned long long)at * (unsigned long long)x->elem);
    x->seq_off[i] = at;
    at += sz;
  }
  x->seq_off[n] = at;
  for (uint64_t d = 0; d < m; d++) {
    const uint64_t s = le64(docs + 8 * d);
    MGT_REQUIRE(s <= n && (d > 0 || s == 0) && (d == 0 || s >= (uint64_t)x->doc_seq[d - 1]) &&
                    (d + 1 < m || s == n),
                "--data-path %s: document index entry %llu is %llu (must rise from 0 to the %llu "
                "sequences)",
                p, (unsigned long long)d, (unsigned long long)s, (unsigned long long)n);
    x->doc_seq[d] = (int64_t)s;
  }
  return MGT_OK;
}

mgt_status mgt_mmidx_open(const char *prefix, mgt_mmidx *x) {
  memset(x, 0, sizeof *x);
  MGT_REQUIRE(strlen(prefix) + 5 < sizeof x->idx_path, "--data-path %.64s...: path too long",
              prefix);
  snprintf(x->idx_path, sizeof x->idx_path, "%s.idx", prefix);
  snprintf(x->bin_path, sizeof x->bin_path, "%s.bin", prefix);
  unsigned char *buf = NULL;
  size_t len = 0;
  mgt_status st = map_index(x->idx_path, &buf, &len, &x->idx_st);
  if (st == MGT_OK) st = parse_index(x, buf, len);
  if (buf) munmap(buf, len);
  int fd = -1;
  if (st == MGT_OK) st = mgt_open_file("--data-path", x->bin_path, &fd);
  if (st == MGT_OK) {
    if (fstat(fd, &x->bin_st) == 0 && x->elem == 0) /* code 7, no pointer past a token */
      x->elem = (uint64_t)x->bin_st.st_size == (uint64_t)x->seq_off[x->n_seq] * 4 ? 4 : 8;
    const uint64_t bytes = (uint64_t)x->seq_off[x->n_seq] * (uint64_t)x->elem;
    if (fstat(fd, &x->bin_st) != 0) {
      st = MGT_ERROR(MGT_ERR_INPUT, "--data-path %s: %s", x->bin_path, strerror(errno));
    } else if ((uint64_t)x->bin_st.st_size != bytes) {
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "--data-path %s: %lld bytes, but its index %s says %llu (truncated, or not "
                     "the data of that index)",
                     x->bin_path, (long long)x->bin_st.st_size, x->idx_path,
                     (unsigned long long)bytes);
    } else if (bytes > 0) {
      x->map_len = (size_t)bytes;
      x->map = mmap(NULL, x->map_len, PROT_READ, MAP_SHARED, fd, 0);
      if (x->map == MAP_FAILED) {
        x->map = NULL;
        st = MGT_ERROR(MGT_ERR_IO, "--data-path %s: mmap failed: %s", x->bin_path, strerror(errno));
      }
    }
  }
  if (fd >= 0) close(fd);
  if (st != MGT_OK) mgt_mmidx_close(x);
  return st;
}

int64_t mgt_mmidx_token(const mgt_mmidx *x, int64_t i) {
  const unsigned char *p = (const unsigned char *)x->map + (size_t)i * (size_t)x->elem;
  switch (x->dtype) {
  case MGT_MM_U8: return p[0];
  case MGT_MM_I8: return (int8_t)p[0];
  case MGT_MM_I16: {
    int16_t v;
    memcpy(&v, p, 2);
    return v;
  }
  case MGT_MM_U16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
  }
  case MGT_MM_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  case MGT_MM_I64: {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
  }
  default: { /* the float codes: 6 float64; 7 float32 or float64 (its element size) */
    double v;
    if (x->elem == 4) {
      float f;
      memcpy(&f, p, 4);
      v = f;
    } else {
      memcpy(&v, p, 8);
    }
    return v >= -9e18 && v <= 9e18 ? (int64_t)v : -1;
  }
  }
}

/* ---- writing ---- */

/* Writes `n` bytes at `off` of an open MPI file in pieces below MPI's int limit; every rank
   takes part in as many collective writes as the rank with the most pieces. */
static mgt_status write_all_at(MPI_File f, MPI_Comm world, uint64_t off, const void *buf,
                               uint64_t n, const char *what) {
  const uint64_t piece = 1u << 30;
  long long mine = (long long)((n + piece - 1) / piece), most = 0;
  MGT_MPI(MPI_Allreduce(&mine, &most, 1, MPI_LONG_LONG, MPI_MAX, world));
  mgt_status st = MGT_OK;
  for (long long k = 0; k < most; k++) {
    const uint64_t at = (uint64_t)k * piece, cnt = at < n ? (n - at < piece ? n - at : piece) : 0;
    int rc = MPI_File_write_at_all(f, (MPI_Offset)(off + at), (const char *)buf + (at < n ? at : 0),
                                   (int)cnt, MPI_BYTE, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS && st == MGT_OK) {
      st = MGT_ERROR(MGT_ERR_IO, "%s: write failed (MPI-IO)", what);
    }
  }
  return st;
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* Rank 0's index: the header, every rank's sizes (gathered), pointers and document starts. */
static mgt_status write_index(const char *path, MPI_Comm world, int dtype, const int64_t *seq_len,
                              int64_t n_seq, const int64_t *doc_seqs, int64_t n_docs) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  int *cs = NULL, *ds = NULL, *co = NULL, *dof = NULL;
  int64_t *all_len = NULL, *all_docs = NULL;
  unsigned char *buf = NULL;
  int64_t tot[2] = {0, 0}, mine[2] = {n_seq, n_docs};
  mgt_status st = MGT_OK;
  MGT_MPI(MPI_Allreduce(mine, tot, 2, MPI_INT64_T, MPI_SUM, world));
  MGT_REQUIRE(tot[0] < INT_MAX && tot[1] < INT_MAX && n_seq < INT_MAX,
              "%s: %lld sequences exceed what this writer gathers", path, (long long)tot[0]);
  if (rank == 0) {
    st = mgt_calloc(sizeof(int) * 4 * (size_t)size, "index counts", (void **)&cs);
    if (st == MGT_OK)
      st = mgt_calloc(sizeof(int64_t) * (size_t)(tot[0] + 1), "sequence sizes", (void **)&all_len);
    if (st == MGT_OK)
      st = mgt_calloc(sizeof(int64_t) * (size_t)(tot[1] + 1), "document sizes", (void **)&all_docs);
    ds = cs + size, co = cs + 2 * size, dof = cs + 3 * size;
  }
  st = mgt_mpi_agree(world, st);
  if (st != MGT_OK) goto done;
  int c[2] = {(int)n_seq, (int)n_docs};
  MGT_MPI_TRY(MPI_Gather(&c[0], 1, MPI_INT, cs, 1, MPI_INT, 0, world));
  MGT_MPI_TRY(MPI_Gather(&c[1], 1, MPI_INT, ds, 1, MPI_INT, 0, world));
  if (rank == 0)
    for (int q = 1; q < size; q++)
      co[q] = co[q - 1] + cs[q - 1], dof[q] = dof[q - 1] + ds[q - 1];
  MGT_MPI_TRY(MPI_Gatherv(seq_len, c[0], MPI_INT64_T, all_len, cs, co, MPI_INT64_T, 0, world));
  MGT_MPI_TRY(MPI_Gatherv(doc_seqs, c[1], MPI_INT64_T, all_docs, ds, dof, MPI_INT64_T, 0, world));
  if (rank == 0) {
    const int elem = elem_of(dtype);
    const size_t n = (size_t)tot[0], m = (size_t)tot[1] + 1, len = HEADER + 12 * n + 8 * m;
    st = mgt_calloc(len, "index", (void **)&buf);
    FILE *f = NULL;
    if (st == MGT_OK) st = mgt_create_file("--output-prefix", path, 0, &f);
    if (st == MGT_OK) {
      memcpy(buf, MAGIC, 9);
      put64(buf + 9, 1);
      buf[17] = (unsigned char)dtype;
      put64(buf + 18, n);
      put64(buf + 26, m);
      unsigned char *sizes = buf + HEADER, *ptrs = sizes + 4 * n, *docs = ptrs + 8 * n;
      uint64_t at = 0;
      for (size_t i = 0; i < n; i++) {
        const int32_t sz = (int32_t)all_len[i];
        memcpy(sizes + 4 * i, &sz, 4);
        put64(ptrs + 8 * i, at);
        at += (uint64_t)all_len[i] * (uint64_t)elem;
      }
      uint64_t s = 0;
      put64(docs, 0);
      for (size_t d = 0; d + 1 < m; d++)
        put64(docs + 8 * (d + 1), s += (uint64_t)all_docs[d]);
      if (fwrite(buf, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st = MGT_ERROR(MGT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
      }
    }
    if (f && fclose(f) != 0 && st == MGT_OK) {
      st = MGT_ERROR(MGT_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    }
  }
done:
  mgt_free(cs);
  mgt_free(all_len);
  mgt_free(all_docs);
  mgt_free(buf);
  return mgt_mpi_agree(world, st);
}

mgt_status mgt_mmidx_write(const char *prefix, MPI_Comm world, int dtype, const int32_t *tokens,
                           int64_t n_tok, const int64_t *seq_len, int64_t n_seq,
                           const int64_t *doc_seqs, int64_t n_docs) {
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_REQUIRE(dtype == MGT_MM_U8 || dtype == MGT_MM_U16 || dtype == MGT_MM_I32,
              "%s: writing dtype %d is not implemented", prefix, dtype);
  const int elem = elem_of(dtype);
  char bin[MGT_PATH_MAX + 16], idx[MGT_PATH_MAX + 16], tbin[MGT_PATH_MAX + 24],
      tidx[MGT_PATH_MAX + 24];
  snprintf(bin, sizeof bin, "%s.bin", prefix);
  snprintf(idx, sizeof idx, "%s.idx", prefix);
  snprintf(tbin, sizeof tbin, "%s.bin.tmp", prefix);
  snprintf(tidx, sizeof tidx, "%s.idx.tmp", prefix);
  void *buf = NULL;
  mgt_status st = mgt_calloc((size_t)(n_tok ? n_tok : 1) * (size_t)elem, "token buffer", &buf);
  for (int64_t i = 0; st == MGT_OK && i < n_tok; i++) {
    if (elem == 1) {
      ((uint8_t *)buf)[i] = (uint8_t)tokens[i];
    } else if (elem == 2) {
      const uint16_t v = (uint16_t)tokens[i];
      memcpy((char *)buf + 2 * i, &v, 2);
    } else
      memcpy((char *)buf + 4 * i, &tokens[i], 4);
  }
  st = mgt_mpi_agree(world, st);
  long long before = 0, mine = (long long)n_tok;
  if (st == MGT_OK) MGT_MPI(MPI_Exscan(&mine, &before, 1, MPI_LONG_LONG, MPI_SUM, world));
  if (rank == 0) before = 0;
  MPI_File f = MPI_FILE_NULL;
  if (st == MGT_OK) {
    if (rank == 0) unlink(tbin); /* MPI_MODE_CREATE does not truncate */
    MGT_MPI(MPI_Barrier(world));
    int rc = MPI_File_open(world, tbin, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &f);
    if (rc != MPI_SUCCESS) {
      st = MGT_ERROR(MGT_ERR_IO, "%s: cannot create (MPI-IO)", tbin);
      f = MPI_FILE_NULL;
    }
    st = mgt_mpi_agree(world, st);
  }
  if (st == MGT_OK)
    st = mgt_mpi_agree(world, write_all_at(f, world, (uint64_t)before * (uint64_t)elem, buf,
                                           (uint64_t)n_tok * (uint64_t)elem, tbin));
  if (f != MPI_FILE_NULL) {
    if (st == MGT_OK && MPI_File_sync(f) != MPI_SUCCESS) st = MGT_ERR_IO;
    MPI_File_close(&f);
    st = mgt_mpi_agree(world, st);
  }
  mgt_free(buf);
  if (st == MGT_OK) st = write_index(tidx, world, dtype, seq_len, n_seq, doc_seqs, n_docs);
  if (st == MGT_OK) { /* the data first: a reader that finds the index finds its data; an
                          earlier index goes before, so that it never pairs with the new data */
    mgt_status ps = rank == 0 ? mgt_remove_file(idx) : MGT_OK;
    if (ps == MGT_OK && rank == 0) ps = mgt_publish_file(tbin, bin);
    if (ps == MGT_OK && rank == 0) ps = mgt_publish_file(tidx, idx);
    st = mgt_mpi_agree(world, ps);
  }
  if (st != MGT_OK && rank == 0) unlink(tbin), unlink(tidx);
  return st;
}
