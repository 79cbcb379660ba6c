/* Private to io/: BERT's training samples as Megatron-LM (v2.5) builds them from a sentence
   dataset: the samples mapping (helpers.cpp build_mapping: groups of whole sentences of one
   document with a target length, shuffled), and the sample builder (bert_dataset.py with
   dataset_utils.py: segments A and B, sentence-order swap, truncation, [CLS] A [SEP] B [SEP],
   whole-word n-gram masking, padding). The random numbers are Megatron's: std::mt19937 and
   std::mt19937_64 for the mapping, numpy's RandomState((seed + idx) mod 2^32) for sample idx,
   so a sample is a function of (seed, idx) only. Not collective. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"

/* ---- Megatron's random numbers ---- */

typedef struct mgt_mt19937 {
  uint32_t mt[624];
  int i;
} mgt_mt19937;
void mgt_mt19937_seed(mgt_mt19937 *g, uint32_t seed);
uint32_t mgt_mt19937_next(mgt_mt19937 *g);

typedef struct mgt_mt19937_64 {
  uint64_t mt[312];
  int i;
} mgt_mt19937_64;
void mgt_mt19937_64_seed(mgt_mt19937_64 *g, uint64_t seed);
uint64_t mgt_mt19937_64_next(mgt_mt19937_64 *g);

/* numpy.random.RandomState's legacy draws over MT19937 */
double mgt_np_random(mgt_mt19937 *g);                           /* random() */
int64_t mgt_np_randint(mgt_mt19937 *g, int64_t lo, int64_t hi); /* randint(lo, hi) */
int64_t mgt_np_interval(mgt_mt19937 *g, uint64_t max);          /* shuffle's draw in [0, max] */

/* ---- the samples mapping ---- */

/* Sentence j of the dataset is tokens [sent_off[j], sent_off[j+1]); document d is sentences
   [doc_sent[d], doc_sent[d+1]). */
typedef struct mgt_bert_corpus {
  const int64_t *sent_off, *doc_sent;
} mgt_bert_corpus;

/* Rows of (first sentence, end sentence, target length) for the documents [a, b): whole epochs
   until at least `needed` samples, targets max_len (seq_length - 3), or with probability
   short_seq_prob a shorter one; documents with fewer than min_sentences sentences, or with
   several sentences one of which is longer than 512 tokens, are left out; shuffled with
   mt19937_64(seed + 1). *rows is malloc'd (3 *n), the caller frees it. `what` names the
   dataset in errors (no sample at all). */
MGT_NODISCARD mgt_status mgt_bert_mapping(const mgt_bert_corpus *c, int64_t a, int64_t b,
                                          int64_t needed, int max_len, double short_seq_prob,
                                          int min_sentences, uint64_t seed, const char *what,
                                          int64_t **rows, int64_t *n);

/* ---- one sample ---- */

typedef struct mgt_bert_vocab {
  int32_t cls, sep, mask, pad;
  int32_t size;                /* random replacements draw from [0, size) */
  const uint8_t *continuation; /* per id: the piece starts with "##" */
} mgt_bert_vocab;

/* Sample idx of a mapping row: T positions each of tokens, types and labels (the original id
   at a masked position, -1 elsewhere); *length real positions before the padding; *is_random
   1 when the segments were swapped. `token(ctx, i)` reads token i of the corpus. */
typedef int32_t (*mgt_bert_token_fn)(const void *ctx, int64_t i);
MGT_NODISCARD mgt_status mgt_bert_sample(const mgt_bert_corpus *c, mgt_bert_token_fn token,
                                         const void *ctx, const int64_t row[3],
                                         const mgt_bert_vocab *v, int T, double mask_prob,
                                         int binary_head, uint64_t seed, uint64_t idx,
                                         int32_t *tokens, int32_t *types, int32_t *labels,
                                         int32_t *length, int32_t *is_random);
