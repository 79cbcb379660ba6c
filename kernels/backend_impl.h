/* The backend's table of operations: private to the backends that fill it (kernels/cpu,
   kernels/cuda) and to the checked wrappers (kernels/backend.c), as ggml's backend
   implementation header. Everything else calls the wrappers of include/mgt/backend.h, which
   fail with "backend NAME lacks operation OP" where a slot is empty. */
#pragma once

#include "mgt/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mgt_backend {
  const char *name;
  void *ctx;
  /* Bytes per element of the 16-bit activations (set_act16). */
  int act16_bytes;
  /* Frees memory alloc gave. */
  void (*free)(void *ctx, void *p);
  /* Waits for queued work to finish. */
  mgt_status (*sync)(void *ctx);
  /* Releases what the backend holds (handles, streams, scratch); NULL if nothing. */
  void (*destroy)(void *ctx);
  /* The operations of include/mgt/backend.h's list, each called with the backend's context
     first (their documentation is there). */
#define MGT_BE_SLOT(name, NAME, params, args, kind)                                                \
  mgt_status (*name)(void *ctx, MGT_BE_UNPACK params);
  MGT_BE_OPERATIONS(MGT_BE_SLOT)
#undef MGT_BE_SLOT
};

/* Fills be's slots of the list with PREFIX##name (cpu_gemm, cu_gemm, ...): a backend defines
   every operation under its prefix. */
#define MGT_BE_FILL_SLOT(name, NAME, params, args, kind) be->name = MGT_BE_PREFIXED(name);

#ifdef __cplusplus
}
#endif
