/* mgt serve, the engine: every sequence in flight decoded together, one position each per
   step (continuous batching: a request joins at the next step, a finished or abandoned one
   leaves its cache slot to the next). A prompt is fed one token per step as well, which gives
   its log-probabilities on the way. Rank 0 decides each step and broadcasts it (slots,
   positions, tokens) to the tensor-parallel group, which decodes it together; rank 0 samples
   as mgt generate does, so greedy answers and seeded draws are generate's. */
#define _POSIX_C_SOURCE 200809L
#include "mgt/chat.h"
#include "mgt/serve.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgt/agree.h"
#include "mgt/cli.h"
#include "mgt/eval.h"
#include "mgt/flags.h"
#include "mgt/generate.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/log.h"
#include "mgt/rng.h"
#include "mgt/session.h"
#include "mgt/tokenizer.h"

#define OFF(f) offsetof(mgt_serve_opts, f)
#define SZ(f) sizeof(((mgt_serve_opts *)0)->f)
static const mgt_flag flags[] = {
    MGT_CHECKPOINT_FLAGS(mgt_serve_opts),
    {"--tensor-model-parallel-size", MGT_FLAG_INT, OFF(tensor_model_parallel_size), 0, 1 << 16,
     "must be the number of ranks (0: the number of ranks)", NULL, 0, 0},
    {"--host", MGT_FLAG_STR, OFF(host), 0, 0, "IPv4 address to listen on (0.0.0.0: every one)",
     NULL, SZ(host), 0},
    {"--port", MGT_FLAG_INT, OFF(port), 0, 65535, "TCP port (0: any free one, printed at start)",
     NULL, 0, 0},
    {"--max-batch", MGT_FLAG_INT, OFF(max_batch), 1, 4096,
     "sequences decoded together (each keeps a key/value cache of the model's positions)", NULL, 0,
     0},
    {"--max-prompts", MGT_FLAG_INT, OFF(max_prompts), 1, 1 << 20,
     "prompts (times choices) one request may carry", NULL, 0, 0},
    {"--max-request-bytes", MGT_FLAG_INT64, OFF(max_body), 64, 1LL << 34,
     "largest request body accepted", NULL, 0, 0},
    {"--max-connections", MGT_FLAG_INT, OFF(max_connections), 1, 65536,
     "open connections at once (a thread each); beyond, new ones are closed at once", NULL, 0, 0},
    {"--max-connections-per-client", MGT_FLAG_INT, OFF(max_per_client), 1, 65536,
     "open connections from one IP address", NULL, 0, 0},
    {"--idle-timeout", MGT_FLAG_DOUBLE, OFF(idle_timeout), 1, 86400,
     "seconds a connection may send nothing before it is closed", NULL, 0, 0},
    {"--request-timeout", MGT_FLAG_DOUBLE, OFF(request_timeout), 1, 86400,
     "seconds for a request's body to arrive whole, else the connection is closed", NULL, 0, 0},
    {"--drain-timeout", MGT_FLAG_DOUBLE, OFF(drain_timeout), 0, 86400,
     "seconds the requests in flight get to finish after SIGTERM; then they are answered 503", NULL,
     0, 0},
    {"--served-model-name", MGT_FLAG_STR, OFF(served_model_name), 0, 0,
     "the model's name in /v1/models and completions (default: the checkpoint folder's)", NULL,
     SZ(served_model_name), 0},
    MGT_TOKENIZER_FLAGS(mgt_serve_opts, " (default: the checkpoint's)"),
    {"--chat-template", MGT_FLAG_STR, OFF(chat_template), 0, 0,
     "the chat format POST /v1/chat/completions renders conversations in: llama3, chatml "
     "(qwen3), llama2, mistral, or auto (the one the tokenizer's tokenizer_config.json holds; "
     "none found: the endpoint answers 400 saying so)",
     NULL, SZ(chat_template), 0},
    MGT_DEVICE_FLAG(mgt_serve_opts),
    MGT_PRECISION_FLAGS(mgt_serve_opts),
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_serve_defaults(mgt_serve_opts *o) {
  memset(o, 0, sizeof *o);
  o->ckpt_iteration = -1;
  snprintf(o->host, sizeof o->host, "127.0.0.1");
  o->port = 5000; /* Megatron-LM's text generation server */
  o->max_batch = 8;
  o->max_prompts = 128; /* Megatron-LM's limit */
  o->max_body = 1 << 20;
  o->max_connections = 256, o->max_per_client = 64;
  o->idle_timeout = 15, o->request_timeout = 60, o->drain_timeout = 30;
  o->tokenizer_type = -1;
  o->cpu_gemm = -1;
  snprintf(o->chat_template, sizeof o->chat_template, "auto");
}

mgt_status mgt_serve_parse(mgt_serve_opts *o, int argc, char **argv, int first, int *help) {
  MGT_CHECK(mgt_flags_parse(flags, N_FLAGS, o, argc, argv, first, "serve", help));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->load[0], "--load: give the checkpoint to serve");
  int f;
  if (strcmp(o->chat_template, "auto") != 0) MGT_CHECK(mgt_chat_format_named(o->chat_template, &f));
  return MGT_OK;
}

void mgt_serve_usage(FILE *f) {
  mgt_serve_opts d;
  mgt_serve_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "serve", f);
  fprintf(f, "\nAPI: PUT /api (Megatron-LM's), POST /v1/completions, POST /v1/chat/completions, "
             "GET /v1/models, GET /health. See docs/serving.md.\n");
}

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

#ifndef MGT_HAVE_MHD
mgt_status srv_http_start(srv *s, const mgt_serve_opts *o, void **http, int *bound) {
  (void)s, (void)o, (void)http, (void)bound;
  MGT_FAIL(MGT_ERR_INPUT, "mgt serve: this build has no HTTP server (built without "
                          "libmicrohttpd: apt-get install libmicrohttpd-dev, then rebuild)");
}
void srv_http_quiesce(void *http) { (void)http; }
void srv_http_stop(void *http) { (void)http; }
#endif

/* The chat format of the server: the one named, or the tokenizer's; without one the chat
   endpoint says why. The end of an assistant's turn is the format's own token. */
static mgt_status chat_setup(srv *s, const mgt_serve_opts *o, mgt_chat_specials *sp) {
  s->chat_format = -1;
  MGT_CHECK(mgt_chat_specials_of(s->tok, sp));
  s->chat_sp = sp;
  s->end_of_turn = s->eod;
  int f = -1;
  const mgt_status st = mgt_chat_format_resolve(o->chat_template, s->tok, &f);
  if (st != MGT_OK) {
    if (strcmp(o->chat_template, "auto") != 0) return st; /* a name: its error */
    snprintf(s->chat_why, sizeof s->chat_why, "this server has no chat format: %s",
             mgt_error_message());
    mgt_error_clear();
    f = -1;
  }
  /* Llama 3's <|eot_id|> and ChatML's <|im_end|> end a turn, whatever the tokenizer's
     end-of-document (<|end_of_text|>, Qwen's base models' <|endoftext|>); both stop */
  const char *eot =
      f == MGT_CHAT_LLAMA3 ? "<|eot_id|>" : (f == MGT_CHAT_CHATML ? "<|im_end|>" : NULL);
  if (eot) {
    mgt_ids ids = {0};
    const mgt_status es = mgt_tok_encode(s->tok, eot, strlen(eot), &ids);
    if (es == MGT_OK && ids.n == 1) s->end_of_turn = ids.ids[0];
    mgt_ids_free(&ids);
    MGT_CHECK(es);
  }
  s->chat_format = f;
  return MGT_OK;
}

mgt_status mgt_serve_run(const mgt_serve_opts *o, MPI_Comm world) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  const int tp = o->tensor_model_parallel_size ? o->tensor_model_parallel_size : size;
  MGT_REQUIRE(size % tp == 0,
              "--tensor-model-parallel-size %d does not divide the %d ranks into replicas", tp,
              size);
  mgt_session ses;
  /* one row per sequence in flight: the layers' buffers hold max_batch rows */
  const mgt_session_opts so = {.load = o->load,
                               .ckpt_iteration = o->ckpt_iteration,
                               .tensor_parallel = tp,
                               .seq_length = 1,
                               .micro_batch_size = o->max_batch,
                               .device = o->device,
                               .tokenizer_type = -1,
                               .vocab_file = "",
                               .bf16 = o->bf16,
                               .fp16 = o->fp16,
                               .cpu_gemm = o->cpu_gemm};
  MGT_CHECK(mgt_session_open_config(&ses, &so, world));
  mgt_status st = MGT_OK;
  srv s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL), pthread_cond_init(&s.cv, NULL);
  mgt_gpt_decoder *dec = NULL;
  void *http = NULL;
  st = mgt_open_tokenizer(o->tokenizer_type, o->vocab_file, o->merge_file, &ses.saved, &s.tok);
  MGT_TRY(mgt_mpi_agree(world, st));
  MGT_TRY(mgt_session_open_model(&ses, world));
  const int positions = ses.cfg.max_position_embeddings;
  MGT_TRY(
      mgt_mpi_agree(world, mgt_gpt_decoder_create_batch(ses.model, o->max_batch, positions, &dec)));
  const int V = mgt_gpt_get_dims(ses.model)->V;
  s.positions = positions, s.eligible = mgt_tok_vocab_size(s.tok), s.eod = mgt_tok_eod(s.tok);
  s.max_prompts = o->max_prompts, s.max_body = (size_t)o->max_body;
  mgt_chat_specials sp;
  MGT_TRY(mgt_mpi_agree(world, chat_setup(&s, o, &sp)));
  if (o->served_model_name[0]) {
    snprintf(s.model_name, sizeof s.model_name, "%s", o->served_model_name);
  } else { /* the checkpoint folder's name */
    char path[MGT_PATH_MAX];
    snprintf(path, sizeof path, "%s", o->load);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
      path[--n] = 0;
    const char *b = strrchr(path, '/');
    snprintf(s.model_name, sizeof s.model_name, "%s", b ? b + 1 : path);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL), sigaction(SIGINT, &sa, NULL), sigaction(SIGUSR1, &sa, NULL);
  int bound = 0;
  const mgt_grid *g = ses.grid;
  const int front = g->rank == 0; /* takes the requests and runs the engine */
  if (front) st = srv_http_start(&s, o, &http, &bound);
  MGT_TRY(mgt_mpi_agree(world, st));
  if (front) {
    printf("serve: %s (iteration %lld) on %d tensor-parallel ranks x %d replicas, %s, at "
           "http://%s:%d (model '%s', %d sequences at a time per replica, %d positions)\n",
           ses.path, (long long)ses.state.iteration, g->tp, g->dp, ses.precision, o->host, bound,
           s.model_name, o->max_batch, positions);
    if (s.chat_format >= 0) {
      const char *eot = "";
      size_t eot_n = 0;
      if (mgt_tok_piece(s.tok, s.end_of_turn, &eot, &eot_n) != MGT_OK) mgt_error_clear();
      printf("serve: POST /v1/chat/completions renders conversations as the %s chat format, an "
             "answer ending at %.*s (id %d)\n",
             mgt_chat_names[s.chat_format], (int)eot_n, eot, (int)s.end_of_turn);
    } else
      printf("serve: POST /v1/chat/completions answers 400: %s\n", s.chat_why);
    fflush(stdout);
    st = srv_engine_run(&s, dec, o->max_batch, V, g, &stop_signal, srv_http_quiesce, http,
                        o->drain_timeout);
  } else {
    st = srv_follower_run(dec, o->max_batch, V, g);
  }
  if (front) {
    srv_http_stop(http);
    http = NULL;
    printf("serve: %llu requests answered; stopped\n", s.served);
    fflush(stdout);
  }
done:
  if (http) srv_http_stop(http);
  mgt_gpt_decoder_destroy(&dec);
  mgt_session_close(&ses);
  mgt_tok_destroy(&s.tok);
  free(s.queue);
  pthread_mutex_destroy(&s.mu), pthread_cond_destroy(&s.cv);
  return st;
}
