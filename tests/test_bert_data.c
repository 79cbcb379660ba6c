/* Prints the BERT samples mapping and samples 0..N-1 of a sentence dataset (mgt preprocess
   --split-sentences) as JSON lines, for tests/bert_samples.py to compare with its own
   implementation of Megatron-LM's. Usage:
   test_bert_data DATASET.h5 VOCAB.txt SEQ_LENGTH N SEED [no-binary-head] */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_data.h"
#include "mgt/tokenizer.h"
#include "testutil.h"

static int64_t *read_i64(hid_t f, const char *name, size_t *n) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = H5Dget_space(d);
  hsize_t dims[1];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  int64_t *v = malloc(sizeof *v * (size_t)dims[0]);
  H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Sclose(sp), H5Dclose(d);
  *n = (size_t)dims[0];
  return v;
}

static int32_t token_at(const void *ctx, int64_t i) { return ((const int32_t *)ctx)[i]; }

static void print_ints(const char *key, const int32_t *v, int n) {
  printf(",\"%s\":[", key);
  for (int i = 0; i < n; i++)
    printf("%s%d", i ? "," : "", v[i]);
  printf("]");
}

int main(int argc, char **argv) {
  if (argc < 6) return 2;
  const int T = atoi(argv[3]), N = atoi(argv[4]),
            binary = !(argc > 6 && !strcmp(argv[6], "no-binary-head"));
  const uint64_t seed = strtoull(argv[5], NULL, 10);
  hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  size_t n_sent1, n_doc1, n_tok;
  int64_t *sent_off = read_i64(f, "sentence_offsets", &n_sent1);
  int64_t *doc_off = read_i64(f, "document_offsets", &n_doc1);
  hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT), sp = H5Dget_space(d);
  hsize_t dims[1];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  n_tok = (size_t)dims[0];
  int32_t *tok = malloc(sizeof *tok * n_tok);
  H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
  H5Sclose(sp), H5Dclose(d), H5Fclose(f);
  /* documents as sentence ranges: every document offset is a sentence offset */
  int64_t *doc_sent = malloc(sizeof *doc_sent * n_doc1);
  for (size_t k = 0, j = 0; k < n_doc1; k++) {
    while (sent_off[j] < doc_off[k])
      j++;
    doc_sent[k] = (int64_t)j;
  }
  mgt_tokenizer *t = NULL;
  T_OK(mgt_tok_open(MGT_TOKENIZER_BERT_LOWER, argv[2], NULL, &t));
  const int V = mgt_tok_vocab_size(t);
  uint8_t *cont = calloc((size_t)V, 1);
  mgt_bert_vocab v = {-1, -1, -1, -1, V, cont};
  for (int i = 0; i < V; i++) {
    const char *s;
    size_t l;
    T_OK(mgt_tok_piece(t, i, &s, &l));
    cont[i] = l >= 2 && s[0] == '#' && s[1] == '#';
    if (l == 5 && !memcmp(s, "[CLS]", 5)) v.cls = i;
    if (l == 5 && !memcmp(s, "[SEP]", 5)) v.sep = i;
    if (l == 6 && !memcmp(s, "[MASK]", 6)) v.mask = i;
    if (l == 5 && !memcmp(s, "[PAD]", 5)) v.pad = i;
  }
  mgt_bert_corpus c = {sent_off, doc_sent};
  int64_t *rows = NULL, n_map = 0;
  T_OK(mgt_bert_mapping(&c, 0, (int64_t)n_doc1 - 1, N, T - 3, 0.1, binary ? 2 : 1, seed, argv[1],
                        &rows, &n_map));
  printf("{\"n_map\":%lld,\"rows\":[", (long long)n_map);
  for (int64_t i = 0; i < n_map; i++)
    printf("%s[%lld,%lld,%lld]", i ? "," : "", (long long)rows[3 * i], (long long)rows[3 * i + 1],
           (long long)rows[3 * i + 2]);
  printf("]}\n");
  int32_t *tk = malloc(sizeof *tk * (size_t)T), *ty = malloc(sizeof *ty * (size_t)T),
          *lb = malloc(sizeof *lb * (size_t)T);
  for (int i = 0; i < N && i < n_map; i++) {
    int32_t len, rnd;
    T_OK(mgt_bert_sample(&c, token_at, tok, rows + 3 * i, &v, T, 0.15, binary, seed, (uint64_t)i,
                         tk, ty, lb, &len, &rnd));
    printf("{\"idx\":%d,\"length\":%d,\"is_random\":%d", i, len, rnd);
    print_ints("tokens", tk, T);
    print_ints("types", ty, T);
    print_ints("labels", lb, T);
    printf("}\n");
  }
  mgt_tok_destroy(&t);
  return 0;
}
