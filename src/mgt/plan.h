/* mgt plan: the layouts of a model that fit a machine's GPU memory, ranked by an estimated
   step time (docs/performance.md has the model and its check against the paper). */
#pragma once

#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_plan_opts {
  /* the model and the run's sizes, from mgt train's own flags (those it marks SPEC or PLAN:
     declared once, so both accept and refuse the same values) */
  mgt_config m;
  int nodes, gpus_per_node;
  char gpu_memory[64];
  double memory_bytes; /* parsed from gpu_memory */
  double gemm_tflops, nvlink_gbps, network_gbps, memory_gbps, dp_overlap;
  int comm_bytes;
  int tp, micro_batch; /* 0: every one */
  int recompute;       /* 0: try each; else 1 + MGT_RECOMPUTE_* */
  int distopt_only;
  int sp_only; /* only layouts with --sequence-parallel */
  int top;
  int json; /* one JSON object per layout instead of the table */
} mgt_plan_opts;

/* One layout and its estimate. Times in seconds per iteration; memory in bytes per GPU. */
typedef struct mgt_plan_row {
  int tp, dp, micro_batch, recompute, distopt, sp;
  int ep;           /* expert parallelism (1: none) */
  double a2a_bytes; /* sent per GPU and step by the experts' all-to-alls */
  double a2a_s;     /* their time (not overlapped) */
  double memory, model_flops;
  double params, grads, optimizer, activations; /* the parts of memory */
  double compute_s, elementwise_s, tp_comm_s, dp_comm_s, dp_exposed_s, step_s;
  double ideal_s;            /* the model's FLOPs at the GEMM rate on every GPU, nothing else */
  double tp_bytes, dp_bytes; /* sent per GPU and step, by each parallelism */
  double intra_bytes, inter_bytes; /* the same inside a node and across the network */
} mgt_plan_row;

void mgt_plan_defaults(mgt_plan_opts *o);
MGT_NODISCARD mgt_status mgt_plan_parse(mgt_plan_opts *o, int argc, char **argv, int first,
                                        int *help);
void mgt_plan_usage(FILE *f);
/* The training configuration of one layout (what mgt train would be given). */
void mgt_plan_config(const mgt_plan_opts *o, int tp, int micro_batch, int recompute, int distopt,
                     int sp, mgt_config *c);
/* The memory (this project's plan, as --dry-run) and the step-time estimate of c on dp
   data-parallel groups. */
void mgt_plan_estimate(const mgt_plan_opts *o, const mgt_config *c, int dp, mgt_plan_row *r);
/* Bytes one rank sends per step, at `elem` bytes per element: the tensor-parallel collectives
   (ring all-reduces, or the all-gathers and reduce-scatters of sequence parallelism: the same
   volume), the data-parallel gradient reduction (the experts' over dp / ep ranks) and the
   experts' all-to-alls. */
typedef struct mgt_plan_bytes {
  double tp, dp, edp, a2a; /* dp: the parameters but the experts'; edp: the experts' */
} mgt_plan_bytes;
void mgt_plan_traffic(const mgt_config *c, int dp, int elem, mgt_plan_bytes *b);
/* Every layout that fits, fastest first, to `out`; an input error when none fits. */
MGT_NODISCARD mgt_status mgt_plan_run(const mgt_plan_opts *o, FILE *out);

#ifdef __cplusplus
}
#endif
