/* mgt serve: a trained model answers over HTTP (Megatron-LM's PUT /api and the OpenAI-style
   completions), on the ranks that hold it. Rank 0 takes the requests (serve_http.c, threads of
   libmicrohttpd); its main thread runs the engine (src/infer/engine.c, mgt/engine.h), which
   decodes every sequence in flight together; serve_api.c reads the requests and writes the
   answers, serve.c starts it all. Private to src/cmd. */
#pragma once

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

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
  int bf16, fp16;         /* the GEMM inputs' precision (default fp32) */
  int cpu_gemm;           /* MGT_CPU_GEMM_*; -1: native under --bf16 where the CPU can */
  char chat_template[64]; /* the chat format of /v1/chat/completions; "auto": the tokenizer's */
} mgt_serve_opts;

void mgt_serve_defaults(mgt_serve_opts *o);
MGT_NODISCARD mgt_status mgt_serve_parse(mgt_serve_opts *o, int argc, char **argv, int first,
                                         int *help);
void mgt_serve_usage(FILE *f);
/* Serves until SIGTERM, SIGINT or SIGUSR1 (Slurm's), then finishes the requests in flight.
   Collective over world. */
MGT_NODISCARD mgt_status mgt_serve_run(const mgt_serve_opts *o, MPI_Comm world);

/* ---- between the three files ---- */

enum { SRV_CLIENT_GONE = 499 }; /* a reply's status: nobody to answer (nginx's code) */

/* A request's answer: status, content type and body (malloc'd), or a stream (job set). */
typedef struct srv_reply {
  int status;
  const char *type;
  char *body;
  size_t len;
  srv_job *job;
  int client_fd; /* the connection's socket, watched while the answer is decoded (-1: none) */
} srv_reply;

/* serve_api.c's helpers for the OpenAI-style endpoints (serve_openai.c) */
struct mgt_ids;
typedef struct srv_out { /* a reply body being written */
  FILE *f;
  char *buf;
  size_t len;
} srv_out;
int srv_out_open(srv_out *o);
void srv_out_reply(srv_out *o, srv_reply *r, int status, const char *type);
/* srv_error, then 0: for the checks that return whether a request may go on. */
#define srv_error_0(...) (srv_error(__VA_ARGS__), 0)
/* How many bytes at the end of s[0..n) begin a UTF-8 character not complete yet. */
size_t srv_utf8_tail(const char *s, size_t n);
int srv_is_int(const struct mgt_json *v);
void srv_params_init(srv_params *p);
/* The first member of obj not in known[] (NULL-terminated), or NULL. */
const char *srv_unknown_field(const struct mgt_json *obj, const char *const *known);
/* A job of the prompts (token ids), each `copies` times; NULL when out of memory. */
/* A seed for a request that gives none: another for every request, concurrent or not. */
uint64_t srv_fresh_seed(void);
srv_job *srv_job_new(const srv *s, int api, const srv_params *p, struct mgt_ids *prompts, int np,
                     int copies);
/* Tokenizes the prompts with a clone of the server's tokenizer and checks that each fits the
   model with p->max_new tokens after it; 0 with the reply set when not. */
int srv_tokenize(srv *s, srv_reply *r, int api, const char *const *text, const size_t *len, int np,
                 const srv_params *p, struct mgt_ids *ids);
/* Queues the job and waits for it (a stream: returns at once, r->job set); 0 with the reply
   set when it cannot be answered. */
int srv_run_job(srv *s, srv_reply *r, srv_job *job);
/* The bytes of the generated text a client sees: cut before a stop string. */
size_t srv_gen_len(const srv_seq *q, size_t n);

/* serve_openai.c: POST /v1/completions and POST /v1/chat/completions */
void srv_openai_completions(srv *s, const struct mgt_json *req, srv_reply *r);
void srv_openai_chat(srv *s, const struct mgt_json *req, srv_reply *r);

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
