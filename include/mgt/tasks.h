/* Fine-tuning tasks as Megatron-LM runs them (tasks/race, tasks/glue): readers for the public
   formats, the encoding of each example into BERT rows, and the training source over epochs.
   RACE: a directory of *.txt, each line one passage as JSON (article, questions, options,
   answers), one example per question with 4 rows, one per option ([CLS] question+option [SEP]
   article [SEP]). MNLI and QQP: GLUE's tab-separated files with a header line, one example per
   pair ([CLS] a [SEP] b [SEP]). Not collective. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/data.h"
#include "mgt/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The examples of one file (GLUE) or directory (RACE), tokenized. */
typedef struct mgt_task_set mgt_task_set;

/* Reads and tokenizes `path` with `tok` (a WordPiece tokenizer). A malformed record (bad JSON,
   missing fields, a label outside the task's, an empty text) fails with the file and line;
   with skip_bad it is counted and skipped instead (QQP rows with another number of columns and
   empty texts are skipped with a count as Megatron-LM does). Rank-0 style notes go to log
   (may be NULL). */
MGT_NODISCARD mgt_status mgt_task_set_read(int task, const char *path, mgt_tokenizer *tok,
                                           int skip_bad, FILE *log, mgt_task_set **out);
void mgt_task_set_destroy(mgt_task_set **s);
int64_t mgt_task_set_size(const mgt_task_set *s);    /* examples */
int64_t mgt_task_set_skipped(const mgt_task_set *s); /* records skipped */
const char *mgt_task_set_path(const mgt_task_set *s);
/* The label of example i. */
int mgt_task_set_label(const mgt_task_set *s, int64_t i);
/* Writes the mgt_task_rows(task) rows (mgt_bert_row_ints(T) each, data.h) of example i for a
   sequence length T: ids, token types, labels -1, the real length, and the example's label in
   the order slot. */
void mgt_task_set_encode(const mgt_task_set *s, int64_t i, int T, int32_t *rows);

/* The training source of `sets`: epoch e is a permutation of all their examples drawn from
   (seed, e); global sample i is example perm_{i / per_epoch}[i mod per_epoch] where per_epoch
   drops the last partial global batch as Megatron-LM does. get() writes mgt_task_rows rows
   per sample. The sets are borrowed. */
MGT_NODISCARD mgt_status mgt_task_train_source(mgt_task_set *const *sets, int n, int task,
                                               uint64_t seed, int64_t per_epoch, mgt_data *out);

/* A fine-tuning run's data: the training sets of cfg->train_data and the validation sets of
   cfg->valid_data, read with the tokenizer of cfg (--tokenizer-type, --vocab-file). */
typedef struct mgt_task_data {
  int task;
  mgt_task_set **train, **valid;
  int n_train, n_valid;
  int64_t train_examples;
} mgt_task_data;

/* Reads every set (each rank reads them all: the sets are text, small beside a model). Errors
   name the file and line. Not collective. */
MGT_NODISCARD mgt_status mgt_task_data_open(const mgt_config *cfg, FILE *log, mgt_task_data *out);
void mgt_task_data_close(mgt_task_data *d);

#ifdef __cplusplus
}
#endif
