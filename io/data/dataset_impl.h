/* Private to the dataset readers (io/data/dataset.c: files, blending, the sources;
   io/data/sample_index.c: the GPT sample index and the caches beside a dataset;
   io/data/bert_source.c: the BERT samples source). */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "mmidx.h"
#include "mgt/data.h"
#include "mgt/dataset.h"
#include "mgt/tokenizer.h"

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
  /* where its caches go: --data-cache-path, or "" for the folder mgt-cache beside the file (a
     folder, which Megatron-LM's tools/merge_datasets.py passes over) */
  char cache_dir[MGT_PATH_MAX];
  mgt_mmidx mm; /* a Megatron-LM dataset: its tokens (mm.map) instead of map */
  /* conversations' loss masks (mgt preprocess --chat-template): a byte per token, mapped from
     the HDF5 file's loss_mask or a Megatron-LM PREFIX_loss_mask.bin; NULL without */
  const unsigned char *mask;
  void *mask_map;
  size_t mask_map_len;
  mgt_mmidx mm_mask;
} dataset;

/* The cache file: this header, then doc_idx, sample_idx and shuffle (index_views). A job killed
   while writing it, or a damaged file, is found by the length and checksum and rebuilt. */
typedef struct index_header {
  char magic[8]; /* "MGTIDX2" */
  int64_t n_doc_idx, n_samples, seq;
  uint64_t bytes;    /* of the whole file */
  uint64_t checksum; /* of everything after the header, as body_checksum computes it */
} index_header;

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

/* A block cached beside a dataset (a sample index, a BERT samples mapping): how to build it
   and how to tell that a file holds a whole, valid one. */
typedef struct cache_ops {
  const char *what;
  const void *ctx;
  mgt_status (*build)(const void *ctx, void **mem, size_t *len);
  int (*valid)(const void *ctx, const void *mem, size_t len);
} cache_ops;

/* Which dataset, and which of its samples, each sample of a source is. */
typedef struct blending {
  int32_t *which;  /* sample -> dataset (NULL with one dataset) */
  int64_t *within; /* sample -> sample of that dataset */
  int64_t n;
  int64_t *counts; /* the samples each dataset gives */
} blending;

/* The datasets of --data-path and their weights: one prefix, or any number of weight-prefix
   pairs, every one checked. */
typedef struct data_spec {
  int n;
  double *w;     /* normalized; with by_size, set per split from the datasets */
  int by_size;   /* prefixes without weights: weighted by their samples, as Megatron-LM does */
  char **prefix; /* into buf */
  char *buf;
} data_spec;

/* The datasets of a run, shared by its sources and closed with the last of them. */
typedef struct opened {
  int n;
  dataset *ds;
  int refs;
} opened;

/* ---- dataset.c: files, blending, the sources ---- */

void ds_dataset_close(dataset *ds);
mgt_status ds_dataset_open(const char *prefix, int sentences, dataset *ds);
int32_t ds_token_at(const dataset *ds, int64_t i);
/* Token i's loss mask: 1 where it trains (every token of a dataset without one). */
static inline int ds_mask_at(const dataset *ds, int64_t i) { return !ds->mask || ds->mask[i]; }

/* ---- sample_index.c: the sample index, the caches ---- */

/* The checksum of a cache file's body (everything after its index_header). */
uint64_t ds_body_checksum(const void *mem, size_t bytes);
void ds_index_free(split_index *ix);
/* CACHE_DIR/BASENAME.<suffix>-<16 hex digits of the hash of key>: ds's cache of that kind. */
void ds_cache_path(const dataset *ds, const char *suffix, const char *key, char *path, size_t n);
mgt_status ds_cached_block(const char *path, const cache_ops *ops, const dataset *ds,
                           MPI_Comm world, FILE *log, void **mem, size_t *len, int *mapped);
mgt_status ds_split_index_get(const dataset *ds, int split, int64_t a, int64_t b, int64_t needed,
                              int seq, uint64_t seed, MPI_Comm world, FILE *log, split_index *ix);
void ds_read_sample(const split_index *ix, int64_t s, int seq, int32_t *out);
/* The documents [a, a + n) in the order of epoch `epoch` of split `split` (seeded). */
void ds_shuffle_docs(uint64_t seed, int split, int64_t epoch, int64_t a, int64_t n, int32_t *out);

/* ---- pack.c: --sft's samples, whole documents packed ---- */

typedef struct pack_index {
  const dataset *ds;
  int64_t n_samples, n_pieces;
  int64_t *first; /* n_samples + 1: each sample's first piece */
  int64_t *piece; /* 3 per piece: document, its first token there, tokens */
  /* for the log: documents placed, tokens placed, and what a long document became */
  int64_t docs, tokens, truncated, cut, dropped, split, pieces_split;
} pack_index;

/* Samples of documents [a, b) of ds for `needed` samples of seq + 1 tokens: each epoch's
   documents in their shuffled order, placed whole while they fit (next fit); a document longer
   than seq + 1 truncated, dropped or split (policy 0, 1, 2) into pieces of seq + 1 that overlap
   by one token, so each of its targets is trained once. Not collective: every rank builds the
   same. */
mgt_status ds_pack_build(const dataset *ds, int64_t a, int64_t b, int split, int64_t needed,
                         int seq, uint64_t seed, int policy, pack_index *px);
void ds_pack_free(pack_index *px);
/* Sample s as seq + 1 tokens with MGT_TOKEN_* flags: each piece's first token starts a
   document, a token whose loss mask is 0 (unless train_on_prompt) trains no target, and the
   padding after the pieces (the dataset's end-of-document id) is a document of no target. Fails
   on an id outside [0, vocabulary). */
mgt_status ds_pack_read(const pack_index *px, int64_t s, int seq, int train_on_prompt,
                        int32_t *out);

/* ---- dataset.c ---- */

mgt_status ds_blending_make(const double *w, int n, int64_t needed, blending *bl);
mgt_status ds_blending_at(const blending *bl, uint64_t i, int *d, int64_t *k);
void ds_blending_free(blending *bl);
void ds_split_docs(const dataset *ds, int split, const double frac[3], int64_t *a, int64_t *b);
void ds_opened_release(opened *op);

/* ---- bert_source.c: the BERT samples source of one split ---- */

mgt_status ds_make_bert_source(opened *op, const data_spec *spec, int split, const double frac[3],
                               int64_t needed, const mgt_config *cfg, const mgt_tokenizer *tok,
                               MPI_Comm world, FILE *log, mgt_data *out);
