/* The `mgt` command line: subcommands over one MPI job. */
#pragma once

#include <mpi.h>

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/dataset.h"
#include "mgt/flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `mgt <subcommand> [flags]` on the ranks of `world` (MPI already initialized) and
   returns the process exit status: 0 on success, 2 for bad input found identically on
   every rank. A failure that may differ between ranks is printed by the failing rank and
   ends the job with MPI_Abort. Collective over `world`. */
int mgt_cli_main(int argc, char **argv, MPI_Comm world);

/* Reports a failure of a command and returns its exit status. Input errors found before any
   collective state are the same on every rank: rank 0 prints and all return 2 (`agreed`).
   Anything else is printed by the failing rank and aborts the job. */
int mgt_cli_fail(mgt_status st, int rank, MPI_Comm world, int agreed);

/* Ranks of this node in `world`. Collective over `world`. */
int mgt_cli_local_ranks(MPI_Comm world);
/* Rank 0 prints each line of notes ("--flag: why") as "mgt: note: ..." on stderr: the
   Megatron-LM flags a command took though they change nothing, said once. */
void mgt_cli_print_notes(const char *notes, int rank);

/* `mgt train ...` and `mgt finetune ...` (src/cmd/train_cmd.c). Collective over `world`. */
int mgt_cli_train(int argc, char **argv, MPI_Comm world);

/* `mgt dataset info ...` (src/cmd/dataset_cmd.c). Collective over `world`. */
int mgt_cli_dataset(int argc, char **argv, MPI_Comm world);

/* `mgt ckpt ...` (src/cmd/ckpt_cmd.c). Collective over `world`. */
int mgt_cli_ckpt(int argc, char **argv, MPI_Comm world);

/* Chooses OpenMP threads per rank when OMP_NUM_THREADS is unset: the CPUs this rank is
   bound to, or the node's CPUs shared among its ranks. Collective over `world`. */
void mgt_cli_configure_threads(MPI_Comm world);

/* Flag table entries shared by commands: a checkpoint to read (struct S has fields load and
   ckpt_iteration), a device (device), and a tokenizer (vocab_file, merge_file,
   tokenizer_type), `note` added to the tokenizer flags' help (as " (default: the
   checkpoint's)"). */
#define MGT_FIELD_SIZE(S, f) sizeof(((S *)0)->f)
#define MGT_CHECKPOINT_FLAGS(S)                                                                    \
  {"--load",                                                                                       \
   MGT_FLAG_STR,                                                                                   \
   offsetof(S, load),                                                                              \
   0,                                                                                              \
   0,                                                                                              \
   "checkpoint directory (its latest) or file",                                                    \
   NULL,                                                                                           \
   MGT_FIELD_SIZE(S, load),                                                                        \
   0},                                                                                             \
  {                                                                                                \
    "--ckpt-iteration", MGT_FLAG_INT64, offsetof(S, ckpt_iteration), -1, 9e15,                     \
        "load this iteration instead of the latest", NULL, 0, 0                                    \
  }
#define MGT_DEVICE_FLAG(S)                                                                         \
  {                                                                                                \
    "--device", MGT_FLAG_ENUM, offsetof(S, device), 0, 0, "cpu, or cuda (one GPU per rank)",       \
        mgt_device_names, 0, 0                                                                     \
  }
/* The precision a checkpoint runs in (fields bf16, fp16, cpu_gemm), whatever it was trained in. */
#define MGT_PRECISION_FLAGS(S)                                                                     \
  {"--bf16",                                                                                       \
   MGT_FLAG_BOOL,                                                                                  \
   offsetof(S, bf16),                                                                              \
   0,                                                                                              \
   1,                                                                                              \
   "bf16 GEMM inputs (as mgt train --bf16); default fp32",                                         \
   NULL,                                                                                           \
   0,                                                                                              \
   0},                                                                                             \
      {"--fp16",                                                                                   \
       MGT_FLAG_BOOL,                                                                              \
       offsetof(S, fp16),                                                                          \
       0,                                                                                          \
       1,                                                                                          \
       "fp16 GEMM inputs (as mgt train --fp16)",                                                   \
       NULL,                                                                                       \
       0,                                                                                          \
       0},                                                                                         \
  {                                                                                                \
    "--cpu-gemm", MGT_FLAG_ENUM, offsetof(S, cpu_gemm), 0, 0,                                      \
        "--bf16 on the CPU: native or emulated (as mgt train)", mgt_cpu_gemm_names, 0, 0           \
  }
#define MGT_TOKENIZER_FLAGS(S, note)                                                               \
  {"--vocab-file",                                                                                 \
   MGT_FLAG_STR,                                                                                   \
   offsetof(S, vocab_file),                                                                        \
   0,                                                                                              \
   0,                                                                                              \
   "GPT-2 vocabulary (gpt2-vocab.json)" note,                                                      \
   NULL,                                                                                           \
   MGT_FIELD_SIZE(S, vocab_file),                                                                  \
   0},                                                                                             \
      {"--tokenizer-model",                                                                        \
       MGT_FLAG_STR,                                                                               \
       offsetof(S, vocab_file),                                                                    \
       0,                                                                                          \
       0,                                                                                          \
       "",                                                                                         \
       NULL,                                                                                       \
       MGT_FIELD_SIZE(S, vocab_file),                                                              \
       0},                                                                                         \
      {"--merge-file",                                                                             \
       MGT_FLAG_STR,                                                                               \
       offsetof(S, merge_file),                                                                    \
       0,                                                                                          \
       0,                                                                                          \
       "GPT-2 merges (gpt2-merges.txt)" note,                                                      \
       NULL,                                                                                       \
       MGT_FIELD_SIZE(S, merge_file),                                                              \
       0},                                                                                         \
  {                                                                                                \
    "--tokenizer-type", MGT_FLAG_ENUM, offsetof(S, tokenizer_type), 0, 0, MGT_TOKENIZER_HELP note, \
        mgt_tokenizer_names, 0, 0                                                                  \
  }

/* mgt preprocess: its flags (the work is mgt_preprocess_run, include/mgt/dataset.h). */
void mgt_preprocess_defaults(mgt_preprocess_opts *o);
/* Parses `mgt preprocess` flags; *help is set by --help. Not collective. */
MGT_NODISCARD mgt_status mgt_preprocess_parse(mgt_preprocess_opts *o, int argc, char **argv,
                                              int first, int *help);
void mgt_preprocess_usage(FILE *f);

#ifdef __cplusplus
}
#endif
