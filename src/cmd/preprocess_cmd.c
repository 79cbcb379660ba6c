/* The flags of `mgt preprocess` (the work is io/data/preprocess.c's). */
#include <stddef.h>
#include <string.h>

#include "mgt/chat.h"
#include "mgt/cli.h"
#include "mgt/dataset.h"
#include "mgt/tokenizer.h"

static const char *const impls[] = {"hdf5", "mmap", NULL};

#define OFF(f) offsetof(mgt_preprocess_opts, f)
#define SZ(f) sizeof(((mgt_preprocess_opts *)0)->f)
static const mgt_flag flags[] = {
    {"--input", MGT_FLAG_LIST, OFF(input), 0, 0,
     "input files: .jsonl/.json hold one JSON document per line, others are one document each",
     NULL, SZ(input), 0},
    {"--output-prefix", MGT_FLAG_STR, OFF(output_prefix), 0, 0, "write PREFIX.h5", NULL,
     SZ(output_prefix), 0},
    MGT_TOKENIZER_FLAGS(mgt_preprocess_opts, ""),
    {"--json-keys", MGT_FLAG_STR, OFF(json_keys), 0, 0, "the key of the text in each JSON line",
     NULL, SZ(json_keys), 0},
    {"--split-sentences", MGT_FLAG_BOOL, OFF(split_sentences), 0, 1,
     "split documents into sentences (BERT): the rule-based splitter of docs/data-format.md", NULL,
     0, 0},
    {"--append-eod", MGT_FLAG_BOOL, OFF(append_eod), 0, 1, "end every document with <|endoftext|>",
     NULL, 0, 0},
    {"--skip-bad-lines", MGT_FLAG_BOOL, OFF(skip_bad_lines), 0, 1,
     "count and skip malformed JSON lines and lines without the key, instead of stopping", NULL, 0,
     0},
    {"--log-interval", MGT_FLAG_INT, OFF(log_interval_s), 0, 1 << 20,
     "seconds between progress lines when stderr is not a terminal (on a terminal one line "
     "is rewritten in place)",
     NULL, 0, 0},
    {"--dataset-impl", MGT_FLAG_ENUM, OFF(dataset_impl), 0, 0,
     "hdf5 (PREFIX.h5, this project's) or mmap (Megatron-LM's PREFIX_KEY_LEVEL.bin and .idx, "
     "KEY the --json-keys, LEVEL document or sentence, as its preprocess_data.py names them)",
     impls, 0, 0},
    {"--chat-template", MGT_FLAG_STR, OFF(chat_template), 0, 0,
     "the lines are conversations ({\"messages\": ...} or {\"segments\": ...}, docs/chat.md), "
     "rendered as this chat format (llama3, chatml or qwen3, llama2, mistral; auto: as the "
     "tokenizer's tokenizer_config.json names it) and stored with a loss mask",
     NULL, SZ(chat_template), 0},
    {"--seq-length", MGT_FLAG_INT, OFF(seq_length), 0, 1 << 24,
     "report how the documents would pack whole into samples of this + 1 tokens (mgt train "
     "--sft's packing, in the input's order): the share of the slots they fill",
     NULL, 0, 0},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

#define RANKS "mgt preprocess tokenizes on its MPI ranks (mpiexec -n N mgt preprocess ...)"
/* Megatron-LM's tools/preprocess_data.py flags this command answers beyond its table. */
static const mgt_foreign_flag megatron[] = {
    {"--workers", 1, MGT_FOREIGN_NOTE, NULL, RANKS},
    {"--partitions", 1, MGT_FOREIGN_NOTE, NULL, RANKS},
    {"--keep-sequential-samples", 0, MGT_FOREIGN_NOTE, NULL,
     "mgt preprocess keeps the documents in the order of its inputs always"},
    {"--lang", 1, MGT_FOREIGN_AT, "english",
     "mgt splits sentences (--split-sentences) by its own English rules"},
};

void mgt_preprocess_defaults(mgt_preprocess_opts *o) {
  memset(o, 0, sizeof *o);
  strcpy(o->json_keys, "text");
  o->log_interval_s = 0; /* MGT_PROGRESS_SECONDS, else 10 */
}

mgt_status mgt_preprocess_parse(mgt_preprocess_opts *o, int argc, char **argv, int first,
                                int *help) {
  MGT_CHECK(mgt_flags_parse_foreign(flags, N_FLAGS, megatron,
                                    (int)(sizeof megatron / sizeof megatron[0]), o, argc, argv,
                                    first, "preprocess", help, o->notes, sizeof o->notes));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->input[0], "--input: give one or more input files");
  MGT_REQUIRE(o->output_prefix[0], "--output-prefix: give the prefix of the output file");
  MGT_REQUIRE(o->tokenizer_type != MGT_TOKENIZER_NULL, "%s", MGT_NULL_TOKENIZER_WHY);
  MGT_REQUIRE(o->tokenizer_type == MGT_TOKENIZER_BYTES || o->vocab_file[0], "%s needs %s",
              mgt_tokenizer_names[o->tokenizer_type], mgt_tokenizer_file_flag(o->tokenizer_type));
  MGT_REQUIRE(o->tokenizer_type != MGT_TOKENIZER_GPT2 || o->merge_file[0],
              "GPT2BPETokenizer needs --vocab-file and --merge-file");
  MGT_REQUIRE(!o->append_eod || (o->tokenizer_type != MGT_TOKENIZER_BERT_LOWER &&
                                 o->tokenizer_type != MGT_TOKENIZER_BERT_CASED),
              "--append-eod: BERT's WordPiece has no end-of-document token (documents are kept "
              "apart by document_offsets)");
  MGT_REQUIRE(strlen(o->output_prefix) + 8 < MGT_PATH_MAX, "--output-prefix is too long");
  if (o->chat_template[0]) {
    int f;
    if (strcmp(o->chat_template, "auto") != 0)
      MGT_CHECK(mgt_chat_format_named(o->chat_template, &f));
    MGT_REQUIRE(!o->split_sentences && !o->append_eod,
                "--chat-template: conversations are not split into sentences, and their format "
                "writes their own ends (no --split-sentences, --append-eod)");
    MGT_REQUIRE(o->tokenizer_type != MGT_TOKENIZER_BERT_LOWER &&
                    o->tokenizer_type != MGT_TOKENIZER_BERT_CASED,
                "--chat-template: WordPiece cannot say where its tokens are in the text");
    if (!strcmp(o->json_keys, "text")) snprintf(o->json_keys, sizeof o->json_keys, "messages");
  }
  return MGT_OK;
}

void mgt_preprocess_usage(FILE *f) {
  mgt_preprocess_opts d;
  mgt_preprocess_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "preprocess", f);
}
