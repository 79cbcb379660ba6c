/* Evaluation of a checkpoint: `mgt eval`. */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_eval_opts {
  char load[MGT_PATH_MAX];
  int64_t ckpt_iteration;
  char input_ids[MGT_PATH_MAX];
  int tensor_model_parallel_size;
  int seq_length; /* 0: the checkpoint's */
} mgt_eval_opts;

void mgt_eval_defaults(mgt_eval_opts *o);
MGT_NODISCARD mgt_status mgt_eval_parse(mgt_eval_opts *o, int argc, char **argv, int first,
                                        int *help);
void mgt_eval_usage(FILE *f);

/* Loads the checkpoint on this job's layout (tensor parallelism from the options, the rest
   data parallelism) and scores the token ids of --input-ids in non-overlapping windows of the
   sequence length: every token after the first is predicted once. Rank 0 writes one JSON
   line with tokens, avg_loss and ppl to `out`. Collective over world; errors are agreed. */
MGT_NODISCARD mgt_status mgt_eval_run(const mgt_eval_opts *o, MPI_Comm world, FILE *out);

/* Reads whitespace-separated token ids from a file; each must lie in [0, vocab). */
MGT_NODISCARD mgt_status mgt_read_ids(const char *path, int vocab, int32_t **ids, size_t *n);

#ifdef __cplusplus
}
#endif
