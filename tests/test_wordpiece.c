/* BERT's WordPiece (BertWordPieceLowerCase, BertWordPieceCase) against the references in
   ../shared/data/bert, made with an independent Python implementation of Google's rules and
   cross-checked against a JavaScript one: 192 strings under both vocabularies (ids, and the
   pieces decode() must join), and whole-file id streams (count, [UNK] count, the first ids and
   the SHA-256 of the uint16 stream). Usage: test_wordpiece DATA_DIR; exits 77 without it. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "mgt/json.h"
#include "mgt/sha256.h"
#include "mgt/tokenizer.h"
#include "testutil.h"

/* The pieces joined as Hugging Face's convert_tokens_to_string does:
   " ".join(tokens).replace(" ##", "").strip(). */
static size_t join_pieces(const mgt_json *toks, char *out) {
  size_t n = 0;
  for (size_t i = 0; i < toks->len; i++) {
    const char *p = toks->items[i].str;
    size_t l = toks->items[i].len;
    if (i > 0 && l >= 2 && p[0] == '#' && p[1] == '#')
      p += 2, l -= 2;
    else if (i > 0)
      out[n++] = ' ';
    memcpy(out + n, p, l);
    n += l;
  }
  out[n] = 0;
  return n;
}

static void test_strings(mgt_tokenizer *tok, const char *dir, const char *kind) {
  char path[1024], key[32];
  snprintf(path, sizeof path, "%s/bert/reference-wordpiece.jsonl", dir);
  size_t len;
  char *text = t_slurp(path, &len);
  T_CHECK(text != NULL, "cannot read %s", path);
  if (!text) return;
  mgt_json_parser *jp = NULL;
  T_OK(mgt_json_parser_create(&jp));
  int cases = 0, exact = 0, decoded = 0;
  for (char *line = text; *line;) {
    char *nl = strchr(line, '\n');
    size_t ll = nl ? (size_t)(nl - line) : strlen(line);
    const mgt_json *root;
    T_OK(mgt_json_parse(jp, line, ll, &root));
    const mgt_json *txt = mgt_json_get(root, "text"), *ids = mgt_json_get(root, kind);
    snprintf(key, sizeof key, "%s_tokens", kind);
    const mgt_json *toks = mgt_json_get(root, key);
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, txt->str, txt->len, &out));
    int same = out.n == ids->len;
    for (size_t i = 0; same && i < out.n; i++)
      same = out.ids[i] == (int32_t)ids->items[i].number;
    exact += same;
    T_CHECK(same, "%s case %d (%.40s): %zu ids, expected %zu", kind, cases, txt->str, out.n,
            ids->len);
    /* decode joins the pieces back */
    char *want = malloc(ll + 16 * toks->len + 1), *got = NULL;
    size_t wl = join_pieces(toks, want), gl = 0, gc = 0;
    T_OK(mgt_tok_decode(tok, out.ids, out.n, &got, &gl, &gc));
    int dsame = gl == wl && (wl == 0 || memcmp(got, want, wl) == 0);
    decoded += dsame;
    T_CHECK(!same || dsame, "%s case %d: decode gives '%.40s', expected '%.40s'", kind, cases,
            got ? got : "", want);
    free(want), free(got);
    mgt_ids_free(&out);
    cases++;
    line = nl ? nl + 1 : line + ll;
  }
  printf("%s: %d of %d reference strings exact, %d decoded to their pieces\n", kind, exact, cases,
         decoded);
  T_CHECK(cases == 192, "%d reference strings, expected 192", cases);
  mgt_json_parser_destroy(&jp);
  free(text);
}

static void test_files(mgt_tokenizer *tok, const char *dir, const char *kind, int32_t unk) {
  char path[1024];
  snprintf(path, sizeof path, "%s/bert/reference-file-encodings.json", dir);
  size_t len;
  char *meta = t_slurp(path, &len);
  T_CHECK(meta != NULL, "cannot read %s", path);
  if (!meta) return;
  mgt_json_parser *jp = NULL;
  const mgt_json *root;
  T_OK(mgt_json_parser_create(&jp));
  T_OK(mgt_json_parse(jp, meta, len, &root));
  const mgt_json *files = mgt_json_get(root, "files");
  for (size_t f = 0; files && f < files->len; f++) {
    const mgt_json *e = mgt_json_get(&files->items[f], kind);
    snprintf(path, sizeof path, "%s/%s", dir, files->keys[f]);
    size_t n;
    char *text = t_slurp(path, &n);
    T_CHECK(text != NULL, "cannot read %s", path);
    if (!text) continue;
    mgt_ids out = {0};
    T_OK(mgt_tok_encode(tok, text, n, &out));
    mgt_sha256 h;
    unsigned char d[32];
    char hex[65];
    mgt_sha256_init(&h);
    size_t unks = 0;
    for (size_t i = 0; i < out.n; i++) {
      unsigned char le[2] = {(unsigned char)out.ids[i], (unsigned char)(out.ids[i] >> 8)};
      mgt_sha256_update(&h, le, 2);
      unks += out.ids[i] == unk;
    }
    mgt_sha256_final(&h, d);
    mgt_sha256_hex(d, hex);
    const mgt_json *first = mgt_json_get(e, "first_ids");
    int head = out.n >= first->len;
    for (size_t i = 0; head && i < first->len; i++)
      head = out.ids[i] == (int32_t)first->items[i].number;
    size_t want = (size_t)mgt_json_get(e, "tokens")->number;
    size_t want_unk = (size_t)mgt_json_get(e, "unk")->number;
    const char *sha = mgt_json_get(e, "sha256_uint16le")->str;
    T_CHECK(out.n == want && unks == want_unk && head && strcmp(hex, sha) == 0,
            "%s %s: %zu tokens (%zu [UNK]) sha256 %.12s, expected %zu (%zu) %.12s", kind,
            files->keys[f], out.n, unks, hex, want, want_unk, sha);
    printf("%s %s: %zu tokens, %zu [UNK], stream sha256 %s\n", kind, files->keys[f], out.n, unks,
           strcmp(hex, sha) == 0 ? "matches" : "DIFFERS");
    mgt_ids_free(&out);
    free(text);
  }
  mgt_json_parser_destroy(&jp);
  free(meta);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/data";
  char uncased[1024], cased[1024];
  snprintf(uncased, sizeof uncased, "%s/bert/bert-base-uncased-vocab.txt", dir);
  snprintf(cased, sizeof cased, "%s/bert/bert-base-cased-vocab.txt", dir);
  struct stat st;
  if (stat(uncased, &st) != 0 || stat(cased, &st) != 0) {
    printf("test_wordpiece: %s not found: skipped\n", uncased);
    return 77;
  }
  const struct {
    const char *kind, *vocab;
    int type, n_vocab;
  } runs[2] = {{"uncased", uncased, MGT_TOKENIZER_BERT_LOWER, 30522},
               {"cased", cased, MGT_TOKENIZER_BERT_CASED, 28996}};
  for (int r = 0; r < 2; r++) {
    mgt_tokenizer *tok = NULL;
    T_OK(mgt_tok_open(runs[r].type, runs[r].vocab, NULL, &tok));
    T_CHECK(mgt_tok_vocab_size(tok) == runs[r].n_vocab && mgt_tok_eod(tok) == 102 &&
                mgt_tok_type(tok) == runs[r].type,
            "%s: %d ids, eod (= [SEP]) %d", runs[r].kind, mgt_tok_vocab_size(tok),
            mgt_tok_eod(tok));
    test_strings(tok, dir, runs[r].kind);
    test_files(tok, dir, runs[r].kind, 100);
    /* a lone surrogate (JSON's "\ud800", kept by the reader as WTF-8) is a character of no
       class in Google's Python tokenizer: its word is [UNK]; U+FFFD (an invalid byte) drops */
    mgt_ids got = {0}, want = {0};
    const char *lone = "a x\xED\xA0\x80y b \xED\xB0\x80";
    T_OK(mgt_tok_encode(tok, lone, strlen(lone), &got));
    T_OK(mgt_tok_encode(tok, "a b", 3, &want));
    const int same = got.n == 4 && want.n == 2 && got.ids[0] == want.ids[0] && got.ids[1] == 100 &&
                     got.ids[2] == want.ids[1] && got.ids[3] == 100;
    T_CHECK(same, "%s: a lone surrogate's word is not [UNK] (%zu ids)", runs[r].kind, got.n);
    mgt_ids_free(&got);
    mgt_ids_free(&want);
    mgt_tok_destroy(&tok);
  }
  /* the two vocabularies and rules give different dataset hashes */
  mgt_tokenizer *a = NULL, *b = NULL;
  T_OK(mgt_tok_open(MGT_TOKENIZER_BERT_LOWER, uncased, NULL, &a));
  T_OK(mgt_tok_open(MGT_TOKENIZER_BERT_CASED, uncased, NULL, &b));
  T_CHECK(strcmp(mgt_tok_hash(a), mgt_tok_hash(b)) != 0, "cased and uncased rules share a hash");
  mgt_tok_destroy(&a);
  mgt_tok_destroy(&b);
  /* refusals name the file */
  char merges[1024];
  snprintf(merges, sizeof merges, "%s/gpt2/gpt2-merges.txt", dir);
  mgt_status s = mgt_tok_open(MGT_TOKENIZER_BERT_LOWER, merges, NULL, &a);
  T_CHECK(s == MGT_ERR_INPUT && strstr(mgt_error_message(), "no [UNK]"),
          "a merges file as WordPiece vocabulary: %s", mgt_error_message());
  s = mgt_tok_open(MGT_TOKENIZER_BERT_CASED, "/nonexistent/vocab.txt", NULL, &a);
  T_CHECK(s == MGT_ERR_INPUT && strstr(mgt_error_message(), "/nonexistent/vocab.txt"),
          "a missing vocabulary: %s", mgt_error_message());
  s = mgt_tok_open(MGT_TOKENIZER_BERT_CASED, "", NULL, &a);
  T_CHECK(s == MGT_ERR_INPUT && strstr(mgt_error_message(), "needs --vocab-file"),
          "no vocabulary: %s", mgt_error_message());
  return t_report("test_wordpiece");
}
