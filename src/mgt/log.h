/* Wall-clock timers reported as the max over ranks with the max/min imbalance, and the
   metrics file (one JSON object per logged iteration). */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "mgt/common.h"
#include "mgt/agree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on a monotonic clock. */
double mgt_now(void);

typedef struct mgt_timer {
  const char *name;
  double total; /* seconds accumulated */
  double started;
  int64_t count;
} mgt_timer;

void mgt_timer_start(mgt_timer *t);
void mgt_timer_stop(mgt_timer *t);

/* Rank 0 of comm writes each timer's total as the max over its ranks, the mean per call, and
   the max/min ratio across them. Collective over comm. */
MGT_NODISCARD mgt_status mgt_timers_report(const mgt_timer *timers, int n, MPI_Comm comm, FILE *f);

#ifdef __cplusplus
}
#endif
