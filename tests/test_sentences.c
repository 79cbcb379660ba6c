/* The sentence splitter of `mgt preprocess --split-sentences` on hand-written English: what it
   must split, what it must keep together (abbreviations, initials, decimals, quotes, lower-case
   continuations), paragraphs, and the limitations docs/data-format.md states. */
#include <stdio.h>
#include <string.h>

#include "sentences.h"
#include "testutil.h"

/* Splits text and compares with the sentences of want, separated by '|'. */
static void expect(const char *text, const char *want) {
  mgt_span sp[32];
  size_t n = mgt_split_sentences(text, strlen(text), sp, 32);
  char got[1024] = "";
  for (size_t i = 0; i < n && i < 32; i++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%.*s", i ? "|" : "",
             (int)(sp[i].end - sp[i].begin), text + sp[i].begin);
  T_CHECK(strcmp(got, want) == 0, "split of \"%s\":\n    got  \"%s\"\n    want \"%s\"", text, got,
          want);
}

int main(void) {
  expect("Hello world. This is a test.", "Hello world.|This is a test.");
  expect("Mr. Smith went to Washington. He arrived at 3 p.m. and left.",
         "Mr. Smith went to Washington.|He arrived at 3 p.m. and left.");
  expect("J. R. R. Tolkien wrote books. They sold well.",
         "J. R. R. Tolkien wrote books.|They sold well.");
  expect("The value is 3.14 today. Next?", "The value is 3.14 today.|Next?");
  expect("\"Stop!\" she said. \"Why?\" he asked.", "\"Stop!\" she said.|\"Why?\" he asked.");
  expect("See Fig. 3 for details. It shows e.g. the trend.",
         "See Fig. 3 for details.|It shows e.g. the trend.");
  expect("Wait... What happened? Nothing! Really?!", "Wait...|What happened?|Nothing!|Really?!");
  expect("First paragraph without an end\n\nSecond paragraph.",
         "First paragraph without an end|Second paragraph.");
  expect("Line one\nline two. Next.", "Line one\nline two.|Next.");
  expect("\xe2\x80\x9cHello.\xe2\x80\x9d Then it ended.",
         "\xe2\x80\x9cHello.\xe2\x80\x9d|Then it ended.");
  expect("I paid $5. 10 people came.", "I paid $5.|10 people came.");
  expect("Visit example.com today. Or not.", "Visit example.com today.|Or not.");
  expect("(This is in brackets.) This is not.", "(This is in brackets.)|This is not.");
  expect("Dr. No is a film. St. Paul is a city. No. 5 is a perfume.",
         "Dr. No is a film.|St. Paul is a city.|No. 5 is a perfume.");
  /* references join a number only: "no." and "p." end sentences too */
  expect("The answer is no. We went home. See p. 12 and Vol. II of it. I said no. I left.",
         "The answer is no.|We went home.|See p. 12 and Vol. II of it.|I said no.|I left.");
  expect("Read ch. IV. Then sec. 3.1 of it.", "Read ch. IV.|Then sec. 3.1 of it.");
  expect("  Leading and trailing space.  ", "Leading and trailing space.");
  expect("no terminal punctuation", "no terminal punctuation");
  expect("", "");
  expect(" \n\n \t ", "");
  expect("It was late.\r\n\r\nThe end.", "It was late.|The end.");
  /* the stated limitations: an abbreviation or an initial that really ends a sentence */
  expect("He lives in the U.S. The country is big.", "He lives in the U.S. The country is big.");
  expect("I chose plan B. Then I left.", "I chose plan B. Then I left.");
  /* a buffer that is too small says how many it needed */
  mgt_span one[1];
  size_t n = mgt_split_sentences("A b. C d. E f.", 14, one, 1);
  T_CHECK(n == 3 && one[0].begin == 0 && one[0].end == 4, "capacity 1: %zu sentences", n);
  return t_report("test_sentences");
}
