/* The serving engine (src/infer/engine.c), below the HTTP and JSON of mgt serve (src/cmd/serve*):
   the queue of sequences, their jobs and texts, and the decoding loop that decodes every
   sequence in flight together, one position each per step, on the tensor-parallel group (and
   replicas of it), sampling as mgt generate does. Private to src/infer and src/cmd. */
#pragma once

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "mgt/common.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mgt_tokenizer;

enum { SRV_MEGATRON, SRV_OPENAI }; /* the API a job answers in */
enum { SRV_MAX_STOP = 4, SRV_MAX_TOP = 5, SRV_STOP_LEN = 128 };
enum { SRV_RUNNING, SRV_LENGTH, SRV_STOP }; /* a sequence's state; the last two: finished */
enum { SRV_FAILED_MODEL = 1, SRV_FAILED_SHUTDOWN = 2 };

typedef struct srv_params {
  int max_new;
  int greedy;
  double temperature;
  int top_k;
  double top_p;
  uint64_t seed;
  int logprobs; /* Megatron: 1 for the log-probabilities; OpenAI: -1 none, else top k */
  int echo;     /* OpenAI: the prompt is part of the text */
  int stop_eol, stop_double_eol;
  int nstop;
  char stop[SRV_MAX_STOP][SRV_STOP_LEN];
  int add_bos;
  int n; /* OpenAI: choices per prompt */
  int stream;
  int stream_usage; /* OpenAI's stream_options.include_usage: a last event with the usage */
  /* Megatron-LM's: the nucleus shrinks by top_p_decay after each token, not below top_p_bound
     (0: no decay); a newline never follows a colon (the tokens of ":" and "\n", or -1); the
     generation also stops at stop_token (-1: only at the end of document) */
  double top_p_decay, top_p_bound;
  int32_t colon_id, newline_id, stop_token;
  int chat; /* OpenAI: a chat completion (its answers are messages) */
} srv_params;

typedef struct srv_job srv_job;

/* One sequence: a prompt and its continuation. Written by the engine under srv.mu; once its
   job has finished, read by the request's thread alone. */
typedef struct srv_seq {
  srv_job *job;
  int index; /* the choice's index in the answer */
  int32_t *ids;
  int n, n_prompt, fed, slot, state;
  int cap; /* of ids, lp, top_* (per position) and off (+ 1) */
  /* the text of ids[0..n), kept as tokens come (no decoding of the whole at each token): token
     i's bytes are text[off[i] .. off[i + 1]) */
  char *text;
  size_t text_len, text_cap;
  size_t *off;
  float *lp;       /* lp[i]: log-probability of ids[i] after ids[0..i), i >= 1 */
  int32_t *top_id; /* SRV_MAX_TOP alternatives per position, with their */
  float *top_lp;   /* log-probabilities */
  uint64_t stream;
  int cut;        /* a stop string ended it: */
  size_t stop_at; /* the bytes of the generated text before it */
  size_t sent;    /* streaming: bytes of the answer's text sent */
  int sent_tokens;
  int sent_role; /* a chat stream: the first chunk, with the role, went */
  int final_sent;
} srv_seq;

struct srv_job {
  int api;
  srv_params p;
  int nseq, pending, refs, cancelled;
  int admitted; /* its sequences given a slot so far */
  int failed;   /* SRV_FAILED_*: the engine failed, or the drain time ran out */
  srv_seq *seq;
  pthread_cond_t cv;
  char id[64];
  long long created;
};

typedef struct srv {
  pthread_mutex_t mu; /* the queue, the jobs and their sequences */
  pthread_cond_t cv;  /* the engine's: work arrived or stop */
  srv_seq **queue;
  int nq, capq;
  volatile int stopping;
  int open_requests; /* from their headers until their answers are sent */
  int receiving;     /* of them, those whose body is still arriving */
  int failed;
  struct mgt_tokenizer *tok; /* decodes for every thread; requests encode with clones */
  int positions, eligible;
  int32_t eod;
  char model_name[256];
  /* POST /v1/chat/completions: the chat format (include/mgt/chat.h; -1: none, chat_why says
     why), its bos/eos texts, and the token ending an assistant's turn */
  int chat_format;
  char chat_why[512];
  struct mgt_chat_specials *chat_sp;
  int32_t end_of_turn;
  int max_prompts;
  size_t max_body;
  unsigned long long served;
} srv;

/* Waits on cv (mu held) for a signal or ms milliseconds, whichever comes first. */
void srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);
/* The engine's side of a job: queued for decoding; the caller waits on job->cv under mu. */
MGT_NODISCARD mgt_status srv_submit(srv *s, srv_job *job);
/* Drops the caller's hold on a job: a job not finished is cancelled (its slots freed by the
   engine), a finished one freed. Under s->mu. */
void srv_release(srv *s, srv_job *job);
/* Room for q's positions up to n (ids, log-probabilities, alternatives, offsets), and the bytes
   of token ids[i] appended to q's text (i == the tokens the text has). Decoding reads the
   tokenizer only: no lock of its own. */
MGT_NODISCARD mgt_status srv_seq_room(srv_seq *q, int n);
MGT_NODISCARD mgt_status srv_seq_text_push(const srv *s, srv_seq *q, int i);
/* The bytes of tokens [from, to) of q. */
const char *srv_seq_text(const srv_seq *q, int from, int to, size_t *len);

/* Grid rank 0: admits queued sequences into the replicas' slots (the emptiest replica first),
   broadcasts each step to every rank, decodes its replica's rows, receives the other replicas'
   logits from their first ranks, and samples everything; until *stop_signal (then quiesce(arg)
   stops new requests, and those in flight get drain_timeout seconds) and the requests are
   answered. Collective over g's world with srv_follower_run on the other ranks. */
MGT_NODISCARD mgt_status srv_engine_run(srv *s, mgt_gpt_decoder *dec, int slots, int V,
                                        const mgt_grid *g, const volatile sig_atomic_t *stop_signal,
                                        void (*quiesce)(void *), void *arg, double drain_timeout);
/* The other ranks: each step as grid rank 0 broadcasts it, their replica's rows decoded. */
MGT_NODISCARD mgt_status srv_follower_run(mgt_gpt_decoder *dec, int slots, int V,
                                          const mgt_grid *g);

#ifdef __cplusplus
}
#endif
