/* `mgt dataset info PREFIX...`: what a token dataset holds, ours (PREFIX.h5) or Megatron-LM's
   (PREFIX.bin and PREFIX.idx). */
#include <stdio.h>
#include <string.h>

#include "mgt/cli.h"
#include "mgt/dataset.h"
#include "mgt/flags.h"

static void info_usage(FILE *f) {
  fprintf(f, "usage: mgt dataset info PREFIX... [--unigram [--split S]]\n\n"
             "  PREFIX.h5 (mgt preprocess) or Megatron-LM's PREFIX.bin and PREFIX.idx: format,\n"
             "  documents, sentences, tokens, token type and the vocabulary where recorded\n"
             "  --unigram   also the unigram baseline: the perplexity of the validation split\n"
             "              under the training split's token frequencies (add-one smoothed),\n"
             "              what a model that ignores context scores (reads every token)\n"
             "  --split S   the train, validation, test weights, as mgt train's [969, 30, 1]\n");
}

static void print_info(const mgt_dataset_info *in, FILE *f) {
  const int mm = !strcmp(in->format, "megatron");
  fprintf(f, "path: %s\n", in->path);
  fprintf(f, "format: %s\n", mm ? "megatron (MMIDIDX .bin/.idx)" : "hdf5");
  fprintf(f, "documents: %lld\n", (long long)in->n_documents);
  if (in->n_sentences >= 0) fprintf(f, "sentences: %lld\n", (long long)in->n_sentences);
  fprintf(f, "tokens: %lld\n", (long long)in->n_tokens);
  fprintf(f, "dtype: %s\n", in->dtype);
  if (mm) {
    fprintf(f, "vocabulary: unknown (a Megatron-LM dataset does not record its tokenizer)\n");
    return;
  }
  fprintf(f, "tokenizer: %s\n", in->tokenizer);
  fprintf(f, "vocabulary: %lld ids (hash %.16s), largest id used %lld, end of document %lld\n",
          (long long)in->vocab_size, in->vocab_hash, (long long)in->max_token_id,
          (long long)in->eod_id);
}

int mgt_cli_dataset(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  if (argc < 3 || strcmp(argv[2], "info") != 0) {
    if (rank == 0 && argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      info_usage(stdout);
      return 0;
    }
    if (rank == 0 && argc >= 3 && mgt_nearest(argv[2], (const char *const[]){"info"}, 1))
      fprintf(stderr, "mgt: error: unknown dataset command '%s' (did you mean mgt dataset info?)\n",
              argv[2]);
    else if (rank == 0)
      fprintf(stderr, "mgt: error: mgt dataset takes a command: info PREFIX... (mgt dataset "
                      "--help)\n");
    return 2;
  }
  if (argc < 4 || !strcmp(argv[3], "--help") || !strcmp(argv[3], "-h")) {
    if (rank == 0) info_usage(argc < 4 ? stderr : stdout);
    return argc < 4 ? 2 : 0;
  }
  int unigram = 0, first = 1;
  const char *split = "969, 30, 1";
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--unigram")) unigram = 1;
    if (!strcmp(argv[i], "--split") && i + 1 < argc) split = argv[++i];
    if (!strncmp(argv[i], "--split=", 8)) split = argv[i] + 8;
  }
  for (int i = 3; i < argc; i++) { /* every rank reads; rank 0 prints */
    if (!strcmp(argv[i], "--unigram") || !strncmp(argv[i], "--split=", 8)) continue;
    if (!strcmp(argv[i], "--split")) {
      i++;
      continue;
    }
    if (!strncmp(argv[i], "--", 2)) {
      if (rank == 0)
        fprintf(stderr, "mgt: error: mgt dataset info: unknown flag '%s' (mgt dataset --help)\n",
                argv[i]);
      return 2;
    }
    mgt_dataset_info in;
    mgt_status st = mgt_dataset_info_read(argv[i], &in);
    double ppl = 0;
    int64_t n = 0;
    if (st == MGT_OK && unigram) st = mgt_dataset_unigram(argv[i], split, &ppl, &n);
    if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
    if (rank == 0) {
      if (!first) printf("\n");
      print_info(&in, stdout);
      if (unigram)
        printf("unigram perplexity: %.4f (the %lld tokens of the validation split of --split %s "
               "under the training split's token frequencies)\n",
               ppl, (long long)n, split);
    }
    first = 0;
  }
  if (first) {
    if (rank == 0) fprintf(stderr, "mgt: error: mgt dataset info: no PREFIX given\n");
    return 2;
  }
  return 0;
}
