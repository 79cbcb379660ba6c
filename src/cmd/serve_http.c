/* mgt serve, the HTTP side on rank 0: GNU libmicrohttpd with a thread per connection, so a
   request's thread may wait for its job (docs/serving.md says why this library). Bodies are
   read up to --max-request-bytes; beyond that the request is answered 413 without keeping
   them. A stream's thread sends the job's events as they come, with a comment line every
   second while it waits, which also finds a client that has left: its job is then cancelled
   and its cache slots go to others. Never calls MPI. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mgt/log.h"
#include "mgt/serve.h"

typedef struct req_state {
  srv *s;
  char *body;
  size_t len, cap;
  int too_big;
  srv_job *job; /* a stream's */
  char *pend;   /* its events not sent yet */
  size_t pend_len, pend_off;
  int done;
  double t0;
} req_state;

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  req_state *rq = cls;
  srv *s = rq->s;
  while (rq->pend_off == rq->pend_len) {
    free(rq->pend);
    rq->pend = NULL, rq->pend_len = rq->pend_off = 0;
    if (rq->done) return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&s->mu);
    size_t n = 0;
    int done = 0;
    char *t = srv_stream_next(s, rq->job, &n, &done);
    if (!t && !done) { /* wait for a token, at most a second */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      int waited = 0;
      while (!t && !done && !waited) {
        waited = pthread_cond_timedwait(&rq->job->cv, &s->mu, &ts) != 0;
        t = srv_stream_next(s, rq->job, &n, &done);
      }
      if (!t && !done) { /* still nothing: a comment, which a gone client fails to take */
        t = strdup(": waiting\n\n");
        n = t ? strlen(t) : 0;
      }
    }
    if (done) s->served++;
    pthread_mutex_unlock(&s->mu);
    if (!t && !done) return MHD_CONTENT_READER_END_WITH_ERROR;
    rq->pend = t, rq->pend_len = n, rq->done = done;
  }
  size_t k = rq->pend_len - rq->pend_off;
  if (k > max) k = max;
  memcpy(buf, rq->pend + rq->pend_off, k);
  rq->pend_off += k;
  return (ssize_t)k;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *up,
                                 size_t *up_size, void **con_cls) {
  (void)version;
  srv *s = cls;
  req_state *rq = *con_cls;
  if (!rq) { /* the headers: a request begins */
    rq = calloc(1, sizeof *rq);
    if (!rq) return MHD_NO;
    rq->s = s, rq->t0 = mgt_now();
    *con_cls = rq;
    pthread_mutex_lock(&s->mu);
    s->open_requests++;
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
  }
  if (*up_size) { /* a piece of the body */
    if (!rq->too_big && rq->len + *up_size > s->max_body) {
      rq->too_big = 1;
      free(rq->body);
      rq->body = NULL, rq->len = rq->cap = 0;
    }
    if (!rq->too_big) {
      if (rq->len + *up_size > rq->cap) {
        size_t cap = rq->cap ? rq->cap : 4096;
        while (cap < rq->len + *up_size)
          cap *= 2;
        char *b = realloc(rq->body, cap);
        if (!b) return MHD_NO;
        rq->body = b, rq->cap = cap;
      }
      memcpy(rq->body + rq->len, up, *up_size);
      rq->len += *up_size;
    }
    *up_size = 0;
    return MHD_YES;
  }
  srv_reply r;
  srv_handle(s, method, url, rq->body, rq->len, rq->too_big, &r);
  struct MHD_Response *resp;
  if (r.job) {
    rq->job = r.job;
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, rq, NULL);
    if (resp) {
      MHD_add_response_header(resp, "Content-Type", "text/event-stream");
      MHD_add_response_header(resp, "Cache-Control", "no-cache");
    }
    r.status = 200;
  } else {
    resp = MHD_create_response_from_buffer(r.len, r.body, MHD_RESPMEM_MUST_FREE);
    if (resp)
      MHD_add_response_header(resp, "Content-Type", r.type);
    else
      free(r.body);
  }
  if (!resp) return MHD_NO;
  const enum MHD_Result ret = MHD_queue_response(c, (unsigned)r.status, resp);
  MHD_destroy_response(resp);
  if (!r.job || r.status != 200) {
    printf("serve: %s %s %d (%.3f s)\n", method, url, r.status, mgt_now() - rq->t0);
    fflush(stdout);
  }
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  (void)c;
  srv *s = cls;
  req_state *rq = *con_cls;
  if (!rq) return;
  if (rq->job) {
    printf("serve: stream %s %s (%.3f s)\n", rq->job->id,
           why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "sent" : "ended by the client",
           mgt_now() - rq->t0);
    fflush(stdout);
  }
  pthread_mutex_lock(&s->mu);
  if (rq->job) srv_release(s, rq->job); /* a job still decoding is cancelled */
  s->open_requests--;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  free(rq->body), free(rq->pend), free(rq);
  *con_cls = NULL;
}

mgt_status srv_http_start(srv *s, const char *host, int port, void **http, int *bound) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  MGT_REQUIRE(inet_pton(AF_INET, host, &a.sin_addr) == 1,
              "--host %s: not an IPv4 address (127.0.0.1, or 0.0.0.0 for every interface)", host);
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC, (uint16_t)port,
      NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
  if (!d)
    MGT_FAIL(MGT_ERR_INPUT, "cannot listen on %s:%d (%s)", host, port,
             errno ? strerror(errno) : "libmicrohttpd refused");
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  *bound = info ? info->port : port;
  *http = d;
  return MGT_OK;
}

void srv_http_quiesce(void *http) {
  if (!http) return;
  const MHD_socket fd = MHD_quiesce_daemon(http); /* no new connections; in-flight ones go on */
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(void *http) {
  if (http) MHD_stop_daemon(http);
}
