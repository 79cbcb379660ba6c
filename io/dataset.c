/* Reading token datasets and building Megatron-style samples.

   A split is a contiguous range of documents. For as many epochs as the run needs, the
   split's documents are shuffled (per epoch, by seed) and concatenated; sample s is the
   window of seq_length + 1 tokens starting seq_length * s tokens into that stream; samples
   are then shuffled by seed (the last epoch apart from the earlier ones). The three arrays
   (document order, sample starts, sample order) are the sample index, built by world rank 0 and
   cached beside the dataset. Tokens are read through a memory map of the contiguous HDF5 dataset.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5util.h"
#include "mgt/dataset.h"
#include "mgt/grid.h"
#include "mgt/rng.h"
#include "mgt/sha256.h"
#include "mgt/tokenizer.h"

/* ---- dataset files ---- */

static void h5_path(const char *prefix, char *out, size_t n) {
  size_t l = strlen(prefix);
  if (l > 3 && strcmp(prefix + l - 3, ".h5") == 0)
    snprintf(out, n, "%s", prefix);
  else
    snprintf(out, n, "%s.h5", prefix);
}

static hid_t open_ro(const char *path) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  H5Pset_file_locking(fapl, 0, 1); /* readers need no lock: files are published by rename */
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  return f;
}

mgt_status mgt_dataset_info_read(const char *prefix, mgt_dataset_info *info) {
  memset(info, 0, sizeof *info);
  h5_path(prefix, info->path, sizeof info->path);
  const char *p = info->path;
  struct stat sb;
  MGT_REQUIRE(stat(p, &sb) == 0, "--data-path %s: %s (run mgt preprocess first)", p,
              strerror(errno));
  MGT_REQUIRE(S_ISREG(sb.st_mode), "--data-path %s: not a regular file", p);
  mgt_h5_quiet();
  hid_t f = open_ro(p);
  MGT_REQUIRE(f >= 0, "--data-path %s: not a readable HDF5 file", p);
  mgt_status st = MGT_OK;
  char format[64];
  int64_t complete = 0;
  hid_t d = -1, t = -1;
  MGT_TRY(mgt_h5_read_str(f, "format", format, sizeof format, p));
  if (strcmp(format, "megatron-c tokens 1") != 0) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--data-path %s: format '%s' is not a megatron-c token dataset", p, format);
    st = MGT_ERR_INPUT;
    goto done;
  }
  MGT_TRY(mgt_h5_read_i64(f, "complete", &complete, p));
  MGT_TRY(mgt_h5_read_str(f, "tokenizer", info->tokenizer, sizeof info->tokenizer, p));
  MGT_TRY(mgt_h5_read_str(f, "vocab_hash", info->vocab_hash, sizeof info->vocab_hash, p));
  MGT_TRY(mgt_h5_read_i64(f, "vocab_size", &info->vocab_size, p));
  MGT_TRY(mgt_h5_read_i64(f, "eod_id", &info->eod_id, p));
  MGT_TRY(mgt_h5_read_i64(f, "n_tokens", &info->n_tokens, p));
  MGT_TRY(mgt_h5_read_i64(f, "n_documents", &info->n_documents, p));
  MGT_TRY(mgt_h5_read_i64(f, "max_token_id", &info->max_token_id, p));
  MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
  MGT_H5_TRY(t = H5Dget_type(d), p);
  info->token_bytes = (int)H5Tget_size(t);
  if (complete != 1 || H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE ||
      (info->token_bytes != 2 && info->token_bytes != 4) || info->n_tokens < 0 ||
      info->n_documents < 0 || info->max_token_id >= info->vocab_size) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--data-path %s: inconsistent attributes (complete %lld, %d-byte tokens, max "
                  "id %lld, vocabulary %lld)",
                  p, (long long)complete, info->token_bytes, (long long)info->max_token_id,
                  (long long)info->vocab_size);
    st = MGT_ERR_INPUT;
  }
done:
  if (t >= 0) H5Tclose(t);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return st;
}

/* A dataset opened for reading: document offsets in memory, tokens mapped. */
typedef struct dataset {
  mgt_dataset_info info;
  int64_t *doc_off; /* n_documents + 1 */
  void *map;
  size_t map_len;
  const unsigned char *tokens;
  char identity[65]; /* hash of what makes a cached index valid for this file */
} dataset;

static void dataset_close(dataset *ds) {
  if (ds->map) munmap(ds->map, ds->map_len);
  mgt_free(ds->doc_off);
  memset(ds, 0, sizeof *ds);
}

/* The length of a one-dimensional dataset. */
static mgt_status extent_1d(hid_t d, const char *p, const char *name, int64_t *n) {
  hid_t sp = H5Dget_space(d);
  MGT_REQUIRE(sp >= 0, "--data-path %s: %s has no dataspace", p, name);
  int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (nd >= 1 && nd <= H5S_MAX_RANK) H5Sget_simple_extent_dims(sp, dims, NULL);
  H5Sclose(sp);
  MGT_REQUIRE(nd == 1, "--data-path %s: %s is not one-dimensional", p, name);
  *n = (int64_t)dims[0];
  return MGT_OK;
}

static mgt_status dataset_open(const char *prefix, dataset *ds) {
  memset(ds, 0, sizeof *ds);
  MGT_CHECK(mgt_dataset_info_read(prefix, &ds->info));
  const char *p = ds->info.path;
  mgt_status st = MGT_OK;
  hid_t f = -1, d = -1, o = -1, dcpl = -1;
  int fd = -1;
  MGT_H5_TRY(f = open_ro(p), p);
  MGT_H5_TRY(o = H5Dopen2(f, "document_offsets", H5P_DEFAULT), p);
  /* sizes from attributes are checked against the datasets before they size a buffer */
  int64_t n_off = 0, n_tok = 0;
  MGT_TRY(extent_1d(o, p, "document_offsets", &n_off));
  if (n_off != ds->info.n_documents + 1) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--data-path %s: document_offsets holds %lld entries, but the n_documents "
                  "attribute says %lld documents",
                  p, (long long)n_off, (long long)ds->info.n_documents);
    st = MGT_ERR_INPUT;
    goto done;
  }
  MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
  MGT_TRY(extent_1d(d, p, "tokens", &n_tok));
  if (n_tok != ds->info.n_tokens) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--data-path %s: tokens holds %lld ids, but the n_tokens attribute says %lld", p,
                  (long long)n_tok, (long long)ds->info.n_tokens);
    st = MGT_ERR_INPUT;
    goto done;
  }
  H5Dclose(d);
  d = -1;
  MGT_TRY(mgt_calloc(sizeof(int64_t) * (size_t)(ds->info.n_documents + 1), "document offsets",
                     (void **)&ds->doc_off));
  MGT_H5_TRY(H5Dread(o, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->doc_off), p);
  for (int64_t i = 0; i < ds->info.n_documents; i++)
    if (ds->doc_off[i] > ds->doc_off[i + 1]) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--data-path %s: document offsets decrease at document %lld", p, (long long)i);
      st = MGT_ERR_INPUT;
      goto done;
    }
  if (ds->doc_off[0] != 0 || ds->doc_off[ds->info.n_documents] != ds->info.n_tokens) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--data-path %s: document offsets do not cover the %lld tokens", p,
                  (long long)ds->info.n_tokens);
    st = MGT_ERR_INPUT;
    goto done;
  }
  if (ds->info.n_tokens > 0) {
    MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
    MGT_H5_TRY(dcpl = H5Dget_create_plist(d), p);
    haddr_t off = H5Dget_offset(d);
    if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0 || off == HADDR_UNDEF) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--data-path %s: tokens are not one contiguous unfiltered dataset", p);
      st = MGT_ERR_INPUT;
      goto done;
    }
    size_t bytes = (size_t)ds->info.n_tokens * (size_t)ds->info.token_bytes;
    struct stat sb;
    fd = open(p, O_RDONLY);
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < off + bytes) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--data-path %s: the file is shorter than its token dataset (truncated?)", p);
      st = MGT_ERR_INPUT;
      goto done;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), start = (size_t)off / page * page;
    ds->map_len = bytes + ((size_t)off - start);
    ds->map = mmap(NULL, ds->map_len, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (ds->map == MAP_FAILED) {
      ds->map = NULL;
      mgt_error_set(MGT_ERR_IO, __FILE__, __LINE__, __func__, "--data-path %s: mmap failed: %s", p,
                    strerror(errno));
      st = MGT_ERR_IO;
      goto done;
    }
    ds->tokens = (const unsigned char *)ds->map + ((size_t)off - start);
    /* the identity of the file for cached indices: size, time, inode and document layout */
    mgt_sha256 h;
    unsigned char dg[32];
    mgt_sha256_init(&h);
    mgt_sha256_update(&h, &sb.st_size, sizeof sb.st_size);
    mgt_sha256_update(&h, &sb.st_mtim, sizeof sb.st_mtim);
    mgt_sha256_update(&h, &sb.st_ino, sizeof sb.st_ino);
    mgt_sha256_update(&h, ds->doc_off, sizeof(int64_t) * (size_t)(ds->info.n_documents + 1));
    mgt_sha256_final(&h, dg);
    mgt_sha256_hex(dg, ds->identity);
  }
done:
  if (fd >= 0) close(fd);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (d >= 0) H5Dclose(d);
  if (o >= 0) H5Dclose(o);
  if (f >= 0) H5Fclose(f);
  if (st != MGT_OK) dataset_close(ds);
  return st;
}

static int32_t token_at(const dataset *ds, int64_t i) {
  if (ds->info.token_bytes == 2) {
    uint16_t v;
    memcpy(&v, ds->tokens + 2 * i, 2);
    return v;
  }
  uint32_t v;
  memcpy(&v, ds->tokens + 4 * i, 4);
  return (int32_t)v;
}

/* ---- sample index ---- */

/* The cache file: this header, then doc_idx, sample_idx and shuffle (index_views). A job killed
   while writing it, or a damaged file, is found by the length and checksum and rebuilt. */
typedef struct index_header {
  char magic[8]; /* "MGTIDX2" */
  int64_t n_doc_idx, n_samples, seq;
  uint64_t bytes;    /* of the whole file */
  uint64_t checksum; /* of everything after the header, as body_checksum computes it */
} index_header;

static const char INDEX_MAGIC[8] = "MGTIDX2";

/* Bytes of an index of these sizes (0 if absurd). */
static size_t index_bytes(int64_t n_doc_idx, int64_t n_samples) {
  if (n_doc_idx < 0 || n_samples < 0 || n_doc_idx > (1ll << 40) || n_samples > (1ll << 40))
    return 0;
  size_t bytes = sizeof(index_header) + sizeof(int32_t) * (size_t)n_doc_idx;
  bytes = (bytes + 7) / 8 * 8;
  bytes += sizeof(int64_t) * 2 * (size_t)(n_samples + 1);
  return bytes + sizeof(int64_t) * (size_t)n_samples;
}

static uint64_t body_checksum(const void *mem, size_t bytes) {
  const uint64_t *w = (const uint64_t *)((const unsigned char *)mem + sizeof(index_header));
  const size_t n = (bytes - sizeof(index_header)) / 8;
  uint64_t s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (size_t i = 0; i < n; i++)
    s += mgt_fmix64(mgt_fmix64(i + 1) ^ w[i]);
  return s;
}

/* Samples of one split of one dataset. */
typedef struct split_index {
  const dataset *ds;
  int64_t n_doc_idx, n_samples;
  const int32_t *doc_idx;    /* global document ids in stream order */
  const int64_t *sample_idx; /* 2 (n_samples + 1): position in doc_idx, offset in the doc */
  const int64_t *shuffle;    /* n_samples */
  void *mem;                 /* the index as one block: mapped cache or malloc'd */
  size_t mem_len;
  int mapped;
} split_index;

static void index_views(split_index *ix);

static uint64_t draw(uint64_t seed, uint64_t stream, uint64_t k) {
  uint32_t w[4];
  mgt_rng_block(seed, stream, k, w);
  return (uint64_t)w[0] << 32 | w[1];
}

/* Builds the index into one malloc'd block laid out as the cache file. */
static mgt_status build_index(const dataset *ds, int64_t a, int64_t b, int split, int64_t needed,
                              int seq, uint64_t seed, void **out, size_t *out_len) {
  const char *p = ds->info.path;
  int64_t tpe = ds->doc_off[b] - ds->doc_off[a];
  int64_t spe = tpe > 0 ? (tpe - 1) / seq : 0;
  static const char *names[3] = {"train", "valid", "test"};
  MGT_REQUIRE(spe > 0,
              "--data-path %s: the %s split (documents %lld to %lld) has %lld tokens, "
              "too few for one sample of --seq-length %d + 1",
              p, names[split], (long long)a, (long long)b, (long long)tpe, seq);
  int64_t epochs = (needed + spe - 1) / spe;
  if (epochs < 1) epochs = 1;
  /* a sample may straddle epochs, so count samples over the concatenated stream */
  int64_t n_docs = b - a, n_doc_idx = epochs * n_docs;
  int64_t n_samples = (epochs * tpe - 1) / seq;
  size_t off_samples = (sizeof(index_header) + sizeof(int32_t) * (size_t)n_doc_idx + 7) / 8 * 8;
  size_t off_shuffle = off_samples + sizeof(int64_t) * 2 * (size_t)(n_samples + 1);
  size_t bytes = index_bytes(n_doc_idx, n_samples);
  MGT_REQUIRE(bytes > 0, "--data-path %s: a sample index of %lld samples is too large", p,
              (long long)n_samples);
  unsigned char *mem = NULL;
  MGT_CHECK(mgt_calloc(bytes, "sample index", (void **)&mem));
  index_header *h = (index_header *)mem;
  memcpy(h->magic, INDEX_MAGIC, 8);
  h->n_doc_idx = n_doc_idx;
  h->n_samples = n_samples;
  h->seq = seq;
  h->bytes = bytes;
  int32_t *doc_idx = (int32_t *)(mem + sizeof *h);
  int64_t *sample_idx = (int64_t *)(mem + off_samples), *shuffle = (int64_t *)(mem + off_shuffle);
  for (int64_t e = 0; e < epochs; e++) {
    int32_t *d = doc_idx + e * n_docs;
    for (int64_t i = 0; i < n_docs; i++)
      d[i] = (int32_t)(a + i);
    for (int64_t i = n_docs - 1; i > 0; i--) { /* Fisher-Yates */
      int64_t j = (int64_t)(draw(seed, mgt_rng_data_stream(0x100u + (uint32_t)split),
                                 (uint64_t)e << 32 | (uint64_t)i) %
                            (uint64_t)(i + 1));
      int32_t tmp = d[i];
      d[i] = d[j];
      d[j] = tmp;
    }
  }
  int64_t pos = 0, offset = 0;
  for (int64_t s = 0; s <= n_samples; s++) {
    sample_idx[2 * s] = pos;
    sample_idx[2 * s + 1] = offset;
    int64_t left = seq;
    while (left > 0 && pos < n_doc_idx) {
      int64_t len = ds->doc_off[doc_idx[pos] + 1] - ds->doc_off[doc_idx[pos]] - offset;
      if (len > left) {
        offset += left;
        left = 0;
      } else {
        left -= len;
        pos++;
        offset = 0;
      }
    }
  }
  /* Samples that start in the earlier epochs are shuffled apart from those of the last, so
     every earlier epoch is seen whole before the last begins. */
  int64_t n_first = (epochs - 1) * tpe / seq;
  if (n_first > n_samples) n_first = n_samples;
  for (int64_t i = 0; i < n_samples; i++)
    shuffle[i] = i;
  for (int part = 0; part < 2; part++) {
    int64_t lo = part ? n_first : 0, hi = part ? n_samples : n_first;
    for (int64_t i = hi - 1; i > lo; i--) {
      int64_t j =
          lo + (int64_t)(draw(seed, mgt_rng_data_stream(0x200u + (uint32_t)split), (uint64_t)i) %
                         (uint64_t)(i - lo + 1));
      int64_t tmp = shuffle[i];
      shuffle[i] = shuffle[j];
      shuffle[j] = tmp;
    }
  }
  h->checksum = body_checksum(mem, bytes);
  *out = mem;
  *out_len = bytes;
  return MGT_OK;
}

/* Whether `mem` (len bytes) is a whole, undamaged index of documents [a, b) of ds for
   samples of seq tokens: length, checksum and every value in range, so reading samples from
   it cannot leave the dataset. */
static int index_valid(const dataset *ds, const void *mem, size_t len, int64_t a, int64_t b,
                       int seq) {
  const index_header *h = mem;
  if (len < sizeof *h || memcmp(h->magic, INDEX_MAGIC, 8) != 0 || h->bytes != len ||
      h->seq != seq || index_bytes(h->n_doc_idx, h->n_samples) != len ||
      body_checksum(mem, len) != h->checksum)
    return 0;
  split_index ix = {0};
  ix.mem = (void *)mem;
  index_views(&ix);
  int64_t tokens = 0; /* read_sample wraps around doc_idx: it must hold a sample's tokens */
  for (int64_t i = 0; i < ix.n_doc_idx; i++) {
    if (ix.doc_idx[i] < a || ix.doc_idx[i] >= b) return 0;
    tokens += ds->doc_off[ix.doc_idx[i] + 1] - ds->doc_off[ix.doc_idx[i]];
  }
  if (ix.n_samples > 0 && tokens < seq + 1) return 0;
  for (int64_t s = 0; s <= ix.n_samples; s++) {
    int64_t pos = ix.sample_idx[2 * s], off = ix.sample_idx[2 * s + 1];
    if (pos < 0 || pos > ix.n_doc_idx || off < 0 || (s && pos < ix.sample_idx[2 * s - 2])) return 0;
    if (pos < ix.n_doc_idx &&
        off >= ds->doc_off[ix.doc_idx[pos] + 1] - ds->doc_off[ix.doc_idx[pos]] && off > 0)
      return 0;
  }
  for (int64_t s = 0; s < ix.n_samples; s++)
    if (ix.shuffle[s] < 0 || ix.shuffle[s] >= ix.n_samples) return 0;
  return 1;
}

static void index_views(split_index *ix) {
  const unsigned char *mem = ix->mem;
  const index_header *h = (const index_header *)mem;
  ix->n_doc_idx = h->n_doc_idx;
  ix->n_samples = h->n_samples;
  size_t off = sizeof *h + sizeof(int32_t) * (size_t)h->n_doc_idx;
  off = (off + 7) / 8 * 8;
  ix->doc_idx = (const int32_t *)(mem + sizeof *h);
  ix->sample_idx = (const int64_t *)(mem + off);
  ix->shuffle = ix->sample_idx + 2 * (h->n_samples + 1);
}

static void index_free(split_index *ix) {
  if (ix->mem) {
    if (ix->mapped)
      munmap(ix->mem, ix->mem_len);
    else
      mgt_free(ix->mem);
  }
  memset(ix, 0, sizeof *ix);
}

static mgt_status write_cache(const char *path, const void *mem, size_t len) {
  char tmp[MGT_PATH_MAX + 256];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) MGT_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  const unsigned char *p = mem;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, p + done, len - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  int err = done == len ? 0 : errno;
  if (close(fd) != 0 && !err) err = errno;
  if (err) {
    unlink(tmp);
    MGT_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(err));
  }
  mgt_status st = mgt_publish_file(tmp, path);
  if (st != MGT_OK) unlink(tmp);
  return st;
}

static mgt_status map_cache(const char *path, split_index *ix) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) MGT_FAIL(MGT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(index_header)) {
    close(fd);
    MGT_FAIL(MGT_ERR_IO, "%s: not a sample index", path);
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) MGT_FAIL(MGT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
  ix->mem = m;
  ix->mem_len = (size_t)st.st_size;
  ix->mapped = 1;
  if (memcmp(((index_header *)m)->magic, INDEX_MAGIC, 8) != 0) {
    index_free(ix);
    MGT_FAIL(MGT_ERR_IO, "%s: not a sample index", path);
  }
  index_views(ix);
  return MGT_OK;
}

/* The index of one split, from the cache beside the dataset or built by world rank 0.
   Collective over world. */
static mgt_status split_index_get(const dataset *ds, int split, int64_t a, int64_t b,
                                  int64_t needed, int seq, uint64_t seed, MPI_Comm world, FILE *log,
                                  split_index *ix) {
  memset(ix, 0, sizeof *ix);
  ix->ds = ds;
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  /* the cache name hashes everything the index depends on */
  char key[512], hex[65], path[MGT_PATH_MAX + 128];
  snprintf(key, sizeof key, "v3 %s %d %lld %lld %lld %d %llu", ds->identity, split, (long long)a,
           (long long)b, (long long)needed, seq, (unsigned long long)seed);
  mgt_sha256 h;
  unsigned char dg[32];
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, key, strlen(key));
  mgt_sha256_final(&h, dg);
  mgt_sha256_hex(dg, hex);
  snprintf(path, sizeof path, "%s.index-%.16s", ds->info.path, hex);
  /* rank 0 makes sure a whole, valid cache exists; the others use it if it does */
  int cached = 0;
  mgt_status st = MGT_OK;
  if (rank == 0) {
    split_index probe = {0};
    if (access(path, F_OK) == 0) {
      cached =
          map_cache(path, &probe) == MGT_OK && index_valid(ds, probe.mem, probe.mem_len, a, b, seq);
      if (!cached) {
        mgt_error_clear();
        if (log)
          fprintf(log, "note: the sample index %s is damaged or incomplete: rebuilding it\n", path);
      }
      index_free(&probe);
    }
    if (!cached) {
      void *mem = NULL;
      size_t len = 0;
      st = build_index(ds, a, b, split, needed, seq, seed, &mem, &len);
      if (st == MGT_OK) {
        cached = write_cache(path, mem, len) == MGT_OK;
        if (!cached) {
          mgt_error_clear();
          if (log)
            fprintf(log,
                    "note: cannot cache the sample index beside %s; every rank builds "
                    "it in memory\n",
                    ds->info.path);
        } else if (log) {
          fprintf(log, "built sample index %s\n", path);
        }
        mgt_free(mem);
      }
    }
  }
  MGT_CHECK(mgt_mpi_agree(world, st));
  MGT_MPI(MPI_Bcast(&cached, 1, MPI_INT, 0, world));
  if (cached) {
    st = map_cache(path, ix);
    if (st == MGT_OK && !index_valid(ds, ix->mem, ix->mem_len, a, b, seq)) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "%s: the sample index changed while the job started (another job?)", path);
      st = MGT_ERR_INPUT;
    }
  } else {
    st = build_index(ds, a, b, split, needed, seq, seed, &ix->mem, &ix->mem_len);
    if (st == MGT_OK) index_views(ix);
  }
  MGT_CHECK(mgt_mpi_agree(world, st));
  MGT_REQUIRE(ix->n_samples >= needed, "%s: the sample index holds %lld samples, %lld needed", path,
              (long long)ix->n_samples, (long long)needed);
  return MGT_OK;
}

/* seq + 1 tokens of sample s (before shuffling) */
static void read_sample(const split_index *ix, int64_t s, int seq, int32_t *out) {
  const dataset *ds = ix->ds;
  int64_t pos = ix->sample_idx[2 * s], off = ix->sample_idx[2 * s + 1];
  for (int k = 0; k <= seq;) {
    int32_t d = ix->doc_idx[pos % ix->n_doc_idx];
    int64_t first = ds->doc_off[d] + off, end = ds->doc_off[d + 1];
    for (int64_t i = first; i < end && k <= seq; i++)
      out[k++] = token_at(ds, i);
    pos++;
    off = 0;
  }
}

/* ---- blended data source ---- */

typedef struct opened opened;

typedef struct source {
  opened *op; /* shared with the other source of the run */
  int n;      /* datasets */
  split_index *ix;
  int32_t *which;  /* blended sample -> dataset (NULL with one dataset) */
  int64_t *within; /* blended sample -> sample of that dataset */
  int64_t n_blend;
  int seq;
} source;

static mgt_status source_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  source *s = ctx;
  for (int r = 0; r < n; r++) {
    uint64_t i = first + (uint64_t)r;
    int d = 0;
    int64_t k = (int64_t)i;
    if (s->which) {
      MGT_REQUIRE((int64_t)i < s->n_blend, "sample %llu is beyond the %lld planned for this run",
                  (unsigned long long)i, (long long)s->n_blend);
      d = s->which[i];
      k = s->within[i];
    }
    const split_index *ix = &s->ix[d];
    MGT_REQUIRE(k < ix->n_samples, "sample %lld is beyond the %lld in the index of %s",
                (long long)k, (long long)ix->n_samples, ix->ds->info.path);
    int32_t *row = out + (size_t)r * (T + 1);
    read_sample(ix, ix->shuffle[k], T, row);
    const int64_t V = ix->ds->info.vocab_size; /* the attribute may lie about the data */
    for (int t = 0; t <= T; t++)
      MGT_REQUIRE(row[t] >= 0 && row[t] < V,
                  "--data-path %s: token id %lld in sample %lld is outside its vocabulary of %lld",
                  ix->ds->info.path, (long long)(uint32_t)row[t], (long long)k, (long long)V);
  }
  return MGT_OK;
}

static void opened_release(opened *op);

static void source_destroy(void *ctx) {
  source *s = ctx;
  if (!s) return;
  if (s->ix)
    for (int d = 0; d < s->n; d++)
      index_free(&s->ix[d]);
  opened_release(s->op);
  mgt_free(s->ix);
  mgt_free(s->which);
  mgt_free(s->within);
  mgt_free(s);
}

/* Blending by weight: sample i goes to the dataset furthest behind its share,
   w_d * (i + 1) - taken_d (ties to the lower index), as Megatron-LM's blendable dataset. */
static void blend(const double *w, int n, int64_t total, int32_t *which, int64_t *within,
                  int64_t *counts) {
  for (int d = 0; d < n; d++)
    counts[d] = 0;
  for (int64_t i = 0; i < total; i++) {
    int best = 0;
    double be = -1e300;
    for (int d = 0; d < n; d++) {
      double e = w[d] * (double)(i + 1) - (double)counts[d];
      if (e > be) be = e, best = d;
    }
    which[i] = best;
    within[i] = counts[best]++;
  }
}

/* ---- the training sources ---- */

/* The datasets of --data-path and their weights: one prefix, or any number of weight-prefix
   pairs, every one checked. */
typedef struct data_spec {
  int n;
  double *w;
  char **prefix; /* into buf */
  char *buf;
} data_spec;

static void spec_free(data_spec *spec) {
  if (!spec) return;
  free(spec->w);
  free(spec->prefix);
  free(spec->buf);
  free(spec);
}

static mgt_status parse_data_path(const char *list, data_spec **out) {
  *out = NULL;
  data_spec *spec = calloc(1, sizeof *spec);
  char **items = NULL;
  mgt_status st = MGT_OK;
  size_t n = 0;
  if (!spec || !(spec->buf = strdup(list))) goto nomem;
  for (const char *c = list; *c; c++)
    n += *c == '\n';
  n += list[0] != 0;
  if (!(items = calloc(n + 1, sizeof *items))) goto nomem;
  n = 0;
  for (char *s = spec->buf; *s;) { /* one value per line */
    items[n++] = s;
    char *e = strchr(s, '\n');
    if (!e) break;
    *e = 0;
    s = e + 1;
  }
  if (n == 1) {
    spec->n = 1;
    spec->w = malloc(sizeof *spec->w);
    spec->prefix = malloc(sizeof *spec->prefix);
    if (!spec->w || !spec->prefix) goto nomem;
    spec->w[0] = 1;
    spec->prefix[0] = items[0];
  } else {
    if (n == 0 || n % 2 != 0) {
      mgt_error_set(
          MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
          "--data-path: give one prefix, or pairs of weight and prefix (%zu values given)", n);
      st = MGT_ERR_INPUT;
      goto done;
    }
    spec->n = (int)(n / 2);
    spec->w = calloc(n / 2, sizeof *spec->w);
    spec->prefix = calloc(n / 2, sizeof *spec->prefix);
    if (!spec->w || !spec->prefix) goto nomem;
    double sum = 0;
    for (int i = 0; i < spec->n; i++) {
      char *end;
      double w = strtod(items[2 * i], &end);
      if (!(*end == 0 && end != items[2 * i] && w > 0 && isfinite(w))) {
        mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                      "--data-path: value %d, '%.64s', is not a positive weight (pairs of weight "
                      "and prefix)",
                      2 * i + 1, items[2 * i]);
        st = MGT_ERR_INPUT;
        goto done;
      }
      spec->w[i] = w;
      sum += w;
      spec->prefix[i] = items[2 * i + 1];
    }
    for (int i = 0; i < spec->n; i++)
      spec->w[i] /= sum;
  }
  free(items);
  *out = spec;
  return MGT_OK;
nomem:
  mgt_error_set(MGT_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory reading --data-path");
  st = MGT_ERR_NOMEM;
done:
  free(items);
  spec_free(spec);
  return st;
}

mgt_status mgt_dataset_vocab_size(const mgt_config *cfg, int *vocab_size) {
  data_spec *spec = NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(parse_data_path(cfg->data_path, &spec));
  *vocab_size = 0;
  for (int i = 0; i < spec->n; i++) {
    mgt_dataset_info info;
    MGT_TRY(mgt_dataset_info_read(spec->prefix[i], &info));
    if (info.vocab_size > *vocab_size) *vocab_size = (int)info.vocab_size;
  }
done:
  spec_free(spec);
  return st;
}

/* The datasets of a run, shared by its sources and closed with the last of them. */
struct opened {
  int n;
  dataset *ds;
  int refs;
};

static void opened_release(opened *op) {
  if (!op || --op->refs > 0) return;
  for (int d = 0; d < op->n; d++)
    dataset_close(&op->ds[d]);
  mgt_free(op->ds);
  mgt_free(op);
}

static mgt_status make_source(opened *op, const data_spec *spec, int split, const double frac[3],
                              int64_t needed, const mgt_config *cfg, MPI_Comm world, FILE *log,
                              mgt_data *out) {
  source *s = NULL;
  MGT_CHECK(mgt_calloc(sizeof *s, "data source", (void **)&s));
  mgt_status st = MGT_OK;
  s->op = op;
  op->refs++;
  s->n = spec->n;
  s->seq = cfg->seq_length;
  int64_t *counts = NULL;
  MGT_TRY(mgt_calloc(sizeof *counts * (size_t)spec->n, "blending counts", (void **)&counts));
  MGT_TRY(mgt_calloc(sizeof(split_index) * (size_t)spec->n, "sample indices", (void **)&s->ix));
  if (spec->n > 1) {
    s->n_blend = needed;
    MGT_TRY(
        mgt_calloc(sizeof(int32_t) * ((size_t)needed + 1), "blending index", (void **)&s->which));
    MGT_TRY(
        mgt_calloc(sizeof(int64_t) * ((size_t)needed + 1), "blending index", (void **)&s->within));
    blend(spec->w, spec->n, needed, s->which, s->within, counts);
  } else {
    counts[0] = needed;
  }
  for (int d = 0; d < spec->n; d++) {
    const dataset *ds = &op->ds[d];
    int64_t nd = ds->info.n_documents;
    double c1 = frac[0], c2 = frac[0] + frac[1];
    int64_t b1 = (int64_t)(c1 * (double)nd + 0.5), b2 = (int64_t)(c2 * (double)nd + 0.5);
    int64_t a = split == 0 ? 0 : (split == 1 ? b1 : b2),
            b = split == 0 ? b1 : (split == 1 ? b2 : nd);
    int64_t need = counts[d] > 0 ? counts[d] : 1;
    MGT_TRY(
        split_index_get(ds, split, a, b, need, cfg->seq_length, cfg->seed, world, log, &s->ix[d]));
  }
  out->ctx = s;
  out->get = source_get;
  out->destroy = source_destroy;
  mgt_free(counts);
  return MGT_OK;
done:
  mgt_free(counts);
  source_destroy(s);
  return st;
}

mgt_status mgt_dataset_sources(const mgt_config *cfg, MPI_Comm world, FILE *log, mgt_data *train,
                               mgt_data *valid) {
  memset(train, 0, sizeof *train);
  memset(valid, 0, sizeof *valid);
  data_spec *spec = NULL;
  opened *op = NULL;
  mgt_tokenizer *tok = NULL;
  mgt_status st = MGT_OK;
  MGT_TRY(mgt_calloc(sizeof *op, "datasets", (void **)&op));
  op->refs = 1; /* this function's own reference, dropped at the end */
  MGT_TRY(parse_data_path(cfg->data_path, &spec));
  MGT_TRY(mgt_calloc(sizeof *op->ds * (size_t)spec->n, "datasets", (void **)&op->ds));
  if (cfg->vocab_file[0]) {
    MGT_TRY(mgt_tok_open(cfg->tokenizer_type, cfg->vocab_file, cfg->merge_file, &tok));
  }
  for (int d = 0; d < spec->n; d++) {
    MGT_TRY(dataset_open(spec->prefix[d], &op->ds[d]));
    op->n = d + 1;
    const mgt_dataset_info *in = &op->ds[d].info;
    if (tok && strcmp(in->vocab_hash, mgt_tok_hash(tok)) != 0) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--data-path %s was tokenized with another vocabulary than --vocab-file %s "
                    "(hash %.12s, expected %.12s)",
                    in->path, cfg->vocab_file, in->vocab_hash, mgt_tok_hash(tok));
      st = MGT_ERR_INPUT;
      goto done;
    }
    if (in->max_token_id >= cfg->vocab_size || in->vocab_size > cfg->vocab_size) {
      mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                    "--data-path %s: vocabulary of %lld ids (largest used %lld) does not fit "
                    "--vocab-size %d",
                    in->path, (long long)in->vocab_size, (long long)in->max_token_id,
                    cfg->vocab_size);
      st = MGT_ERR_INPUT;
      goto done;
    }
  }
  double frac[3];
  MGT_TRY(mgt_split_parse(cfg->split, frac));
  int64_t need_train = cfg->train_iters * (int64_t)cfg->global_batch_size;
  MGT_TRY(make_source(op, spec, 0, frac, need_train > 0 ? need_train : 1, cfg, world, log, train));
  if (cfg->eval_iters > 0 && frac[1] > 0) {
    int64_t need_valid = (int64_t)cfg->eval_iters * cfg->global_batch_size;
    MGT_TRY(make_source(op, spec, 1, frac, need_valid, cfg, world, log, valid));
  }
done:
  mgt_tok_destroy(&tok);
  spec_free(spec);
  if (st != MGT_OK) {
    mgt_data_destroy(train);
    mgt_data_destroy(valid);
  }
  opened_release(op);
  return st;
}
