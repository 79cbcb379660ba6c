/* mgt generate: sampling from a checkpoint with a key/value cache, tensor-parallel over all
   ranks. Every rank holds the gathered logits; rank 0 draws and broadcasts the token so that
   the ranks never diverge. */
#include "mgt/generate.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/session.h"
#include "mgt/eval.h"
#include "mgt/cli.h"
#include "mgt/flags.h"
#include "mgt/gpt.h"
#include "mgt/agree.h"
#include "mgt/log.h"
#include "mgt/rng.h"
#include "mgt/sample.h"
#include "mgt/tokenizer.h"

#define OFF(f) offsetof(mgt_generate_opts, f)
#define SZ(f) sizeof(((mgt_generate_opts *)0)->f)
static const mgt_flag flags[] = {
    MGT_CHECKPOINT_FLAGS(mgt_generate_opts),
    {"--prompt", MGT_FLAG_STR, OFF(prompt), 0, 0, "text to continue (empty: start a document)",
     NULL, SZ(prompt), 0},
    {"--prompt-file", MGT_FLAG_STR, OFF(prompt_file), 0, 0, "file whose text to continue", NULL,
     SZ(prompt_file), 0},
    {"--max-new-tokens", MGT_FLAG_INT, OFF(max_new_tokens), 1, 1 << 20,
     "tokens to generate at most (fewer at end-of-document)", NULL, 0, 0},
    {"--greedy", MGT_FLAG_BOOL, OFF(greedy), 0, 1, "always take the most likely token", NULL, 0, 0},
    {"--temperature", MGT_FLAG_DOUBLE, OFF(temperature), 1e-6, 1e6, "divides the logits", NULL, 0,
     0},
    {"--top-k", MGT_FLAG_INT, OFF(top_k), 0, 1 << 30, "sample among the k most likely (0: all)",
     NULL, 0, 0},
    {"--top-p", MGT_FLAG_DOUBLE, OFF(top_p), 0, 1,
     "sample among the most likely tokens of total probability p (0: off)", NULL, 0, 0},
    {"--seed", MGT_FLAG_UINT64, OFF(seed), 0, 1.8e19, "random seed of the sampler", NULL, 0, 0},
    {"--tensor-model-parallel-size", MGT_FLAG_INT, OFF(tensor_model_parallel_size), 0, 1 << 16,
     "must be the number of ranks (0: the number of ranks)", NULL, 0, 0},
    MGT_TOKENIZER_FLAGS(mgt_generate_opts, " (default: the checkpoint's)"),
    MGT_DEVICE_FLAG(mgt_generate_opts),
    MGT_PRECISION_FLAGS(mgt_generate_opts),
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_generate_defaults(mgt_generate_opts *o) {
  memset(o, 0, sizeof *o);
  o->ckpt_iteration = -1;
  o->max_new_tokens = 64;
  o->temperature = 1.0;
  o->seed = 1234;
  o->tokenizer_type = -1;
  o->cpu_gemm = -1;
}

mgt_status mgt_generate_parse(mgt_generate_opts *o, int argc, char **argv, int first, int *help) {
  MGT_CHECK(mgt_flags_parse(flags, N_FLAGS, o, argc, argv, first, "generate", help));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->load[0], "--load: give the checkpoint to generate from");
  MGT_REQUIRE(!(o->prompt[0] && o->prompt_file[0]), "give --prompt or --prompt-file, not both");
  return MGT_OK;
}

void mgt_generate_usage(FILE *f) {
  mgt_generate_opts d;
  mgt_generate_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "generate", f);
}

/* ---- the run ---- */

mgt_status mgt_generate_run(const mgt_generate_opts *o, MPI_Comm world, FILE *out, FILE *info) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  MGT_REQUIRE(o->tensor_model_parallel_size == 0 || o->tensor_model_parallel_size == size,
              "--tensor-model-parallel-size %d: generate runs one model over all %d ranks",
              o->tensor_model_parallel_size, size);
  /* decoding has its own buffers: the training activations are for one token */
  mgt_session ses;
  const mgt_session_opts so = {.load = o->load,
                               .ckpt_iteration = o->ckpt_iteration,
                               .tensor_parallel = size,
                               .seq_length = 1,
                               .micro_batch_size = 1,
                               .device = o->device,
                               .tokenizer_type = -1,
                               .vocab_file = "",
                               .bf16 = o->bf16,
                               .fp16 = o->fp16,
                               .cpu_gemm = o->cpu_gemm};
  MGT_CHECK(mgt_session_open_config(&ses, &so, world));
  const mgt_config *cfg = &ses.cfg;
  const char *path = ses.path;
  mgt_status st = MGT_OK;

  mgt_tokenizer *tok = NULL;
  mgt_ids prompt = {0};
  char *text = NULL, *piece = NULL;
  size_t text_n = 0, piece_n = 0, piece_cap = 0;
  float *logits = NULL;
  mgt_gpt_decoder *dec = NULL;
  /* inputs first: bad input stops every rank before anything is allocated */
  st = mgt_open_tokenizer(o->tokenizer_type, o->vocab_file, o->merge_file, &ses.saved, &tok);
  if (st == MGT_OK && o->prompt_file[0])
    st = mgt_read_file("--prompt-file", o->prompt_file, &text, &text_n);
  if (st == MGT_OK)
    st = text ? mgt_tok_encode(tok, text, text_n, &prompt)
              : mgt_tok_encode(tok, o->prompt, strlen(o->prompt), &prompt);
  /* an empty prompt starts a new document */
  if (st == MGT_OK && prompt.n == 0) st = mgt_ids_push(&prompt, mgt_tok_eod(tok));
  const int positions = cfg->max_position_embeddings;
  const int max_len = (int)prompt.n + o->max_new_tokens;
  if (st == MGT_OK && (prompt.n > (size_t)positions || max_len > positions)) {
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "a prompt of %zu tokens and --max-new-tokens %d exceed the model's %d positions",
                   prompt.n, o->max_new_tokens, positions);
  }
  MGT_TRY(mgt_mpi_agree(world, st));
  MGT_TRY(mgt_session_open_model(&ses, world));
  MGT_TRY(mgt_mpi_agree(world, mgt_gpt_decoder_create(ses.model, max_len, &dec)));
  const int V = mgt_gpt_get_dims(ses.model)->V, eligible = mgt_tok_vocab_size(tok);
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)V, "logits", (void **)&logits));

  const int32_t eod = mgt_tok_eod(tok);
  const int started_doc = o->prompt[0] == 0 && text_n == 0;
  if (rank == 0) {
    if (!started_doc) fwrite(text ? text : o->prompt, 1, text ? text_n : strlen(o->prompt), out);
    fflush(out);
  }
  double t0 = mgt_now();
  int pos = 0;
  for (; pos < (int)prompt.n; pos++)
    MGT_TRY(mgt_gpt_decode(dec, prompt.ids[pos], pos, logits));
  double t_prompt = mgt_now() - t0;
  int generated = 0, at_eod = 0;
  const uint64_t stream = mgt_rng_data_stream(0x300u);
  for (; generated < o->max_new_tokens; generated++) {
    int32_t next = 0;
    if (rank == 0) {
      uint32_t w[4];
      mgt_rng_block(o->seed, stream, (uint64_t)generated, w);
      double u = (double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) / 9007199254740992.0;
      next = mgt_sample_token(logits, eligible, o->greedy, o->temperature, o->top_k, o->top_p, u);
    }
    MGT_MPI_TRY(MPI_Bcast(&next, 1, MPI_INT32_T, 0, world));
    if (next == eod) {
      at_eod = 1;
      break;
    }
    if (rank == 0) {
      piece_n = 0;
      MGT_TRY(mgt_tok_decode(tok, &next, 1, &piece, &piece_n, &piece_cap));
      fwrite(piece, 1, piece_n, out);
      fflush(out);
    }
    if (generated + 1 < o->max_new_tokens) MGT_TRY(mgt_gpt_decode(dec, next, pos++, logits));
  }
  double t_all = mgt_now() - t0;
  if (rank == 0) {
    fputc('\n', out);
    fflush(out);
    if (info) {
      double t_gen = t_all - t_prompt;
      fprintf(info,
              "generate: %s (iteration %lld) on %d tensor-parallel ranks, %s: prompt %zu tokens "
              "in %.3f s, %d new tokens in %.3f s (%.1f tokens/s), stopped at %s\n",
              path, (long long)ses.state.iteration, size, ses.precision, prompt.n, t_prompt,
              generated, t_gen, t_gen > 0 ? generated / t_gen : 0.0,
              at_eod ? "end-of-document" : "--max-new-tokens");
      fflush(info);
    }
  }
done:
  mgt_free(logits);
  mgt_gpt_decoder_destroy(&dec);
  mgt_session_close(&ses);
  mgt_tok_destroy(&tok);
  mgt_ids_free(&prompt);
  free(text);
  free(piece);
  return st;
}
