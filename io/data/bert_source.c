/* The BERT training source: the samples mapping of each split cached beside its dataset, and
   samples built from it as Megatron-LM builds them (io/data/bert_data.c). */
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
    h->checksum = ds_body_checksum(mem, bytes);
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
      ds_body_checksum(mem, len) != h->checksum)
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
  ds_cache_path(ds, "bertmap", key, path, sizeof path);
  const bert_map_args args = {ds, cfg, a, b, needed};
  const cache_ops ops = {"BERT samples mapping", &args, bert_map_build_cb, bert_map_valid_cb};
  mgt_status st = ds_cached_block(path, &ops, ds, world, log, &bm->mem, &bm->mem_len, &bm->mapped);
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

static int32_t bert_token(const void *ctx, int64_t i) { return ds_token_at(ctx, i); }

static mgt_status bert_source_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  bert_source *s = ctx;
  for (int r = 0; r < n; r++) {
    int d;
    int64_t k;
    MGT_CHECK(ds_blending_at(&s->bl, first + (uint64_t)r, &d, &k));
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
    const int64_t V = ds->info.vocab_size;          /* the attribute may lie about the data */
    const int32_t *lab = row + MGT_BERT_LABELS * T; /* a masked position's id is only here */
    for (int t = 0; t < T; t++) {
      const int bad = row[t] < 0 || row[t] >= V;
      const int32_t x = bad ? row[t] : lab[t]; /* -1: not masked */
      MGT_REQUIRE(!bad && x >= -1 && x < V,
                  "--data-path %s: token id %lld in BERT sample %lld is outside its vocabulary of "
                  "%lld",
                  ds->info.path, (long long)(uint32_t)x, (long long)k, (long long)V);
    }
  }
  return MGT_OK;
}

static void bert_source_destroy(void *ctx) {
  bert_source *s = ctx;
  if (!s) return;
  if (s->map)
    for (int d = 0; d < s->n; d++)
      bert_map_free(&s->map[d]);
  ds_opened_release(s->op);
  mgt_free(s->map);
  ds_blending_free(&s->bl);
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

mgt_status ds_make_bert_source(opened *op, const data_spec *spec, int split, const double frac[3],
                               int64_t needed, const mgt_config *cfg, const mgt_tokenizer *tok,
                               MPI_Comm world, FILE *log, mgt_data *out) {
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
  MGT_TRY(ds_blending_make(spec->w, spec->n, needed, &s->bl));
  for (int d = 0; d < spec->n; d++) {
    int64_t a, b, need = s->bl.counts[d];
    if (need == 0) continue; /* never drawn (its split may hold no sample) */
    ds_split_docs(&op->ds[d], split, frac, &a, &b);
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
