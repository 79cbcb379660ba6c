/* A small JSON reader: one document into an arena, values as a tree. Used for JSONL input,
   the GPT-2 vocabulary, and configuration files. Not collective. */
#pragma once

#include <stddef.h>
#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_json_type {
  MGT_JSON_NULL,
  MGT_JSON_BOOL,
  MGT_JSON_NUMBER,
  MGT_JSON_STRING,
  MGT_JSON_ARRAY,
  MGT_JSON_OBJECT
} mgt_json_type;

typedef struct mgt_json {
  mgt_json_type type;
  double number;   /* NUMBER, and BOOL as 0/1 */
  const char *str; /* STRING: UTF-8, NUL-terminated (may hold NULs: use len) */
  size_t len;      /* STRING: bytes; ARRAY/OBJECT: children; NUMBER: 1 when written with a fraction
                      or an exponent (a float to Python's json), 0 as an integer */
  const struct mgt_json *items; /* ARRAY/OBJECT children */
  const char *const *keys;      /* OBJECT: member names, parallel to items */
  const size_t *key_lens;
  /* OBJECT of many members: an open-addressing table of 1 + member index (0: empty), the
     last of duplicate keys in it; size hash_mask + 1. NULL for small objects. */
  const unsigned *hash;
  size_t hash_mask;
} mgt_json;

typedef struct mgt_json_parser mgt_json_parser;

MGT_NODISCARD mgt_status mgt_json_parser_create(mgt_json_parser **out);
void mgt_json_parser_destroy(mgt_json_parser **p);

/* Caps the values (every number, string, array, object...) of each document parsed from now on
   at max_values (0: no cap): a document of more fails to parse, and mgt_json_parser_over says
   that was why. Each value takes about 80 bytes, whatever its text (2 bytes for "0,"). */
void mgt_json_parser_limit(mgt_json_parser *p, size_t max_values);
int mgt_json_parser_over(const mgt_json_parser *p);

/* Parses text[0..len) as one JSON value (surrounding whitespace allowed). On success *root
   points into the parser's arena, valid until the next parse. On malformed input returns
   MGT_ERR_INPUT with a message naming the byte offset and the problem. */
MGT_NODISCARD mgt_status mgt_json_parse(mgt_json_parser *p, const char *text, size_t len,
                                        const mgt_json **root);

/* The member `key` of an object, or NULL. With duplicate keys, the last one (as Python's json).
   Constant time for objects of many members (a safetensors header, a vocabulary). */
const mgt_json *mgt_json_get(const mgt_json *obj, const char *key);

/* Whether v is the string s, all of it (a "\u0000" inside v is not where s ends). */
int mgt_json_is(const mgt_json *v, const char *s);

/* Writes s as a JSON string literal. */
void mgt_json_write_string(FILE *f, const char *s);
/* Writes text[0..n) as a JSON string literal that is valid UTF-8 whatever the bytes: NULs and
   control characters escaped, each part that is no UTF-8 character (a byte-level tokenizer's
   piece of one, 0xF5-0xFF) written as one U+FFFD (mgt_utf8_bad_len's parts). */
void mgt_json_write_bytes(FILE *f, const char *text, size_t n);
/* The bytes at s[0..n), which start no valid UTF-8 character, that one U+FFFD replaces: the
   maximal subpart of a sequence (a lead byte and the continuation bytes that could still follow
   it), as Unicode recommends and Python's errors="replace", Rust's from_utf8_lossy and
   TextDecoder do; else one byte. */
size_t mgt_utf8_bad_len(const unsigned char *s, size_t n);

#ifdef __cplusplus
}
#endif
