/* Token datasets in HDF5 (docs/data-format.md): `mgt preprocess` writes them in parallel,
   training reads samples of seq_length + 1 tokens from a train/valid/test split of their
   documents, shuffled by seed, optionally blended from several datasets by weight. */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- preprocessing ---- */

typedef struct mgt_preprocess_opts {
  char input[8192]; /* paths, one per line: .jsonl/.json are JSON lines, others one document */
  char output_prefix[MGT_PATH_MAX];
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type; /* MGT_TOKENIZER_* */
  char json_keys[256];
  int append_eod;
  int split_sentences; /* one sequence per sentence (BERT), documents kept apart */
  int skip_bad_lines;
  int log_interval_s; /* seconds between progress lines on stderr when it is not a terminal */
  int dataset_impl;   /* 0: hdf5 (PREFIX.h5); 1: mmap, Megatron-LM's PREFIX_KEY_LEVEL.bin/.idx */
  /* conversations (include/mgt/chat.h) rendered as this chat format ("auto": the tokenizer's
     tokenizer_config.json's), stored with their loss masks; "" for text */
  char chat_template[64];
  int seq_length;   /* > 0: report how the documents pack into samples of seq_length + 1 */
  char notes[1024]; /* not a flag: Megatron-LM's flags taken that change nothing, and why */
} mgt_preprocess_opts;

/* Tokenizes the inputs, each rank its share of the documents, and writes OUTPUT_PREFIX.h5
   with collective HDF5 writes (under a temporary name, renamed when complete). The output
   is the same for any number of ranks. Errors are agreed: every rank returns the same
   status and message. Rank 0 writes progress and a summary to `log`. Collective. */
MGT_NODISCARD mgt_status mgt_preprocess_run(const mgt_preprocess_opts *o, MPI_Comm world,
                                            FILE *log);

/* ---- reading ---- */

/* What a dataset file says about itself. A Megatron-LM dataset (PREFIX.bin and PREFIX.idx,
   io/data/mmidx.h) records no tokenizer: its tokenizer and vocab_hash are empty, vocab_size 0 and
   eod_id, max_token_id -1. */
typedef struct mgt_dataset_info {
  char path[MGT_PATH_MAX];
  char format[16]; /* "hdf5" or "megatron" */
  char dtype[16];  /* the tokens' type: uint16, uint32, or any of Megatron-LM's */
  char tokenizer[64];
  char vocab_hash[65];
  int64_t vocab_size, eod_id, n_tokens, n_documents, max_token_id;
  int64_t n_sentences; /* -1: not split into sentences */
  int token_bytes;
  int has_mask;           /* conversations with a loss mask (format 2; PREFIX_loss_mask) */
  char chat_template[16]; /* the chat format they were rendered as ("" unknown) */
  int64_t n_trained;      /* tokens whose loss mask is 1 (-1 unknown) */
} mgt_dataset_info;

/* Reads what PREFIX.h5 (or PATH when it ends in .h5) says about itself, or, without
   PREFIX.h5, Megatron-LM's PREFIX.idx (checking PREFIX.bin). Not collective. */
MGT_NODISCARD mgt_status mgt_dataset_info_read(const char *prefix, mgt_dataset_info *info);

/* Training and validation samples from cfg->data_path, cfg->split and cfg->seed, for
   cfg->train_iters iterations and cfg->eval_iters validation batches. GPT: windows of
   seq_length + 1 tokens over the split's documents joined in shuffled order. BERT (datasets
   made with --split-sentences): Megatron-LM's samples mapping over the split's documents and
   its sample builder (io/data/bert_data.h), a sample a function of (seed, its index). The sample
   index (or mapping) is built once by world rank 0 and cached beside each dataset (rebuilt in
   memory if the directory is not writable). Checks the vocabulary (hash and size) against
   cfg. The `train` and `valid` sources are owned by the caller. Collective over world. */
MGT_NODISCARD mgt_status mgt_dataset_sources(const mgt_config *cfg, MPI_Comm world, FILE *log,
                                             mgt_data *train, mgt_data *valid);

/* The unigram baseline of a dataset: the perplexity of its validation split (the documents
   --split gives it, as mgt train splits them) under the token frequencies of its training
   split, add-one smoothed: what a model that ignores context scores. Reads every token. Not
   collective. */
MGT_NODISCARD mgt_status mgt_dataset_unigram(const char *prefix, const char *split, double *ppl,
                                             int64_t *n_valid);

/* The vocabulary size the datasets of cfg->data_path need (the largest of their
   vocab_size attributes). Not collective. */
MGT_NODISCARD mgt_status mgt_dataset_vocab_size(const mgt_config *cfg, int *vocab_size);

#ifdef __cplusplus
}
#endif
