/* Evaluation of a checkpoint: `mgt eval`. */
#pragma once

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_eval_opts {
  int task; /* 0 lm, 1 wikitext103, 2 lambada; 3 RACE, 4 MNLI, 5 QQP (a fine-tuned BERT) */
  char load[MGT_PATH_MAX];
  int64_t ckpt_iteration;
  char valid_data[1 << 14]; /* paths, one per line (one for wikitext103 and lambada) */
  int skip_bad_records;
  char input_ids[MGT_PATH_MAX];
  char text[MGT_PATH_MAX];
  int overlapping_eval; /* window stride; 0: the task's default */
  int strict_lambada;
  int seq_length; /* 0: the checkpoint's */
  int micro_batch_size;
  int tensor_model_parallel_size;
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type; /* -1: the checkpoint's */
  int device;         /* MGT_DEVICE_* */
  int bf16, fp16;     /* the GEMM inputs' precision (default fp32) */
  int cpu_gemm;       /* MGT_CPU_GEMM_*; -1: native under --bf16 where the CPU can */
} mgt_eval_opts;

void mgt_eval_defaults(mgt_eval_opts *o);
MGT_NODISCARD mgt_status mgt_eval_parse(mgt_eval_opts *o, int argc, char **argv, int first,
                                        int *help);
void mgt_eval_usage(FILE *f);

/* Loads the checkpoint on this job's layout (tensor parallelism from the options, the rest
   data parallelism, which shares out the windows or examples) and runs the task. Rank 0
   writes a summary line and one JSON line to `out`. Collective over world; errors are
   agreed. */
MGT_NODISCARD mgt_status mgt_eval_run(const mgt_eval_opts *o, MPI_Comm world, FILE *out);

/* Megatron-LM's WikiText detokenizer over the whole text (see src/cmd/detok.c for the rules).
 *out is malloc'd and NUL-terminated. Not collective. */
MGT_NODISCARD mgt_status mgt_wikitext_detokenize(const char *text, size_t n, char **out,
                                                 size_t *out_n);
/* Words as Megatron-LM counts them for the adjusted perplexity: the text stripped of
   surrounding whitespace, split on single spaces. */
size_t mgt_wikitext_word_count(const char *text, size_t n);
/* The length of the whitespace character (Python's str.isspace) at s[0..n), or ending it; 0 if
   there is none. */
size_t mgt_space_at(const unsigned char *s, size_t n);
size_t mgt_space_before(const unsigned char *s, size_t n);

/* Which targets of a token stream of n tokens window w scores, with windows of seq_len
   tokens advancing by stride (Megatron-LM's --overlapping-eval): the first window scores all
   its targets, later ones only their last `stride`; every target is scored exactly once.
   Window w covers tokens [w * stride, w * stride + seq_len]; it scores its positions
   [*first, *last) (0 <= first <= last <= seq_len). Returns the number of windows. */
size_t mgt_eval_windows(size_t n, int seq_len, int stride);
void mgt_eval_window(size_t n, int seq_len, int stride, size_t w, int *first, int *last);

/* A LAMBADA example as Megatron-LM builds it from a text: the ids of the text and how many
   of the last ones are the target word. Strict: the text before the last whitespace-separated
   word (stripped) and ' ' + word are tokenized apart, the target is all of the word's tokens;
   otherwise the whole text is tokenized and the target is its last token. *ids is malloc'd. */
struct mgt_tokenizer;
MGT_NODISCARD mgt_status mgt_lambada_example(struct mgt_tokenizer *tok, const char *text,
                                             size_t len, int strict, int32_t **ids, int *n,
                                             int *n_target);

/* Reads whitespace-separated token ids from a file; each must lie in [0, vocab). */
MGT_NODISCARD mgt_status mgt_read_ids(const char *path, int vocab, int32_t **ids, size_t *n);

#ifdef __cplusplus
}
#endif
