/* Sharded checkpoints in one HDF5 file per saved iteration (docs/checkpoint-format.md):
   every tensor of a state list (include/mgt/state.h) once, at its logical unpadded shape,
   written by the ranks that hold the primary copy with collective hyperslab writes; read back
   by every rank for the slabs of its own list, so a job may resume on another (tp, dp). This
   module knows no model and no optimizer: it saves and loads whatever the list names. */
#pragma once

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where training stands, beside the tensors: the root attributes of the file. */
typedef struct mgt_ckpt_state {
  int64_t iteration;
  uint64_t consumed_samples;
  int64_t optimizer_steps;
  uint64_t seed;
  /* the fp16 loss scaler (loss_scale 0: none saved, as in checkpoints of fp32/bf16 runs) */
  double loss_scale;
  int64_t loss_scale_growth, loss_scale_hysteresis;
  int64_t has_optimizer; /* the list holds the optimizer's tensors */
  /* the layout that saved it (information only: any layout loads it) */
  int64_t tensor_model_parallel_size, data_parallel_size;
  /* validation samples consumed so far (Megatron-LM's consumed_valid_samples); -1: not recorded
     (older checkpoints, whose runs validated on the same samples every time) */
  int64_t consumed_valid_samples;
  /* iterations, and their samples, whose update was skipped (an fp16 overflow, a non-finite
     loss): the learning-rate schedule does not advance on them (Megatron-LM's); stored where
     not 0 (older checkpoints: 0, as their runs counted every iteration) */
  int64_t lr_skipped_iterations, lr_skipped_samples;
} mgt_ckpt_state;

/* The per-tensor checksum: the sum mod 2^64 over elements of h(i, b), where i is the element's
   index in the logical tensor (row-major), b the bits of its float32 value, and
   h(i, b) = fmix64(fmix64(i + 1) ^ b) with MurmurHash3's 64-bit finalizer. The sum does not
   depend on how the tensor is split, so shards can be checked separately and added. */
uint64_t mgt_ckpt_hash(uint64_t index, float value);

/* Writes DIR/iter_NNNNNNN.h5 (through a temporary file, renamed when complete) and then
   points DIR/latest at it: every tensor of `tensors`, the run's configuration `config` and the
   model's spec `model` (texts, each stored with its checksum; mgt_config_to_text,
   mgt_model_spec_to_text), *state as attributes. The ranks holding primary slabs write them; the
   rest wait. Rank 0 of `world` notes the save on `log` (may be NULL). Collective over `world`;
   errors are agreed. */
MGT_NODISCARD mgt_status mgt_ckpt_save(const char *dir, MPI_Comm world, const mgt_state *tensors,
                                       const char *config, const char *model,
                                       const mgt_ckpt_state *state, FILE *log);

/* Makes DIR ready to take checkpoints of `bytes` each, before the first iteration rather than
   at the first save: creates it (and missing parents), checks it is a writable directory with
   room for one checkpoint, and locks it for this job with DIR/mgt.lock (host, pid, Slurm job).
   A lock held by a live job is refused, naming it; one left by a process that is gone on this
   host, or by this same Slurm job before a requeue, is taken over. *lock (0 or 1) says whether
   this rank holds the lock, for mgt_ckpt_unlock. Collective over world; errors are agreed. */
MGT_NODISCARD mgt_status mgt_ckpt_prepare_dir(const char *dir, MPI_Comm world, uint64_t bytes,
                                              int *lock);
/* Removes the lock taken by mgt_ckpt_prepare_dir (when *lock), and clears *lock. */
void mgt_ckpt_unlock(const char *dir, int *lock);
/* Bytes of a checkpoint of `tensors` (data plus room for metadata). Not collective. */
uint64_t mgt_ckpt_bytes(const mgt_state *tensors);

/* Removes all but the newest `keep` checkpoint files iter_NNNNNNN.h5 of DIR, never the one
   `latest` names and never a file being written (*.tmp). Rank 0's business: not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_prune(const char *dir, int keep, FILE *log);

/* Whether --load src holds no checkpoint yet: a directory without a `latest` file, or a path
   that does not exist (and does not name a file: no .h5). The first run of Megatron-LM's
   auto-resume (--save X --load X) starts from scratch there. Not collective. */
int mgt_ckpt_none_yet(const char *src);
/* The checkpoint file of DIR (its `latest`, or iteration K when K >= 0), or FILE itself.
   Errors name what is missing. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_resolve(const char *dir_or_file, int64_t iteration, char *path,
                                          size_t n);

/* Reads the configuration text and, when model is not NULL, the model section (format 3, else
   *model = NULL), each checked against its checksum (malloc'd, free with mgt_free), and the
   training state (range-checked; state may be NULL) stored in a checkpoint file. What the texts
   mean is the caller's (mgt_config_from_text, mgt_model_spec_from_text). Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_read_config_text(const char *path, char **config, char **model,
                                                   mgt_ckpt_state *state);

/* Loads every tensor of `tensors` from a checkpoint file: each rank reads its own slabs, and
   each copy is checked against the stored checksums (the slabs of a copy add up to them).
   *state receives the stored state. A missing tensor, a wrong shape or a failed checksum is
   an MGT_ERR_INPUT naming the tensor. Collective over `world`; errors are agreed. */
MGT_NODISCARD mgt_status mgt_ckpt_load(const char *path, MPI_Comm world, const mgt_state *tensors,
                                       mgt_ckpt_state *state);

/* Reads every tensor of a checkpoint file and recomputes its checksum; with `expect` (the list
   the stored configuration implies, whole tensors: mgt_gpt_describe at one rank) also checks
   that each expected tensor is there with its logical shape as float32 and that there is no
   other. Writes one line per failure to f and sets *damaged to their number. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_verify(const char *path, const mgt_state *expect, FILE *f,
                                         int *damaged);

/* Lists the tensors of a checkpoint file (name, shape) on f, and the elements of those under
   /model. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_list(const char *path, FILE *f, int64_t *model_elements);

#ifdef __cplusplus
}
#endif
