/* mgt serve: a trained model answers over HTTP (Megatron-LM's PUT /api and the OpenAI-style
   completions), on the ranks that hold it. Rank 0 takes the requests (serve_http.c, threads of
   libmicrohttpd); its main thread runs the engine (serve.c), which decodes every sequence in
   flight together, one position each per step, on the tensor-parallel group; serve_api.c
   reads the requests and writes the answers. Private to src/cmd. */
#pragma once

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mgt_tokenizer;
struct mgt_json;

typedef struct mgt_serve_opts {
  char load[MGT_PATH_MAX];
  int64_t ckpt_iteration;
  int tensor_model_parallel_size; /* 0: every rank */
  char host[64];
  int port;      /* 0: any free one (the start line says which) */
  int max_batch; /* sequences decoded together */
  int max_prompts;
  int64_t max_body;                    /* bytes of a request body */
  int max_connections, max_per_client; /* open connections: in all, from one address */
  double idle_timeout;                 /* s a connection may send nothing */
  double request_timeout;              /* s for a request to arrive whole */
  double drain_timeout;                /* s the requests in flight get after SIGTERM */
  char served_model_name[256];
  char vocab_file[MGT_PATH_MAX];
  char merge_file[MGT_PATH_MAX];
  int tokenizer_type;
  int device;
} mgt_serve_opts;

void mgt_serve_defaults(mgt_serve_opts *o);
MGT_NODISCARD mgt_status mgt_serve_parse(mgt_serve_opts *o, int argc, char **argv, int first,
                                         int *help);
void mgt_serve_usage(FILE *f);
/* Serves until SIGTERM, SIGINT or SIGUSR1 (Slurm's), then finishes the requests in flight.
   Collective over world. */
MGT_NODISCARD mgt_status mgt_serve_run(const mgt_serve_opts *o, MPI_Comm world);

/* ---- between the three files ---- */

enum { SRV_MEGATRON, SRV_OPENAI };
enum { SRV_MAX_STOP = 4, SRV_MAX_TOP = 5, SRV_STOP_LEN = 128 };
enum { SRV_RUNNING, SRV_LENGTH, SRV_STOP }; /* a sequence's state; the last two: finished */
enum { SRV_FAILED_MODEL = 1, SRV_FAILED_SHUTDOWN = 2 };
enum { SRV_CLIENT_GONE = 499 }; /* a reply's status: nobody to answer (nginx's code) */

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
} srv_params;

typedef struct srv_job srv_job;

/* One sequence: a prompt and its continuation. Written by the engine under srv.mu. */
typedef struct srv_seq {
  srv_job *job;
  int index; /* the choice's index in the answer */
  int32_t *ids;
  int n, n_prompt, fed, slot, state;
  float *lp;       /* lp[i]: log-probability of ids[i] after ids[0..i), i >= 1 */
  int32_t *top_id; /* SRV_MAX_TOP alternatives per position, with their */
  float *top_lp;   /* log-probabilities */
  uint64_t stream;
  int cut;        /* a stop string ended it: */
  size_t stop_at; /* the bytes of the generated text before it */
  size_t sent;    /* streaming: bytes of the answer's text sent */
  int sent_tokens;
  int final_sent;
} srv_seq;

struct srv_job {
  int api;
  srv_params p;
  int nseq, pending, refs, cancelled;
  int failed; /* SRV_FAILED_*: the engine failed, or the drain time ran out */
  srv_seq *seq;
  pthread_cond_t cv;
  char id[40];
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
  int max_prompts;
  size_t max_body;
  unsigned long long served;
} srv;

/* A request's answer: status, content type and body (malloc'd), or a stream (job set). */
typedef struct srv_reply {
  int status;
  const char *type;
  char *body;
  size_t len;
  srv_job *job;
  int client_fd; /* the connection's socket, watched while the answer is decoded (-1: none) */
} srv_reply;

/* Waits on cv (mu held) for a signal or ms milliseconds, whichever comes first. */
void srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);
/* The engine's side of a job: queued for decoding; the caller waits on job->cv under mu. */
MGT_NODISCARD mgt_status srv_submit(srv *s, srv_job *job);
/* Drops the caller's hold on a job: a job not finished is cancelled (its slots freed by the
   engine), a finished one freed. Under s->mu. */
void srv_release(srv *s, srv_job *job);
/* The bytes of ids (decoding reads the tokenizer only: no lock). */
MGT_NODISCARD mgt_status srv_detok(srv *s, const int32_t *ids, int n, char **buf, size_t *len,
                                   size_t *cap);

/* serve_api.c: answers a request (method, url, body); for a stream, reply->job is the job
   and the caller streams it with srv_stream_next. While the answer is decoded, client_fd (the
   connection's socket; -1: none) is watched: a client that closes it cancels the job and the
   reply's status is SRV_CLIENT_GONE, with nothing to send. */
void srv_handle(srv *s, const char *method, const char *url, const char *body, size_t len,
                int too_big, int client_fd, srv_reply *reply);
/* The stream's events since the last call (malloc'd, *len bytes; NULL when none), *done once
   the last one is in. Under s->mu. */
char *srv_stream_next(srv *s, srv_job *job, size_t *len, int *done);
/* serve_http.c: listens on o->host:o->port (0: any; *bound says which) with its own threads,
   within o's limits of connections and time. */
MGT_NODISCARD mgt_status srv_http_start(srv *s, const mgt_serve_opts *o, void **http, int *bound);
/* No new connections; the open ones are answered. */
void srv_http_quiesce(void *http);
void srv_http_stop(void *http);

/* A one-line error answer in the API's form. */
void srv_error(srv_reply *r, int api, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
