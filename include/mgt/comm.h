/* Communication: the collectives the model calls on the grid's axes, as one interface with an
   MPI implementation on host buffers and a device one (NCCL, CUDA-aware or staged MPI) for
   the CUDA backend. Kernels know no communicators; the model calls only this. */
#pragma once

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which communicator of the grid a collective runs on. */
/* EP: the expert-parallel group; EDP: the data-parallel ranks that hold the same experts (the
   data-parallel group itself without expert parallelism). */
typedef enum mgt_axis {
  MGT_AXIS_TP,
  MGT_AXIS_DP,
  MGT_AXIS_WORLD,
  MGT_AXIS_EP,
  MGT_AXIS_EDP,
  MGT_N_AXES
} mgt_axis;
typedef enum mgt_redop { MGT_SUM, MGT_MAX } mgt_redop;

/* A non-blocking collective in flight: an MPI request, or (the device communicator's NCCL
   path) the event that completes the collective on the communication stream, a cudaEvent_t
   owned by the communicator; NULL for MPI requests and for collectives already finished or
   ordered on the backend's stream. */
typedef struct mgt_comm_req {
  MPI_Request mpi;
  mgt_axis axis;
  void *event;
} mgt_comm_req;

/* Time spent inside collectives, per axis: blocking calls whole, non-blocking ones from
   start to return plus the wait. */
typedef struct mgt_comm_stats {
  double seconds[MGT_N_AXES];
  uint64_t calls[MGT_N_AXES];
  uint64_t bytes[MGT_N_AXES];
} mgt_comm_stats;

/* A communicator: the collectives on the grid's groups, for host buffers (MPI) or device
   buffers (the CUDA backend's: NCCL, CUDA-aware or staged MPI). The table behind it is private
   (src/mgt/comm_impl.h); callers use the checked wrappers below, which fail with "communicator
   NAME lacks operation OP" where it has none. */
typedef struct mgt_comm mgt_comm;

/* The collectives, one list: X(name, NAME, (parameters after the axis), (their names)). From it
   come the enum MGT_COMM_NAME, the private table's slots and the checked wrappers
   mgt_comm_name(comm, axis, parameters), each collective over the group of `axis` of the
   communicator's grid (src/parallel/comm.c). */
#define MGT_COMM_OPERATIONS(X)                                                                     \
  /* In-place all-reduce of `n` floats. */                                                         \
  X(allreduce, ALLREDUCE, (float *buf, size_t n, mgt_redop op), (buf, n, op))                      \
  /* In-place all-reduce of `n` host doubles (losses, norms). */                                   \
  X(allreduce_f64, ALLREDUCE_F64, (double *buf, size_t n, mgt_redop op), (buf, n, op))             \
  /* For each i, the largest val[i] over the group and its idx[i] (the lowest idx among equal      \
     values); host arrays. */                                                                      \
  X(allreduce_maxloc, ALLREDUCE_MAXLOC, (float *val, int32_t *idx, size_t n), (val, idx, n))       \
  /* Starts an in-place all-reduce; finish it with mgt_comm_wait (or test until done). The         \
     buffer must not be touched before then. */                                                    \
  X(iallreduce, IALLREDUCE, (float *buf, size_t n, mgt_redop op, mgt_comm_req *req),               \
    (buf, n, op, req))                                                                             \
  /* Every rank contributes `n` floats; `out` holds size*n floats in rank order. */                \
  X(allgather, ALLGATHER, (const float *in, float *out, size_t n), (in, out, n))                   \
  X(broadcast, BROADCAST, (void *buf, size_t bytes, int root), (buf, bytes, root))                 \
  /* The distributed optimizer's pair. counts[q] (q in rank order, summing to n) partitions n      \
     floats into consecutive parts. reduce_scatter: every rank gives n floats in `in`; this rank   \
     receives in `out` the sum over the group of its part. allgatherv: in place, each rank's part  \
     of buf (at displs[rank], the sum of the counts before it) goes to every rank. With req        \
     non-NULL either may be started only (counts and displs kept alive), finished by wait/test. */ \
  X(reduce_scatter, REDUCE_SCATTER,                                                                \
    (const float *in, float *out, const int *counts, mgt_comm_req *req), (in, out, counts, req))   \
  X(allgatherv, ALLGATHERV, (float *buf, const int *counts, const int *displs, mgt_comm_req *req), \
    (buf, counts, displs, req))                                                                    \
  /* Each rank tells every rank of the group how many it will send it: send[q] to rank q, and      \
     recv[q] the count rank q will send this one (host ints, size of the group each). */           \
  X(exchange_counts, EXCHANGE_COUNTS, (const int *send, int *recv), (send, recv))                  \
  /* All-to-all with counts per rank (MoE's dispatch and combine): send_counts[q] floats of `in`,  \
     in rank order, go to rank q; recv_counts[q] floats from rank q land in `out`, in rank order.  \
     in and out may not overlap. */                                                                \
  X(alltoallv, ALLTOALLV,                                                                          \
    (const float *in, const int *send_counts, float *out, const int *recv_counts),                 \
    (in, send_counts, out, recv_counts))

#define MGT_COMM_UNPACK(...) __VA_ARGS__
#define MGT_COMM_ENUM(name, NAME, params, args) MGT_COMM_##NAME,
typedef enum mgt_comm_op { MGT_COMM_OPERATIONS(MGT_COMM_ENUM) MGT_COMM_N_OPS } mgt_comm_op;
#undef MGT_COMM_ENUM
#define MGT_COMM_PROTOTYPE(name, NAME, params, args)                                               \
  MGT_NODISCARD mgt_status mgt_comm_##name(const mgt_comm *comm, mgt_axis axis,                    \
                                           MGT_COMM_UNPACK params);
MGT_COMM_OPERATIONS(MGT_COMM_PROTOTYPE)
#undef MGT_COMM_PROTOTYPE

/* Finishes a started collective. MPI: the host waits for it. Device buffers: work enqueued on
   the backend's stream after the call is ordered after the collective, without the host
   waiting (a host read through the backend synchronizes that stream). Not collective. */
MGT_NODISCARD mgt_status mgt_comm_wait(const mgt_comm *comm, mgt_comm_req *req);
/* Lets a started collective progress; *done is set once it has finished (then it needs no
   wait). Not collective. */
MGT_NODISCARD mgt_status mgt_comm_test(const mgt_comm *comm, mgt_comm_req *req, int *done);
/* Whether the communicator has the collective; its name ("alltoallv"), and the
   communicator's ("mpi", "cuda"). */
int mgt_comm_has(const mgt_comm *comm, mgt_comm_op op);
const char *mgt_comm_op_name(mgt_comm_op op);
const char *mgt_comm_name(const mgt_comm *comm);
/* The grid whose groups the collectives run on. */
const mgt_grid *mgt_comm_grid(const mgt_comm *comm);
/* Frees a communicator (any kind); its collectives still in flight end first. NULL is fine. */
void mgt_comm_destroy(mgt_comm **comm);

/* The communicator of an axis and its size. */
MPI_Comm mgt_grid_axis_comm(const mgt_grid *g, mgt_axis axis, int *size);

/* The MPI implementation on host buffers. With `stats` non-NULL, time in collectives is
   added there (the caller owns it and must keep it alive). Not collective. */
MGT_NODISCARD mgt_status mgt_comm_mpi_create(const mgt_grid *grid, mgt_comm_stats *stats,
                                             mgt_comm **out);

/* Adds one collective that started at t0 (mgt_now) and moved `bytes` to stats (may be NULL):
   the one timing helper of every implementation. */
void mgt_comm_stats_add(mgt_comm_stats *stats, mgt_axis axis, double t0, size_t bytes);

/* Collectives on device buffers (built with MGT_CUDA). Host buffers passed to them go to the
   MPI implementation. */
typedef enum mgt_dist_mode {
  MGT_DIST_MPI_STAGED = 0,     /* MPI on pinned host copies */
  MGT_DIST_MPI_CUDA_AWARE = 1, /* MPI on device pointers */
  MGT_DIST_NCCL = 2,           /* NCCL communicators per grid axis (see mgt_comm_cuda_create) */
} mgt_dist_mode;
/* Builds the communicator on device buffers ordered on `stream` (a cudaStream_t, the CUDA
   backend's): NCCL when use_nccl, else MPI (on device pointers if mgt_mpi_cuda_aware(), else
   staged). With NCCL and a data-parallel group, data-parallel collectives run on a
   communication stream of its own, so that started ones overlap the work on `stream`
   (src/parallel/comm_cuda.c). Collective over the grid's world. */
MGT_NODISCARD mgt_status mgt_comm_cuda_create(const mgt_grid *grid, void *stream, int use_nccl,
                                              mgt_comm_stats *stats, mgt_dist_mode *mode,
                                              mgt_comm **out);
/* Whether MPI may be given device pointers: MPIX_Query_cuda_support() where Open MPI has
   it; MGT_CUDA_AWARE_MPI=0/1 in the environment overrides. */
int mgt_mpi_cuda_aware(void);
const char *mgt_dist_mode_name(mgt_dist_mode m);

#ifdef __cplusplus
}
#endif
