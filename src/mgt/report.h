/* What a training run reports, apart from the training itself: each log interval's line (in
   Megatron-LM's format), the metrics file (JSON lines), TensorBoard events and the validation
   lines. Rank 0 writes; on the other ranks every call only keeps the interval's sums. */
#pragma once

#include <stdio.h>

#include "mgt/model.h"
#include "mgt/train.h"

typedef struct mgt_report mgt_report;

/* Creates the sinks of run (--metrics-file, --tensorboard-dir) on the root rank; log (root
   only) takes the text lines. An iteration does `flops` model FLOPs on `tokens` tokens over
   `ranks` ranks. run must outlive the report. */
MGT_NODISCARD mgt_status mgt_report_open(const mgt_run *run, const mgt_model_spec *desc,
                                         double flops, double tokens, int ranks, int root,
                                         FILE *log, mgt_report **out);
/* Adds an iteration that took `seconds` to the current interval. */
void mgt_report_step(mgt_report *r, const mgt_step_stats *s, double seconds);
/* The interval's means up to iteration s (log line, TensorBoard, metrics), then a new one. */
MGT_NODISCARD mgt_status mgt_report_interval(mgt_report *r, const mgt_step_stats *s);
/* A pretraining validation (mgt_trainer_evaluate). */
MGT_NODISCARD mgt_status mgt_report_valid(mgt_report *r, int64_t iteration,
                                          const mgt_valid_stats *v);
/* A fine-tuning validation set at `path`, one of n_sets; then, with several sets, all of
   them together (right of all). */
MGT_NODISCARD mgt_status mgt_report_task_set(mgt_report *r, int64_t iteration, const char *path,
                                             int n_sets, const mgt_task_score *sc);
MGT_NODISCARD mgt_status mgt_report_task_overall(mgt_report *r, int64_t iteration, int64_t right,
                                                 int64_t all);
/* Closes the sinks and frees r; a failed write of the metrics file is the result when st is
   MGT_OK, otherwise st. */
MGT_NODISCARD mgt_status mgt_report_close(mgt_report **r, mgt_status st);
