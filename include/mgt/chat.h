/* Conversations as a model's own chat format: the text Hugging Face's apply_chat_template
   renders from a model's tokenizer_config.json, written here for the formats of today's open
   models (no Jinja engine: they are few, each checked against the real template rendered by
   jinja2, tests/chat.sh), with the spans of that text a fine-tuning trains on, and its ids with
   a loss mask. Not collective. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"
#include "mgt/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The formats: Llama 3's (the early template of Meta-Llama-3-8B-Instruct), ChatML as Qwen 3
   writes it (without tools), Llama 2's [INST] with <<SYS>> (Llama-2-7b-chat-hf), Mistral's [INST]
   (Mistral-7B-Instruct-v0.1/v0.2, Mixtral). */
enum { MGT_CHAT_LLAMA3, MGT_CHAT_CHATML, MGT_CHAT_LLAMA2, MGT_CHAT_MISTRAL, MGT_CHAT_N };
extern const char *const mgt_chat_names[MGT_CHAT_N];

enum { MGT_ROLE_SYSTEM, MGT_ROLE_USER, MGT_ROLE_ASSISTANT };

typedef struct mgt_chat_message {
  int role;
  const char *content;
  size_t len;
  const char *reasoning; /* Qwen 3's reasoning_content, or NULL */
  size_t reasoning_len;
} mgt_chat_message;

/* A rendered conversation: its text, and the byte ranges [train[2i], train[2i+1]) that train
   (each assistant turn's text after its header, its end-of-turn token included). */
typedef struct mgt_chat_text {
  char *s;
  size_t n, cap;
  size_t *train;
  size_t n_train, cap_train; /* n_train: numbers in train, two per range */
} mgt_chat_text;

void mgt_chat_text_free(mgt_chat_text *t);

/* The format named `name` ("llama3", "chatml" or "qwen3", "llama2", "mistral"); otherwise an
   error naming the choices. */
MGT_NODISCARD mgt_status mgt_chat_format_named(const char *name, int *format);

/* The format whose template is the chat_template of the tokenizer_config.json at `path`,
   recognized by its exact text; a template it does not know is refused naming the formats there
   are and --chat-template. */
MGT_NODISCARD mgt_status mgt_chat_format_of(const char *path, int *format);
/* `name` as --chat-template gives it: a format's name, or "auto" for the one tok's
   tokenizer_config.json holds (mgt_chat_format_of). */
MGT_NODISCARD mgt_status mgt_chat_format_resolve(const char *name, const mgt_tokenizer *tok,
                                                 int *format);

/* Renders messages[0..n) as `format` writes them into out (emptied first), with bos and eos the
   tokenizer's beginning- and end-of-sequence texts; with add_generation_prompt, what comes
   before the assistant speaks is appended (nothing for the [INST] formats, whose prompt ends
   at [/INST]; Llama 3's early template appends it always). The template's own exceptions
   (roles that do not alternate, a role it does not render) are errors, as are tools and
   roles beyond system, user and assistant. */
MGT_NODISCARD mgt_status mgt_chat_render(int format, const mgt_chat_message *messages, int n,
                                         int add_generation_prompt, const char *bos,
                                         const char *eos, mgt_chat_text *out);

/* The beginning- and end-of-sequence texts the templates write: the pieces of tok's BOS (""
   without one) and end-of-document ids, NUL-terminated. */
typedef struct mgt_chat_specials {
  char bos[256], eos[256];
} mgt_chat_specials;
MGT_NODISCARD mgt_status mgt_chat_specials_of(const mgt_tokenizer *tok, mgt_chat_specials *out);

struct mgt_json;
/* A conversation as JSON renders into out: {"messages": [{"role": "system"|"user"|"assistant",
   "content": "...", "reasoning_content": ...}, ...]} as `format` writes it, or the format-free
   {"segments": [{"text": "...", "loss": true|false}, ...]} joined as they are, the segments with
   "loss": true trained. Errors say what is wrong with the value, not where it came from. */
MGT_NODISCARD mgt_status mgt_chat_from_json(const struct mgt_json *root, int format,
                                            const char *bos, const char *eos,
                                            int add_generation_prompt, mgt_chat_text *out);

/* The ids of t->s[0..t->n) as tok encodes the whole text, appended to ids, and for each one
   byte appended to mask: 1 where the token is trained as a target (it holds a byte of a
   trained range; a token across a range's start, as Qwen 3's "\n\n" after "assistant" can be,
   trains), else 0. */
MGT_NODISCARD mgt_status mgt_chat_encode(mgt_tokenizer *tok, const mgt_chat_text *t, mgt_ids *ids,
                                         uint8_t **mask, size_t *mask_cap);

#ifdef __cplusplus
}
#endif
