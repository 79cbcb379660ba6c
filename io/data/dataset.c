/* Reading token datasets and building Megatron-style samples.

   A split is a contiguous range of documents. For as many epochs as the run needs, the
   split's documents are shuffled (per epoch, by seed) and concatenated; sample s is the
   window of seq_length + 1 tokens starting seq_length * s tokens into that stream; samples
   are then shuffled by seed (the last epoch apart from the earlier ones). The three arrays
   (document order, sample starts, sample order) are the sample index, built by world rank 0 and
   cached beside the dataset. Tokens are read through a memory map of the contiguous HDF5 dataset.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bert_data.h"
#include "h5util.h"
#include "mmidx.h"
#include "mgt/dataset.h"
#include "mgt/agree.h"
#include "mgt/model.h"
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

/* A Megatron-LM dataset: PREFIX.idx without PREFIX.h5 (a prefix naming .h5 is ours). */
static int is_megatron(const char *prefix) {
  char h5[MGT_PATH_MAX + 8];
  h5_path(prefix, h5, sizeof h5);
  const size_t l = strlen(prefix);
  return !(l > 3 && strcmp(prefix + l - 3, ".h5") == 0) && access(h5, F_OK) != 0 &&
         mgt_mmidx_exists(prefix);
}

static void megatron_info(const mgt_mmidx *x, mgt_dataset_info *info) {
  snprintf(info->path, sizeof info->path, "%s", x->idx_path);
  snprintf(info->format, sizeof info->format, "megatron");
  snprintf(info->dtype, sizeof info->dtype, "%s", mgt_mmidx_dtype_name(x->dtype));
  info->eod_id = info->max_token_id = -1;
  info->n_tokens = x->seq_off[x->n_seq];
  info->n_documents = x->n_doc;
  info->n_sentences = x->n_seq != x->n_doc ? x->n_seq : -1; /* a sequence per document: not split */
  info->token_bytes = x->elem;
}

mgt_status mgt_dataset_info_read(const char *prefix, mgt_dataset_info *info) {
  memset(info, 0, sizeof *info);
  if (is_megatron(prefix)) {
    mgt_mmidx x;
    MGT_CHECK(mgt_mmidx_open(prefix, &x));
    megatron_info(&x, info);
    mgt_mmidx_close(&x);
    return MGT_OK;
  }
  h5_path(prefix, info->path, sizeof info->path);
  snprintf(info->format, sizeof info->format, "hdf5");
  const char *p = info->path;
  struct stat sb;
  MGT_REQUIRE(stat(p, &sb) == 0,
              "--data-path %s: %s (nor is there a Megatron-LM %s.idx; run mgt preprocess first)", p,
              strerror(errno), prefix);
  MGT_REQUIRE(S_ISREG(sb.st_mode), "--data-path %s: not a regular file", p);
  mgt_h5_quiet();
  hid_t f = open_ro(p);
  MGT_REQUIRE(f >= 0, "--data-path %s: not a readable HDF5 file", p);
  mgt_status st = MGT_OK;
  char format[64];
  int64_t complete = 0;
  hid_t d = -1, t = -1;
  MGT_TRY(mgt_h5_read_str(f, "format", format, sizeof format, p));
  if (strcmp(format, "megatron-c tokens 1") != 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: format '%s' is not a megatron-c token dataset", p,
                  format);
  MGT_TRY(mgt_h5_read_i64(f, "complete", &complete, p));
  MGT_TRY(mgt_h5_read_str(f, "tokenizer", info->tokenizer, sizeof info->tokenizer, p));
  MGT_TRY(mgt_h5_read_str(f, "vocab_hash", info->vocab_hash, sizeof info->vocab_hash, p));
  MGT_TRY(mgt_h5_read_i64(f, "vocab_size", &info->vocab_size, p));
  MGT_TRY(mgt_h5_read_i64(f, "eod_id", &info->eod_id, p));
  MGT_TRY(mgt_h5_read_i64(f, "n_tokens", &info->n_tokens, p));
  MGT_TRY(mgt_h5_read_i64(f, "n_documents", &info->n_documents, p));
  MGT_TRY(mgt_h5_read_i64(f, "max_token_id", &info->max_token_id, p));
  info->n_sentences = -1;
  if (H5Aexists(f, "n_sentences") > 0) {
    MGT_TRY(mgt_h5_read_i64(f, "n_sentences", &info->n_sentences, p));
    if (info->n_sentences < 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: n_sentences is %lld", p,
                    (long long)info->n_sentences);
  }
  MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
  MGT_H5_TRY(t = H5Dget_type(d), p);
  info->token_bytes = (int)H5Tget_size(t);
  snprintf(info->dtype, sizeof info->dtype, "uint%d", 8 * info->token_bytes);
  if (complete != 1 || H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE ||
      (info->token_bytes != 2 && info->token_bytes != 4) || info->n_tokens < 0 ||
      info->n_documents < 0 || info->max_token_id >= info->vocab_size) {
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--data-path %s: inconsistent attributes (complete %lld, %d-byte tokens, max "
                   "id %lld, vocabulary %lld)",
                   p, (long long)complete, info->token_bytes, (long long)info->max_token_id,
                   (long long)info->vocab_size);
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
  int64_t *doc_off;  /* n_documents + 1 */
  int64_t *sent_off; /* n_sentences + 1, with sentences */
  int64_t *doc_sent; /* n_documents + 1: each document's first sentence, with sentences */
  void *map;
  size_t map_len;
  const unsigned char *tokens;
  char identity[65]; /* hash of what makes a cached index valid for this file */
  mgt_mmidx mm;      /* a Megatron-LM dataset: its tokens (mm.map) instead of map */
} dataset;

static void dataset_close(dataset *ds) {
  mgt_mmidx_close(&ds->mm);
  if (ds->map) munmap(ds->map, ds->map_len);
  mgt_free(ds->doc_off);
  mgt_free(ds->sent_off);
  mgt_free(ds->doc_sent);
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

/* Reads /sentence_offsets and checks that they split the documents into whole sentences. */
static mgt_status read_sentences(hid_t f, dataset *ds) {
  const char *p = ds->info.path;
  const int64_t ns = ds->info.n_sentences, nd = ds->info.n_documents;
  MGT_REQUIRE(ns >= 0 && H5Lexists(f, "sentence_offsets", H5P_DEFAULT) > 0,
              "--data-path %s: not split into sentences (BERT needs mgt preprocess "
              "--split-sentences)",
              p);
  hid_t o = H5Dopen2(f, "sentence_offsets", H5P_DEFAULT);
  MGT_REQUIRE(o >= 0, "--data-path %s: cannot open sentence_offsets", p);
  int64_t n = 0;
  mgt_status st = extent_1d(o, p, "sentence_offsets", &n);
  if (st == MGT_OK && n != ns + 1) {
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--data-path %s: sentence_offsets holds %lld entries, but n_sentences says %lld",
                   p, (long long)n, (long long)ns);
  }
  if (st == MGT_OK)
    st = mgt_calloc(sizeof(int64_t) * (size_t)(ns + 1), "sentence offsets", (void **)&ds->sent_off);
  if (st == MGT_OK)
    st = mgt_calloc(sizeof(int64_t) * (size_t)(nd + 1), "document sentences",
                    (void **)&ds->doc_sent);
  if (st == MGT_OK &&
      H5Dread(o, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->sent_off) < 0) {
    st = MGT_ERROR(MGT_ERR_IO, "--data-path %s: cannot read sentence_offsets", p);
  }
  H5Dclose(o);
  MGT_CHECK(st);
  int ok = ds->sent_off[0] == 0 && ds->sent_off[ns] == ds->info.n_tokens;
  for (int64_t j = 0; ok && j < ns; j++)
    ok = ds->sent_off[j] <= ds->sent_off[j + 1];
  for (int64_t d = 0, j = 0; ok && d <= nd; d++) { /* every document offset a sentence offset */
    while (j < ns && ds->sent_off[j] < ds->doc_off[d])
      j++;
    ok = ds->sent_off[j] == ds->doc_off[d];
    ds->doc_sent[d] = j;
  }
  MGT_REQUIRE(
      ok, "--data-path %s: sentence_offsets do not split the documents into whole sentences", p);
  return MGT_OK;
}

/* The identity of a dataset for its cached indices: size, time and inode of each file and the
   document layout. */
static void identity_of(dataset *ds, const struct stat *const *files, int n) {
  mgt_sha256 h;
  unsigned char dg[32];
  mgt_sha256_init(&h);
  for (int i = 0; i < n; i++) {
    mgt_sha256_update(&h, &files[i]->st_size, sizeof files[i]->st_size);
    mgt_sha256_update(&h, &files[i]->st_mtim, sizeof files[i]->st_mtim);
    mgt_sha256_update(&h, &files[i]->st_ino, sizeof files[i]->st_ino);
  }
  mgt_sha256_update(&h, ds->doc_off, sizeof(int64_t) * (size_t)(ds->info.n_documents + 1));
  mgt_sha256_final(&h, dg);
  mgt_sha256_hex(dg, ds->identity);
}

/* Megatron-LM's PREFIX.bin/.idx: documents from the document index, and every sequence a
   sentence (what Megatron-LM's BERT dataset takes them for). */
static mgt_status megatron_open(const char *prefix, int sentences, dataset *ds) {
  MGT_CHECK(mgt_mmidx_open(prefix, &ds->mm));
  const mgt_mmidx *x = &ds->mm;
  megatron_info(x, &ds->info);
  mgt_status st = mgt_calloc(sizeof(int64_t) * (size_t)(x->n_doc + 1), "document offsets",
                             (void **)&ds->doc_off);
  for (int64_t d = 0; st == MGT_OK && d <= x->n_doc; d++)
    ds->doc_off[d] = x->seq_off[x->doc_seq[d]];
  if (st == MGT_OK && sentences) {
    ds->info.n_sentences = x->n_seq;
    st = mgt_calloc(sizeof(int64_t) * (size_t)(x->n_seq + 1), "sentence offsets",
                    (void **)&ds->sent_off);
    if (st == MGT_OK)
      st = mgt_calloc(sizeof(int64_t) * (size_t)(x->n_doc + 1), "document sentences",
                      (void **)&ds->doc_sent);
    if (st == MGT_OK) {
      memcpy(ds->sent_off, x->seq_off, sizeof(int64_t) * (size_t)(x->n_seq + 1));
      memcpy(ds->doc_sent, x->doc_seq, sizeof(int64_t) * (size_t)(x->n_doc + 1));
    }
  }
  if (st == MGT_OK) {
    const struct stat *files[2] = {&x->idx_st, &x->bin_st};
    identity_of(ds, files, 2);
  }
  if (st != MGT_OK) dataset_close(ds);
  return st;
}

static mgt_status dataset_open(const char *prefix, int sentences, dataset *ds) {
  memset(ds, 0, sizeof *ds);
  if (is_megatron(prefix)) return megatron_open(prefix, sentences, ds);
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
  if (n_off != ds->info.n_documents + 1)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--data-path %s: document_offsets holds %lld entries, but the n_documents "
                  "attribute says %lld documents",
                  p, (long long)n_off, (long long)ds->info.n_documents);
  MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
  MGT_TRY(extent_1d(d, p, "tokens", &n_tok));
  if (n_tok != ds->info.n_tokens)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--data-path %s: tokens holds %lld ids, but the n_tokens attribute says %lld", p,
                  (long long)n_tok, (long long)ds->info.n_tokens);
  H5Dclose(d);
  d = -1;
  MGT_TRY(mgt_calloc(sizeof(int64_t) * (size_t)(ds->info.n_documents + 1), "document offsets",
                     (void **)&ds->doc_off));
  MGT_H5_TRY(H5Dread(o, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->doc_off), p);
  for (int64_t i = 0; i < ds->info.n_documents; i++)
    if (ds->doc_off[i] > ds->doc_off[i + 1])
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: document offsets decrease at document %lld", p,
                    (long long)i);
  if (ds->doc_off[0] != 0 || ds->doc_off[ds->info.n_documents] != ds->info.n_tokens)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: document offsets do not cover the %lld tokens", p,
                  (long long)ds->info.n_tokens);
  if (sentences) MGT_TRY(read_sentences(f, ds));
  if (ds->info.n_tokens > 0) {
    MGT_H5_TRY(d = H5Dopen2(f, "tokens", H5P_DEFAULT), p);
    MGT_H5_TRY(dcpl = H5Dget_create_plist(d), p);
    haddr_t off = H5Dget_offset(d);
    if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0 || off == HADDR_UNDEF)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--data-path %s: tokens are not one contiguous unfiltered dataset", p);
    size_t bytes = (size_t)ds->info.n_tokens * (size_t)ds->info.token_bytes;
    struct stat sb;
    MGT_TRY(mgt_open_file("--data-path", p, &fd));
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < off + bytes)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--data-path %s: the file is shorter than its token dataset (truncated?)", p);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), start = (size_t)off / page * page;
    ds->map_len = bytes + ((size_t)off - start);
    ds->map = mmap(NULL, ds->map_len, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (ds->map == MAP_FAILED) {
      ds->map = NULL;
      MGT_GOTO_FAIL(MGT_ERR_IO, "--data-path %s: mmap failed: %s", p, strerror(errno));
    }
    ds->tokens = (const unsigned char *)ds->map + ((size_t)off - start);
    const struct stat *files[1] = {&sb};
    identity_of(ds, files, 1);
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
  if (ds->mm.map) { /* any of Megatron-LM's dtypes; what no id can be reads as -1 */
    const int64_t v = mgt_mmidx_token(&ds->mm, i);
    return v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
  }
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
  int fd;
  MGT_CHECK(mgt_create_fd("cache", tmp, 0, &fd));
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

/* Maps a cache file read-only. */
static mgt_status map_file(const char *path, void **mem, size_t *len) {
  int fd; /* not a regular file (a FIFO is never waited on): damaged, rebuilt over it */
  MGT_CHECK(mgt_open_file("cache", path, &fd));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(index_header)) {
    close(fd);
    MGT_FAIL(MGT_ERR_IO, "%s: too short for a cached index", path);
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) MGT_FAIL(MGT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
  *mem = m;
  *len = (size_t)st.st_size;
  return MGT_OK;
}

/* A block cached beside a dataset (a sample index, a BERT samples mapping): how to build it
   and how to tell that a file holds a whole, valid one. */
typedef struct cache_ops {
  const char *what;
  const void *ctx;
  mgt_status (*build)(const void *ctx, void **mem, size_t *len);
  int (*valid)(const void *ctx, const void *mem, size_t len);
} cache_ops;

/* DATASET.h5.<suffix>-<16 hex digits of the hash of key>. */
static void cache_path(const dataset *ds, const char *suffix, const char *key, char *path,
                       size_t n) {
  char hex[65];
  mgt_sha256 h;
  unsigned char dg[32];
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, key, strlen(key));
  mgt_sha256_final(&h, dg);
  mgt_sha256_hex(dg, hex);
  snprintf(path, n, "%s.%s-%.16s", ds->info.path, suffix, hex);
}

/* Removes the caches' temporary files (DATASET.h5.<suffix>-<hash>.tmp.<pid>) that a killed
   run left beside the dataset: a sample index can take gigabytes. One is in use while its
   process lives on this host or while it is being written (on another node). */
static void remove_stale_caches(const char *dataset_path, FILE *log) {
  char dir[MGT_PATH_MAX], base[MGT_PATH_MAX], full[2 * MGT_PATH_MAX + 2];
  snprintf(dir, sizeof dir, "%s", dataset_path);
  snprintf(base, sizeof base, "%s", dataset_path);
  const char *d = dirname(dir), *b = basename(base);
  const size_t bl = strlen(b);
  DIR *dh = opendir(d);
  if (!dh) return;
  struct dirent *e;
  while ((e = readdir(dh))) {
    const char *t = strstr(e->d_name, ".tmp.");
    if (strncmp(e->d_name, b, bl) != 0 || e->d_name[bl] != '.' || !t) continue;
    char *end = NULL;
    const long long pid = strtoll(t + 5, &end, 10);
    if (end == t + 5 || *end || mgt_pid_alive(pid)) continue;
    snprintf(full, sizeof full, "%s/%s", d, e->d_name);
    mgt_remove_stale(full, 600, log);
  }
  closedir(dh);
}

/* The block at `path`: rank 0 makes sure a whole, valid cache exists (rebuilding a damaged
   one), then every rank maps it; where it cannot be written every rank builds its own.
   *mapped says which. Collective over world. */
static mgt_status cached_block(const char *path, const cache_ops *ops, const dataset *ds,
                               MPI_Comm world, FILE *log, void **mem, size_t *len, int *mapped) {
  *mem = NULL, *len = 0, *mapped = 0;
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  int cached = 0;
  mgt_status st = MGT_OK;
  if (rank == 0) {
    remove_stale_caches(ds->info.path, log);
    if (access(path, F_OK) == 0) {
      void *m = NULL;
      size_t l = 0;
      cached = map_file(path, &m, &l) == MGT_OK && ops->valid(ops->ctx, m, l);
      if (m) munmap(m, l);
      if (!cached) {
        mgt_error_clear();
        if (log)
          fprintf(log, "note: the %s %s is damaged or incomplete: rebuilding it\n", ops->what,
                  path);
      }
    }
    if (!cached) {
      void *m = NULL;
      size_t l = 0;
      st = ops->build(ops->ctx, &m, &l);
      if (st == MGT_OK) {
        cached = write_cache(path, m, l) == MGT_OK;
        if (!cached) {
          mgt_error_clear();
          if (log)
            fprintf(log, "note: cannot cache the %s beside %s; every rank builds it in memory\n",
                    ops->what, ds->info.path);
        } else if (log) {
          fprintf(log, "built %s %s\n", ops->what, path);
        }
        mgt_free(m);
      }
    }
  }
  MGT_CHECK(mgt_mpi_agree(world, st));
  MGT_MPI(MPI_Bcast(&cached, 1, MPI_INT, 0, world));
  if (cached) {
    st = map_file(path, mem, len);
    *mapped = st == MGT_OK;
    if (st == MGT_OK && !ops->valid(ops->ctx, *mem, *len)) {
      st = MGT_ERROR(MGT_ERR_INPUT, "%s: the %s changed while the job started (another job?)", path,
                     ops->what);
    }
  } else {
    st = ops->build(ops->ctx, mem, len);
  }
  return mgt_mpi_agree(world, st);
}

/* What the index of one split depends on. */
typedef struct index_args {
  const dataset *ds;
  int split, seq;
  int64_t a, b, needed;
  uint64_t seed;
} index_args;

static mgt_status index_build_cb(const void *ctx, void **mem, size_t *len) {
  const index_args *x = ctx;
  return build_index(x->ds, x->a, x->b, x->split, x->needed, x->seq, x->seed, mem, len);
}

static int index_valid_cb(const void *ctx, const void *mem, size_t len) {
  const index_args *x = ctx;
  return index_valid(x->ds, mem, len, x->a, x->b, x->seq);
}

/* The index of one split, from the cache beside the dataset or built by world rank 0.
   Collective over world. */
static mgt_status split_index_get(const dataset *ds, int split, int64_t a, int64_t b,
                                  int64_t needed, int seq, uint64_t seed, MPI_Comm world, FILE *log,
                                  split_index *ix) {
  memset(ix, 0, sizeof *ix);
  ix->ds = ds;
  /* the cache name hashes everything the index depends on */
  char key[512], path[MGT_PATH_MAX + 128];
  snprintf(key, sizeof key, "v3 %s %d %lld %lld %lld %d %llu", ds->identity, split, (long long)a,
           (long long)b, (long long)needed, seq, (unsigned long long)seed);
  cache_path(ds, "index", key, path, sizeof path);
  const index_args args = {ds, split, seq, a, b, needed, seed};
  const cache_ops ops = {"sample index", &args, index_build_cb, index_valid_cb};
  mgt_status st = cached_block(path, &ops, ds, world, log, &ix->mem, &ix->mem_len, &ix->mapped);
  if (st != MGT_OK) {
    index_free(ix);
    return st;
  }
  index_views(ix);
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

/* ---- blending ---- */

/* Which dataset, and which of its samples, each sample of a source is. */
typedef struct blending {
  int32_t *which;  /* sample -> dataset (NULL with one dataset) */
  int64_t *within; /* sample -> sample of that dataset */
  int64_t n;
  int64_t *counts; /* the samples each dataset gives */
} blending;

/* Blending by weight: sample i goes to the dataset furthest behind its share,
   w_d * (i + 1) - taken_d (ties to the lower index), as Megatron-LM's blendable dataset. */
static mgt_status blending_make(const double *w, int n, int64_t needed, blending *bl) {
  memset(bl, 0, sizeof *bl);
  MGT_CHECK(mgt_calloc(sizeof *bl->counts * (size_t)n, "blending counts", (void **)&bl->counts));
  if (n == 1) {
    bl->counts[0] = needed;
    return MGT_OK;
  }
  bl->n = needed;
  MGT_CHECK(
      mgt_calloc(sizeof(int32_t) * ((size_t)needed + 1), "blending index", (void **)&bl->which));
  MGT_CHECK(
      mgt_calloc(sizeof(int64_t) * ((size_t)needed + 1), "blending index", (void **)&bl->within));
  for (int64_t i = 0; i < needed; i++) {
    int best = 0;
    double be = -1e300;
    for (int d = 0; d < n; d++) {
      double e = w[d] * (double)(i + 1) - (double)bl->counts[d];
      if (e > be) be = e, best = d;
    }
    bl->which[i] = best;
    bl->within[i] = bl->counts[best]++;
  }
  return MGT_OK;
}

static mgt_status blending_at(const blending *bl, uint64_t i, int *d, int64_t *k) {
  *d = 0;
  *k = (int64_t)i;
  if (!bl->which) return MGT_OK;
  MGT_REQUIRE((int64_t)i < bl->n, "sample %llu is beyond the %lld planned for this run",
              (unsigned long long)i, (long long)bl->n);
  *d = bl->which[i];
  *k = bl->within[i];
  return MGT_OK;
}

static void blending_free(blending *bl) {
  mgt_free(bl->which);
  mgt_free(bl->within);
  mgt_free(bl->counts);
  memset(bl, 0, sizeof *bl);
}

/* Documents [a, b) of split 0 (train), 1 (valid) or 2 (test) of ds. */
static void split_docs(const dataset *ds, int split, const double frac[3], int64_t *a, int64_t *b) {
  const int64_t nd = ds->info.n_documents;
  const double c1 = frac[0], c2 = frac[0] + frac[1];
  const int64_t b1 = (int64_t)(c1 * (double)nd + 0.5), b2 = (int64_t)(c2 * (double)nd + 0.5);
  *a = split == 0 ? 0 : (split == 1 ? b1 : b2);
  *b = split == 0 ? b1 : (split == 1 ? b2 : nd);
}

/* ---- blended data source ---- */

typedef struct opened opened;

typedef struct source {
  opened *op; /* shared with the other source of the run */
  int n;      /* datasets */
  split_index *ix;
  blending bl;
  int seq;
} source;

static mgt_status source_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  source *s = ctx;
  for (int r = 0; r < n; r++) {
    int d;
    int64_t k;
    MGT_CHECK(blending_at(&s->bl, first + (uint64_t)r, &d, &k));
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
  blending_free(&s->bl);
  mgt_free(s);
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
      if (!(*end == 0 && end != items[2 * i] && w > 0 && isfinite(w)))
        MGT_GOTO_FAIL(MGT_ERR_INPUT,
                      "--data-path: value %d, '%.64s', is not a positive weight (pairs of weight "
                      "and prefix)",
                      2 * i + 1, items[2 * i]);
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
  st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory reading --data-path");
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
    if (!strcmp(info.format, "megatron") && *vocab_size == 0 && i == spec->n - 1)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--data-path %s is a Megatron-LM dataset, which does not record its "
                    "vocabulary: give --vocab-file (and --merge-file) or --vocab-size",
                    info.path);
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
  MGT_TRY(mgt_calloc(sizeof(split_index) * (size_t)spec->n, "sample indices", (void **)&s->ix));
  MGT_TRY(blending_make(spec->w, spec->n, needed, &s->bl));
  for (int d = 0; d < spec->n; d++) {
    int64_t a, b, need = s->bl.counts[d] > 0 ? s->bl.counts[d] : 1;
    split_docs(&op->ds[d], split, frac, &a, &b);
    MGT_TRY(split_index_get(&op->ds[d], split, a, b, need, cfg->seq_length, cfg->seed, world, log,
                            &s->ix[d]));
  }
  out->ctx = s;
  out->get = source_get;
  out->destroy = source_destroy;
  return MGT_OK;
done:
  source_destroy(s);
  return st;
}

/* ---- BERT samples ---- */

/* A samples mapping (io/data/bert_data.h) of one split of one dataset: rows of (first sentence, end
   sentence, target length), cached beside the dataset as an index_header (magic below,
   n_samples rows, seq the sequence length) followed by the rows. */
static const char BERT_MAGIC[8] = "MGTBMP1";

typedef struct bert_map {
  const dataset *ds;
  const int64_t *rows;
  int64_t n;
  void *mem;
  size_t mem_len;
  int mapped;
} bert_map;

static void bert_map_free(bert_map *bm) {
  if (bm->mem) {
    if (bm->mapped)
      munmap(bm->mem, bm->mem_len);
    else
      mgt_free(bm->mem);
  }
  memset(bm, 0, sizeof *bm);
}

static mgt_status bert_map_build(const dataset *ds, int64_t a, int64_t b, int64_t needed,
                                 const mgt_config *cfg, void **out, size_t *len) {
  const mgt_bert_corpus corpus = {ds->sent_off, ds->doc_sent};
  int64_t *rows = NULL, n = 0;
  MGT_CHECK(mgt_bert_mapping(&corpus, a, b, needed, cfg->seq_length - 3, cfg->short_seq_prob,
                             cfg->bert_no_binary_head ? 1 : 2, cfg->seed, ds->info.path, &rows,
                             &n));
  const size_t bytes = sizeof(index_header) + sizeof(int64_t) * 3 * (size_t)n;
  unsigned char *mem = NULL;
  mgt_status st = mgt_calloc(bytes, "BERT samples mapping", (void **)&mem);
  if (st == MGT_OK) {
    index_header *h = (index_header *)mem;
    memcpy(h->magic, BERT_MAGIC, 8);
    h->n_samples = n;
    h->seq = cfg->seq_length;
    h->bytes = bytes;
    memcpy(mem + sizeof *h, rows, sizeof(int64_t) * 3 * (size_t)n);
    h->checksum = body_checksum(mem, bytes);
    *out = mem;
    *len = bytes;
  }
  free(rows);
  return st;
}

/* Whether mem is a whole, undamaged mapping whose rows stay inside sentences [lo, hi) and
   fit samples of seq positions. */
static int bert_map_valid(const void *mem, size_t len, int64_t lo, int64_t hi, int seq) {
  const index_header *h = mem;
  if (len < sizeof *h || memcmp(h->magic, BERT_MAGIC, 8) != 0 || h->bytes != len || h->seq != seq ||
      h->n_samples < 1 || h->n_samples > (1ll << 40) ||
      len != sizeof *h + sizeof(int64_t) * 3 * (size_t)h->n_samples ||
      body_checksum(mem, len) != h->checksum)
    return 0;
  const int64_t *r = (const int64_t *)((const unsigned char *)mem + sizeof *h);
  for (int64_t i = 0; i < h->n_samples; i++, r += 3)
    if (r[0] < lo || r[1] <= r[0] || r[1] > hi || r[2] < 2 || r[2] > seq - 3) return 0;
  return 1;
}

static void bert_map_views(bert_map *bm) {
  const index_header *h = bm->mem;
  bm->n = h->n_samples;
  bm->rows = (const int64_t *)((const unsigned char *)bm->mem + sizeof *h);
}

typedef struct bert_map_args {
  const dataset *ds;
  const mgt_config *cfg;
  int64_t a, b, needed;
} bert_map_args;

static mgt_status bert_map_build_cb(const void *ctx, void **mem, size_t *len) {
  const bert_map_args *x = ctx;
  return bert_map_build(x->ds, x->a, x->b, x->needed, x->cfg, mem, len);
}

static int bert_map_valid_cb(const void *ctx, const void *mem, size_t len) {
  const bert_map_args *x = ctx;
  return bert_map_valid(mem, len, x->ds->doc_sent[x->a], x->ds->doc_sent[x->b], x->cfg->seq_length);
}

/* The mapping of documents [a, b), cached beside the dataset as the GPT index is. Collective. */
static mgt_status bert_map_get(const dataset *ds, int split, int64_t a, int64_t b, int64_t needed,
                               const mgt_config *cfg, MPI_Comm world, FILE *log, bert_map *bm) {
  memset(bm, 0, sizeof *bm);
  bm->ds = ds;
  char key[512], path[MGT_PATH_MAX + 128];
  snprintf(key, sizeof key, "bert v1 %s %d %lld %lld %lld %d %.17g %d %llu", ds->identity, split,
           (long long)a, (long long)b, (long long)needed, cfg->seq_length, cfg->short_seq_prob,
           cfg->bert_no_binary_head, (unsigned long long)cfg->seed);
  cache_path(ds, "bertmap", key, path, sizeof path);
  const bert_map_args args = {ds, cfg, a, b, needed};
  const cache_ops ops = {"BERT samples mapping", &args, bert_map_build_cb, bert_map_valid_cb};
  mgt_status st = cached_block(path, &ops, ds, world, log, &bm->mem, &bm->mem_len, &bm->mapped);
  if (st != MGT_OK) {
    bert_map_free(bm);
    return st;
  }
  bert_map_views(bm);
  return MGT_OK;
}

typedef struct bert_source {
  opened *op;
  int n;
  bert_map *map;
  blending bl;
  mgt_bert_vocab vocab;
  uint8_t *continuation;
  double mask_prob;
  int binary;
  uint64_t seed;
} bert_source;

static int32_t bert_token(const void *ctx, int64_t i) { return token_at(ctx, i); }

static mgt_status bert_source_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  bert_source *s = ctx;
  for (int r = 0; r < n; r++) {
    int d;
    int64_t k;
    MGT_CHECK(blending_at(&s->bl, first + (uint64_t)r, &d, &k));
    const bert_map *bm = &s->map[d];
    const dataset *ds = bm->ds;
    MGT_REQUIRE(k < bm->n, "sample %lld is beyond the %lld in the BERT samples mapping of %s",
                (long long)k, (long long)bm->n, ds->info.path);
    int32_t *row = out + (size_t)r * mgt_bert_row_ints(T);
    const mgt_bert_corpus corpus = {ds->sent_off, ds->doc_sent};
    MGT_CHECK(mgt_bert_sample(&corpus, bert_token, ds, bm->rows + 3 * k, &s->vocab, T, s->mask_prob,
                              s->binary, s->seed, (uint64_t)k, row + MGT_BERT_TOKENS * T,
                              row + MGT_BERT_TYPES * T, row + MGT_BERT_LABELS * T,
                              row + mgt_bert_length_at(T), row + mgt_bert_random_at(T)));
    const int64_t V = ds->info.vocab_size; /* the attribute may lie about the data */
    for (int t = 0; t < T; t++)
      MGT_REQUIRE(row[t] >= 0 && row[t] < V,
                  "--data-path %s: token id %lld in BERT sample %lld is outside its vocabulary of "
                  "%lld",
                  ds->info.path, (long long)(uint32_t)row[t], (long long)k, (long long)V);
  }
  return MGT_OK;
}

static void bert_source_destroy(void *ctx) {
  bert_source *s = ctx;
  if (!s) return;
  if (s->map)
    for (int d = 0; d < s->n; d++)
      bert_map_free(&s->map[d]);
  opened_release(s->op);
  mgt_free(s->map);
  blending_free(&s->bl);
  mgt_free(s->continuation);
  mgt_free(s);
}

/* [CLS], [SEP], [MASK], [PAD] and the "##" pieces of a WordPiece vocabulary. */
static mgt_status bert_vocab(const mgt_tokenizer *tok, bert_source *s) {
  const int V = mgt_tok_vocab_size(tok);
  MGT_CHECK(mgt_calloc((size_t)V, "vocabulary flags", (void **)&s->continuation));
  mgt_bert_vocab v = {mgt_tok_special(tok, "[CLS]"),
                      mgt_tok_special(tok, "[SEP]"),
                      mgt_tok_special(tok, "[MASK]"),
                      mgt_tok_special(tok, "[PAD]"),
                      V,
                      s->continuation};
  for (int i = 0; i < V; i++) {
    const char *p;
    size_t l;
    MGT_CHECK(mgt_tok_piece(tok, i, &p, &l));
    s->continuation[i] = l >= 2 && p[0] == '#' && p[1] == '#';
  }
  MGT_REQUIRE(v.cls >= 0 && v.sep >= 0 && v.mask >= 0 && v.pad >= 0,
              "--vocab-file: BERT needs [CLS], [SEP], [MASK] and [PAD] in the vocabulary");
  s->vocab = v;
  return MGT_OK;
}

static mgt_status make_bert_source(opened *op, const data_spec *spec, int split,
                                   const double frac[3], int64_t needed, const mgt_config *cfg,
                                   const mgt_tokenizer *tok, MPI_Comm world, FILE *log,
                                   mgt_data *out) {
  bert_source *s = NULL;
  MGT_CHECK(mgt_calloc(sizeof *s, "data source", (void **)&s));
  mgt_status st = MGT_OK;
  s->op = op;
  op->refs++;
  s->n = spec->n;
  s->mask_prob = cfg->mask_prob;
  s->binary = mgt_model_of(cfg).head == MGT_HEAD_MLM_SOP;
  s->seed = cfg->seed;
  MGT_TRY(bert_vocab(tok, s));
  MGT_TRY(mgt_calloc(sizeof(bert_map) * (size_t)spec->n, "BERT mappings", (void **)&s->map));
  MGT_TRY(blending_make(spec->w, spec->n, needed, &s->bl));
  for (int d = 0; d < spec->n; d++) {
    int64_t a, b, need = s->bl.counts[d] > 0 ? s->bl.counts[d] : 1;
    split_docs(&op->ds[d], split, frac, &a, &b);
    MGT_TRY(bert_map_get(&op->ds[d], split, a, b, need, cfg, world, log, &s->map[d]));
  }
  out->ctx = s;
  out->get = bert_source_get;
  out->destroy = bert_source_destroy;
  return MGT_OK;
done:
  bert_source_destroy(s);
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
  mgt_model_desc desc;
  MGT_CHECK(mgt_model_describe(cfg, &desc));
  const int samples = desc.input == MGT_INPUT_SAMPLES; /* BERT's, not windows of tokens */
  MGT_TRY(mgt_calloc(sizeof *op, "datasets", (void **)&op));
  op->refs = 1; /* this function's own reference, dropped at the end */
  MGT_TRY(parse_data_path(cfg->data_path, &spec));
  MGT_TRY(mgt_calloc(sizeof *op->ds * (size_t)spec->n, "datasets", (void **)&op->ds));
  if (cfg->vocab_file[0]) {
    MGT_TRY(mgt_tok_open(cfg->tokenizer_type, cfg->vocab_file, cfg->merge_file, &tok));
  }
  for (int d = 0; d < spec->n; d++) {
    MGT_TRY(dataset_open(spec->prefix[d], samples, &op->ds[d]));
    op->n = d + 1;
    mgt_dataset_info *in = &op->ds[d].info;
    if (!in->vocab_hash[0]) in->vocab_size = cfg->vocab_size; /* Megatron-LM's: the run's ids */
    if (tok && in->vocab_hash[0] && strcmp(in->vocab_hash, mgt_tok_hash(tok)) != 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--data-path %s was tokenized with another vocabulary than --vocab-file %s "
                    "(hash %.12s, expected %.12s)",
                    in->path, cfg->vocab_file, in->vocab_hash, mgt_tok_hash(tok));
    if (in->max_token_id >= cfg->vocab_size || in->vocab_size > cfg->vocab_size)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--data-path %s: vocabulary of %lld ids (largest used %lld) does not fit "
                    "--vocab-size %d",
                    in->path, (long long)in->vocab_size, (long long)in->max_token_id,
                    cfg->vocab_size);
  }
  double frac[3];
  MGT_TRY(mgt_split_parse(cfg->split, frac));
  int64_t need_train = cfg->train_iters * (int64_t)cfg->global_batch_size;
  if (need_train < 1) need_train = 1;
  const int64_t need_valid = (int64_t)cfg->eval_iters * cfg->global_batch_size;
  const int want_valid = cfg->eval_iters > 0 && frac[1] > 0;
  if (samples) {
    if (!tok || mgt_tok_type(tok) < MGT_TOKENIZER_BERT_LOWER)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--model bert needs the WordPiece --vocab-file the datasets were made with");
    MGT_TRY(make_bert_source(op, spec, 0, frac, need_train, cfg, tok, world, log, train));
    if (want_valid)
      MGT_TRY(make_bert_source(op, spec, 1, frac, need_valid, cfg, tok, world, log, valid));
  } else {
    MGT_TRY(make_source(op, spec, 0, frac, need_train, cfg, world, log, train));
    if (want_valid) MGT_TRY(make_source(op, spec, 1, frac, need_valid, cfg, world, log, valid));
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
