/* A checkpoint's model opened on the job's layout, for the commands that use a trained model
   (eval, generate): the checkpoint resolved and its configuration read, then the grid, the
   device, the model and its weights. Two steps, so that a command can read and check its
   inputs with the model's configuration before anything is allocated. */
#pragma once

#include <mpi.h>
#include <stdint.h>

#include "mgt/checkpoint.h"
#include "mgt/config.h"
#include "mgt/device.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the job asks for. */
typedef struct mgt_session_opts {
  const char *load;       /* checkpoint directory (its latest) or file */
  int64_t ckpt_iteration; /* -1: the latest */
  int tensor_parallel;    /* 0: every rank */
  int seq_length;         /* 0: the checkpoint's */
  int micro_batch_size;   /* sequences per forward pass */
  int device;             /* MGT_DEVICE_* */
  int task;               /* MGT_TASK_*: the fine-tuned BERT scored; 0: a GPT */
  int tokenizer_type;     /* -1: the checkpoint's */
  const char *vocab_file; /* "": the checkpoint's (an imported model has none) */
  int bf16, fp16;         /* the GEMM inputs' precision, whatever the checkpoint was trained in */
  int cpu_gemm;           /* MGT_CPU_GEMM_*, -1: native under bf16 where every CPU can */
} mgt_session_opts;

typedef struct mgt_session {
  char path[MGT_PATH_MAX + 64]; /* the checkpoint file */
  mgt_config saved;             /* the checkpoint's configuration */
  mgt_config cfg;               /* the checkpoint's configuration with this job's flags */
  mgt_model_spec spec;          /* the checkpoint's model */
  mgt_model_layout layout;      /* this job's */
  mgt_ckpt_state state;
  mgt_grid *grid;
  mgt_device dev;
  mgt_gpt *model;
  char precision[320]; /* "bf16 on cpu (BLAS: ...; bf16 GEMMs on ...)": for the report lines */
} mgt_session;

/* Resolves and reads the checkpoint and derives s->cfg (dropout off, no data). Errors are
   agreed. Collective over world. */
MGT_NODISCARD mgt_status mgt_session_open_config(mgt_session *s, const mgt_session_opts *o,
                                                 MPI_Comm world);
/* Creates the grid, device and model of s->cfg and loads the checkpoint's weights into it.
   Errors are agreed. Collective over world. */
MGT_NODISCARD mgt_status mgt_session_open_model(mgt_session *s, MPI_Comm world);
struct mgt_tokenizer;
/* The tokenizer of type (MGT_TOKENIZER_*, or -1 for the checkpoint's) with the given files,
   empty ones replaced by the checkpoint's; refused when it has more ids than the model. */
MGT_NODISCARD mgt_status mgt_open_tokenizer(int type, const char *vocab_file,
                                            const char *merge_file, const mgt_config *ck,
                                            struct mgt_tokenizer **tok);
/* Frees what the session holds; collective over its grid's world when a model was opened. */
void mgt_session_close(mgt_session *s);

#ifdef __cplusplus
}
#endif
