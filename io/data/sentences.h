/* Private to io/: a rule-based sentence splitter for English prose, for `mgt preprocess
   --split-sentences` (NLTK's Punkt models, which Megatron-LM uses, are not available here).
   docs/data-format.md says what it handles and what it does not. Not collective. */
#pragma once

#include <stddef.h>

/* One sentence: bytes [begin, end) of the text, without surrounding white space. */
typedef struct mgt_span {
  size_t begin, end;
} mgt_span;

/* Splits text[0..len) into sentences, in order, none empty. Returns the number written to
   out (at most `cap`); a return greater than cap means out was too small and nothing past cap
   was written. */
size_t mgt_split_sentences(const char *text, size_t len, mgt_span *out, size_t cap);
