/* Hugging Face export and import: a checkpoint's model tensors under Hugging Face's names, as
   GPT2LMHeadModel (Conv1D weights stored (in, out), the transpose of our (out, in)), BERT
   (MegatronBert or Bert, src/cmd/hf.c says which) or LlamaForCausalLM, with config.json, and
   back. Named tensors are read from and written to the checkpoint file
   directly: no grid, backend or model is created. Run on the calling process alone. */
#pragma once

#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes OUT/model.safetensors, or beyond max_shard_bytes several files with their index
   (float32, vocabulary padding left out), and OUT/config.json from a checkpoint file, each
   published durably. */
MGT_NODISCARD mgt_status mgt_hf_export(const char *ckpt_path, const char *out_dir,
                                       size_t max_shard_bytes, FILE *log);
/* Builds a checkpoint (iteration 0, no optimizer state) in save_dir from a Hugging Face
   directory (config.json, model.safetensors or sharded files with their index, in float32,
   float16 or bfloat16). */
MGT_NODISCARD mgt_status mgt_hf_import(const char *hf_dir, const char *save_dir, FILE *log);

#ifdef __cplusplus
}
#endif
