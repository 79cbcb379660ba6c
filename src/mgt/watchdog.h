/* The watchdog: a rank that has waited in one collective longer than
   --distributed-timeout-minutes says what it waited for and ends the job with
   MGT_EXIT_WATCHDOG. Without it a lost peer (a node down, a rank stopped) leaves the others
   in the collective until the scheduler notices, minutes later. A background thread reads the
   marks the training thread sets around its blocking MPI calls (mgt_watch_begin in
   include/mgt/agree.h); it never calls MPI itself. */
#pragma once

#include <stdint.h>

#include "mgt/common.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EX_PROTOCOL: a peer stopped answering; launchers requeue it as a failure. */
enum { MGT_EXIT_WATCHDOG = 76 };

/* Starts the thread over `g` (kept for the messages) when seconds > 0; one watchdog per
   process. Not collective. */
MGT_NODISCARD mgt_status mgt_watchdog_start(double seconds, const mgt_grid *g);
/* Stops and joins the thread; nothing when none runs. */
void mgt_watchdog_stop(void);

#ifdef __cplusplus
}
#endif
