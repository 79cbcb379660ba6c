/* Tokenizer throughput on one core: MB/s of encoding whole files. Each file is encoded 5 times
   with a fresh tokenizer (cold piece cache); the median is reported.
   Usage: bench_tokenizer TYPE VOCAB MERGES|- FILE...   (TYPE as --tokenizer-type spells it) */
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "mgt/log.h"
#include "mgt/tokenizer.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int type = -1;
  for (int i = 0; argc > 1 && mgt_tokenizer_names[i]; i++)
    if (strcmp(argv[1], mgt_tokenizer_names[i]) == 0) type = i;
  if (argc < 5 || type < 0) {
    fprintf(stderr, "usage: bench_tokenizer TYPE VOCAB MERGES|- FILE...\n");
    return 2;
  }
  for (int f = 4; f < argc; f++) {
    FILE *fp = fopen(argv[f], "rb");
    if (!fp) {
      fprintf(stderr, "bench_tokenizer: cannot open %s\n", argv[f]);
      return 2;
    }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    rewind(fp);
    char *text = malloc((size_t)n);
    if (fread(text, 1, (size_t)n, fp) != (size_t)n) return 2;
    fclose(fp);
    double t[5];
    size_t tokens = 0;
    for (int r = 0; r < 5; r++) {
      mgt_tokenizer *tok = NULL;
      if (mgt_tok_open(type, argv[2], argv[3], &tok) != MGT_OK) {
        mgt_error_print(stderr);
        return 1;
      }
      mgt_ids ids = {0};
      double t0 = mgt_now();
      if (mgt_tok_encode(tok, text, (size_t)n, &ids) != MGT_OK) return 1;
      t[r] = mgt_now() - t0;
      tokens = ids.n;
      mgt_ids_free(&ids);
      mgt_tok_destroy(&tok);
    }
    qsort(t, 5, sizeof t[0], cmp);
    printf("megatron-c %-22s %-40s %9ld bytes %8zu tokens %7.2f MB/s (median of 5, one core)\n",
           argv[1], argv[f], n, tokens, n / t[2] / 1e6);
    free(text);
  }
  return 0;
}
