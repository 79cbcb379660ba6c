/* Data parallelism over flat parameter and gradient buffers, independent of any model: the
   buffers are cut into buckets (element ranges, in the order backward completes them), each
   into pieces of at most bucket_size elements, one collective per piece over the grid's
   data-parallel axis. A bucket's gradients are summed as soon as backward completes it
   (non-blocking with overlap_grad_reduce); with `distributed` (ZeRO stage 1, Megatron-LM's
   distributed optimizer) data-parallel rank q owns the q-th of dp even cuts of the buffers (at
   any element; with experts, of the rest's elements, and the experts' are cut over the
   expert-data-parallel ranks) and a piece's reduce-scatter leaves each rank its owned part only,
   and the parameters are all-gathered after the update (non-blocking with overlap_param_gather,
   waited for per bucket when the forward first reads it). With weight_copies, the backend's 16-bit
   weight copies are remade per bucket, once after each change, before their first read. */
#pragma once

#include <stddef.h>

#include "mgt/backend.h"
#include "mgt/comm.h"
#include "mgt/grid.h"

typedef struct mgt_ddp mgt_ddp;

typedef struct mgt_ddp_opts {
  size_t bucket_size; /* most elements of one collective (--ddp-bucket-size) */
  int overlap_grad_reduce;
  int distributed; /* --use-distributed-optimizer */
  int overlap_param_gather;
  int weight_copies; /* the backend keeps 16-bit copies of w (set_weights) */
  /* the ranges [expert_lo[i], expert_hi[i]) (sorted, disjoint) hold MoE experts, which only the
     ranks of the expert-data-parallel axis share: their pieces are summed over it */
  int n_expert;
  const size_t *expert_lo, *expert_hi;
} mgt_ddp_opts;

/* Buckets b = 0 .. n_buckets - 1 are [lo[b], hi[b]) of w and g (n floats each, memory of be),
   numbered in the order backward completes them. The buffers are borrowed. Not collective. */
MGT_NODISCARD mgt_status mgt_ddp_create(const mgt_grid *grid, const mgt_comm *comm,
                                        const mgt_backend *be, float *w, float *g, size_t n,
                                        int n_buckets, const size_t *lo, const size_t *hi,
                                        const mgt_ddp_opts *o, mgt_ddp **out);
/* Waits for whatever is still in flight (a failed step), then frees. */
void mgt_ddp_destroy(mgt_ddp **d);

/* Backward: begin, then start each bucket as it completes (progressing the earlier ones
   meanwhile), then finish, which waits for every started piece. Collective over dp. */
void mgt_ddp_begin(mgt_ddp *d);
MGT_NODISCARD mgt_status mgt_ddp_start_bucket(mgt_ddp *d, int b);
/* Drives the started collectives: MPI progresses them only inside MPI calls. */
MGT_NODISCARD mgt_status mgt_ddp_progress(mgt_ddp *d);
MGT_NODISCARD mgt_status mgt_ddp_finish(mgt_ddp *d);

/* The summed gradient of this rank's part, *n elements packed from the *n_spans spans (sorted)
   at the pointer returned: g itself, one run, without `distributed` or at dp = 1. With expert
   ranges a rank owns a part of the rest and a part of the experts, hence several spans. */
float *mgt_ddp_grad_shard(mgt_ddp *d, const mgt_span **spans, int *n_spans, size_t *n);
/* `distributed`: every rank's updated part of w to every rank, bucket by bucket in the order
   the forward reads them (the last bucket first). Marks the weights changed. */
MGT_NODISCARD mgt_status mgt_ddp_gather_params(mgt_ddp *d);
/* Waits for bucket b's parameter all-gathers (b = -1: every bucket), driving the others on. */
MGT_NODISCARD mgt_status mgt_ddp_params_ready(mgt_ddp *d, int b);
/* params_ready, then bucket b's (every bucket's with b < 0) 16-bit copies remade if stale. */
MGT_NODISCARD mgt_status mgt_ddp_weights_ready(mgt_ddp *d, int b);
/* w changed (an update, a load): every bucket's 16-bit copies are stale. */
void mgt_ddp_weights_changed(mgt_ddp *d);
/* Every bucket's copies were written with w (the optimizer's pass): none is stale. */
void mgt_ddp_copies_fresh(mgt_ddp *d);
