/* The serving engine (src/mgt/engine.h): every sequence in flight decoded together, one
   position each per step (continuous batching: a request joins at the next step, a finished or
   abandoned one leaves its cache slot to the next). A prompt is fed one token per step as well,
   which gives its log-probabilities on the way. Rank 0 decides each step and broadcasts it
   (slots, positions, tokens) to the tensor-parallel group, which decodes it together; rank 0
   samples as mgt generate does, so greedy answers and seeded draws are generate's. A
   sequence's text grows by each token's bytes as the token comes, so that nothing is decoded
   twice: stop strings are looked for in the new bytes alone, and streams send what came. */
#define _POSIX_C_SOURCE 200809L
#include "mgt/engine.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgt/agree.h"
#include "mgt/grid.h"
#include "mgt/log.h"
#include "mgt/rng.h"
#include "mgt/sample.h"
#include "mgt/tokenizer.h"

/* ---- the queue (HTTP threads) ---- */

void srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(cv, mu, &ts);
}

mgt_status srv_submit(srv *s, srv_job *job) {
  if (s->stopping) MGT_FAIL(MGT_ERR_INPUT, "the server is shutting down");
  if (s->nq + job->nseq > s->capq) {
    const int cap = (s->nq + job->nseq) * 2 + 16;
    srv_seq **q = realloc(s->queue, sizeof *q * (size_t)cap);
    if (!q) MGT_FAIL(MGT_ERR_NOMEM, "out of memory queueing %d sequences", job->nseq);
    s->queue = q, s->capq = cap;
  }
  for (int i = 0; i < job->nseq; i++)
    s->queue[s->nq++] = &job->seq[i];
  job->pending = job->nseq, job->refs = 2, job->admitted = 0;
  pthread_cond_signal(&s->cv);
  return MGT_OK;
}

static void job_free(srv_job *job) {
  for (int i = 0; i < job->nseq; i++) {
    free(job->seq[i].ids), free(job->seq[i].lp);
    free(job->seq[i].top_id), free(job->seq[i].top_lp);
    free(job->seq[i].text), free(job->seq[i].off);
  }
  free(job->seq);
  pthread_cond_destroy(&job->cv);
  free(job);
}

/* A job is held by its HTTP request and, while it has sequences to decode, by the engine. */
static void job_unref(srv_job *job) {
  if (--job->refs == 0) job_free(job);
}

void srv_release(srv *s, srv_job *job) {
  job->cancelled = 1; /* sequences still queued or decoding leave at the next step */
  pthread_cond_signal(&s->cv);
  job_unref(job);
}

/* q leaves the engine; its job may be freed after this. */
static void seq_finish(srv_seq *q, int state) {
  srv_job *job = q->job;
  q->state = state;
  pthread_cond_broadcast(&job->cv);
  if (--job->pending == 0) job_unref(job);
}

mgt_status srv_seq_room(srv_seq *q, int n) {
  if (n <= q->cap) return MGT_OK;
  const int cap = n > 2 * q->cap ? n : 2 * q->cap; /* geometric: appends cost O(1) each */
  int32_t *ids = realloc(q->ids, sizeof *ids * (size_t)cap);
  if (ids) q->ids = ids;
  float *lp = realloc(q->lp, sizeof *lp * (size_t)cap);
  if (lp) q->lp = lp;
  int32_t *ti = realloc(q->top_id, sizeof *ti * (size_t)cap * SRV_MAX_TOP);
  if (ti) q->top_id = ti;
  float *tl = realloc(q->top_lp, sizeof *tl * (size_t)cap * SRV_MAX_TOP);
  if (tl) q->top_lp = tl;
  size_t *off = realloc(q->off, sizeof *off * ((size_t)cap + 1));
  if (off) q->off = off;
  if (!ids || !lp || !ti || !tl || !off) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a sequence");
  for (int i = q->cap; i < cap; i++) /* the first position has no log-probability */
    q->lp[i] = 0;
  if (q->cap == 0) q->off[0] = 0;
  q->cap = cap;
  return MGT_OK;
}

mgt_status srv_seq_text_push(const srv *s, srv_seq *q, int i) {
  const char *p;
  size_t k;
  MGT_CHECK(mgt_tok_piece(s->tok, q->ids[i], &p, &k));
  if (q->text_len + k + 1 > q->text_cap) {
    size_t cap = q->text_cap ? 2 * q->text_cap : 256;
    while (cap < q->text_len + k + 1)
      cap *= 2;
    char *t = realloc(q->text, cap);
    if (!t) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a sequence's text");
    q->text = t, q->text_cap = cap;
  }
  memcpy(q->text + q->text_len, p, k);
  q->text_len += k;
  q->text[q->text_len] = 0;
  q->off[i + 1] = q->text_len;
  return MGT_OK;
}

const char *srv_seq_text(const srv_seq *q, int from, int to, size_t *len) {
  *len = q->off[to] - q->off[from];
  return q->text ? q->text + q->off[from] : "";
}

/* ---- the engine ---- */

enum { OP_STEP = 1, OP_STOP = 2 };

/* Rank 0's step to the group: op, n, then slot, position and token of each row. MPI_Ibcast
   polled with short sleeps, so that an idle server does not spin its ranks. */
static mgt_status bcast_ints(int *v, int n, MPI_Comm comm) {
  MPI_Request rq;
  MGT_MPI(MPI_Ibcast(v, n, MPI_INT, 0, comm, &rq));
  for (;;) {
    int done = 0;
    MGT_MPI(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
    if (done) return MGT_OK;
    const struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

/* log-softmax of the eligible logits at id, and the top k of them */
static void logprobs_of(const float *logits, int n, int32_t id, int k, float *lp, int32_t *top_id,
                        float *top_lp) {
  double mx = logits[0];
  for (int i = 1; i < n; i++)
    mx = logits[i] > mx ? logits[i] : mx;
  double sum = 0.0;
  for (int i = 0; i < n; i++)
    sum += exp((double)logits[i] - mx);
  const double lse = mx + log(sum);
  *lp = (float)((double)logits[id] - lse);
  for (int j = 0; j < k; j++) { /* k <= SRV_MAX_TOP: selection by k passes */
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
      int taken = 0;
      for (int q = 0; q < j; q++)
        taken |= top_id[q] == i;
      if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
    }
    top_id[j] = best, top_lp[j] = (float)((double)logits[best] - lse);
  }
}

/* Whether the token just added ends the sequence (a stop string, an end of line): only the
   bytes a match could end in are searched, the earlier ones having been searched before;
   sets q->stop_at to the bytes of generated text kept. */
static void seq_stops(srv_seq *q, int *stop) {
  const srv_params *p = &q->job->p;
  *stop = 0;
  if (!p->nstop && !p->stop_eol && !p->stop_double_eol) return;
  const size_t gen0 = q->off[q->n_prompt], n = q->text_len - gen0, prev = q->off[q->n - 1] - gen0;
  const char *t = q->text + gen0;
  for (int i = 0; i < p->nstop; i++) {
    const size_t k = strlen(p->stop[i]);
    for (size_t at = prev + 1 > k ? prev + 1 - k : 0; k && at + k <= n; at++)
      if (!memcmp(t + at, p->stop[i], k)) {
        if (!*stop || at < q->stop_at) q->stop_at = at;
        *stop = q->cut = 1;
        break;
      }
  }
  if (!*stop && (p->stop_eol || p->stop_double_eol)) {
    const char *nl = p->stop_double_eol ? "\n\n" : "\n";
    const size_t k = strlen(nl);
    for (size_t at = prev + 1 > k ? prev + 1 - k : 0; at + k <= n && !*stop; at++)
      if (!memcmp(t + at, nl, k)) *stop = 1; /* the new line kept, as Megatron */
  }
}

/* After q fed ids[fed]: the prompt's next log-probability, or a new token; *left when q has
   finished (and may be freed). */
/* The nucleus of generated token `gen`: top_p, times top_p_decay after each earlier token, not
   below top_p_bound (Megatron-LM's, step by step). */
static double top_p_at(const srv_params *p, int gen) {
  double t = p->top_p;
  for (int i = 0; i < gen && t > 0 && p->top_p_decay > 0; i++) {
    t *= p->top_p_decay;
    if (p->top_p_bound > 0 && t < p->top_p_bound) t = p->top_p_bound;
  }
  return t;
}

static mgt_status seq_advance(srv *s, srv_seq *q, float *logits, int *left) {
  const srv_params *p = &q->job->p;
  const int k = p->logprobs > 0 ? p->logprobs : 0, at = q->fed;
  *left = 0;
  q->fed++;
  if (q->fed < q->n) { /* inside the prompt: how likely its next token was */
    logprobs_of(logits, s->eligible, q->ids[at + 1], k, &q->lp[at + 1],
                q->top_id + (size_t)(at + 1) * SRV_MAX_TOP,
                q->top_lp + (size_t)(at + 1) * SRV_MAX_TOP);
  } else {
    const int gen = q->n - q->n_prompt;
    uint32_t w[4];
    mgt_rng_block(p->seed, q->stream, (uint64_t)gen, w);
    const double u = (double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) / 9007199254740992.0;
    /* Megatron-LM's prevent_newline_after_colon: the newline's logit at -1e10 after a colon */
    const int ban = p->colon_id >= 0 && p->newline_id >= 0 && p->newline_id < s->eligible &&
                    q->n > 0 && q->ids[q->n - 1] == p->colon_id;
    const float kept = ban ? logits[p->newline_id] : 0.0f;
    if (ban) logits[p->newline_id] = -1e10f;
    const int32_t next = mgt_sample_token(logits, s->eligible, p->greedy, p->temperature, p->top_k,
                                          top_p_at(p, gen), u);
    if (ban) logits[p->newline_id] = kept; /* the log-probabilities are the model's */
    int stop = next == s->eod || next == p->stop_token;
    if (!stop) {
      MGT_CHECK(srv_seq_room(q, q->n + 1));
      q->ids[q->n] = next;
      logprobs_of(logits, s->eligible, next, k, &q->lp[q->n],
                  q->top_id + (size_t)q->n * SRV_MAX_TOP, q->top_lp + (size_t)q->n * SRV_MAX_TOP);
      MGT_CHECK(srv_seq_text_push(s, q, q->n));
      q->n++;
      seq_stops(q, &stop);
    }
    if (stop) {
      *left = 1;
      seq_finish(q, SRV_STOP);
      return MGT_OK;
    }
  }
  if (q->n - q->n_prompt >= p->max_new && q->fed >= q->n - 1) {
    *left = 1;
    seq_finish(q, SRV_LENGTH);
  } else {
    pthread_cond_broadcast(&q->job->cv); /* streams wait for each token */
  }
  return MGT_OK;
}

/* One step's rows, grouped by replica: rows[r*4 + 0..3] = replica, slot, position, token. */
enum { ROW = 4, TAG_LOGITS = 7301 };

/* Decodes this rank's replica's rows of a step into logits (host, one row each): the rows
   whose replica is g->dp_rank, in order. */
static mgt_status decode_mine(mgt_gpt_decoder *dec, const mgt_grid *g, const int *rows, int n,
                              int *slot, int *pos, int32_t *tok, float *logits, int *mine) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (rows[i * ROW] == g->dp_rank)
      slot[k] = rows[i * ROW + 1], pos[k] = rows[i * ROW + 2], tok[k++] = rows[i * ROW + 3];
  *mine = k;
  return k ? mgt_gpt_decode_batch(dec, k, slot, tok, pos, logits) : MGT_OK;
}

/* Fills free slots (the emptiest replica first) from the queue: each with a sequence of the
   job that has had the fewest admitted, the earliest among equals, so that a request of many
   sequences (n) takes turns with the others instead of holding them all up. */
static void admit(srv *s, srv_seq **act, int R, int slots) {
  while (s->nq > 0) {
    int best = -1, best_free = 0;
    for (int r = 0; r < R; r++) {
      int f = 0;
      for (int k = 0; k < slots; k++)
        f += !act[r * slots + k];
      if (f > best_free) best = r, best_free = f;
    }
    if (best < 0) return;
    int pick = 0;
    for (int i = 1; i < s->nq; i++)
      if (s->queue[i]->job->admitted < s->queue[pick]->job->admitted) pick = i;
    srv_seq *q = s->queue[pick];
    memmove(s->queue + pick, s->queue + pick + 1, sizeof *s->queue * (size_t)(s->nq - pick - 1));
    s->nq--;
    int k = 0;
    while (act[best * slots + k])
      k++;
    q->slot = best * slots + k, q->fed = 0;
    act[q->slot] = q;
    q->job->admitted++;
  }
}

/* Grid rank 0: admits queued sequences into the replicas' slots (the emptiest replica first),
   broadcasts each step to every rank, decodes replica 0's rows, receives the other replicas'
   logits from their first ranks, and samples everything; until stopped and drained. */
mgt_status srv_engine_run(srv *s, mgt_gpt_decoder *dec, int slots, int V, const mgt_grid *g,
                          const volatile sig_atomic_t *stop_signal, void (*quiesce)(void *),
                          void *arg, double drain_timeout) {
  mgt_status st = MGT_OK;
  const int R = g->dp, total = R * slots;
  srv_seq **act = calloc((size_t)total, sizeof *act);
  int *cmd = malloc(sizeof(int) * (size_t)(2 + ROW * total));
  int *slot = malloc(sizeof(int) * (size_t)slots), *pos = malloc(sizeof(int) * (size_t)slots);
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)slots);
  float *logits = malloc(sizeof(float) * (size_t)total * (size_t)V);
  srv_seq **row = malloc(sizeof *row * (size_t)total);
  if (!act || !cmd || !slot || !pos || !tok || !logits || !row) {
    st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory for the engine of %d sequences", total);
    goto done;
  }
  double deadline = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    if (*stop_signal && !s->stopping) {
      s->stopping = 1;
      deadline = mgt_now() + drain_timeout;
      printf("serve: %s: finishing the %d requests in flight (at most %g s), then exiting\n",
             *stop_signal == SIGTERM ? "SIGTERM" : (*stop_signal == SIGINT ? "SIGINT" : "SIGUSR1"),
             s->open_requests, drain_timeout);
      fflush(stdout);
      quiesce(arg); /* no new connections */
    }
    if (s->stopping && s->open_requests > 0 && mgt_now() >= deadline) {
      /* the drain time is over: what is still decoding or queued is answered 503, and the
         connections still sending are closed when the HTTP side stops */
      printf("serve: the drain time of %g s is over: %d requests cut off\n", drain_timeout,
             s->open_requests);
      fflush(stdout);
      for (int i = 0; i < total; i++)
        if (act[i]) {
          act[i]->job->failed = SRV_FAILED_SHUTDOWN;
          seq_finish(act[i], SRV_STOP);
          act[i] = NULL;
        }
      for (int i = 0; i < s->nq; i++) {
        s->queue[i]->job->failed = SRV_FAILED_SHUTDOWN;
        seq_finish(s->queue[i], SRV_STOP);
      }
      s->nq = 0;
      /* their threads answer 503 now: give them a moment to send it before the connections
         close, but none to the connections still sending a body */
      const double until = mgt_now() + 2.0;
      while (s->open_requests > s->receiving && mgt_now() < until)
        srv_timed_wait(&s->cv, &s->mu, 50);
      pthread_mutex_unlock(&s->mu);
      break;
    }
    /* sequences whose client left free their slots */
    for (int i = 0; i < total; i++)
      if (act[i] && act[i]->job->cancelled) {
        srv_seq *q = act[i];
        act[i] = NULL;
        seq_finish(q, SRV_STOP);
      }
    int w = 0;
    for (int i = 0; i < s->nq; i++) {
      srv_seq *q = s->queue[i];
      if (q->job->cancelled)
        seq_finish(q, SRV_STOP);
      else if (q->job->p.max_new == 0 && q->n <= 1) /* nothing to feed */
        seq_finish(q, SRV_LENGTH);
      else
        s->queue[w++] = q;
    }
    s->nq = w;
    admit(s, act, R, slots);
    int n = 0;
    for (int i = 0; i < total; i++) /* grouped by replica, as the logits come back */
      if (act[i]) row[n++] = act[i];
    if (!n) {
      if (s->stopping && s->open_requests == 0) {
        pthread_mutex_unlock(&s->mu);
        break;
      }
      srv_timed_wait(&s->cv, &s->mu, 50);
      pthread_mutex_unlock(&s->mu);
      continue;
    }
    cmd[0] = OP_STEP, cmd[1] = n;
    for (int i = 0; i < n; i++) {
      int *c = cmd + 2 + ROW * i;
      c[0] = row[i]->slot / slots, c[1] = row[i]->slot % slots, c[2] = row[i]->fed;
      c[3] = row[i]->ids[row[i]->fed];
    }
    pthread_mutex_unlock(&s->mu);
    MGT_TRY(bcast_ints(cmd, 2, g->world));
    MGT_TRY(bcast_ints(cmd + 2, ROW * n, g->world));
    int mine;
    MGT_TRY(decode_mine(dec, g, cmd + 2, n, slot, pos, tok, logits, &mine));
    for (int r = 1, at = mine; r < R; r++) { /* the other replicas' rows, in order */
      int cnt = 0;
      for (int i = 0; i < n; i++)
        cnt += cmd[2 + ROW * i] == r;
      if (cnt)
        MGT_MPI_TRY(MPI_Recv(logits + (size_t)at * V, cnt * V, MPI_FLOAT, r * g->tp, TAG_LOGITS,
                             g->world, MPI_STATUS_IGNORE));
      at += cnt;
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n && st == MGT_OK; i++) {
      const int at = row[i]->slot;
      int left;
      st = seq_advance(s, row[i], logits + (size_t)i * V, &left);
      if (left) act[at] = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (st != MGT_OK) goto done;
  }
done:
  if (st != MGT_OK) { /* every waiting client gets an error answer */
    pthread_mutex_lock(&s->mu);
    s->failed = 1, s->stopping = 1;
    for (int i = 0; act && i < total; i++)
      if (act[i]) act[i]->job->failed = SRV_FAILED_MODEL, pthread_cond_broadcast(&act[i]->job->cv);
    for (int i = 0; i < s->nq; i++)
      s->queue[i]->job->failed = SRV_FAILED_MODEL, pthread_cond_broadcast(&s->queue[i]->job->cv);
    pthread_mutex_unlock(&s->mu);
  }
  int stop[2] = {OP_STOP, 0};
  mgt_status st2 = bcast_ints(stop, 2, g->world);
  free(act), free(cmd), free(slot), free(pos), free(tok), free(logits), free(row);
  return st != MGT_OK ? st : st2;
}

/* The other ranks: each step as grid rank 0 broadcasts it, their replica's rows decoded; a
   replica's first rank sends its rows' logits to grid rank 0. Until OP_STOP. */
mgt_status srv_follower_run(mgt_gpt_decoder *dec, int slots, int V, const mgt_grid *g) {
  const int total = g->dp * slots;
  int *cmd = malloc(sizeof(int) * (size_t)(2 + ROW * total));
  int *slot = malloc(sizeof(int) * (size_t)slots), *pos = malloc(sizeof(int) * (size_t)slots);
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)slots);
  float *logits = malloc(sizeof(float) * (size_t)slots * (size_t)V);
  mgt_status st = MGT_OK;
  if (!cmd || !slot || !pos || !tok || !logits) {
    st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory for the decoder's steps");
    goto done;
  }
  for (;;) {
    MGT_TRY(bcast_ints(cmd, 2, g->world));
    if (cmd[0] != OP_STEP) break;
    const int n = cmd[1];
    MGT_TRY(bcast_ints(cmd + 2, ROW * n, g->world));
    int mine;
    MGT_TRY(decode_mine(dec, g, cmd + 2, n, slot, pos, tok, logits, &mine));
    if (mine && g->tp_rank == 0)
      MGT_MPI_TRY(MPI_Send(logits, mine * V, MPI_FLOAT, 0, TAG_LOGITS, g->world));
  }
done:
  free(cmd), free(slot), free(pos), free(tok), free(logits);
  return st;
}
