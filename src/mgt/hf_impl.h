/* Private to the Hugging Face export and import (src/cmd/hf.c, and src/cmd/hf_llama.c for
   Llama): the plan of Hugging Face tensors and the helpers both files use. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "mgt/config.h"
#include "mgt/json.h"
#include "mgt/model.h"
#include "mgt/state.h"

/* One Hugging Face tensor: a contiguous slice of one of our whole tensors, stored in HF's
   shape, transposed for GPT-2's Conv1D (HF (in, out), ours (out, in)). ours < 0: a tensor we do
   not have, zeros (the token types of a BERT without them). */
typedef struct hf_piece {
  char name[MGT_STATE_NAME];
  int ours;
  int64_t offset, n;
  int ndim;
  int64_t shape[3];
  int transpose;
} hf_piece;

typedef struct hf_plan {
  hf_piece *p;
  int n, cap;
} hf_plan;

/* The model's tensors, indexed by name: a plan looks up every tensor once. */
typedef struct hf_names {
  const mgt_state *s;
  mgt_state_index ix;
} hf_names;

/* The sizes, in the ranges of their flags (src/base/config.c), so that whatever is imported loads.
 */
enum {
  HF_MAX_HIDDEN = 1 << 20,
  HF_MAX_LAYERS = 65535,
  HF_MAX_POSITIONS = 1 << 20,
  HF_MAX_VOCAB = 1 << 30,
  HF_MAX_FFN = 1 << 22
};

/* ---- hf.c ---- */

/* Appends a Hugging Face tensor: `n` elements of our tensor `ours` from `offset`, in HF's shape. */
mgt_status hf_plan_add(hf_plan *pl, const char *name, int ours, int64_t offset, int ndim,
                       const int64_t *shape, int transpose);
/* The index of our tensor `name` (without "model/"), or -1. */
int hf_find(const hf_names *w, const char *name);
/* Our tensor `ours` whole as `hf`, in its own shape (flat: as one vector; conv1d: transposed). */
mgt_status hf_plan_whole(hf_plan *pl, const hf_names *w, const char *hf, const char *ours, int flat,
                         int conv1d);
/* Writes `text` to path, published durably. */
mgt_status hf_write_text(const char *path, const char *text);
/* config.json's boolean `key` (dflt when absent or null). */
mgt_status hf_bool(const struct mgt_json *conf, const char *path, const char *key, int dflt,
                   int *out);
/* config.json's integer or number `key` (dflt when absent or null) within [lo, hi]. */
mgt_status hf_int(const mgt_json *conf, const char *path, const char *key, int dflt, int lo, int hi,
                  int *out);
mgt_status hf_num(const mgt_json *conf, const char *path, const char *key, double dflt, double lo,
                  double hi, double *out);

/* ---- hf_llama.c ---- */

/* Whether a description is Llama's: a causal LM with rotary positions, RMSNorm and SwiGLU. */
int hf_is_llama(const mgt_model_spec *d);
mgt_status hf_plan_llama(hf_plan *pl, const mgt_config *c, const mgt_model_spec *d,
                         const hf_names *w);
/* config.json of LlamaForCausalLM, with the tokenizer's bos and eos ids (-1: null). */
char *hf_llama_config_json(const mgt_config *c, const mgt_model_spec *d, int64_t iteration,
                           int32_t bos, int32_t eos);
/* The Hugging Face tokenizer at `path` beside an export, and its bos and eos ids. */
void hf_copy_tokenizer(const char *path, const char *out_dir, FILE *log, int32_t *bos,
                       int32_t *eos);
mgt_status hf_read_llama_config(const mgt_json *conf, const char *path, const char *model_type,
                                mgt_config *cfg);
/* A Llama directory's tokenizer.json as the checkpoint's tokenizer. */
mgt_status hf_adopt_tokenizer(const char *hf_dir, mgt_config *cfg, FILE *log);
