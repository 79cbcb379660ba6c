/* The `mgt tokenize` command: encode JSON lines to ids or decode ids to JSON lines. */
#pragma once

#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_tokenize_opts {
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type;
  char input[MGT_PATH_MAX];
  char json_keys[256];
  int decode;
  char chat_template[64]; /* conversations: a chat format's name, or "auto" */
} mgt_tokenize_opts;

void mgt_tokenize_defaults(mgt_tokenize_opts *o);
MGT_NODISCARD mgt_status mgt_tokenize_parse(mgt_tokenize_opts *o, int argc, char **argv, int first,
                                            int *help);
void mgt_tokenize_usage(FILE *f);
/* Encodes each JSON line of the input (its --json-keys string) into a line of
   space-separated ids, or with decode each line of ids into {"text": ...}; with a chat template
   each conversation (include/mgt/chat.h) into {"text": rendered, "ids": [...], "loss_mask":
   [...]}. Not collective. */
MGT_NODISCARD mgt_status mgt_tokenize_run(const mgt_tokenize_opts *o, FILE *out);

#ifdef __cplusplus
}
#endif
