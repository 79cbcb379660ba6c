/* `mgt dataset info PREFIX...`: what a token dataset holds, ours (PREFIX.h5) or Megatron-LM's
   (PREFIX.bin and PREFIX.idx). */
#include <stdio.h>
#include <string.h>

#include "mgt/cli.h"
#include "mgt/agree.h"
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
  if (in->has_mask && in->n_trained >= 0)
    fprintf(
        f,
        "loss mask: conversations in the %s chat format, %lld tokens trained (mgt train --sft)\n",
        in->chat_template, (long long)in->n_trained);
  else if (in->has_mask)
    fprintf(f, "loss mask: PREFIX_loss_mask.bin/.idx beside it (mgt train --sft)\n");
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
  /* the flags first, so that a bad one is refused before anything is read */
  int unigram = 0, prefixes = 0;
  const char *split = "969, 30, 1";
  char bad[160] = "";
  for (int i = 3; i < argc && !bad[0]; i++) {
    if (!strcmp(argv[i], "--unigram")) {
      unigram = 1;
    } else if (!strncmp(argv[i], "--split=", 8)) {
      split = argv[i] + 8;
    } else if (!strcmp(argv[i], "--split")) {
      if (i + 1 < argc)
        split = argv[++i];
      else
        snprintf(bad, sizeof bad, "--split: missing value");
    } else if (!strncmp(argv[i], "--", 2)) {
      snprintf(bad, sizeof bad, "unknown flag '%.100s'", argv[i]);
    } else {
      argv[3 + prefixes++] = argv[i]; /* the prefixes, in order, at the front */
    }
  }
  if (!bad[0] && !prefixes) snprintf(bad, sizeof bad, "no PREFIX given");
  if (bad[0]) {
    if (rank == 0) fprintf(stderr, "mgt: error: mgt dataset info: %s (mgt dataset --help)\n", bad);
    return 2;
  }
  for (int i = 3; i < 3 + prefixes; i++) { /* every rank reads the attributes; rank 0 prints */
    mgt_dataset_info in;
    mgt_status st = mgt_dataset_info_read(argv[i], &in);
    double ppl = 0;
    int64_t n = 0;
    /* reading every token is rank 0's alone; the others learn whether it worked */
    if (st == MGT_OK && unigram)
      st = mgt_mpi_agree(world, rank == 0 ? mgt_dataset_unigram(argv[i], split, &ppl, &n) : MGT_OK);
    if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
    if (rank == 0) {
      if (i > 3) printf("\n");
      print_info(&in, stdout);
      if (unigram)
        printf("unigram perplexity: %.4f (the %lld tokens of the validation split of --split %s "
               "under the training split's token frequencies)\n",
               ppl, (long long)n, split);
    }
  }
  return 0;
}
