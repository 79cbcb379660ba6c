/* The GPT sample index of a split (see io/data/dataset.c) and the caches kept beside a dataset:
   built by world rank 0, written durably, mapped, checked by length and checksum. */
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

/* ---- sample index ---- */

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

uint64_t ds_body_checksum(const void *mem, size_t bytes) {
  const uint64_t *w = (const uint64_t *)((const unsigned char *)mem + sizeof(index_header));
  const size_t n = (bytes - sizeof(index_header)) / 8;
  uint64_t s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (size_t i = 0; i < n; i++)
    s += mgt_fmix64(mgt_fmix64(i + 1) ^ w[i]);
  return s;
}

static void index_views(split_index *ix);

static uint64_t draw(uint64_t seed, uint64_t stream, uint64_t k) {
  uint32_t w[4];
  mgt_rng_block(seed, stream, k, w);
  return (uint64_t)w[0] << 32 | w[1];
}

/* Builds the index into one malloc'd block laid out as the cache file. */
void ds_shuffle_docs(uint64_t seed, int split, int64_t e, int64_t a, int64_t n, int32_t *d) {
  for (int64_t i = 0; i < n; i++)
    d[i] = (int32_t)(a + i);
  for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
    int64_t j = (int64_t)(draw(seed, mgt_rng_data_stream(0x100u + (uint32_t)split),
                               (uint64_t)e << 32 | (uint64_t)i) %
                          (uint64_t)(i + 1));
    int32_t tmp = d[i];
    d[i] = d[j];
    d[j] = tmp;
  }
}

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
  /* the fewest epochs whose concatenated tokens hold `needed` samples, a sample straddling
     epochs (Megatron-LM's _get_num_epochs) */
  MGT_REQUIRE(needed < INT64_MAX / seq - 1, "--data-path %s: %lld samples are too many", p,
              (long long)needed);
  const int64_t epochs = needed <= 0 ? 1 : (needed * seq + 1 + tpe - 1) / tpe;
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
  for (int64_t e = 0; e < epochs; e++)
    ds_shuffle_docs(seed, split, e, a, n_docs, doc_idx + e * n_docs);
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
  h->checksum = ds_body_checksum(mem, bytes);
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
      ds_body_checksum(mem, len) != h->checksum)
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

void ds_index_free(split_index *ix) {
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

/* The folder of ds's caches. */
static void cache_dir_of(const dataset *ds, char *dir, size_t n) {
  if (ds->cache_dir[0]) {
    snprintf(dir, n, "%s", ds->cache_dir);
    return;
  }
  char d[MGT_PATH_MAX];
  snprintf(d, sizeof d, "%s", ds->info.path);
  snprintf(dir, n, "%s/mgt-cache", dirname(d));
}

void ds_cache_path(const dataset *ds, const char *suffix, const char *key, char *path, size_t n) {
  char hex[65], dir[MGT_PATH_MAX], base[MGT_PATH_MAX];
  mgt_sha256 h;
  unsigned char dg[32];
  mgt_sha256_init(&h);
  mgt_sha256_update(&h, key, strlen(key));
  mgt_sha256_final(&h, dg);
  mgt_sha256_hex(dg, hex);
  cache_dir_of(ds, dir, sizeof dir);
  snprintf(base, sizeof base, "%s", ds->info.path);
  snprintf(path, n, "%s/%s.%s-%.16s", dir, basename(base), suffix, hex);
}

/* Removes the caches' temporary files (BASENAME.<suffix>-<hash>.tmp.<pid>) that a killed run
   left in the dataset's cache folder: a sample index can take gigabytes. One is in use while its
   process lives on this host or while it is being written (on another node). */
static void remove_stale_caches(const dataset *ds, FILE *log) {
  char d[MGT_PATH_MAX], base[MGT_PATH_MAX], full[2 * MGT_PATH_MAX + 2];
  cache_dir_of(ds, d, sizeof d);
  snprintf(base, sizeof base, "%s", ds->info.path);
  const char *b = basename(base);
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

/* Makes the cache folder (and its parents) on rank 0; 0 where it cannot be. */
static int make_cache_dir(const dataset *ds) {
  char dir[MGT_PATH_MAX];
  cache_dir_of(ds, dir, sizeof dir);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(dir, 0777) != 0 && errno != EEXIST) return 0;
      *p = '/';
    }
  struct stat sb;
  return (mkdir(dir, 0777) == 0 || errno == EEXIST) && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The block at `path`: rank 0 makes sure a whole, valid cache exists (rebuilding a damaged
   one), then every rank maps it; where it cannot be written every rank builds its own.
   *mapped says which. Collective over world. */
mgt_status ds_cached_block(const char *path, const cache_ops *ops, const dataset *ds,
                           MPI_Comm world, FILE *log, void **mem, size_t *len, int *mapped) {
  *mem = NULL, *len = 0, *mapped = 0;
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  int cached = 0;
  mgt_status st = MGT_OK;
  if (rank == 0) {
    remove_stale_caches(ds, log);
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
        cached = make_cache_dir(ds) && write_cache(path, m, l) == MGT_OK;
        if (!cached) {
          mgt_error_clear();
          if (log)
            fprintf(log, "note: cannot cache the %s of %s in %s; every rank builds it in memory\n",
                    ops->what, ds->info.path, path);
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
mgt_status ds_split_index_get(const dataset *ds, int split, int64_t a, int64_t b, int64_t needed,
                              int seq, uint64_t seed, MPI_Comm world, FILE *log, split_index *ix) {
  memset(ix, 0, sizeof *ix);
  ix->ds = ds;
  /* the index holds 32-bit document ids, as Megatron-LM's */
  MGT_REQUIRE(b <= INT32_MAX,
              "%s: a split reaching document %lld: over the 2^31 documents a sample "
              "index holds (split the dataset in files of fewer)",
              ds->info.path, (long long)b);
  /* the cache name hashes everything the index depends on */
  char key[512], path[MGT_PATH_MAX + 128];
  snprintf(key, sizeof key, "v4 %s %d %lld %lld %lld %d %llu", ds->identity, split, (long long)a,
           (long long)b, (long long)needed, seq, (unsigned long long)seed);
  ds_cache_path(ds, "index", key, path, sizeof path);
  const index_args args = {ds, split, seq, a, b, needed, seed};
  const cache_ops ops = {"sample index", &args, index_build_cb, index_valid_cb};
  mgt_status st = ds_cached_block(path, &ops, ds, world, log, &ix->mem, &ix->mem_len, &ix->mapped);
  if (st != MGT_OK) {
    ds_index_free(ix);
    return st;
  }
  index_views(ix);
  MGT_REQUIRE(ix->n_samples >= needed, "%s: the sample index holds %lld samples, %lld needed", path,
              (long long)ix->n_samples, (long long)needed);
  return MGT_OK;
}

/* seq + 1 tokens of sample s (before shuffling) */
void ds_read_sample(const split_index *ix, int64_t s, int seq, int32_t *out) {
  const dataset *ds = ix->ds;
  int64_t pos = ix->sample_idx[2 * s], off = ix->sample_idx[2 * s + 1];
  for (int k = 0; k <= seq;) {
    int32_t d = ix->doc_idx[pos % ix->n_doc_idx];
    int64_t first = ds->doc_off[d] + off, end = ds->doc_off[d + 1];
    for (int64_t i = first; i < end && k <= seq; i++)
      out[k++] = ds_token_at(ds, i);
    pos++;
    off = 0;
  }
}
