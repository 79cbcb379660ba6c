/* mgt serve, the APIs: Megatron-LM's PUT /api (its field names, types, limits and messages;
   every rejection here is a 400, where Megatron answers some with 200), GET /v1/models and
   /health, the routes, and what the OpenAI-style endpoints (serve_openai.c) share: replies,
   field checks, tokenizing, queueing and waiting.
   A request is read and checked whole before anything is queued: a bad one costs nothing. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mgt/json.h"
#include "mgt/rng.h"
#include "mgt/serve.h"
#include "mgt/sha256.h"
#include "mgt/tokenizer.h"

/* ---- JSON out ---- */

/* How many bytes at the end of s[0..n) begin a UTF-8 character not complete yet. */
size_t srv_utf8_tail(const char *s, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    const unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;
    const size_t len = c >= 0xF0 ? 4 : (c >= 0xE0 ? 3 : (c >= 0xC0 ? 2 : 1));
    return len > back ? back : 0;
  }
  return 0;
}

int srv_out_open(srv_out *o) {
  o->buf = NULL, o->len = 0;
  o->f = open_memstream(&o->buf, &o->len);
  return o->f != NULL;
}

void srv_out_reply(srv_out *o, srv_reply *r, int status, const char *type) {
  fclose(o->f);
  r->status = status, r->type = type, r->body = o->buf, r->len = o->len;
}

void srv_error(srv_reply *r, int api, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  srv_out o;
  if (!srv_out_open(&o)) {
    r->status = 500, r->type = "text/plain", r->body = NULL, r->len = 0;
    return;
  }
  if (api == SRV_OPENAI) { /* OpenAI's error object */
    fputs("{\"error\": {\"message\": ", o.f);
    mgt_json_write_bytes(o.f, msg, strlen(msg));
    fprintf(o.f, ", \"type\": \"%s\", \"param\": null, \"code\": null}}\n",
            status == 404 ? "not_found_error"
                          : (status >= 500 ? "server_error" : "invalid_request_error"));
  } else { /* Megatron's Flask resource answers its message as a JSON string */
    mgt_json_write_bytes(o.f, msg, strlen(msg));
    fputc('\n', o.f);
  }
  srv_out_reply(&o, r, status, "application/json");
}

/* ---- requests ---- */

typedef struct field {
  const char *name;
  const mgt_json *v;
} field;

int srv_is_int(const mgt_json *v) {
  return v->type == MGT_JSON_NUMBER && v->number == floor(v->number) && fabs(v->number) < 9e15;
}
/* Python's int and float of a JSON number, as Megatron-LM's isinstance checks see them. */
static int py_int(const mgt_json *v) { return srv_is_int(v) && v->len == 0; }
static int py_float(const mgt_json *v) { return v->type == MGT_JSON_NUMBER && v->len != 0; }

void srv_params_init(srv_params *p) {
  memset(p, 0, sizeof *p);
  p->colon_id = p->newline_id = p->stop_token = -1;
}

/* The members of obj not in known[] (NULL-terminated): the first one's name, or NULL. */
const char *srv_unknown_field(const mgt_json *obj, const char *const *known) {
  for (size_t i = 0; i < obj->len; i++) {
    int found = 0;
    for (int k = 0; known[k] && !found; k++) /* all of the name: "\u0000" does not end it */
      found =
          obj->key_lens[i] == strlen(known[k]) && !memcmp(obj->keys[i], known[k], obj->key_lens[i]);
    if (!found) return obj->keys[i];
  }
  return NULL;
}

/* Jobs made by this process: their ids and default seeds differ whatever their timing. */
static uint64_t jobs_made;

uint64_t srv_fresh_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t n = __atomic_fetch_add(&jobs_made, 1, __ATOMIC_RELAXED);
  return mgt_fmix64(((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                    mgt_fmix64(n + ((uint64_t)getpid() << 32)));
}

/* A job of the given prompts (token ids), each `copies` times. */
srv_job *srv_job_new(const srv *s, int api, const srv_params *p, mgt_ids *prompts, int np,
                     int copies) {
  srv_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->api = api, j->p = *p, j->nseq = np * copies;
  j->seq = calloc((size_t)j->nseq, sizeof *j->seq);
  pthread_cond_init(&j->cv, NULL);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  j->created = (long long)ts.tv_sec;
  snprintf(j->id, sizeof j->id, "cmpl-%llx%06lx%llx", (unsigned long long)ts.tv_sec,
           (unsigned long)(ts.tv_nsec / 1000),
           (unsigned long long)__atomic_fetch_add(&jobs_made, 1, __ATOMIC_RELAXED));
  int ok = j->seq != NULL;
  for (int i = 0; ok && i < j->nseq; i++) {
    srv_seq *q = &j->seq[i];
    const mgt_ids *pr = &prompts[i / copies];
    q->job = j, q->index = i, q->n = q->n_prompt = (int)pr->n;
    ok = srv_seq_room(q, (int)pr->n + 1) == MGT_OK;
    if (ok) memcpy(q->ids, pr->ids, sizeof(int32_t) * pr->n);
    for (int t = 0; ok && t < q->n; t++) /* the prompt's text, token by token */
      ok = srv_seq_text_push(s, q, t) == MGT_OK;
    /* sequence 0 draws as mgt generate --seed does; the others from their own streams */
    q->stream = mgt_rng_data_stream(0x300u + (uint32_t)i);
  }
  if (!ok) {
    mgt_error_clear();
    for (int i = 0; j->seq && i < j->nseq; i++) {
      srv_seq *q = &j->seq[i];
      free(q->ids), free(q->lp), free(q->top_id), free(q->top_lp), free(q->text), free(q->off);
    }
    free(j->seq);
    pthread_cond_destroy(&j->cv);
    free(j);
    return NULL;
  }
  return j;
}

/* The first token of text (a clone of the server's tokenizer encodes it), or -1. */
static int32_t first_token(srv *s, const char *text) {
  mgt_tokenizer *tok = NULL;
  mgt_ids ids = {0};
  int32_t id = -1;
  if (mgt_tok_clone(s->tok, &tok) == MGT_OK &&
      mgt_tok_encode(tok, text, strlen(text), &ids) == MGT_OK && ids.n > 0)
    id = ids.ids[0];
  mgt_error_clear();
  mgt_ids_free(&ids);
  mgt_tok_destroy(&tok);
  return id;
}

/* Tokenizes the prompts and checks each fits the model with max_new tokens after it. The
   request's own clone of the tokenizer encodes, under no lock: a long prompt costs its own
   thread only, never the engine or the other requests. */
int srv_tokenize(srv *s, srv_reply *r, int api, const char *const *text, const size_t *len, int np,
                 const srv_params *p, mgt_ids *ids) {
  mgt_tokenizer *tok = NULL;
  if (mgt_tok_clone(s->tok, &tok) != MGT_OK) {
    mgt_error_clear();
    srv_error(r, api, 500, "out of memory");
    return 0;
  }
  for (int i = 0; i < np; i++) {
    mgt_status st = MGT_OK;
    if (p->add_bos) st = mgt_ids_push(&ids[i], s->eod);
    if (st == MGT_OK) st = mgt_tok_encode(tok, text[i], len[i], &ids[i]);
    if (st != MGT_OK) {
      srv_error(r, api, 400, "prompt %d: %s", i, mgt_error_message());
      mgt_error_clear();
      mgt_tok_destroy(&tok);
      return 0;
    }
    if (ids[i].n == 0) { /* OpenAI: an empty prompt starts a document, as mgt generate's */
      if (mgt_ids_push(&ids[i], s->eod) != MGT_OK) {
        mgt_error_clear();
        srv_error(r, api, 500, "out of memory");
        mgt_tok_destroy(&tok);
        return 0;
      }
    }
    if ((long long)ids[i].n + p->max_new > s->positions) {
      srv_error(r, api, 400,
                "prompt %d has %zu tokens: with %d to generate that exceeds the model's %d "
                "positions",
                i, ids[i].n, p->max_new, s->positions);
      mgt_tok_destroy(&tok);
      return 0;
    }
  }
  mgt_tok_destroy(&tok);
  return 1;
}

/* Whether the client has closed its connection: the end of its stream or an error, seen without
   reading anything it sent after its request. A client that only shuts down its sending side
   reads as gone too: HTTP/1.1 gives that no meaning, and nginx takes it the same way. */
static int client_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&pf, 1, 0) <= 0) return 0;
  if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
  char c;
  return (pf.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Queues the job and waits for it (the request's thread); 0 with the reply set when it cannot
   be answered (engine failed, shut down, or the client left: SRV_CLIENT_GONE). */
int srv_run_job(srv *s, srv_reply *r, srv_job *job) {
  pthread_mutex_lock(&s->mu);
  mgt_status st = srv_submit(s, job);
  if (st != MGT_OK) {
    pthread_mutex_unlock(&s->mu);
    srv_error(r, job->api, 503, "%s", mgt_error_message());
    mgt_error_clear();
    job->refs = 1;
    pthread_mutex_lock(&s->mu);
    srv_release(s, job);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  if (job->p.stream) { /* the HTTP layer streams it */
    pthread_mutex_unlock(&s->mu);
    r->job = job;
    return 1;
  }
  while (job->pending > 0 && !job->failed) {
    srv_timed_wait(&job->cv, &s->mu, 200);
    if (job->pending > 0 && !job->failed && client_gone(r->client_fd)) {
      srv_release(s, job); /* its sequences leave at the engine's next step */
      pthread_mutex_unlock(&s->mu);
      r->status = SRV_CLIENT_GONE;
      return 0;
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (job->failed) {
    if (job->failed == SRV_FAILED_SHUTDOWN)
      srv_error(r, job->api, 503, "the server shut down before the answer was complete");
    else
      srv_error(r, job->api, 500, "the model failed while decoding (see the server's log)");
    pthread_mutex_lock(&s->mu);
    srv_release(s, job);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  return 1;
}

/* The bytes of the generated text a client sees: cut before a stop string. */
size_t srv_gen_len(const srv_seq *q, size_t n) { return q->cut && q->stop_at < n ? q->stop_at : n; }

/* ---- Megatron-LM's PUT /api ---- */

static void megatron(srv *s, const mgt_json *req, srv_reply *r) {
  const int api = SRV_MEGATRON;
  if (req->type != MGT_JSON_OBJECT) return srv_error(r, api, 400, "the body is not a JSON object");
  const mgt_json *v; /* fields it does not know are ignored, as Megatron-LM's server does */
  if (!mgt_json_get(req, "prompts")) return srv_error(r, api, 400, "prompts argument required");
  if (mgt_json_get(req, "max_len"))
    return srv_error(r, api, 400, "max_len is no longer used.  Replace with tokens_to_generate");
  if (mgt_json_get(req, "sentences"))
    return srv_error(r, api, 400, "sentences is no longer used.  Replace with prompts");
  const mgt_json *pr = mgt_json_get(req, "prompts");
  if (pr->type != MGT_JSON_ARRAY) return srv_error(r, api, 400, "prompts is not a list of strings");
  if (pr->len == 0) return srv_error(r, api, 400, "prompts is empty");
  if (pr->len > (size_t)s->max_prompts)
    return srv_error(r, api, 400, "Maximum number of prompts is %d", s->max_prompts);
  for (size_t i = 0; i < pr->len; i++)
    if (pr->items[i].type != MGT_JSON_STRING)
      return srv_error(r, api, 400, "prompts is not a list of strings");
  srv_params p;
  srv_params_init(&p);
  p.max_new = 64, p.temperature = 1.0, p.logprobs = 0, p.n = 1;
  if ((v = mgt_json_get(req, "tokens_to_generate"))) {
    if (!py_int(v))
      return srv_error(r, api, 400, "tokens_to_generate must be an integer greater than 0");
    if (v->number < 0)
      return srv_error(r, api, 400,
                       "tokens_to_generate must be an integer greater than or equal to 0");
    if (v->number > s->positions)
      return srv_error(r, api, 400, "tokens_to_generate %.0f exceeds the model's %d positions",
                       v->number, s->positions);
    p.max_new = (int)v->number;
  }
  if ((v = mgt_json_get(req, "logprobs"))) {
    if (v->type != MGT_JSON_BOOL) return srv_error(r, api, 400, "logprobs must be a boolean value");
    p.logprobs = v->number != 0;
  }
  if (p.max_new == 0 && !p.logprobs)
    return srv_error(r, api, 400, "tokens_to_generate=0 implies logprobs should be True");
  if ((v = mgt_json_get(req, "temperature"))) {
    if (v->type != MGT_JSON_NUMBER)
      return srv_error(r, api, 400,
                       "temperature must be a positive number less than or equal to 1000.0");
    if (!(v->number > 0.0 && v->number <= 100.0))
      return srv_error(r, api, 400,
                       "temperature must be a positive number less than or equal to 100.0");
    p.temperature = v->number;
  }
  if ((v = mgt_json_get(req, "top_k"))) {
    if (!py_int(v))
      return srv_error(r, api, 400,
                       "top_k must be an integer equal to or greater than 0 and less than or "
                       "equal to 1000");
    if (!(v->number >= 0 && v->number <= 1000))
      return srv_error(r, api, 400,
                       "top_k must be equal to or greater than 0 and less than or equal to 1000");
    p.top_k = (int)v->number;
  }
  if ((v = mgt_json_get(req, "top_p"))) {
    if (!py_float(v))
      return srv_error(r, api, 400, "top_p must be a positive float less than or equal to 1.0");
    if (v->number > 0.0 && p.top_k > 0)
      return srv_error(r, api, 400, "cannot set both top-k and top-p samplings.");
    if (!(v->number >= 0 && v->number <= 1.0))
      return srv_error(r, api, 400, "top_p must be less than or equal to 1.0");
    p.top_p = v->number;
  }
  if ((v = mgt_json_get(req, "top_p_decay"))) {
    if (!py_float(v))
      return srv_error(r, api, 400,
                       "top_p_decay must be a positive float less than or equal to 1.0");
    if (p.top_p == 0.0) return srv_error(r, api, 400, "top_p_decay cannot be set without top_p");
    if (!(v->number >= 0 && v->number <= 1.0))
      return srv_error(r, api, 400, "top_p_decay must be less than or equal to 1.0");
    p.top_p_decay = v->number;
  }
  if ((v = mgt_json_get(req, "top_p_bound"))) {
    if (!py_float(v))
      return srv_error(r, api, 400,
                       "top_p_bound must be a positive float less than or equal to top_p");
    if (p.top_p == 0.0) return srv_error(r, api, 400, "top_p_bound cannot be set without top_p");
    if (!(v->number > 0.0 && v->number <= p.top_p))
      return srv_error(r, api, 400, "top_p_bound must be greater than 0 and less than top_p");
    p.top_p_bound = v->number;
  }
  if ((v = mgt_json_get(req, "beam_width")) && v->type != MGT_JSON_NULL)
    return srv_error(r, api, 400, "beam_width: beam search is not implemented by mgt serve");
  if ((v = mgt_json_get(req, "stop_token"))) {
    if (!py_int(v)) return srv_error(r, api, 400, "stop_token must be an integer");
    p.stop_token = v->number >= 0 && v->number < 2147483647.0 ? (int32_t)v->number : -1;
  }
  /* only beam search reads it in Megatron-LM: checked, and without effect here */
  if ((v = mgt_json_get(req, "length_penalty")) && !py_float(v))
    return srv_error(r, api, 400, "length_penalty must be a float");
  int colon = 0;
  static const char *const bools[] = {"add_BOS", "stop_on_double_eol", "stop_on_eol", "no_log",
                                      "prevent_newline_after_colon"};
  int *dst[] = {&p.add_bos, &p.stop_double_eol, &p.stop_eol, NULL, &colon};
  for (int i = 0; i < 5; i++)
    if ((v = mgt_json_get(req, bools[i]))) {
      if (v->type != MGT_JSON_BOOL)
        return srv_error(r, api, 400, "%s must be a boolean value", bools[i]);
      if (dst[i]) *dst[i] = v->number != 0;
    }
  for (size_t i = 0; i < pr->len; i++)
    if (pr->items[i].len == 0 && !p.add_bos)
      return srv_error(r, api, 400, "Empty prompts require add_BOS=true");
  p.seed = srv_fresh_seed();
  if (colon) { /* the tokens of ":" and "\n", as Megatron-LM takes them: the first of each */
    p.colon_id = first_token(s, ":");
    p.newline_id = first_token(s, "\n");
  }
  if ((v = mgt_json_get(req, "random_seed"))) {
    if (!py_int(v)) return srv_error(r, api, 400, "random_seed must be integer");
    if (v->number < 0) return srv_error(r, api, 400, "random_seed must be a positive integer");
    p.seed = (uint64_t)v->number;
  }
  p.greedy = p.top_k == 1; /* the most likely token, as Megatron's top_k = 1 */
  const int np = (int)pr->len;
  const char **text = calloc((size_t)np, sizeof *text);
  size_t *len = calloc((size_t)np, sizeof *len);
  mgt_ids *ids = calloc((size_t)np, sizeof *ids);
  srv_job *job = NULL;
  if (!text || !len || !ids) {
    srv_error(r, api, 500, "out of memory");
    goto done;
  }
  for (int i = 0; i < np; i++)
    text[i] = pr->items[i].str, len[i] = pr->items[i].len;
  if (!srv_tokenize(s, r, api, text, len, np, &p, ids)) goto done;
  job = srv_job_new(s, api, &p, ids, np, 1);
  if (!job) {
    srv_error(r, api, 500, "out of memory");
    goto done;
  }
  if (!srv_run_job(s, r, job)) goto done;
  /* {"text": [prompt + continuation], "segments": [[token texts]], "tokens": [[ids]],
     "logprobs": [[log-probability of each token after the first]]} */
  srv_out o;
  if (!srv_out_open(&o)) {
    srv_error(r, api, 500, "out of memory");
  } else { /* the engine is done with the job: read without the lock */
    const char *keys[] = {"text", "segments", "tokens", "logprobs"};
    fputc('{', o.f);
    for (int k = 0; k < (p.logprobs ? 4 : 3); k++) {
      fprintf(o.f, "%s\"%s\": [", k ? ", " : "", keys[k]);
      for (int i = 0; i < job->nseq; i++) {
        const srv_seq *q = &job->seq[i];
        fputs(i ? ", " : "", o.f);
        size_t n;
        if (k == 0) {
          const char *t = srv_seq_text(q, 0, q->n, &n);
          mgt_json_write_bytes(o.f, t, n);
          continue;
        }
        fputc('[', o.f);
        for (int t = k == 3 ? 1 : 0; t < q->n; t++) {
          fputs(t > (k == 3 ? 1 : 0) ? ", " : "", o.f);
          if (k == 1) {
            const char *w = srv_seq_text(q, t, t + 1, &n);
            mgt_json_write_bytes(o.f, w, n);
          } else if (k == 2) {
            fprintf(o.f, "%d", q->ids[t]);
          } else {
            fprintf(o.f, "%.9g", (double)q->lp[t]);
          }
        }
        fputc(']', o.f);
      }
      fputc(']', o.f);
    }
    fputs("}\n", o.f);
    pthread_mutex_lock(&s->mu);
    s->served++;
    srv_release(s, job);
    pthread_mutex_unlock(&s->mu);
    job = NULL;
    srv_out_reply(&o, r, 200, "application/json");
  }
  if (job) {
    pthread_mutex_lock(&s->mu);
    srv_release(s, job);
    pthread_mutex_unlock(&s->mu);
  }
done:
  for (int i = 0; ids && i < np; i++)
    mgt_ids_free(&ids[i]);
  free(text), free(len), free(ids);
}

/* ---- routes ---- */

void srv_handle(srv *s, const char *method, const char *url, const char *body, size_t len,
                int too_big, int client_fd, srv_reply *r) {
  memset(r, 0, sizeof *r);
  r->client_fd = client_fd;
  const int api = !strcmp(url, "/api") ? SRV_MEGATRON : SRV_OPENAI;
  const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"); /* HEAD: the same, no body */
  if (!strcmp(url, "/health")) {
    if (!get) return srv_error(r, api, 405, "%s /health: use GET", method);
    srv_out o;
    if (!srv_out_open(&o)) return srv_error(r, api, 500, "out of memory");
    fputs("{\"status\": \"ok\"}\n", o.f);
    return srv_out_reply(&o, r, 200, "application/json");
  }
  if (!strcmp(url, "/v1/models")) {
    if (!get) return srv_error(r, api, 405, "%s /v1/models: use GET", method);
    srv_out o;
    if (!srv_out_open(&o)) return srv_error(r, api, 500, "out of memory");
    fputs("{\"object\": \"list\", \"data\": [{\"id\": ", o.f);
    mgt_json_write_bytes(o.f, s->model_name, strlen(s->model_name));
    fprintf(o.f,
            ", \"object\": \"model\", \"created\": %lld, \"owned_by\": \"megatron-c\", "
            "\"max_model_len\": %d}]}\n",
            (long long)time(NULL), s->positions);
    return srv_out_reply(&o, r, 200, "application/json");
  }
  const int is_api = api == SRV_MEGATRON,
            is_chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"),
            is_cmpl = is_chat || !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
  if (!is_api && !is_cmpl) return srv_error(r, api, 404, "no such endpoint: %.200s", url);
  if (is_api && strcmp(method, "PUT")) return srv_error(r, api, 405, "%s /api: use PUT", method);
  if (is_cmpl && strcmp(method, "POST"))
    return srv_error(r, api, 405, "%s %s: use POST", method, url);
  if (too_big)
    return srv_error(r, api, 413, "the request body is over this server's %zu bytes", s->max_body);
  mgt_json_parser *jp = NULL;
  const mgt_json *req = NULL;
  if (mgt_json_parser_create(&jp) != MGT_OK) {
    mgt_error_clear();
    return srv_error(r, api, 500, "out of memory");
  }
  /* no valid request holds more values than its prompts' tokens and a few parameters: the cap
     keeps a body of tiny values from costing 40x its size while it is served */
  const size_t cap = (size_t)s->max_prompts * (size_t)s->positions + 4096;
  mgt_json_parser_limit(jp, cap);
  if (mgt_json_parse(jp, body ? body : "", len, &req) != MGT_OK) {
    if (mgt_json_parser_over(jp))
      srv_error(r, api, 413,
                "the request holds more than %zu JSON values (--max-prompts %d times the "
                "model's %d positions, and 4096 more)",
                cap, s->max_prompts, s->positions);
    else
      srv_error(r, api, 400, "malformed JSON: %s", mgt_error_message());
    mgt_error_clear();
  } else if (is_api) {
    megatron(s, req, r);
  } else if (is_chat) {
    srv_openai_chat(s, req, r);
  } else {
    srv_openai_completions(s, req, r);
  }
  mgt_json_parser_destroy(&jp);
}
