/* Sharded checkpoints in one HDF5 file per saved iteration (docs/checkpoint-format.md):
   every tensor once, at its logical unpadded shape, written by the tensor-parallel ranks of
   data-parallel replica 0 with collective hyperslab writes; read back by every rank for the
   layout of the job that loads, so a job may resume on another (tp, dp). */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where training stands, beside the tensors. */
typedef struct mgt_ckpt_state {
  int64_t iteration;
  uint64_t consumed_samples;
  int64_t optimizer_steps;
  uint64_t seed;
  /* the fp16 loss scaler (loss_scale 0: none saved, as in checkpoints of fp32/bf16 runs) */
  double loss_scale;
  int64_t loss_scale_growth, loss_scale_hysteresis;
} mgt_ckpt_state;

/* The per-tensor checksum: the sum mod 2^64 over elements of h(i, b), where i is the element's
   index in the logical tensor (row-major), b the bits of its float32 value, and
   h(i, b) = fmix64(fmix64(i + 1) ^ b) with MurmurHash3's 64-bit finalizer. The sum does not
   depend on how the tensor is split, so shards can be checked separately and added. */
uint64_t mgt_ckpt_hash(uint64_t index, float value);

/* Writes DIR/iter_NNNNNNN.h5 (through a temporary file, renamed when complete) and then
   points DIR/latest at it. `opt` NULL leaves the optimizer state out. Rank 0 notes the save
   on `log` (may be NULL). Collective over the grid's world. */
MGT_NODISCARD mgt_status mgt_ckpt_save(const char *dir, const mgt_config *cfg, const mgt_grid *grid,
                                       mgt_gpt *model, mgt_optim *opt, const mgt_ckpt_state *state,
                                       FILE *log);

/* The checkpoint file of DIR (its `latest`, or iteration K when K >= 0), or FILE itself.
   Errors name what is missing. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_resolve(const char *dir_or_file, int64_t iteration, char *path,
                                          size_t n);

/* Reads the configuration and training state stored in a checkpoint file. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_read_config(const char *path, mgt_config *cfg,
                                              mgt_ckpt_state *state);

/* Refuses (MGT_ERR_INPUT, listing every difference) a checkpoint whose model differs from
   cfg's: layers, hidden size, heads, FFN size, vocabulary, positions. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_check_model(const char *path, const mgt_config *cfg);

/* Loads the model (and, with `opt`, the optimizer moments) from a checkpoint file: each rank
   reads its own slices for the grid's layout and the checksums are verified tensor by
   tensor. *state receives the stored state. Errors are agreed across ranks. Collective over
   the grid's world. */
MGT_NODISCARD mgt_status mgt_ckpt_load(const char *path, const mgt_grid *grid, mgt_gpt *model,
                                       mgt_optim *opt, mgt_ckpt_state *state);

/* Reads every tensor of a checkpoint file and recomputes its checksum; writes one line per
   tensor that fails to f and sets *damaged to their number. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_verify(const char *path, FILE *f, int *damaged);

/* Prints iteration, layout, configuration and tensors of a checkpoint. Not collective. */
MGT_NODISCARD mgt_status mgt_ckpt_info(const char *path, FILE *f);

/* Writes OUT/model.safetensors (the transformer.* names of Hugging Face GPT-2, Conv1D
   weights as (in, out), float32, vocabulary padding left out) and OUT/config.json from a
   checkpoint file. Runs on the calling process alone. */
MGT_NODISCARD mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir, FILE *log);
/* Builds a checkpoint (iteration 0, no optimizer state) in save_dir from a Hugging Face GPT-2
   directory (config.json, model.safetensors in float32, float16 or bfloat16). Runs on the
   calling process alone. */
MGT_NODISCARD mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log);

#ifdef __cplusplus
}
#endif
