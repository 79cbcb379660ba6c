/* mgt serve, the HTTP side on rank 0: GNU libmicrohttpd with a thread per connection, so a
   request's thread may wait for its job (docs/serving.md says why this library). Bodies are
   read up to --max-request-bytes; beyond that the request is answered 413 without keeping
   them. A stream's thread sends the job's events as they come, with a comment line every
   second while it waits, which also finds a client that has left: its job is then cancelled
   and its cache slots go to others. The limits that keep one client from stalling the others:
   connections in all and per address (libmicrohttpd refuses beyond them), idle time (it closes
   a connection that sends nothing), and the time a request may take to arrive whole, headers
   and body, kept here by a thread that shuts down the connections past it. Never calls MPI. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mgt/log.h"
#include "mgt/serve.h"

/* A connection: waiting for a request (or between two), receiving one, or answering it. */
enum { CONN_WAITING, CONN_RECEIVING, CONN_ANSWERING };

typedef struct conn_state {
  struct conn_state *prev, *next;
  int fd, state, cut;
  double since; /* when it began waiting for its request */
  char addr[INET_ADDRSTRLEN];
} conn_state;

typedef struct http {
  srv *s;
  struct MHD_Daemon *d;
  pthread_mutex_t mu; /* the connections' list and states */
  conn_state *conns;
  double request_timeout;
  pthread_t reaper;
  int reaper_started;
  volatile int stop;
} http;

/* s with every byte a terminal or a log reader could take for something else (control
   characters, DEL, bytes above 0x7F) written as \xNN, at most `cap` bytes of it: a request's
   path, decoded from %0a or %1b, never forges a log line or moves the cursor. */
static const char *printable(const char *s, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (; *s && o + 5 < cap; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out[o++] = (char)c;
    } else {
      out[o++] = '\\', out[o++] = 'x', out[o++] = hex[c >> 4], out[o++] = hex[c & 15];
    }
  }
  if (*s && o + 3 < cap) out[o++] = '.', out[o++] = '.', out[o++] = '.';
  out[o] = 0;
  return out;
}

static void log_request(const char *method, const char *url, int status, const char *why,
                        double t0) {
  char m[64], u[256];
  printf("serve: %s %s %d%s (%.3f s)\n", printable(method, m, sizeof m),
         printable(url, u, sizeof u), status, why, mgt_now() - t0);
  fflush(stdout);
}

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
  int fd;      /* the connection's socket */
  int handled; /* whole, and given to srv_handle */
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
    if (done && !rq->job->failed) s->served++;
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

/* The connection's state, under h->mu. */
static void conn_set(http *h, struct MHD_Connection *c, int state) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  conn_state *k = ci ? ci->socket_context : NULL;
  if (!k) return;
  pthread_mutex_lock(&h->mu);
  k->state = state;
  if (state == CONN_WAITING) k->since = mgt_now();
  pthread_mutex_unlock(&h->mu);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *up,
                                 size_t *up_size, void **con_cls) {
  (void)version;
  http *h = cls;
  srv *s = h->s;
  req_state *rq = *con_cls;
  if (!rq) { /* the headers: a request begins */
    rq = calloc(1, sizeof *rq);
    if (!rq) return MHD_NO;
    rq->s = s, rq->t0 = mgt_now();
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    rq->fd = ci ? ci->connect_fd : -1;
    *con_cls = rq;
    conn_set(h, c, CONN_RECEIVING);
    pthread_mutex_lock(&s->mu);
    s->open_requests++, s->receiving++;
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
  conn_set(h, c, CONN_ANSWERING);
  pthread_mutex_lock(&s->mu);
  s->receiving--, rq->handled = 1;
  pthread_mutex_unlock(&s->mu);
  srv_reply r;
  srv_handle(s, method, url, rq->body, rq->len, rq->too_big, rq->fd, &r);
  if (r.status == SRV_CLIENT_GONE) { /* nobody to answer: close */
    log_request(method, url, r.status, " the client left; its decoding was cancelled", rq->t0);
    return MHD_NO;
  }
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
  if (!r.job || r.status != 200) log_request(method, url, r.status, "", rq->t0);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  http *h = cls;
  srv *s = h->s;
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
  if (!rq->handled) s->receiving--;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  free(rq->body), free(rq->pend), free(rq);
  *con_cls = NULL;
  conn_set(h, c, CONN_WAITING);
}

/* Connections come and go: each has its state from start to close. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  http *h = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    conn_state *k = calloc(1, sizeof *k);
    if (!k) return; /* not watched: the idle timeout still applies */
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    k->fd = fi ? fi->connect_fd : -1;
    if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &((const struct sockaddr_in *)ai->client_addr)->sin_addr, k->addr,
                sizeof k->addr);
    k->state = CONN_WAITING, k->since = mgt_now();
    pthread_mutex_lock(&h->mu);
    k->next = h->conns;
    if (h->conns) h->conns->prev = k;
    h->conns = k;
    pthread_mutex_unlock(&h->mu);
    *socket_context = k;
  } else if (*socket_context) { /* closed; libmicrohttpd closes the socket after this */
    conn_state *k = *socket_context;
    pthread_mutex_lock(&h->mu);
    if (k->prev) k->prev->next = k->next;
    if (k->next) k->next->prev = k->prev;
    if (h->conns == k) h->conns = k->next;
    pthread_mutex_unlock(&h->mu);
    free(k);
    *socket_context = NULL;
  }
}

/* Twice a second: a connection whose request has not arrived whole within request_timeout of
   its start (or of its last answer) is shut down, which wakes its thread to close it. */
static void *reaper(void *arg) {
  http *h = arg;
  while (!h->stop) {
    const struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
    const double now = mgt_now();
    char cut[16][INET_ADDRSTRLEN]; /* logged after the lock: a slow log stalls no connection */
    int n = 0, more = 0;
    pthread_mutex_lock(&h->mu);
    for (conn_state *k = h->conns; k; k = k->next)
      if (k->state != CONN_ANSWERING && !k->cut && k->fd >= 0 &&
          now - k->since > h->request_timeout) {
        k->cut = 1;
        shutdown(k->fd, SHUT_RDWR);
        if (n < 16)
          snprintf(cut[n++], sizeof cut[0], "%s", k->addr[0] ? k->addr : "?");
        else
          more++;
      }
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < n; i++)
      printf("serve: closed a connection from %s: no whole request within %g s\n", cut[i],
             h->request_timeout);
    if (more)
      printf("serve: closed %d more connections: no whole request within %g s\n", more,
             h->request_timeout);
    if (n) fflush(stdout);
  }
  return NULL;
}

mgt_status srv_http_start(srv *s, const mgt_serve_opts *o, void **out, int *bound) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)o->port);
  MGT_REQUIRE(inet_pton(AF_INET, o->host, &a.sin_addr) == 1,
              "--host %s: not an IPv4 address (127.0.0.1, or 0.0.0.0 for every interface)",
              o->host);
  http *h = calloc(1, sizeof *h);
  if (!h) MGT_FAIL(MGT_ERR_NOMEM, "out of memory starting the server");
  h->s = s, h->request_timeout = o->request_timeout;
  pthread_mutex_init(&h->mu, NULL);
  h->d = MHD_start_daemon(
      /* poll(), not select(): select() takes no socket above 1023 */
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC,
      (uint16_t)o->port, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)o->max_per_client, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->idle_timeout + 0.5),
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
      MHD_OPTION_END);
  if (!h->d) {
    const int e = errno;
    pthread_mutex_destroy(&h->mu);
    free(h);
    MGT_FAIL(MGT_ERR_INPUT, "cannot listen on %s:%d (%s)", o->host, o->port,
             e ? strerror(e) : "libmicrohttpd refused");
  }
  h->reaper_started = pthread_create(&h->reaper, NULL, reaper, h) == 0;
  if (!h->reaper_started)
    printf("serve: warning: no thread to enforce --request-timeout (%s); the idle timeout "
           "still applies\n",
           strerror(errno));
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  *bound = info ? info->port : o->port;
  *out = h;
  return MGT_OK;
}

void srv_http_quiesce(void *ph) {
  http *h = ph;
  if (!h) return;
  const MHD_socket fd = MHD_quiesce_daemon(h->d); /* no new connections; in-flight ones go on */
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(void *ph) {
  http *h = ph;
  if (!h) return;
  h->stop = 1;
  if (h->reaper_started) pthread_join(h->reaper, NULL);
  MHD_stop_daemon(h->d); /* closes every connection and joins its thread */
  pthread_mutex_destroy(&h->mu);
  free(h);
}
