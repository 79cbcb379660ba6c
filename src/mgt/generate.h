/* Text generation from a checkpoint: `mgt generate`. */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_generate_opts {
  char load[MGT_PATH_MAX];
  int64_t ckpt_iteration;
  char prompt[16384];
  char prompt_file[MGT_PATH_MAX];
  int max_new_tokens;
  int greedy;
  double temperature;
  int top_k;    /* 0: off */
  double top_p; /* 0: off */
  uint64_t seed;
  int tensor_model_parallel_size; /* 0: every rank */
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type; /* -1: the checkpoint's */
  int device;         /* MGT_DEVICE_* */
  int bf16, fp16;     /* the GEMM inputs' precision (default fp32) */
  int cpu_gemm;       /* MGT_CPU_GEMM_*; -1: native under --bf16 where the CPU can */
} mgt_generate_opts;

void mgt_generate_defaults(mgt_generate_opts *o);
MGT_NODISCARD mgt_status mgt_generate_parse(mgt_generate_opts *o, int argc, char **argv, int first,
                                            int *help);
void mgt_generate_usage(FILE *f);

/* Loads the checkpoint with every rank of world as one tensor-parallel group and writes the
   prompt and its continuation to `out` (rank 0), token by token, with a key/value cache. A
   summary goes to `info`. Collective over world; errors are agreed. */
MGT_NODISCARD mgt_status mgt_generate_run(const mgt_generate_opts *o, MPI_Comm world, FILE *out,
                                          FILE *info);

#ifdef __cplusplus
}
#endif
