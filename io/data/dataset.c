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
#include "dataset_impl.h"

/* ---- dataset files ---- */

/* A dataset of the file p whose elements the file holds (mgt_h5_open_dataset). */
static mgt_status open_ds(hid_t f, const char *name, const char *p, hid_t *d) {
  char what[600];
  snprintf(what, sizeof what, "--data-path %.580s", p);
  MGT_CHECK(mgt_h5_open_dataset(f, name, what, d));
  MGT_REQUIRE(*d >= 0, "--data-path %s: no dataset %s", p, name);
  return MGT_OK;
}

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
  (void)MGT_H5_NO_LOCK(fapl); /* readers need no lock: files are published by rename */
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
  snprintf(info->dtype, sizeof info->dtype, "%s",
           x->dtype == MGT_MM_D64 ? (x->elem == 4 ? "float32" : "float64")
                                  : mgt_mmidx_dtype_name(x->dtype));
  info->eod_id = info->max_token_id = -1;
  info->n_tokens = x->seq_off[x->n_seq];
  info->n_documents = x->n_doc;
  /* split into sentences where a document has several sequences (an empty one has none) */
  int split = 0;
  for (int64_t d = 0; d < x->n_doc && !split; d++)
    split = x->doc_seq[d + 1] - x->doc_seq[d] > 1;
  info->n_sentences = split ? x->n_seq : -1;
  info->token_bytes = x->elem;
}

/* Megatron-LM's files of a loss mask beside PREFIX's tokens. */
static void mask_prefix(const char *prefix, char *out, size_t n) {
  snprintf(out, n, "%s_loss_mask", prefix);
}

mgt_status mgt_dataset_info_read(const char *prefix, mgt_dataset_info *info) {
  memset(info, 0, sizeof *info);
  info->n_trained = -1;
  if (is_megatron(prefix)) {
    mgt_mmidx x;
    char mp[MGT_PATH_MAX + 16];
    MGT_CHECK(mgt_mmidx_open(prefix, &x));
    megatron_info(&x, info);
    mgt_mmidx_close(&x);
    mask_prefix(prefix, mp, sizeof mp);
    info->has_mask = mgt_mmidx_exists(mp);
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
  if (strcmp(format, "megatron-c tokens 1") != 0 && strcmp(format, "megatron-c tokens 2") != 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: format '%s' is not a megatron-c token dataset", p,
                  format);
  info->has_mask = format[sizeof "megatron-c tokens " - 1] == '2';
  if (info->has_mask) {
    MGT_TRY(
        mgt_h5_read_str(f, "chat_template", info->chat_template, sizeof info->chat_template, p));
    MGT_TRY(mgt_h5_read_i64(f, "n_trained", &info->n_trained, p));
  }
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
  MGT_TRY(open_ds(f, "tokens", p, &d));
  MGT_H5_TRY(t = H5Dget_type(d), p);
  info->token_bytes = (int)H5Tget_size(t);
  snprintf(info->dtype, sizeof info->dtype, "uint%d", 8 * info->token_bytes);
  if (complete != 1 || H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE ||
      (info->token_bytes != 2 && info->token_bytes != 4) || info->n_tokens < 0 ||
      info->n_documents < 0 || info->vocab_size < 1 || info->vocab_size > (1 << 30) ||
      info->max_token_id >= info->vocab_size) {
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--data-path %s: inconsistent attributes (complete %lld, %d-byte tokens, max "
                   "id %lld, vocabulary %lld)",
                   p, (long long)complete, info->token_bytes, (long long)info->max_token_id,
                   (long long)info->vocab_size);
  } else if (H5Tget_order(t) != H5T_ORDER_LE) { /* the ids are read from the file's bytes */
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "--data-path %s: tokens are stored big-endian; megatron-c reads little-endian "
                   "ids (rewrite them, e.g. h5py's astype('<u%d'))",
                   p, info->token_bytes);
  }
done:
  if (t >= 0) H5Tclose(t);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return st;
}

void ds_dataset_close(dataset *ds) {
  mgt_mmidx_close(&ds->mm);
  mgt_mmidx_close(&ds->mm_mask);
  if (ds->map) munmap(ds->map, ds->map_len);
  if (ds->mask_map) munmap(ds->mask_map, ds->mask_map_len);
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
  /* every element stored (as mgt preprocess writes them, uncompressed): an extent read into
     memory is then bounded by the file's size, not by a number in it */
  hid_t t = H5Dget_type(d);
  const size_t es = t >= 0 ? H5Tget_size(t) : 0;
  if (t >= 0) H5Tclose(t);
  MGT_REQUIRE(es > 0 && dims[0] <= (hsize_t)(INT64_MAX / (int64_t)es) &&
                  H5Dget_storage_size(d) >= dims[0] * es,
              "--data-path %s: %s holds %llu elements but stores fewer (compressed or never "
              "written)",
              p, name, (unsigned long long)dims[0]);
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
  hid_t o = -1;
  MGT_CHECK(open_ds(f, "sentence_offsets", p, &o));
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
  char mp[MGT_PATH_MAX + 16];
  mask_prefix(prefix, mp, sizeof mp);
  if (st == MGT_OK && mgt_mmidx_exists(mp)) { /* the same sequences, a byte each */
    st = mgt_mmidx_open(mp, &ds->mm_mask);
    const mgt_mmidx *y = &ds->mm_mask;
    if (st == MGT_OK && (y->dtype != MGT_MM_U8 || y->n_seq != x->n_seq ||
                         memcmp(y->seq_off, x->seq_off, sizeof(int64_t) * (size_t)(x->n_seq + 1))))
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "--data-path %s: %s.idx is not a uint8 loss mask of the same sequences",
                     prefix, mp);
    if (st == MGT_OK) ds->mask = y->map, ds->info.has_mask = 1;
  }
  if (st == MGT_OK) {
    const struct stat *files[2] = {&x->idx_st, &x->bin_st};
    identity_of(ds, files, 2);
  }
  if (st != MGT_OK) ds_dataset_close(ds);
  return st;
}

/* bytes of the file at offset off, mapped read-only (from the page holding off): *at is their
   start, *map and *len what to unmap. */
static mgt_status map_at(int fd, haddr_t off, size_t bytes, const char *p, void **map, size_t *len,
                         const unsigned char **at) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), start = (size_t)off / page * page;
  *len = bytes + ((size_t)off - start);
  *map = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, (off_t)start);
  if (*map == MAP_FAILED) {
    *map = NULL;
    MGT_FAIL(MGT_ERR_IO, "--data-path %s: mmap failed: %s", p, strerror(errno));
  }
  *at = (const unsigned char *)*map + ((size_t)off - start);
  return MGT_OK;
}

/* The loss_mask dataset of an open HDF5 file, mapped as the tokens are. */
static mgt_status map_mask(hid_t f, int fd, const char *p, const struct stat *sb, dataset *ds) {
  mgt_status st = MGT_OK;
  hid_t d = -1, dcpl = -1, t = -1;
  int64_t n = 0;
  if (H5Lexists(f, "loss_mask", H5P_DEFAULT) <= 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--data-path %s: format 2 (conversations) without its loss_mask",
                  p);
  MGT_TRY(open_ds(f, "loss_mask", p, &d));
  MGT_TRY(extent_1d(d, p, "loss_mask", &n));
  MGT_H5_TRY(t = H5Dget_type(d), p);
  MGT_H5_TRY(dcpl = H5Dget_create_plist(d), p);
  const haddr_t off = H5Dget_offset(d);
  if (n != ds->info.n_tokens || H5Tget_size(t) != 1 || H5Pget_layout(dcpl) != H5D_CONTIGUOUS ||
      H5Pget_nfilters(dcpl) != 0 || off == HADDR_UNDEF || (uint64_t)sb->st_size < off + (uint64_t)n)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--data-path %s: loss_mask is not one contiguous byte per token of the file", p);
  MGT_TRY(map_at(fd, off, (size_t)n, p, &ds->mask_map, &ds->mask_map_len, &ds->mask));
done:
  if (t >= 0) H5Tclose(t);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (d >= 0) H5Dclose(d);
  return st;
}

mgt_status ds_dataset_open(const char *prefix, int sentences, dataset *ds) {
  memset(ds, 0, sizeof *ds);
  if (is_megatron(prefix)) return megatron_open(prefix, sentences, ds);
  MGT_CHECK(mgt_dataset_info_read(prefix, &ds->info));
  const char *p = ds->info.path;
  mgt_status st = MGT_OK;
  hid_t f = -1, d = -1, o = -1, dcpl = -1;
  int fd = -1;
  MGT_H5_TRY(f = open_ro(p), p);
  MGT_TRY(open_ds(f, "document_offsets", p, &o));
  /* sizes from attributes are checked against the datasets before they size a buffer */
  int64_t n_off = 0, n_tok = 0;
  MGT_TRY(extent_1d(o, p, "document_offsets", &n_off));
  if (n_off != ds->info.n_documents + 1)
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--data-path %s: document_offsets holds %lld entries, but the n_documents "
                  "attribute says %lld documents",
                  p, (long long)n_off, (long long)ds->info.n_documents);
  MGT_TRY(open_ds(f, "tokens", p, &d));
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
    MGT_TRY(open_ds(f, "tokens", p, &d));
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
    MGT_TRY(map_at(fd, off, bytes, p, &ds->map, &ds->map_len, &ds->tokens));
    const struct stat *files[1] = {&sb};
    identity_of(ds, files, 1);
    if (ds->info.has_mask) MGT_TRY(map_mask(f, fd, p, &sb, ds));
  }
done:
  if (fd >= 0) close(fd);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (d >= 0) H5Dclose(d);
  if (o >= 0) H5Dclose(o);
  if (f >= 0) H5Fclose(f);
  if (st != MGT_OK) ds_dataset_close(ds);
  return st;
}

int32_t ds_token_at(const dataset *ds, int64_t i) {
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

/* ---- blending ---- */

/* Blending by weight: sample i goes to the dataset furthest behind its share,
   w_d * max(i, 1) - taken_d (ties to the lower index), as Megatron-LM's
   build_blending_indices (helpers.cpp). */
mgt_status ds_blending_make(const double *w, int n, int64_t needed, blending *bl) {
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
      double e = w[d] * (double)(i > 1 ? i : 1) - (double)bl->counts[d];
      if (e > be) be = e, best = d;
    }
    bl->which[i] = best;
    bl->within[i] = bl->counts[best]++;
  }
  return MGT_OK;
}

mgt_status ds_blending_at(const blending *bl, uint64_t i, int *d, int64_t *k) {
  *d = 0;
  *k = (int64_t)i;
  if (!bl->which) return MGT_OK;
  MGT_REQUIRE((int64_t)i < bl->n, "sample %llu is beyond the %lld planned for this run",
              (unsigned long long)i, (long long)bl->n);
  *d = bl->which[i];
  *k = bl->within[i];
  return MGT_OK;
}

void ds_blending_free(blending *bl) {
  mgt_free(bl->which);
  mgt_free(bl->within);
  mgt_free(bl->counts);
  memset(bl, 0, sizeof *bl);
}

/* Documents [a, b) of split 0 (train), 1 (valid) or 2 (test) of ds. */
void ds_split_docs(const dataset *ds, int split, const double frac[3], int64_t *a, int64_t *b) {
  const int64_t nd = ds->info.n_documents;
  const double c1 = frac[0], c2 = frac[0] + frac[1];
  const int64_t b1 = (int64_t)(c1 * (double)nd + 0.5), b2 = (int64_t)(c2 * (double)nd + 0.5);
  *a = split == 0 ? 0 : (split == 1 ? b1 : b2);
  *b = split == 0 ? b1 : (split == 1 ? b2 : nd);
}

/* ---- blended data source ---- */

typedef struct source {
  opened *op; /* shared with the other source of the run */
  int n;      /* datasets */
  split_index *ix;
  pack_index *px; /* --sft: packed documents instead of windows */
  int train_on_prompt;
  blending bl;
  int seq;
} source;

static mgt_status source_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  source *s = ctx;
  for (int r = 0; r < n; r++) {
    int d;
    int64_t k;
    MGT_CHECK(ds_blending_at(&s->bl, first + (uint64_t)r, &d, &k));
    if (s->px) {
      MGT_REQUIRE(k < s->px[d].n_samples, "sample %lld is beyond the %lld packed of %s",
                  (long long)k, (long long)s->px[d].n_samples, s->px[d].ds->info.path);
      MGT_CHECK(ds_pack_read(&s->px[d], k, T, s->train_on_prompt, out + (size_t)r * (T + 1)));
      continue;
    }
    const split_index *ix = &s->ix[d];
    MGT_REQUIRE(k < ix->n_samples, "sample %lld is beyond the %lld in the index of %s",
                (long long)k, (long long)ix->n_samples, ix->ds->info.path);
    int32_t *row = out + (size_t)r * (T + 1);
    ds_read_sample(ix, ix->shuffle[k], T, row);
    const int64_t V = ix->ds->info.vocab_size; /* the attribute may lie about the data */
    for (int t = 0; t <= T; t++)
      MGT_REQUIRE(row[t] >= 0 && row[t] < V,
                  "--data-path %s: token id %lld in sample %lld is outside its vocabulary of %lld",
                  ix->ds->info.path, (long long)(uint32_t)row[t], (long long)k, (long long)V);
  }
  return MGT_OK;
}

static void source_destroy(void *ctx) {
  source *s = ctx;
  if (!s) return;
  if (s->ix)
    for (int d = 0; d < s->n; d++)
      ds_index_free(&s->ix[d]);
  if (s->px)
    for (int d = 0; d < s->n; d++)
      ds_pack_free(&s->px[d]);
  ds_opened_release(s->op);
  mgt_free(s->ix);
  mgt_free(s->px);
  ds_blending_free(&s->bl);
  mgt_free(s);
}

/* ---- the training sources ---- */

static void spec_free(data_spec *spec) {
  if (!spec) return;
  free(spec->w);
  free(spec->prefix);
  free(spec->buf);
  free(spec);
}

/* Whether v is a number, as Megatron-LM tells a weight from a prefix (Python's float()). */
static int is_number(const char *v) {
  char *end;
  errno = 0;
  (void)strtod(v, &end);
  return end != v && *end == 0;
}

/* The blend of `flag`: one prefix; pairs of weight and prefix; or prefixes without weights (an
   odd count, or no weight where weights go), weighted by their samples, as Megatron-LM's. */
static mgt_status parse_data_path(const char *flag, const char *list, data_spec **out) {
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
  if (n == 0) MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: no dataset given", flag);
  int weights = 0;
  for (size_t i = 0; n % 2 == 0 && i < n; i += 2)
    weights += is_number(items[i]);
  for (size_t i = 0; weights && i < n; i += 2)
    if (!is_number(items[i]))
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s: value %zu, '%.64s', is not a positive weight (give prefixes alone, or "
                    "each with its weight before it)",
                    flag, i + 1, items[i]);
  spec->by_size = !weights && n > 1;
  spec->n = weights ? (int)(n / 2) : (int)n;
  spec->w = calloc((size_t)spec->n, sizeof *spec->w);
  spec->prefix = calloc((size_t)spec->n, sizeof *spec->prefix);
  if (!spec->w || !spec->prefix) goto nomem;
  double sum = 0;
  for (int i = 0; i < spec->n; i++) {
    double w = 1;
    if (weights) {
      w = strtod(items[2 * i], NULL);
      if (!(w > 0 && isfinite(w)))
        MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: value %d, '%.64s', is not a positive weight", flag,
                      2 * i + 1, items[2 * i]);
    }
    spec->w[i] = w;
    sum += w;
    spec->prefix[i] = items[weights ? 2 * i + 1 : i];
  }
  if (!isfinite(sum)) /* each finite, their sum not: the shares would be 0 or NaN */
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: the weights sum beyond a double's range", flag);
  for (int i = 0; i < spec->n; i++)
    spec->w[i] /= sum;
  free(items);
  *out = spec;
  return MGT_OK;
nomem:
  st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory reading %s", flag);
done:
  free(items);
  spec_free(spec);
  return st;
}

mgt_status mgt_dataset_vocab_size(const mgt_config *cfg, int *vocab_size) {
  *vocab_size = 0;
  const char *const flags[3] = {"--data-path", "--train-data-path", "--valid-data-path"};
  const char *const lists[3] = {cfg->data_path, cfg->train_data_path, cfg->valid_data_path};
  for (int k = 0; k < 3; k++) {
    if (!lists[k][0]) continue;
    data_spec *spec = NULL;
    mgt_status st = MGT_OK;
    MGT_TRY(parse_data_path(flags[k], lists[k], &spec));
    for (int i = 0; i < spec->n; i++) {
      mgt_dataset_info info;
      MGT_TRY(mgt_dataset_info_read(spec->prefix[i], &info));
      if (info.vocab_size > *vocab_size) *vocab_size = (int)info.vocab_size;
      if (!strcmp(info.format, "megatron") && *vocab_size == 0 && i == spec->n - 1)
        MGT_GOTO_FAIL(MGT_ERR_INPUT,
                      "%s %s is a Megatron-LM dataset, which does not record its vocabulary: "
                      "give --vocab-file (and --merge-file) or --vocab-size",
                      flags[k], info.path);
    }
  done:
    spec_free(spec);
    MGT_CHECK(st);
  }
  return MGT_OK;
}

void ds_opened_release(opened *op) {
  if (!op || --op->refs > 0) return;
  for (int d = 0; d < op->n; d++)
    ds_dataset_close(&op->ds[d]);
  mgt_free(op->ds);
  mgt_free(op);
}

/* What packing made of a split: the documents placed, the samples, the slots filled. */
static void pack_report(const pack_index *px, int split, int seq, FILE *log) {
  static const char *names[3] = {"train", "valid", "test"};
  const double slots = (double)px->n_samples * (seq + 1);
  fprintf(log,
          "data: --sft %s split of %s: %lld documents placed into %lld samples of %d tokens, "
          "%.1f%% of the slots filled (the rest padding)",
          names[split], px->ds->info.path, (long long)px->docs, (long long)px->n_samples, seq + 1,
          slots > 0 ? 100.0 * (double)px->tokens / slots : 0.0);
  if (px->truncated)
    fprintf(log, "; %lld longer truncated (%lld tokens cut)", (long long)px->truncated,
            (long long)px->cut);
  if (px->dropped) fprintf(log, "; %lld longer dropped", (long long)px->dropped);
  if (px->split)
    fprintf(log, "; %lld longer split into %lld pieces", (long long)px->split,
            (long long)px->pieces_split);
  fputc('\n', log);
  fflush(log);
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
  const double *w = spec->w;
  double *sized = NULL;
  if (spec->by_size) { /* each weighted by the samples of one epoch of its split */
    MGT_TRY(mgt_calloc(sizeof *sized * (size_t)spec->n, "blend weights", (void **)&sized));
    double sum = 0;
    for (int d = 0; d < spec->n; d++) {
      int64_t a, b;
      ds_split_docs(&op->ds[d], split, frac, &a, &b);
      const int64_t tokens = op->ds[d].doc_off[b] - op->ds[d].doc_off[a];
      sum += sized[d] = tokens > 1 ? (double)((tokens - 1) / cfg->seq_length) : 0;
    }
    for (int d = 0; d < spec->n && sum > 0; d++)
      sized[d] /= sum;
    w = sized;
    if (sum == 0) {
      mgt_free(sized);
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "the datasets of the blend hold no sample of --seq-length %d",
                    cfg->seq_length);
    }
  }
  st = ds_blending_make(w, spec->n, needed, &s->bl);
  mgt_free(sized);
  MGT_TRY(st);
  if (cfg->sft) {
    s->train_on_prompt = cfg->train_on_prompt;
    MGT_TRY(mgt_calloc(sizeof(pack_index) * (size_t)spec->n, "packed samples", (void **)&s->px));
  }
  for (int d = 0; d < spec->n; d++) {
    int64_t a, b, need = s->bl.counts[d];
    if (need == 0) continue; /* never drawn (its split may hold no sample) */
    ds_split_docs(&op->ds[d], split, frac, &a, &b);
    if (cfg->sft) {
      MGT_TRY(ds_pack_build(&op->ds[d], a, b, split, need, cfg->seq_length, cfg->seed,
                            cfg->sft_long_policy, &s->px[d]));
      int rank;
      MPI_Comm_rank(world, &rank);
      if (rank == 0 && log) pack_report(&s->px[d], split, cfg->seq_length, log);
      continue;
    }
    MGT_TRY(ds_split_index_get(&op->ds[d], split, a, b, need, cfg->seq_length, cfg->seed, world,
                               log, &s->ix[d]));
  }
  out->ctx = s;
  out->get = source_get;
  out->destroy = source_destroy;
  return MGT_OK;
done:
  source_destroy(s);
  return st;
}

/* The datasets of one blend (`flag`'s list), opened and checked against the run's vocabulary. */
static mgt_status open_blend(const mgt_config *cfg, const char *flag, const char *list, int samples,
                             const mgt_tokenizer *tok, data_spec **spec, opened **out) {
  opened *op = NULL;
  mgt_status st = MGT_OK;
  *out = NULL;
  MGT_CHECK(parse_data_path(flag, list, spec));
  MGT_TRY(mgt_calloc(sizeof *op, "datasets", (void **)&op));
  op->refs = 1; /* the caller's own reference */
  MGT_TRY(mgt_calloc(sizeof *op->ds * (size_t)(*spec)->n, "datasets", (void **)&op->ds));
  for (int d = 0; d < (*spec)->n; d++) {
    MGT_TRY(ds_dataset_open((*spec)->prefix[d], samples, &op->ds[d]));
    op->n = d + 1;
    snprintf(op->ds[d].cache_dir, sizeof op->ds[d].cache_dir, "%s", cfg->data_cache_path);
    mgt_dataset_info *in = &op->ds[d].info;
    if (!in->vocab_hash[0]) in->vocab_size = cfg->vocab_size; /* Megatron-LM's: the run's ids */
    if (tok && in->vocab_hash[0] && strcmp(in->vocab_hash, mgt_tok_hash(tok)) != 0)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s %s was tokenized with another vocabulary than %s %s "
                    "(hash %.12s, expected %.12s)",
                    flag, in->path, mgt_tokenizer_file_flag(cfg->tokenizer_type), cfg->vocab_file,
                    in->vocab_hash, mgt_tok_hash(tok));
    if (in->has_mask && !cfg->sft)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s %s holds conversations with a loss mask: train them with --sft (packed "
                    "whole, each attending only to itself)",
                    flag, in->path);
    if (in->max_token_id >= cfg->vocab_size || in->vocab_size > cfg->vocab_size)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s %s: vocabulary of %lld ids (largest used %lld) does not fit "
                    "--vocab-size %d",
                    flag, in->path, (long long)in->vocab_size, (long long)in->max_token_id,
                    cfg->vocab_size);
  }
  MGT_REQUIRE(!samples || !(*spec)->by_size,
              "%s: --model bert blends need a weight before each prefix", flag);
  *out = op;
  return MGT_OK;
done:
  ds_opened_release(op);
  spec_free(*spec);
  *spec = NULL;
  return st;
}

/* The source of split `split` (0 train, 1 valid) of a blend. */
static mgt_status blend_source(opened *op, const data_spec *spec, int split, const double frac[3],
                               int64_t needed, const mgt_config *cfg, const mgt_tokenizer *tok,
                               MPI_Comm world, FILE *log, int samples, mgt_data *out) {
  if (samples) return ds_make_bert_source(op, spec, split, frac, needed, cfg, tok, world, log, out);
  return make_source(op, spec, split, frac, needed, cfg, world, log, out);
}

mgt_status mgt_dataset_sources(const mgt_config *cfg, MPI_Comm world, FILE *log, mgt_data *train,
                               mgt_data *valid) {
  memset(train, 0, sizeof *train);
  memset(valid, 0, sizeof *valid);
  data_spec *spec = NULL, *vspec = NULL;
  opened *op = NULL, *vop = NULL;
  mgt_tokenizer *tok = NULL;
  mgt_status st = MGT_OK;
  mgt_model_spec desc;
  MGT_CHECK(mgt_model_describe(cfg, &desc));
  const int samples = desc.input == MGT_INPUT_SAMPLES; /* BERT's, not windows of tokens */
  /* what each rank opens alone (a node may lack a file) is agreed before any collective */
  if (cfg->vocab_file[0]) {
    MGT_TRY(mgt_mpi_agree(
        world, mgt_tok_open(cfg->tokenizer_type, cfg->vocab_file, cfg->merge_file, &tok)));
  }
  if (samples && (!tok || mgt_tok_type(tok) < MGT_TOKENIZER_BERT_LOWER))
    MGT_GOTO_FAIL(MGT_ERR_INPUT,
                  "--model bert needs the WordPiece --vocab-file the datasets were made with");
  int64_t need_train = cfg->train_iters * (int64_t)cfg->global_batch_size;
  if (need_train < 1) need_train = 1;
  const int64_t need_valid = mgt_valid_samples_planned(
      cfg->train_iters, cfg->eval_interval, (int64_t)cfg->eval_iters * cfg->global_batch_size);
  if (cfg->train_data_path[0]) { /* each split its own blend, whole (Megatron-LM's) */
    static const double all_train[3] = {1, 0, 0}, all_valid[3] = {0, 1, 0};
    MGT_TRY(mgt_mpi_agree(world, open_blend(cfg, "--train-data-path", cfg->train_data_path, samples,
                                            tok, &spec, &op)));
    MGT_TRY(blend_source(op, spec, 0, all_train, need_train, cfg, tok, world, log, samples, train));
    if (cfg->valid_data_path[0] && cfg->eval_iters > 0) {
      MGT_TRY(mgt_mpi_agree(world, open_blend(cfg, "--valid-data-path", cfg->valid_data_path,
                                              samples, tok, &vspec, &vop)));
      MGT_TRY(
          blend_source(vop, vspec, 1, all_valid, need_valid, cfg, tok, world, log, samples, valid));
    }
  } else {
    double frac[3];
    MGT_TRY(mgt_split_parse(cfg->split, frac));
    MGT_TRY(mgt_mpi_agree(
        world, open_blend(cfg, "--data-path", cfg->data_path, samples, tok, &spec, &op)));
    MGT_TRY(blend_source(op, spec, 0, frac, need_train, cfg, tok, world, log, samples, train));
    if (cfg->eval_iters > 0 && frac[1] > 0)
      MGT_TRY(blend_source(op, spec, 1, frac, need_valid, cfg, tok, world, log, samples, valid));
  }
done:
  mgt_tok_destroy(&tok);
  spec_free(spec);
  spec_free(vspec);
  if (st != MGT_OK) {
    mgt_data_destroy(train);
    mgt_data_destroy(valid);
  }
  ds_opened_release(op);
  ds_opened_release(vop);
  return st;
}

/* ---- the unigram baseline ---- */

mgt_status mgt_dataset_unigram(const char *prefix, const char *split, double *ppl,
                               int64_t *n_valid) {
  double frac[3];
  MGT_CHECK(mgt_split_parse(split, frac));
  dataset ds;
  MGT_CHECK(ds_dataset_open(prefix, 0, &ds));
  mgt_status st = MGT_OK;
  int64_t *count = NULL, ta, tb, va, vb, V = ds.info.vocab_size;
  ds_split_docs(&ds, 0, frac, &ta, &tb);
  ds_split_docs(&ds, 1, frac, &va, &vb);
  const int64_t t0 = ds.doc_off[ta], t1 = ds.doc_off[tb], v0 = ds.doc_off[va], v1 = ds.doc_off[vb];
  if (t1 == t0 || v1 == v0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: --split %s leaves the %s split without tokens", prefix, split,
                  t1 == t0 ? "training" : "validation");
  if (ds.mm.map) /* Megatron-LM's files record no vocabulary: the ids used */
    for (int64_t i = 0; i < ds.info.n_tokens; i++) {
      const int32_t t = ds_token_at(&ds, i);
      if (t >= V) V = (int64_t)t + 1;
    }
  MGT_TRY(mgt_calloc(sizeof *count * (size_t)V, "unigram counts", (void **)&count));
  for (int64_t i = t0; i < t1; i++) {
    const int32_t t = ds_token_at(&ds, i);
    if (t >= 0 && t < V) count[t]++;
  }
  /* add-one smoothing: a token the training split never shows still has a probability */
  double nll = 0.0;
  const double denom = (double)(t1 - t0) + (double)V;
  for (int64_t i = v0; i < v1; i++) {
    const int32_t t = ds_token_at(&ds, i);
    nll -= log(((t >= 0 && t < V ? (double)count[t] : 0.0) + 1.0) / denom);
  }
  *ppl = exp(nll / (double)(v1 - v0));
  *n_valid = v1 - v0;
done:
  mgt_free(count);
  ds_dataset_close(&ds);
  return st;
}
