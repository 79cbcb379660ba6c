#define _POSIX_C_SOURCE 200809L /* fileno, clock_gettime under -std=c11 */
#include "mgt/log.h"

#include <time.h>

double mgt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mgt_timer_start(mgt_timer *t) { t->started = mgt_now(); }

void mgt_timer_stop(mgt_timer *t) {
  t->total += mgt_now() - t->started;
  t->count++;
}

mgt_status mgt_timers_report(const mgt_timer *timers, int n, MPI_Comm comm, FILE *f) {
  int rank;
  MGT_MPI(MPI_Comm_rank(comm, &rank));
  if (rank == 0) fprintf(f, "timers (max over ranks | mean per call | max/min over ranks):\n");
  for (int i = 0; i < n; i++) {
    double mx = timers[i].total, mn = timers[i].total;
    MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, comm));
    MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &mn, 1, MPI_DOUBLE, MPI_MIN, comm));
    if (rank == 0 && timers[i].count > 0)
      fprintf(f, "  %-22s %10.3f s | %9.3f ms | %.3f\n", timers[i].name, mx,
              1e3 * mx / (double)timers[i].count, mn > 0 ? mx / mn : 1.0);
  }
  return MGT_OK;
}
