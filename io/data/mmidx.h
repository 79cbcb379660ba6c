/* Megatron-LM's indexed datasets (megatron/data/indexed_dataset.py, MMapIndexedDataset):
   PREFIX.idx holds the header "MMIDIDX\0\0", version 1 (uint64), a dtype code (uint8), the
   number of sequences n and of document-index entries m (uint64 each), then n int32 sizes, n
   int64 byte pointers into PREFIX.bin and m int64 document starts (sequence numbers, the last
   one n); PREFIX.bin holds the tokens of every sequence back to back. All little-endian. A
   sequence is a document, or a sentence of one when the data was split into sentences. */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <sys/stat.h>

#include "mgt/common.h"

/* Megatron-LM's dtype codes. */
enum {
  MGT_MM_U8 = 1,
  MGT_MM_I8 = 2,
  MGT_MM_I16 = 3,
  MGT_MM_I32 = 4,
  MGT_MM_I64 = 5,
  MGT_MM_F64 = 6, /* float64 */
  MGT_MM_D64 = 7, /* Megatron-Core's float32, its legacy reader's float64: told by the offsets */
  MGT_MM_U16 = 8
};

typedef struct mgt_mmidx {
  char idx_path[MGT_PATH_MAX], bin_path[MGT_PATH_MAX];
  int dtype, elem;      /* code and bytes per token */
  int64_t n_seq, n_doc; /* sequences, documents */
  int64_t *seq_off;     /* n_seq + 1: each sequence's first token */
  int64_t *doc_seq;     /* n_doc + 1: each document's first sequence */
  void *map;            /* PREFIX.bin, mapped read-only */
  size_t map_len;
  struct stat idx_st, bin_st; /* for the identity of cached sample indices */
} mgt_mmidx;

/* Whether PREFIX.idx exists (PREFIX.bin is checked by mgt_mmidx_open). */
int mgt_mmidx_exists(const char *prefix);
/* Opens and checks PREFIX.idx and PREFIX.bin: a damaged, truncated or foreign file is a
   one-line error naming it. Not collective. */
MGT_NODISCARD mgt_status mgt_mmidx_open(const char *prefix, mgt_mmidx *out);
void mgt_mmidx_close(mgt_mmidx *x);
/* Token i of the .bin (as an integer; a float dtype's value truncated). */
int64_t mgt_mmidx_token(const mgt_mmidx *x, int64_t i);
const char *mgt_mmidx_dtype_name(int dtype);

/* Writes PREFIX.bin and PREFIX.idx (under temporary names, published when complete, the index
   last) from every rank's share: `n_tok` tokens, `n_seq` sequence lengths, and for each of its
   `n_docs` documents the number of its sequences. Shares follow in rank order. The dtype
   (MGT_MM_U8, _U16 or _I32) is the caller's: Megatron-LM's is uint16 below a vocabulary of 65500,
   else int32. Errors are agreed. Collective over world. */
MGT_NODISCARD mgt_status mgt_mmidx_write(const char *prefix, MPI_Comm world, int dtype,
                                         const int32_t *tokens, int64_t n_tok,
                                         const int64_t *seq_len, int64_t n_seq,
                                         const int64_t *doc_seqs, int64_t n_docs);
