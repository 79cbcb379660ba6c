/* mgt tokenize: JSON lines to ids, or ids back to JSON lines, on one rank. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/chat.h"
#include "mgt/cli.h"
#include "mgt/flags.h"
#include "mgt/json.h"
#include "mgt/tokenize.h"
#include "mgt/tokenizer.h"

#define OFF(f) offsetof(mgt_tokenize_opts, f)
#define SZ(f) sizeof(((mgt_tokenize_opts *)0)->f)
static const mgt_flag flags[] = {
    MGT_TOKENIZER_FLAGS(mgt_tokenize_opts, ""),
    {"--input", MGT_FLAG_STR, OFF(input), 0, 0,
     "JSON lines to encode, or id lines to decode "
     "(default: standard input)",
     NULL, SZ(input), 0},
    {"--json-keys", MGT_FLAG_STR, OFF(json_keys), 0, 0, "the key of the text in each JSON line",
     NULL, SZ(json_keys), 0},
    {"--decode", MGT_FLAG_BOOL, OFF(decode), 0, 1,
     "read lines of space-separated ids, write one JSON line of text each", NULL, 0, 0},
    {"--chat-template", MGT_FLAG_STR, OFF(chat_template), 0, 0,
     "read conversations ({\"messages\": ...} or {\"segments\": ...}) and write each as "
     "{\"text\", \"ids\", \"loss_mask\"}, rendered as this format: llama3, chatml (qwen3), "
     "llama2, mistral, or auto (the tokenizer's tokenizer_config.json)",
     NULL, SZ(chat_template), 0},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_tokenize_defaults(mgt_tokenize_opts *o) {
  memset(o, 0, sizeof *o);
  strcpy(o->json_keys, "text");
}

mgt_status mgt_tokenize_parse(mgt_tokenize_opts *o, int argc, char **argv, int first, int *help) {
  MGT_CHECK(mgt_flags_parse(flags, N_FLAGS, o, argc, argv, first, "tokenize", help));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->tokenizer_type != MGT_TOKENIZER_NULL, "%s", MGT_NULL_TOKENIZER_WHY);
  MGT_REQUIRE(o->tokenizer_type == MGT_TOKENIZER_BYTES || o->vocab_file[0], "%s needs %s",
              mgt_tokenizer_names[o->tokenizer_type], mgt_tokenizer_file_flag(o->tokenizer_type));
  MGT_REQUIRE(o->tokenizer_type != MGT_TOKENIZER_GPT2 || o->merge_file[0],
              "GPT2BPETokenizer needs --vocab-file and --merge-file");
  MGT_REQUIRE(!o->chat_template[0] || !o->decode, "--chat-template encodes: not with --decode");
  int f;
  if (o->chat_template[0] && strcmp(o->chat_template, "auto") != 0)
    MGT_CHECK(mgt_chat_format_named(o->chat_template, &f));
  return MGT_OK;
}

void mgt_tokenize_usage(FILE *f) {
  mgt_tokenize_opts d;
  mgt_tokenize_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "tokenize", f);
}

static mgt_status decode_line(mgt_tokenizer *tok, const mgt_tokenize_opts *o, const char *name,
                              size_t line_no, char *line, mgt_ids *ids, char **buf, size_t *cap,
                              FILE *out) {
  ids->n = 0;
  for (char *p = line;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
      p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (!(end != p && errno == 0 && v >= 0 && v < mgt_tok_vocab_size(tok) &&
          (*end == 0 || *end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))) {
      char shown[24]; /* the word as printable ASCII: raw input bytes stay out of the message */
      size_t k = 0;
      for (; k < 20 && p[k] && p[k] != ' ' && p[k] != '\t'; k++)
        shown[k] = p[k] >= 0x20 && p[k] < 0x7f ? p[k] : '?';
      shown[k] = 0;
      MGT_FAIL(MGT_ERR_INPUT, "%s:%zu: '%s' is not a token id in [0, %d)", name, line_no, shown,
               mgt_tok_vocab_size(tok));
    }
    MGT_CHECK(mgt_ids_push(ids, (int32_t)v));
    p = end;
  }
  size_t len = 0;
  if (*buf) (*buf)[0] = 0;
  MGT_CHECK(mgt_tok_decode(tok, ids->ids, ids->n, buf, &len, cap));
  /* valid JSON whatever the ids: a byte that ends no character (a byte-level token's piece of
     one) is U+FFFD, as Hugging Face's decoders give it */
  fputc('{', out);
  mgt_json_write_string(out, o->json_keys);
  fputs(": ", out);
  mgt_json_write_bytes(out, *buf, len);
  fputs("}\n", out);
  return MGT_OK;
}

/* A conversation's text, ids and loss mask as one JSON line. */
static mgt_status chat_line(mgt_tokenizer *tok, int format, const mgt_json *root,
                            mgt_chat_text *text, mgt_ids *ids, uint8_t **mask, size_t *mask_cap,
                            FILE *out) {
  mgt_chat_specials sp;
  MGT_CHECK(mgt_chat_specials_of(tok, &sp));
  MGT_CHECK(mgt_chat_from_json(root, format, sp.bos, sp.eos, 0, text));
  ids->n = 0;
  MGT_CHECK(mgt_chat_encode(tok, text, ids, mask, mask_cap));
  fputs("{\"text\": ", out);
  mgt_json_write_bytes(out, text->s ? text->s : "", text->n);
  fputs(", \"ids\": [", out);
  for (size_t i = 0; i < ids->n; i++)
    fprintf(out, i ? ", %d" : "%d", ids->ids[i]);
  fputs("], \"loss_mask\": [", out);
  for (size_t i = 0; i < ids->n; i++)
    fprintf(out, i ? ", %d" : "%d", (*mask)[i]);
  fputs("]}\n", out);
  return MGT_OK;
}

mgt_status mgt_tokenize_run(const mgt_tokenize_opts *o, FILE *out) {
  mgt_status st = MGT_OK;
  mgt_tokenizer *tok = NULL;
  mgt_json_parser *jp = NULL;
  FILE *in = stdin;
  const char *name = o->input[0] ? o->input : "<stdin>";
  char *line = NULL, *buf = NULL;
  size_t cap = 0, bcap = 0, line_no = 0;
  mgt_ids ids = {0};
  mgt_chat_text text = {0};
  uint8_t *mask = NULL;
  size_t mask_cap = 0;
  int format = -1;
  MGT_TRY(mgt_tok_open(o->tokenizer_type, o->vocab_file, o->merge_file, &tok));
  MGT_TRY(mgt_json_parser_create(&jp));
  if (o->chat_template[0]) MGT_TRY(mgt_chat_format_resolve(o->chat_template, tok, &format));
  if (o->input[0]) { /* a stream, read once: a FIFO (`--input <(zcat x.gz)`) is meant to wait */
    in = fopen(o->input, "rb");
    if (!in) MGT_GOTO_FAIL(MGT_ERR_INPUT, "--input %s: cannot open: %s", o->input, strerror(errno));
  }
  ssize_t n;
  while ((n = getline(&line, &cap, in)) > 0) {
    line_no++;
    size_t len = (size_t)n;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = 0;
    if (o->decode) {
      MGT_TRY(decode_line(tok, o, name, line_no, line, &ids, &buf, &bcap, out));
      continue;
    }
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t'))
      k++;
    if (k == len) continue; /* a blank line is no document, as mgt preprocess skips it */
    const mgt_json *root = NULL, *v = NULL;
    if (mgt_json_parse(jp, line, len, &root) != MGT_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", mgt_error_message());
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s:%zu: %s", name, line_no, why);
    }
    if (o->chat_template[0]) {
      const mgt_status cs = chat_line(tok, format, root, &text, &ids, &mask, &mask_cap, out);
      if (cs != MGT_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", mgt_error_message());
        MGT_GOTO_FAIL(cs, "%s:%zu: %s", name, line_no, why);
      }
      continue;
    }
    v = mgt_json_get(root, o->json_keys);
    if (!v || v->type != MGT_JSON_STRING)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s:%zu: no string \"%s\" key (--json-keys)", name, line_no,
                    o->json_keys);
    ids.n = 0;
    const mgt_status es = mgt_tok_encode(tok, v->str, v->len, &ids);
    if (es != MGT_OK) { /* say which line */
      char why[512];
      snprintf(why, sizeof why, "%s", mgt_error_message());
      MGT_GOTO_FAIL(es, "%s:%zu: %s", name, line_no, why);
    }
    for (size_t i = 0; i < ids.n; i++)
      fprintf(out, i ? " %d" : "%d", ids.ids[i]);
    fputc('\n', out);
  }
  if (ferror(in)) {
    st = MGT_ERROR(MGT_ERR_IO, "%s: read error", name);
  }
done:
  if (in && in != stdin) fclose(in);
  free(line);
  free(buf);
  free(mask);
  mgt_chat_text_free(&text);
  mgt_ids_free(&ids);
  mgt_json_parser_destroy(&jp);
  mgt_tok_destroy(&tok);
  return st;
}
