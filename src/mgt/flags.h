/* Table-driven command-line flags shared by the subcommands: each flag names a field of a
   struct, its kind and its valid range. Unknown flags, missing values, malformed values and
   values out of range fail with MGT_ERR_INPUT and a message that names the flag. */
#pragma once

#include <stddef.h>
#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_flag_kind {
  MGT_FLAG_INT,    /* int */
  MGT_FLAG_INT64,  /* int64_t */
  MGT_FLAG_UINT64, /* uint64_t */
  MGT_FLAG_DOUBLE, /* double */
  MGT_FLAG_STR,    /* char[size] */
  MGT_FLAG_LIST,   /* char[size]: one or more values up to the next --flag, joined by '\n' */
  MGT_FLAG_BOOL,   /* int, set to 1 by the flag alone */
  MGT_FLAG_ENUM,   /* int: the index of the value in choices (NULL-terminated) */
} mgt_flag_kind;

typedef struct mgt_flag {
  const char *name; /* "--hidden-size" */
  mgt_flag_kind kind;
  size_t offset;   /* of the field in the destination struct */
  double min, max; /* inclusive range of numbers */
  const char *help;
  const char *const *choices; /* MGT_FLAG_ENUM */
  size_t size;                /* MGT_FLAG_STR and MGT_FLAG_LIST: buffer size */
  unsigned marks;             /* MGT_FLAG_SPEC, MGT_FLAG_RESUME, MGT_FLAG_PLAN */
} mgt_flag;

/* Marks of mgt train's flags (src/base/config.c), so that each is declared once and read by
   everyone who needs it. SPEC: the model spec (mgt plan takes it too); RESUME: a checkpoint of
   another value is another model (the resume check compares it); PLAN: mgt plan takes it,
   though it is not the model's. */
enum { MGT_FLAG_SPEC = 1u, MGT_FLAG_RESUME = 2u, MGT_FLAG_PLAN = 4u };
/* mgt train's flag table. */
const mgt_flag *mgt_config_flags(int *n);

/* The name in names[0..n) nearest to word by edit distance, or NULL when none is near enough
   to be a typo of it (1 edit for words under 4 characters, 2 under 8, else 3). */
const char *mgt_nearest(const char *word, const char *const *names, int n);
/* Parses argv[first..argc) into dst. "--flag value" and "--flag=value" are both accepted.
   "--help" sets *help. Every problem of the command line is reported, in one message. Not
   collective. */
MGT_NODISCARD mgt_status mgt_flags_parse(const mgt_flag *flags, int n, void *dst, int argc,
                                         char **argv, int first, const char *command, int *help);

/* A flag of Megatron-LM's that the table lacks under that name, and the answer to it. */
typedef enum mgt_foreign_kind {
  MGT_FOREIGN_RENAMED, /* refused: text is the flag to write instead */
  MGT_FOREIGN_AT,      /* accepted at the values `accept` ('|' between): what mgt does anyway */
  MGT_FOREIGN_NOTE,    /* accepted; it changes nothing here, and text (a note) says why */
  MGT_FOREIGN_REFUSED, /* refused: text says what mgt lacks and what to do */
} mgt_foreign_kind;
typedef struct mgt_foreign_flag {
  const char *name; /* or several, ' ' between, that share the answer */
  int values;       /* 0: a switch; 1: one value; 2: one or more; 3: any number, none included */
  mgt_foreign_kind kind;
  const char *accept; /* MGT_FOREIGN_AT */
  const char *text;
} mgt_foreign_flag;
/* Megatron-LM's flags that mgt train answers beyond its own table (src/base/megatron_flags.c). */
const mgt_foreign_flag *mgt_megatron_flags(int *n);
/* mgt_flags_parse, answering the flags of `foreign` as they say; the notes of the accepted ones
   ("--flag: why\n" each) go to notes (may be NULL). */
MGT_NODISCARD mgt_status mgt_flags_parse_foreign(const mgt_flag *flags, int n,
                                                 const mgt_foreign_flag *foreign, int nf, void *dst,
                                                 int argc, char **argv, int first,
                                                 const char *command, int *help, char *notes,
                                                 size_t notes_size);
/* Whether flags[i] is an alias: a later flag on an earlier one's field (Megatron-LM's other
   names), never printed or stored. */
int mgt_flag_is_alias(const mgt_flag *flags, int i);
/* "usage: mgt COMMAND [flags]" and one line per flag with its default from `defaults`. */
void mgt_flags_usage(const mgt_flag *flags, int n, const void *defaults, const char *command,
                     FILE *f);
/* One "name value" line per flag. */
void mgt_flags_print(const mgt_flag *flags, int n, const void *src, FILE *f);
/* The flags as one JSON object, keys with '_' for '-'. */
void mgt_flags_json(const mgt_flag *flags, int n, const void *src, FILE *f);
/* The first item ("key":value) of two mgt_flags_json texts that differs, in words (a
   mgt_describe_difference: `mine` against rank 0's). */
void mgt_flags_json_difference(const char *mine, size_t mine_n, const char *root, size_t root_n,
                               char *why, size_t cap);
/* Sets the fields of dst from a JSON object written by mgt_flags_json; keys it lacks keep
   their values. A value of the wrong type fails with MGT_ERR_INPUT naming `what`, and so does
   "" (an unset enum) for an enum that does not hold -1 in dst already. */
struct mgt_json;
MGT_NODISCARD mgt_status mgt_flags_from_json(const mgt_flag *flags, int n, void *dst,
                                             const struct mgt_json *obj, const char *what);

#ifdef __cplusplus
}
#endif
