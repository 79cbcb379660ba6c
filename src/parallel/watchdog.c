/* The collective watchdog: see src/mgt/watchdog.h. */
#define _POSIX_C_SOURCE 200809L /* gethostname */
#include "mgt/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mgt/log.h"

static struct {
  pthread_mutex_t mu; /* guards stop, for the condition variable */
  pthread_cond_t cv;
  pthread_t thread;
  int running, stop;
  double limit;
  char where[3][200]; /* this rank's groups, per axis, named by world ranks */
  char host[64];
  int rank;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* "tensor-parallel group {2,3}": the members of this rank's group along one axis */
static void describe(const mgt_grid *g, const char *name, int first, int step, int n, char *out,
                     size_t cap) {
  const int k = snprintf(out, cap, "%s group ", name);
  if (k > 0 && (size_t)k < cap) mgt_grid_ranks_text(g, first, step, n, out + k, cap - (size_t)k);
}

static void *watch(void *arg) {
  (void)arg;
  const double period = w.limit / 4 < 1.0 ? w.limit / 4 : 1.0;
  pthread_mutex_lock(&w.mu);
  while (!w.stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double wake = (double)ts.tv_nsec * 1e-9 + period;
    ts.tv_sec += (time_t)wake;
    ts.tv_nsec = (long)((wake - (double)(time_t)wake) * 1e9);
    pthread_cond_timedwait(&w.cv, &w.mu, &ts);
    const char *op;
    int axis;
    double since;
    int64_t it;
    if (w.stop || !mgt_watch_read(&op, &axis, &since, &it)) continue;
    const double waited = mgt_now() - since;
    if (waited < w.limit) continue;
    char when[64] = "before the first iteration";
    if (it >= 0) snprintf(when, sizeof when, "in iteration %lld", (long long)it);
    /* the training thread is blocked in MPI: nothing here may wait for it */
    fprintf(stderr,
            "mgt: rank %d (%s): watchdog: waited %.0f s in %s on the %s %s, with no answer "
            "(--distributed-timeout-minutes %g): a peer is lost or stopped; ending the job with "
            "status %d\n",
            w.rank, w.host, waited, op, w.where[axis >= 0 && axis < 3 ? axis : 2], when,
            w.limit / 60, MGT_EXIT_WATCHDOG);
    fflush(stderr);
    _exit(MGT_EXIT_WATCHDOG);
  }
  pthread_mutex_unlock(&w.mu);
  return NULL;
}

mgt_status mgt_watchdog_start(double seconds, const mgt_grid *g) {
  if (seconds <= 0 || w.running) return MGT_OK;
  const int k = g->dp_rank * g->tp, j = g->tp_rank;
  describe(g, "tensor-parallel", k, 1, g->tp, w.where[0], sizeof w.where[0]);
  describe(g, "data-parallel", j, g->tp, g->dp, w.where[1], sizeof w.where[1]);
  snprintf(w.where[2], sizeof w.where[2], "world (%d ranks)", g->size);
  w.rank = g->from_rank[g->rank];
  if (gethostname(w.host, sizeof w.host) != 0) snprintf(w.host, sizeof w.host, "?");
  w.host[sizeof w.host - 1] = '\0';
  w.limit = seconds;
  w.stop = 0;
  const int rc = pthread_create(&w.thread, NULL, watch, NULL);
  MGT_REQUIRE(rc == 0, "cannot start the watchdog thread: %s", strerror(rc));
  w.running = 1;
  mgt_watch_enable(1);
  return MGT_OK;
}

void mgt_watchdog_stop(void) {
  if (!w.running) return;
  pthread_mutex_lock(&w.mu);
  w.stop = 1;
  pthread_cond_signal(&w.cv);
  pthread_mutex_unlock(&w.mu);
  pthread_join(w.thread, NULL);
  w.running = 0;
  mgt_watch_enable(0);
}
