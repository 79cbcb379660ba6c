/* Hugging Face GPT-2 export and import: a checkpoint's model tensors as model.safetensors with
   the transformer.* names (Conv1D weights stored (in, out), the transpose of our (out, in)) and
   config.json, and back. Named tensors are read from and written to the checkpoint file
   directly: no grid, backend or model is created. Run on the calling process alone. */
#pragma once

#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes OUT/model.safetensors (float32, vocabulary padding left out) and OUT/config.json from
   a checkpoint file, each published durably. */
MGT_NODISCARD mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir, FILE *log);
/* Builds a checkpoint (iteration 0, no optimizer state) in save_dir from a Hugging Face GPT-2
   directory (config.json, model.safetensors in float32, float16 or bfloat16). */
MGT_NODISCARD mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log);

#ifdef __cplusplus
}
#endif
