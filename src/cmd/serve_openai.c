/* mgt serve, the OpenAI-style endpoints: POST /v1/completions and /v1/chat/completions, with
   server-sent events when "stream" is true (their shared helpers are serve_api.c's). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgt/chat.h"
#include "mgt/json.h"
#include "mgt/serve.h"
#include "mgt/tokenizer.h"

/* The logprobs object of tokens [from, to) of q, whose text starts at byte `offset` of the
   answer: tokens, token_logprobs, top_logprobs (k alternatives) and text_offset. */
static void openai_logprobs(const srv *s, FILE *f, const srv_seq *q, int from, int to, int k,
                            size_t offset) {
  const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
  fputc('{', f);
  for (int key = 0; key < 4; key++) {
    fprintf(f, "%s\"%s\": [", key ? ", " : "", keys[key]);
    size_t at = offset;
    for (int t = from; t < to; t++) {
      size_t n;
      const char *w = srv_seq_text(q, t, t + 1, &n);
      fputs(t > from ? ", " : "", f);
      if (key == 0) {
        mgt_json_write_bytes(f, w, n);
      } else if (key == 1) {
        if (t == 0)
          fputs("null", f); /* nothing before the first token */
        else
          fprintf(f, "%.9g", (double)q->lp[t]);
      } else if (key == 2) {
        if (t == 0 || k == 0) {
          fputs(t == 0 ? "null" : "{}", f);
        } else {
          fputc('{', f);
          for (int j = 0; j < k; j++) {
            const char *a = "";
            size_t an = 0;
            const int32_t id = q->top_id[(size_t)t * SRV_MAX_TOP + j];
            if (mgt_tok_piece(s->tok, id, &a, &an) != MGT_OK) mgt_error_clear(), a = "", an = 0;
            fputs(j ? ", " : "", f);
            mgt_json_write_bytes(f, a, an);
            fprintf(f, ": %.9g", (double)q->top_lp[(size_t)t * SRV_MAX_TOP + j]);
          }
          fputc('}', f);
        }
      } else {
        fprintf(f, "%zu", at);
      }
      at += n;
    }
    fputc(']', f);
  }
  fputc('}', f);
}

/* The tokens of q a client sees: those whose text starts before a stop string's cut; and the
   bytes of its generated text the client sees. */
static int visible_tokens(const srv_seq *q, size_t *gen_bytes) {
  const size_t gen0 = q->off[q->n_prompt];
  *gen_bytes = srv_gen_len(q, q->off[q->n] - gen0);
  for (int i = q->n_prompt; q->cut && i < q->n; i++)
    if (q->off[i] - gen0 >= *gen_bytes) return i;
  return q->n;
}

static void completion_choice(const srv *s, FILE *f, const srv_seq *q) {
  const srv_params *p = &q->job->p;
  size_t pn, vis;
  srv_seq_text(q, 0, q->n_prompt, &pn);
  const int last = visible_tokens(q, &vis);
  fprintf(f, "{\"text\": ");
  size_t n; /* the prompt and the continuation are one text: echo takes both */
  const char *t = srv_seq_text(q, p->echo ? 0 : q->n_prompt, q->n, &n);
  mgt_json_write_bytes(f, t, (p->echo ? pn : 0) + vis);
  fprintf(f, ", \"index\": %d, \"logprobs\": ", q->index);
  if (p->logprobs < 0)
    fputs("null", f);
  else
    openai_logprobs(s, f, q, p->echo ? 0 : q->n_prompt, last, p->logprobs, p->echo ? 0 : pn);
  fprintf(f, ", \"finish_reason\": \"%s\"}", q->state == SRV_LENGTH ? "length" : "stop");
}

/* An answer's body up to its choices (the engine is done with the job: read without the
   lock); 0 with the reply set and the job released when out of memory. */
static int answer_open(srv *s, srv_reply *r, srv_job *job, const char *object, srv_out *o) {
  if (!srv_out_open(o)) {
    srv_error(r, SRV_OPENAI, 500, "out of memory");
    pthread_mutex_lock(&s->mu);
    srv_release(s, job);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  fprintf(o->f, "{\"id\": \"%s\", \"object\": \"%s\", \"created\": %lld, \"model\": ", job->id,
          object, job->created);
  mgt_json_write_bytes(o->f, s->model_name, strlen(s->model_name));
  fputs(", \"choices\": [", o->f);
  return 1;
}

/* The rest of the answer: the usage; the job released, the reply set. */
static void answer_close(srv *s, srv_reply *r, srv_job *job, srv_out *o, long long prompt_tokens,
                         long long completion_tokens) {
  fprintf(o->f,
          "], \"usage\": {\"prompt_tokens\": %lld, \"completion_tokens\": %lld, \"total_tokens\": "
          "%lld}}\n",
          prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
  pthread_mutex_lock(&s->mu);
  s->served++;
  srv_release(s, job);
  pthread_mutex_unlock(&s->mu);
  srv_out_reply(o, r, 200, "application/json");
}

/* The sampling fields the OpenAI-style endpoints share, into p; 0 with the reply set on a bad
   one. */
static int openai_params(srv *s, const mgt_json *req, int chat, srv_reply *r, srv_params *p) {
  const int api = SRV_OPENAI;
  const mgt_json *v;
  if ((v = mgt_json_get(req, "model")) && v->type != MGT_JSON_NULL) {
    if (v->type != MGT_JSON_STRING) return srv_error_0(r, api, 400, "model must be a string");
    if (!mgt_json_is(v, s->model_name))
      return srv_error_0(r, api, 404, "The model `%.200s` does not exist (this server has `%s`)",
                         v->str, s->model_name);
  }
  srv_params_init(p);
  p->max_new = 16, p->temperature = 1.0, p->logprobs = -1, p->n = 1, p->chat = chat;
  /* neutral values of OpenAI's fields this server does not implement are accepted */
  if ((v = mgt_json_get(req, "presence_penalty")) && v->type != MGT_JSON_NULL &&
      !(v->type == MGT_JSON_NUMBER && v->number == 0))
    return srv_error_0(r, api, 400, "presence_penalty is not supported (only 0)");
  if ((v = mgt_json_get(req, "frequency_penalty")) && v->type != MGT_JSON_NULL &&
      !(v->type == MGT_JSON_NUMBER && v->number == 0))
    return srv_error_0(r, api, 400, "frequency_penalty is not supported (only 0)");
  if ((v = mgt_json_get(req, "logit_bias")) && v->type != MGT_JSON_NULL &&
      !(v->type == MGT_JSON_OBJECT && v->len == 0))
    return srv_error_0(r, api, 400, "logit_bias is not supported (only {} or null)");
  if ((v = mgt_json_get(req, "suffix")) && v->type != MGT_JSON_NULL)
    return srv_error_0(r, api, 400, "suffix is not supported");
  if ((v = mgt_json_get(req, "user")) && v->type != MGT_JSON_STRING && v->type != MGT_JSON_NULL)
    return srv_error_0(r, api, 400, "user must be a string");
  if ((v = mgt_json_get(req, "max_tokens")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < 0)
      return srv_error_0(r, api, 400, "max_tokens must be an integer of at least 0");
    if (v->number > s->positions)
      return srv_error_0(r, api, 400, "max_tokens %.0f exceeds the model's %d positions", v->number,
                         s->positions);
    p->max_new = (int)v->number;
  }
  if ((v = mgt_json_get(req, "temperature")) && v->type != MGT_JSON_NULL) {
    if (v->type != MGT_JSON_NUMBER || !(v->number >= 0 && v->number <= 2))
      return srv_error_0(r, api, 400, "temperature must be a number from 0 to 2");
    p->temperature = v->number;
    p->greedy = v->number == 0; /* 0: the most likely token */
    if (p->greedy) p->temperature = 1.0;
  }
  if ((v = mgt_json_get(req, "top_p")) && v->type != MGT_JSON_NULL) {
    if (v->type != MGT_JSON_NUMBER || !(v->number > 0 && v->number <= 1))
      return srv_error_0(r, api, 400, "top_p must be a number above 0 and at most 1");
    p->top_p = v->number < 1 ? v->number : 0.0;
  }
  if ((v = mgt_json_get(req, "top_k")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < -1 || v->number > 1e6)
      return srv_error_0(r, api, 400, "top_k must be an integer of at least -1 (-1 or 0: off)");
    p->top_k = v->number > 0 ? (int)v->number : 0;
  }
  if ((v = mgt_json_get(req, "n")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < 1 || v->number > s->max_prompts)
      return srv_error_0(r, api, 400, "n must be an integer from 1 to %d", s->max_prompts);
    p->n = (int)v->number;
  }
  if ((v = mgt_json_get(req, "best_of")) && v->type != MGT_JSON_NULL &&
      !(srv_is_int(v) && (v->number == 1 || v->number == p->n)))
    return srv_error_0(r, api, 400, "best_of is not supported (only 1 or n)");
  static const char *const bools[] = {"stream", "echo"};
  int *dst[] = {&p->stream, &p->echo};
  for (int i = 0; i < 2; i++)
    if ((v = mgt_json_get(req, bools[i])) && v->type != MGT_JSON_NULL) {
      if (v->type != MGT_JSON_BOOL)
        return srv_error_0(r, api, 400, "%s must be a boolean", bools[i]);
      *dst[i] = v->number != 0;
    }
  if ((v = mgt_json_get(req, "stream_options")) && v->type != MGT_JSON_NULL) {
    static const char *const opts[] = {"include_usage", NULL};
    const mgt_json *u = v->type == MGT_JSON_OBJECT ? mgt_json_get(v, "include_usage") : NULL;
    if (v->type != MGT_JSON_OBJECT || srv_unknown_field(v, opts) ||
        (u && u->type != MGT_JSON_BOOL && u->type != MGT_JSON_NULL))
      return srv_error_0(r, api, 400,
                         "stream_options must be an object of include_usage (a boolean)");
    if (!p->stream) return srv_error_0(r, api, 400, "stream_options is only allowed with stream");
    p->stream_usage = u && u->type == MGT_JSON_BOOL && u->number != 0;
  }
  if (!chat && (v = mgt_json_get(req, "logprobs")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < 0 || v->number > SRV_MAX_TOP)
      return srv_error_0(r, api, 400, "logprobs must be an integer from 0 to %d", SRV_MAX_TOP);
    p->logprobs = (int)v->number;
  }
  if ((v = mgt_json_get(req, "stop")) && v->type != MGT_JSON_NULL) {
    const mgt_json *items = v->type == MGT_JSON_ARRAY ? v->items : v;
    const size_t n = v->type == MGT_JSON_ARRAY ? v->len : 1;
    if ((v->type != MGT_JSON_STRING && v->type != MGT_JSON_ARRAY) || n > SRV_MAX_STOP)
      return srv_error_0(r, api, 400, "stop must be a string or a list of up to %d strings",
                         SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
      if (items[i].type != MGT_JSON_STRING || items[i].len == 0 || items[i].len >= SRV_STOP_LEN ||
          strlen(items[i].str) != items[i].len)
        return srv_error_0(r, api, 400, "stop: each must be a string of 1 to %d bytes",
                           SRV_STOP_LEN - 1);
      memcpy(p->stop[p->nstop++], items[i].str, items[i].len + 1);
    }
  }
  p->seed = srv_fresh_seed();
  if ((v = mgt_json_get(req, "seed")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < 0)
      return srv_error_0(r, api, 400, "seed must be an integer of at least 0");
    p->seed = (uint64_t)v->number;
  }
  return 1;
}

void srv_openai_completions(srv *s, const mgt_json *req, srv_reply *r) {
  const int api = SRV_OPENAI;
  if (req->type != MGT_JSON_OBJECT) return srv_error(r, api, 400, "the body is not a JSON object");
  static const char *const known[] = {
      "model",   "prompt",     "max_tokens", "temperature",      "top_p",
      "top_k",   "n",          "stream",     "logprobs",         "echo",
      "stop",    "seed",       "user",       "presence_penalty", "frequency_penalty",
      "best_of", "logit_bias", "suffix",     "stream_options",   NULL};
  const char *bad = srv_unknown_field(req, known);
  if (bad) return srv_error(r, api, 400, "unknown field \"%s\"", bad);
  srv_params p;
  if (!openai_params(s, req, 0, r, &p)) return;
  /* prompt: a string, a list of strings, a list of token ids, or a list of such lists */
  const mgt_json *pr = mgt_json_get(req, "prompt");
  if (!pr || pr->type == MGT_JSON_NULL) return srv_error(r, api, 400, "prompt is required");
  int np = 1, token_lists = 0;
  if (pr->type == MGT_JSON_ARRAY) {
    if (pr->len == 0) return srv_error(r, api, 400, "prompt is an empty list");
    if (pr->items[0].type == MGT_JSON_NUMBER) {
      token_lists = 1, np = 1;
    } else {
      np = (int)(pr->len < (size_t)1 << 30 ? pr->len : (size_t)1 << 30);
      token_lists = pr->items[0].type == MGT_JSON_ARRAY ? 2 : 0;
    }
  } else if (pr->type != MGT_JSON_STRING) {
    return srv_error(r, api, 400, "prompt must be a string, a list of strings or of token ids");
  }
  if ((long long)np * p.n > s->max_prompts)
    return srv_error(r, api, 400, "%d prompts times n = %d is over this server's %d", np, p.n,
                     s->max_prompts);
  mgt_ids *ids = calloc((size_t)np, sizeof *ids);
  const char **text = calloc((size_t)np, sizeof *text);
  size_t *len = calloc((size_t)np, sizeof *len);
  srv_job *job = NULL;
  if (!ids || !text || !len) {
    srv_error(r, api, 500, "out of memory");
    goto done;
  }
  if (token_lists) { /* ids as given, each in the vocabulary */
    for (int i = 0; i < np; i++) {
      const mgt_json *list = token_lists == 1 ? pr : &pr->items[i];
      if (list->type != MGT_JSON_ARRAY || list->len == 0) {
        srv_error(r, api, 400, "prompt %d: a token list must be a non-empty list of ids", i);
        goto done;
      }
      for (size_t t = 0; t < list->len; t++) {
        const mgt_json *id = &list->items[t];
        if (!srv_is_int(id) || id->number < 0 || id->number >= s->eligible) {
          srv_error(r, api, 400, "prompt %d: token %zu is not an id in [0, %d)", i, t, s->eligible);
          goto done;
        }
        if (mgt_ids_push(&ids[i], (int32_t)id->number) != MGT_OK) {
          srv_error(r, api, 500, "out of memory");
          goto done;
        }
      }
      if ((long long)ids[i].n + p.max_new > s->positions) {
        srv_error(r, api, 400,
                  "prompt %d has %zu tokens: with %d to generate that exceeds the model's %d "
                  "positions",
                  i, ids[i].n, p.max_new, s->positions);
        goto done;
      }
    }
  } else {
    for (int i = 0; i < np; i++) {
      const mgt_json *t = pr->type == MGT_JSON_ARRAY ? &pr->items[i] : pr;
      if (t->type != MGT_JSON_STRING) {
        srv_error(r, api, 400, "prompt must be a string, a list of strings or of token ids");
        goto done;
      }
      text[i] = t->str, len[i] = t->len;
    }
    if (!srv_tokenize(s, r, api, text, len, np, &p, ids)) goto done;
  }
  job = srv_job_new(s, api, &p, ids, np, p.n);
  if (!job) {
    srv_error(r, api, 500, "out of memory");
    goto done;
  }
  if (!srv_run_job(s, r, job)) goto done;
  if (p.stream) goto done; /* the HTTP layer streams it: r->job */
  srv_out o;
  if (!answer_open(s, r, job, "text_completion", &o)) goto done;
  long long prompt_tokens = 0, completion_tokens = 0;
  for (int i = 0; i < job->nseq; i++) {
    const srv_seq *q = &job->seq[i];
    fputs(i ? ", " : "", o.f);
    completion_choice(s, o.f, q);
    if (i % p.n == 0) prompt_tokens += q->n_prompt;
    completion_tokens += q->n - q->n_prompt;
  }
  answer_close(s, r, job, &o, prompt_tokens, completion_tokens);
done:
  for (int i = 0; ids && i < np; i++)
    mgt_ids_free(&ids[i]);
  free(ids), free(text), free(len);
}

/* ---- OpenAI's chat completions ---- */

static void chat_choice(FILE *f, const srv_seq *q) {
  size_t vis;
  visible_tokens(q, &vis);
  size_t n;
  const char *t = srv_seq_text(q, q->n_prompt, q->n, &n);
  fprintf(f, "{\"index\": %d, \"message\": {\"role\": \"assistant\", \"content\": ", q->index);
  mgt_json_write_bytes(f, t, vis);
  fprintf(f, "}, \"logprobs\": null, \"finish_reason\": \"%s\"}",
          q->state == SRV_LENGTH ? "length" : "stop");
}

/* The conversation rendered as the server's chat format with the assistant's header after it,
   and its ids; the answer stops at the format's end of turn. */
void srv_openai_chat(srv *s, const mgt_json *req, srv_reply *r) {
  const int api = SRV_OPENAI;
  if (req->type != MGT_JSON_OBJECT) return srv_error(r, api, 400, "the body is not a JSON object");
  static const char *const known[] = {"model",
                                      "messages",
                                      "max_tokens",
                                      "temperature",
                                      "top_p",
                                      "top_k",
                                      "n",
                                      "stream",
                                      "stream_options",
                                      "stop",
                                      "seed",
                                      "user",
                                      "presence_penalty",
                                      "frequency_penalty",
                                      "logit_bias",
                                      "logprobs",
                                      "max_completion_tokens",
                                      NULL};
  const char *bad = srv_unknown_field(req, known);
  if (bad) return srv_error(r, api, 400, "unknown field \"%s\"", bad);
  if (s->chat_format < 0) return srv_error(r, api, 400, "%s", s->chat_why);
  const mgt_json *v;
  if ((v = mgt_json_get(req, "logprobs")) && v->type != MGT_JSON_NULL &&
      !(v->type == MGT_JSON_BOOL && v->number == 0))
    return srv_error(r, api, 400, "logprobs is not supported in chat completions (only false)");
  srv_params p;
  if (!openai_params(s, req, 1, r, &p)) return;
  if ((v = mgt_json_get(req, "max_completion_tokens")) && v->type != MGT_JSON_NULL) {
    if (!srv_is_int(v) || v->number < 0 || v->number > s->positions)
      return srv_error(r, api, 400, "max_completion_tokens must be an integer from 0 to %d",
                       s->positions);
    p.max_new = (int)v->number;
  }
  /* without a cap, the answer may fill the context (OpenAI's chat and vLLM have no default) */
  const mgt_json *mt = mgt_json_get(req, "max_tokens");
  const int capped = (mt && mt->type != MGT_JSON_NULL) || (v && v->type != MGT_JSON_NULL);
  if (!capped) p.max_new = 0;
  if (p.n > s->max_prompts)
    return srv_error(r, api, 400, "n = %d is over this server's %d", p.n, s->max_prompts);
  p.stop_token = s->end_of_turn;
  if (!mgt_json_get(req, "messages")) return srv_error(r, api, 400, "messages is required");
  mgt_chat_text text = {0};
  mgt_ids ids = {0};
  srv_job *job = NULL;
  if (mgt_chat_from_json(req, s->chat_format, s->chat_sp->bos, s->chat_sp->eos, 1, &text) !=
      MGT_OK) {
    srv_error(r, api, 400, "messages: %s", mgt_error_message());
    mgt_error_clear();
    goto done;
  }
  const char *t = text.s ? text.s : "";
  if (!srv_tokenize(s, r, api, &t, &text.n, 1, &p, &ids)) goto done;
  if (!capped) {
    if (ids.n >= (size_t)s->positions) {
      srv_error(r, api, 400,
                "the messages have %zu tokens: no room for an answer in the model's %d positions",
                ids.n, s->positions);
      goto done;
    }
    p.max_new = s->positions - (int)ids.n;
  }
  job = srv_job_new(s, api, &p, &ids, 1, p.n);
  if (!job) {
    srv_error(r, api, 500, "out of memory");
    goto done;
  }
  char id[sizeof job->id];
  snprintf(id, sizeof id, "chat%.48s", job->id); /* chatcmpl-: OpenAI's prefix */
  snprintf(job->id, sizeof job->id, "%s", id);
  if (!srv_run_job(s, r, job)) goto done;
  if (p.stream) goto done; /* the HTTP layer streams it: r->job */
  srv_out o;
  if (!answer_open(s, r, job, "chat.completion", &o)) goto done;
  long long completion_tokens = 0;
  for (int i = 0; i < job->nseq; i++) {
    fputs(i ? ", " : "", o.f);
    chat_choice(o.f, &job->seq[i]);
    completion_tokens += job->seq[i].n - job->seq[i].n_prompt;
  }
  const long long prompt_tokens = job->seq[0].n_prompt;
  answer_close(s, r, job, &o, prompt_tokens, completion_tokens);
done:
  mgt_ids_free(&ids);
  mgt_chat_text_free(&text);
}

/* Whether the last k bytes of t could begin one of the stop strings (held back). */
static size_t stop_prefix(const srv_params *p, const char *t, size_t n) {
  size_t hold = 0;
  for (int i = 0; i < p->nstop; i++) {
    const size_t k = strlen(p->stop[i]);
    for (size_t m = k - 1; m > hold && m > 0; m--)
      if (m <= n && !memcmp(t + n - m, p->stop[i], m)) {
        hold = m;
        break;
      }
  }
  return hold;
}

char *srv_stream_next(srv *s, srv_job *job, size_t *len, int *done) {
  srv_out o;
  *len = 0, *done = 0;
  if (!srv_out_open(&o)) return NULL;
  int all_final = 1;
  for (int i = 0; i < job->nseq && !job->failed; i++) {
    srv_seq *q = &job->seq[i];
    if (q->final_sent) continue;
    const int finished = q->state != SRV_RUNNING;
    /* the answer's text is one piece of q's text: the prompt's with echo, then the
       generated; each event sends what came since the last, never decoding anything again */
    size_t pn, gn, vis = 0;
    srv_seq_text(q, 0, q->n_prompt, &pn);
    const char *gt = srv_seq_text(q, q->n_prompt, q->n, &gn);
    size_t an;
    const char *all = srv_seq_text(q, job->p.echo ? 0 : q->n_prompt, q->n, &an);
    int last = q->n, upto = q->n;
    if (finished) {
      last = visible_tokens(q, &vis);
    } else { /* hold back what a stop string or the next token may still change */
      vis = gn - srv_utf8_tail(gt, gn);
      vis -= stop_prefix(&job->p, gt, vis);
      if (!job->p.chat && job->p.logprobs >= 0) { /* whole tokens: each event's log-
                                                      probabilities are those of its text */
        const size_t gen0 = q->off[q->n_prompt];
        while (upto > q->n_prompt && q->off[upto] - gen0 > vis)
          upto--;
        vis = q->off[upto] - gen0;
      }
    }
    const size_t total = (job->p.echo ? pn : 0) + vis;
    if (job->p.chat && (total > q->sent || finished || !q->sent_role)) {
      /* a chat chunk: the role first, then pieces of the content, then the finish reason */
      fprintf(o.f,
              "data: {\"id\": \"%s\", \"object\": \"chat.completion.chunk\", \"created\": "
              "%lld, \"model\": ",
              job->id, job->created);
      mgt_json_write_bytes(o.f, s->model_name, strlen(s->model_name));
      fprintf(o.f, ", \"choices\": [{\"index\": %d, \"delta\": {", q->index);
      if (!q->sent_role) fputs("\"role\": \"assistant\", ", o.f);
      fputs("\"content\": ", o.f);
      mgt_json_write_bytes(o.f, all + q->sent, total > q->sent ? total - q->sent : 0);
      fputs("}, \"logprobs\": null, \"finish_reason\": ", o.f);
      if (finished)
        fprintf(o.f, "\"%s\"}]}\n\n", q->state == SRV_LENGTH ? "length" : "stop");
      else
        fputs("null}]}\n\n", o.f);
      q->sent = total, q->sent_role = 1;
      if (finished) q->final_sent = 1;
    } else if (total > q->sent || finished) {
      fprintf(o.f,
              "data: {\"id\": \"%s\", \"object\": \"text_completion\", \"created\": %lld, "
              "\"model\": ",
              job->id, job->created);
      mgt_json_write_bytes(o.f, s->model_name, strlen(s->model_name));
      fputs(", \"choices\": [{\"text\": ", o.f);
      mgt_json_write_bytes(o.f, all + q->sent, total > q->sent ? total - q->sent : 0);
      fprintf(o.f, ", \"index\": %d, \"logprobs\": ", q->index);
      const int from = q->sent_tokens ? q->sent_tokens : (job->p.echo ? 0 : q->n_prompt);
      const int to = finished ? last : upto;
      if (job->p.logprobs < 0 || to <= from) /* offsets in the prompt and answer, as unstreamed */
        fputs("null", o.f);
      else
        openai_logprobs(s, o.f, q, from, to, job->p.logprobs, q->off[from]);
      if (to > from) q->sent_tokens = to;
      if (finished)
        fprintf(o.f, ", \"finish_reason\": \"%s\"}]}\n\n",
                q->state == SRV_LENGTH ? "length" : "stop");
      else
        fputs(", \"finish_reason\": null}]}\n\n", o.f);
      q->sent = total;
      if (finished) q->final_sent = 1;
    }
    all_final &= q->final_sent;
  }
  if (job->failed) {
    fprintf(o.f,
            "data: {\"error\": {\"message\": \"%s\", \"type\": \"server_error\", \"param\": "
            "null, \"code\": null}}\n\n",
            job->failed == SRV_FAILED_SHUTDOWN
                ? "the server shut down before the answer was complete"
                : "the model failed while decoding");
    all_final = 1;
  }
  if (all_final && !job->failed && job->p.stream_usage) { /* OpenAI's: no choices, the usage */
    long long prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; i < job->nseq; i++) {
      if (i % job->p.n == 0) prompt_tokens += job->seq[i].n_prompt;
      completion_tokens += job->seq[i].n - job->seq[i].n_prompt;
    }
    fprintf(o.f,
            "data: {\"id\": \"%s\", \"object\": \"%s\", \"created\": %lld, \"model\": ", job->id,
            job->p.chat ? "chat.completion.chunk" : "text_completion", job->created);
    mgt_json_write_bytes(o.f, s->model_name, strlen(s->model_name));
    fprintf(o.f,
            ", \"choices\": [], \"usage\": {\"prompt_tokens\": %lld, \"completion_tokens\": "
            "%lld, \"total_tokens\": %lld}}\n\n",
            prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
  }
  if (all_final) {
    fputs("data: [DONE]\n\n", o.f);
    *done = 1;
  }
  fclose(o.f);
  *len = o.len;
  if (!o.len) {
    free(o.buf);
    return NULL;
  }
  return o.buf;
}
