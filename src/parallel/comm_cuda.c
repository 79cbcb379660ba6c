/* Collectives on device buffers for the CUDA backend: NCCL communicators built from the
   grid's MPI communicators, or MPI on device pointers when the MPI library is CUDA-aware, or
   MPI through pinned host staging. Host buffers (losses, norms, gathered logits) go to the
   plain MPI implementation. NCCL work is ordered after the work on the stream passed in (the
   backend's, "compute stream"): tensor-parallel collectives on that stream, data-parallel ones
   on a communication stream (the stream rule below); the MPI paths wait for the compute stream
   first, since MPI cannot see it, and finish before they return.

   The stream rule. NCCL kernels wait on the GPU for their peers, so every rank must run the
   collectives of one NCCL communicator in the same order; two collectives of one communicator
   on two streams could run in either order and, ranks choosing differently, wait for each other
   forever. So each communicator has exactly one stream: the tensor-parallel communicator the
   compute stream, where its collectives sit between the kernels that need them; the
   data-parallel communicator the communication stream, for started and blocking calls alike
   (bucket all-reduces, the distributed optimizer's reduce-scatters and all-gathers, any other
   device collective over dp_comm; losses and norms are host doubles and go through MPI). The
   host issues a communicator's calls in program order, the same on every rank because every
   call is collective over it, and a stream runs its work in issue order: every rank runs them in
   one order. A call on the communication stream first makes that stream wait for the compute
   stream's work so far (so the collective reads the buffers as the program left them); a
   blocking call then makes the compute stream wait for its end, a started one keeps its
   completion event in the request for test (cudaEventQuery) and wait (the compute stream waits
   for the event). The host waits in neither. The two communicators' kernels may then run at the
   same time on the GPU, as with PyTorch's and Megatron-LM's communication streams: each uses a
   few SMs, and the communication stream has the highest priority. */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/comm_impl.h"
#include "mgt/log.h"
#include "../../kernels/cuda/cuda_check.h" /* CU(): the backend's CUDA check, shared */
#ifdef MGT_HAVE_NCCL
#include <nccl.h>
#endif
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

typedef struct cuda_comm {
  mgt_comm host; /* the MPI implementation, for host buffers */
  mgt_comm_stats *stats;
  cudaStream_t stream;
  mgt_dist_mode mode;
  float *stage; /* pinned: 2 * stage_n floats (in and out of a staged all-gather) */
  size_t stage_n;
#ifdef MGT_HAVE_NCCL
  /* per axis: tensor- and data-parallel; NULL on axes of size 1 and always on the world axis,
     which no device collective uses (the gradient norm's world sum is a host double): a
     device collective over the world goes through MPI (through_nccl) */
  ncclComm_t nccl[MGT_N_AXES];
  /* the communication stream of the data-parallel communicator (NULL without one), and the
     events that order it against the compute stream: fork and join are re-recorded for every
     call (a stream waits for an event as it was when the wait was enqueued); completion events
     of started collectives come from a pool: all[0..n_all) were made, idle[0..n_idle) are in
     no request. The pool grows only while more collectives are in flight than ever before
     (in the first step, beyond the EVENTS_AHEAD made with the communicator). */
  cudaStream_t side;
  cudaEvent_t fork, join;
  cudaEvent_t *all, *idle;
  int n_all, n_idle, cap;
#endif
} cuda_comm;

enum { EVENTS_AHEAD = 64 };

#ifdef MGT_HAVE_NCCL
#define NCCL(call)                                                                                 \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) MGT_FAIL(MGT_ERR_MPI, "%s: %s", #call, ncclGetErrorString(r_));         \
  } while (0)
#endif

#ifdef MGT_HAVE_NCCL
/* Whether a device collective over axis goes to NCCL: in NCCL mode, on an axis that has a
   communicator. */
static int through_nccl(const cuda_comm *c, mgt_axis axis) {
  return c->mode == MGT_DIST_NCCL && c->nccl[axis] != NULL;
}
#endif

#ifdef MGT_HAVE_NCCL
/* One more completion event in the pool. */
static mgt_status event_make(cuda_comm *c) {
  if (c->n_all == c->cap) {
    const int cap = c->cap ? 2 * c->cap : EVENTS_AHEAD;
    cudaEvent_t *all = realloc(c->all, sizeof *all * (size_t)cap);
    if (!all) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %d CUDA events", cap);
    c->all = all;
    cudaEvent_t *idle = realloc(c->idle, sizeof *idle * (size_t)cap);
    if (!idle) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %d CUDA events", cap);
    c->idle = idle;
    c->cap = cap;
  }
  cudaEvent_t e;
  CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  c->all[c->n_all++] = e;
  c->idle[c->n_idle++] = e;
  return MGT_OK;
}

static mgt_status event_take(cuda_comm *c, cudaEvent_t *e) {
  if (c->n_idle == 0) MGT_CHECK(event_make(c));
  *e = c->idle[--c->n_idle];
  return MGT_OK;
}

static void event_give(cuda_comm *c, cudaEvent_t e) { c->idle[c->n_idle++] = e; }

/* The stream an NCCL call over axis is issued on (the stream rule): the data-parallel
   communicator's is the communication stream, made to wait for the compute stream's work so
   far. */
static mgt_status nccl_enter(cuda_comm *c, mgt_axis axis, cudaStream_t *s) {
  *s = c->stream;
  if (axis != MGT_AXIS_DP || !c->side) return MGT_OK;
  CU(cudaEventRecord(c->fork, c->stream));
  CU(cudaStreamWaitEvent(c->side, c->fork, 0));
  *s = c->side;
  return MGT_OK;
}

/* After the NCCL call on s: on the communication stream, a started collective (req non-NULL)
   keeps its completion event in req, and the compute stream waits for a blocking one. On the
   compute stream the collective is already in order (req->event stays NULL). */
static mgt_status nccl_leave(cuda_comm *c, cudaStream_t s, mgt_comm_req *req) {
  if (s == c->stream) return MGT_OK;
  if (!req) {
    CU(cudaEventRecord(c->join, s));
    CU(cudaStreamWaitEvent(c->stream, c->join, 0));
    return MGT_OK;
  }
  cudaEvent_t e;
  MGT_CHECK(event_take(c, &e));
  cudaError_t err = cudaEventRecord(e, s);
  if (err != cudaSuccess) event_give(c, e);
  CU(err);
  req->event = e;
  return MGT_OK;
}
#endif

/* A request that is finished (or ordered on the compute stream) as soon as it is made. */
static void req_done(mgt_comm_req *req, mgt_axis axis) {
  if (!req) return;
  req->mpi = MPI_REQUEST_NULL;
  req->axis = axis;
  req->event = NULL;
}

static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void account(cuda_comm *c, mgt_axis axis, double t0, size_t bytes) {
  mgt_comm_stats_add(c->stats, axis, t0, bytes);
}

static mgt_status stage(cuda_comm *c, size_t n) {
  if (n <= c->stage_n) return MGT_OK;
  cudaFreeHost(c->stage);
  c->stage = NULL;
  c->stage_n = 0;
  CU(cudaMallocHost((void **)&c->stage, 2 * n * sizeof(float)));
  c->stage_n = n;
  return MGT_OK;
}

/* An all-reduce of device floats; started only (req non-NULL, made finished by the caller) on
   the communication stream, otherwise finished or in order on the compute stream. */
static mgt_status device_allreduce(cuda_comm *c, const mgt_grid *g, mgt_axis axis, float *buf,
                                   size_t n, mgt_redop op, mgt_comm_req *req) {
  int size;
  MPI_Comm mc = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1 || n == 0) return MGT_OK;
  MGT_REQUIRE(n <= INT_MAX, "all-reduce of %zu floats exceeds the count limit", n);
  double t0 = mgt_now();
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) {
    cudaStream_t s;
    MGT_CHECK(nccl_enter(c, axis, &s));
    NCCL(
        ncclAllReduce(buf, buf, n, ncclFloat, op == MGT_MAX ? ncclMax : ncclSum, c->nccl[axis], s));
    MGT_CHECK(nccl_leave(c, s, req));
    account(c, axis, t0, n * sizeof(float));
    return MGT_OK;
  }
#else
  (void)req;
#endif
  CU(cudaStreamSynchronize(c->stream));
  MPI_Op mop = op == MGT_MAX ? MPI_MAX : MPI_SUM;
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    MGT_MPI_WATCHED("all-reduce", axis,
                    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mop, mc));
  } else {
    MGT_CHECK(stage(c, n));
    CU(cudaMemcpy(c->stage, buf, n * sizeof(float), cudaMemcpyDeviceToHost));
    MGT_MPI_WATCHED("all-reduce", axis,
                    MPI_Allreduce(MPI_IN_PLACE, c->stage, (int)n, MPI_FLOAT, mop, mc));
    CU(cudaMemcpy(buf, c->stage, n * sizeof(float), cudaMemcpyHostToDevice));
  }
  account(c, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status cu_allreduce(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf, size_t n,
                               mgt_redop op) {
  cuda_comm *c = ctx;
  if (!on_device(buf)) return c->host.allreduce(c->host.ctx, g, axis, buf, n, op);
  return device_allreduce(c, g, axis, buf, n, op, NULL);
}

static mgt_status cu_allreduce_f64(void *ctx, const mgt_grid *g, mgt_axis axis, double *buf,
                                   size_t n, mgt_redop op) {
  cuda_comm *c = ctx;
  return c->host.allreduce_f64(c->host.ctx, g, axis, buf, n, op);
}

static mgt_status cu_allreduce_maxloc(void *ctx, const mgt_grid *g, mgt_axis axis, float *val,
                                      int32_t *idx, size_t n) {
  cuda_comm *c = ctx;
  return c->host.allreduce_maxloc(c->host.ctx, g, axis, val, idx, n);
}

/* Started on the communication stream (NCCL over the data-parallel communicator); elsewhere
   the request is finished at once (MPI) or in order on the compute stream (NCCL over the
   tensor-parallel communicator). */
static mgt_status cu_iallreduce(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf, size_t n,
                                mgt_redop op, mgt_comm_req *req) {
  cuda_comm *c = ctx;
  if (!on_device(buf)) return c->host.iallreduce(c->host.ctx, g, axis, buf, n, op, req);
  req_done(req, axis);
  return device_allreduce(c, g, axis, buf, n, op, req);
}

/* A started NCCL collective: the compute stream waits for its completion event, and the event
   goes back to the pool (the wait keeps the event as it is now, so it may be recorded again).
   Anything else: MPI's wait. */
static mgt_status cu_wait(void *ctx, mgt_comm_req *req) {
  cuda_comm *c = ctx;
#ifdef MGT_HAVE_NCCL
  if (req->event) {
    double t0 = mgt_now();
    cudaEvent_t e = (cudaEvent_t)req->event;
    CU(cudaStreamWaitEvent(c->stream, e, 0)); /* on failure the request keeps its event */
    req->event = NULL;
    event_give(c, e);
    account(c, req->axis, t0, 0);
    return MGT_OK;
  }
#endif
  return c->host.wait(c->host.ctx, req);
}

/* A started NCCL collective is done when its completion event has completed; then it needs no
   wait (the work is over, so anything enqueued later sees its result). */
static mgt_status cu_test(void *ctx, mgt_comm_req *req, int *done) {
  cuda_comm *c = ctx;
#ifdef MGT_HAVE_NCCL
  if (req->event) {
    double t0 = mgt_now();
    cudaEvent_t e = (cudaEvent_t)req->event;
    cudaError_t err = cudaEventQuery(e);
    *done = 0;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError(); /* not an error: leave none behind for the next check */
    } else {
      CU(err);
      *done = 1;
      req->event = NULL;
      event_give(c, e);
    }
    account(c, req->axis, t0, 0);
    return MGT_OK;
  }
#endif
  return c->host.test(c->host.ctx, req, done);
}

static mgt_status cu_allgather(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                               float *out, size_t n) {
  cuda_comm *c = ctx;
  int size;
  MPI_Comm mc = mgt_grid_axis_comm(g, axis, &size);
  if (!on_device(out)) return c->host.allgather(c->host.ctx, g, axis, in, out, n);
  MGT_REQUIRE(n * (size_t)size <= INT_MAX, "all-gather of %zu floats exceeds the count limit", n);
  double t0 = mgt_now();
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) {
    cudaStream_t s;
    MGT_CHECK(nccl_enter(c, axis, &s));
    NCCL(ncclAllGather(in, out, n, ncclFloat, c->nccl[axis], s));
    MGT_CHECK(nccl_leave(c, s, NULL));
    account(c, axis, t0, n * sizeof(float));
    return MGT_OK;
  }
#endif
  CU(cudaStreamSynchronize(c->stream));
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    MGT_MPI_WATCHED("all-gather", axis,
                    MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, mc));
  } else {
    MGT_CHECK(stage(c, n * (size_t)(size + 1)));
    float *hin = c->stage, *hout = c->stage + n;
    CU(cudaMemcpy(hin, in, n * sizeof(float), cudaMemcpyDeviceToHost));
    MGT_MPI_WATCHED("all-gather", axis,
                    MPI_Allgather(hin, (int)n, MPI_FLOAT, hout, (int)n, MPI_FLOAT, mc));
    CU(cudaMemcpy(out, hout, n * (size_t)size * sizeof(float), cudaMemcpyHostToDevice));
  }
  account(c, axis, t0, n * sizeof(float));
  return MGT_OK;
}

/* NCCL has no variable counts: a reduce to each part's owner, grouped (started on the
   communication stream with req over the data-parallel communicator). MPI on device pointers
   or through the pinned stage otherwise (finished at once). */
static mgt_status cu_reduce_scatter(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                                    float *out, const int *counts, mgt_comm_req *req) {
  cuda_comm *c = ctx;
  int size, rank;
  MPI_Comm mc = mgt_grid_axis_comm(g, axis, &size);
  if (!on_device(in)) return c->host.reduce_scatter(c->host.ctx, g, axis, in, out, counts, req);
  req_done(req, axis);
  MGT_MPI(MPI_Comm_rank(mc, &rank));
  size_t n = 0;
  for (int q = 0; q < size; q++)
    n += (size_t)counts[q];
  if (size == 1) {
    if (counts[0] > 0 && out != in)
      CU(cudaMemcpyAsync(out, in, sizeof(float) * (size_t)counts[0], cudaMemcpyDeviceToDevice,
                         c->stream));
    return MGT_OK;
  }
  double t0 = mgt_now();
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) {
    int even = 1; /* sequence parallelism's blocks: NCCL's own reduce-scatter */
    for (int q = 1; q < size; q++)
      even &= counts[q] == counts[0];
    cudaStream_t s;
    MGT_CHECK(nccl_enter(c, axis, &s));
    if (even) {
      NCCL(ncclReduceScatter(in, out, (size_t)counts[0], ncclFloat, ncclSum, c->nccl[axis], s));
    } else {
      NCCL(ncclGroupStart());
      size_t at = 0;
      for (int q = 0; q < size; q++) {
        NCCL(ncclReduce(in + at, out, (size_t)counts[q], ncclFloat, ncclSum, q, c->nccl[axis], s));
        at += (size_t)counts[q];
      }
      NCCL(ncclGroupEnd());
    }
    MGT_CHECK(nccl_leave(c, s, req));
    account(c, axis, t0, n * sizeof(float));
    return MGT_OK;
  }
#endif
  CU(cudaStreamSynchronize(c->stream));
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    MGT_MPI_WATCHED("reduce-scatter", axis,
                    MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, mc));
  } else {
    MGT_CHECK(stage(c, n));
    CU(cudaMemcpy(c->stage, in, n * sizeof(float), cudaMemcpyDeviceToHost));
    MGT_MPI_WATCHED("reduce-scatter", axis,
                    MPI_Reduce_scatter(c->stage, c->stage + n, counts, MPI_FLOAT, MPI_SUM, mc));
    CU(cudaMemcpy(out, c->stage + n, sizeof(float) * (size_t)counts[rank], cudaMemcpyHostToDevice));
  }
  account(c, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status cu_allgatherv(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf,
                                const int *counts, const int *displs, mgt_comm_req *req) {
  cuda_comm *c = ctx;
  int size;
  (void)mgt_grid_axis_comm(g, axis, &size);
  if (!on_device(buf)) return c->host.allgatherv(c->host.ctx, g, axis, buf, counts, displs, req);
  req_done(req, axis); /* unless started on the communication stream below */
  if (size == 1) return MGT_OK;
  size_t n = 0;
  for (int q = 0; q < size; q++)
    n += (size_t)counts[q];
  double t0 = mgt_now();
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) { /* each part broadcast by its owner, grouped */
    cudaStream_t s;
    MGT_CHECK(nccl_enter(c, axis, &s));
    NCCL(ncclGroupStart());
    size_t at = 0;
    for (int q = 0; q < size; q++) {
      NCCL(ncclBroadcast(buf + at, buf + at, (size_t)counts[q], ncclFloat, q, c->nccl[axis], s));
      at += (size_t)counts[q];
    }
    NCCL(ncclGroupEnd());
    MGT_CHECK(nccl_leave(c, s, req));
    account(c, axis, t0, n * sizeof(float));
    return MGT_OK;
  }
#endif
  CU(cudaStreamSynchronize(c->stream));
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    MGT_CHECK(c->host.allgatherv(c->host.ctx, g, axis, buf, counts, displs, NULL));
  } else {
    MGT_CHECK(stage(c, n));
    CU(cudaMemcpy(c->stage, buf, n * sizeof(float), cudaMemcpyDeviceToHost));
    MGT_CHECK(c->host.allgatherv(c->host.ctx, g, axis, c->stage, counts, displs, NULL));
    CU(cudaMemcpy(buf, c->stage, n * sizeof(float), cudaMemcpyHostToDevice));
  }
  (void)t0; /* the MPI implementation counted it */
  return MGT_OK;
}

static mgt_status cu_broadcast(void *ctx, const mgt_grid *g, mgt_axis axis, void *buf, size_t bytes,
                               int root) {
  cuda_comm *c = ctx;
  int size;
  MPI_Comm mc = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1 || bytes == 0) return MGT_OK;
  if (!on_device(buf)) return c->host.broadcast(c->host.ctx, g, axis, buf, bytes, root);
  MGT_REQUIRE(bytes <= INT_MAX, "broadcast of %zu bytes exceeds the count limit", bytes);
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) {
    cudaStream_t s;
    MGT_CHECK(nccl_enter(c, axis, &s));
    NCCL(ncclBroadcast(buf, buf, bytes, ncclChar, root, c->nccl[axis], s));
    MGT_CHECK(nccl_leave(c, s, NULL));
    return MGT_OK;
  }
#endif
  CU(cudaStreamSynchronize(c->stream));
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    MGT_MPI_WATCHED("broadcast", axis, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, mc));
  } else {
    MGT_CHECK(stage(c, (bytes + sizeof(float) - 1) / sizeof(float)));
    CU(cudaMemcpy(c->stage, buf, bytes, cudaMemcpyDeviceToHost));
    MGT_MPI_WATCHED("broadcast", axis, MPI_Bcast(c->stage, (int)bytes, MPI_BYTE, root, mc));
    CU(cudaMemcpy(buf, c->stage, bytes, cudaMemcpyHostToDevice));
  }
  return MGT_OK;
}

int mgt_mpi_cuda_aware(void) {
  const char *env = getenv("MGT_CUDA_AWARE_MPI"); /* 0 forces staging, 1 trusts the user */
  if (env && *env) return atoi(env) != 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support();
#else
  return 0;
#endif
}

const char *mgt_dist_mode_name(mgt_dist_mode m) {
  switch (m) {
  case MGT_DIST_NCCL: return "NCCL";
  case MGT_DIST_MPI_CUDA_AWARE: return "CUDA-aware MPI";
  default: return "MPI through host memory";
  }
}

#ifdef MGT_HAVE_NCCL
/* One NCCL communicator over an MPI communicator: rank 0 makes the id and MPI carries it
   with rank 0's status, so that when rank 0 cannot make one every rank returns the error
   (none is left waiting in the broadcast). Collective over mc. */
static mgt_status nccl_over(MPI_Comm mc, const char *what, ncclComm_t *out) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(mc, &rank));
  MGT_MPI(MPI_Comm_size(mc, &size));
  *out = NULL;
  if (size == 1) return MGT_OK;
  struct {
    int status; /* ncclResult_t of ncclGetUniqueId on rank 0 */
    ncclUniqueId id;
  } msg;
  memset(&msg, 0, sizeof msg);
  if (rank == 0) msg.status = (int)ncclGetUniqueId(&msg.id);
  MGT_MPI(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, mc));
  if (msg.status != (int)ncclSuccess)
    MGT_FAIL(MGT_ERR_MPI, "NCCL (%s communicator): rank 0 could not make the unique id: %s", what,
             ncclGetErrorString((ncclResult_t)msg.status));
  NCCL(ncclCommInitRank(out, size, msg.id, rank));
  return MGT_OK;
}

/* The communication stream (at the device's highest priority, so its kernels are scheduled
   ahead of the compute stream's), its two ordering events and the first pooled events. */
static mgt_status side_create(cuda_comm *c) {
  int least = 0, greatest = 0;
  CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CU(cudaStreamCreateWithPriority(&c->side, cudaStreamNonBlocking, greatest));
  CU(cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming));
  for (int i = 0; i < EVENTS_AHEAD; i++)
    MGT_CHECK(event_make(c));
  return MGT_OK;
}
#endif

static mgt_status cu_exchange_counts(void *ctx, const mgt_grid *g, mgt_axis axis, const int *send,
                                     int *recv) {
  cuda_comm *c = ctx; /* host ints */
  return c->host.exchange_counts(c->host.ctx, g, axis, send, recv);
}

/* NCCL: a group of point-to-point sends and receives, one pair per peer with anything to move
   (on the axis's stream, as every NCCL call of the communicator). MPI on device pointers, or
   through the pinned stage. Finished at once on the host's side of the stream rule. */
static mgt_status cu_alltoallv(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                               const int *send_counts, float *out, const int *recv_counts) {
  cuda_comm *c = ctx;
  int size;
  MPI_Comm mc = mgt_grid_axis_comm(g, axis, &size);
  if (!on_device(out) && !on_device(in))
    return c->host.alltoallv(c->host.ctx, g, axis, in, send_counts, out, recv_counts);
  int *sd = malloc(sizeof(int) * 2 * (size_t)size);
  if (!sd) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for an all-to-all of %d ranks", size);
  int *rd = sd + size;
  size_t ns = 0, nr = 0;
  for (int q = 0; q < size; q++)
    sd[q] = (int)ns, ns += (size_t)send_counts[q], rd[q] = (int)nr, nr += (size_t)recv_counts[q];
  mgt_status st = MGT_OK;
  const double t0 = mgt_now();
  if (ns > INT_MAX || nr > INT_MAX) {
    st = MGT_ERROR(MGT_ERR_INPUT, "all-to-all of %zu floats exceeds the count limit",
                   ns > nr ? ns : nr);
    goto done;
  }
#ifdef MGT_HAVE_NCCL
  if (through_nccl(c, axis)) {
    cudaStream_t s;
    st = nccl_enter(c, axis, &s);
    if (st != MGT_OK) goto done;
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < size && r == ncclSuccess; q++) {
      if (send_counts[q])
        r = ncclSend(in + sd[q], (size_t)send_counts[q], ncclFloat, q, c->nccl[axis], s);
      if (r == ncclSuccess && recv_counts[q])
        r = ncclRecv(out + rd[q], (size_t)recv_counts[q], ncclFloat, q, c->nccl[axis], s);
    }
    const ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
    if (r != ncclSuccess) {
      st = MGT_ERROR(MGT_ERR_MPI, "NCCL all-to-all: %s", ncclGetErrorString(r));
      goto done;
    }
    st = nccl_leave(c, s, NULL);
    goto done;
  }
#endif
  if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
    st = MGT_ERROR(MGT_ERR_BACKEND, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
    goto done;
  }
  if (c->mode == MGT_DIST_MPI_CUDA_AWARE) {
    mgt_watch_begin("all-to-all", axis);
    const int err =
        MPI_Alltoallv(in, send_counts, sd, MPI_FLOAT, out, recv_counts, rd, MPI_FLOAT, mc);
    mgt_watch_end();
    st = mgt_mpi_status(err, __FILE__, __LINE__, __func__, "MPI_Alltoallv");
  } else {
    st = stage(c, ns + nr);
    if (st != MGT_OK) goto done;
    float *hin = c->stage, *hout = c->stage + ns;
    if (ns && cudaMemcpy(hin, in, ns * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
      st = MGT_ERROR(MGT_ERR_BACKEND, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
      goto done;
    }
    mgt_watch_begin("all-to-all", axis);
    const int err =
        MPI_Alltoallv(hin, send_counts, sd, MPI_FLOAT, hout, recv_counts, rd, MPI_FLOAT, mc);
    mgt_watch_end();
    st = mgt_mpi_status(err, __FILE__, __LINE__, __func__, "MPI_Alltoallv");
    if (st == MGT_OK && nr &&
        cudaMemcpy(out, hout, nr * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
      st = MGT_ERROR(MGT_ERR_BACKEND, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
  }
done:
  if (st == MGT_OK) account(c, axis, t0, (ns + nr) * sizeof(float));
  free(sd);
  return st;
}

/* Waits for the collectives still in flight, then frees everything the communicator holds. */
static void cu_destroy(void *ctx) {
  cuda_comm *c = ctx;
  if (!c) return;
#ifdef MGT_HAVE_NCCL
  /* collectives still in flight (a step that failed before its waits) end before their
     communicator, events and buffers go */
  if (c->side) cudaStreamSynchronize(c->side);
  for (int a = 0; a < MGT_N_AXES; a++)
    if (c->nccl[a]) ncclCommDestroy(c->nccl[a]);
  for (int i = 0; i < c->n_all; i++)
    cudaEventDestroy(c->all[i]);
  free(c->all);
  free(c->idle);
  if (c->fork) cudaEventDestroy(c->fork);
  if (c->join) cudaEventDestroy(c->join);
  if (c->side) cudaStreamDestroy(c->side);
#endif
  cudaFreeHost(c->stage);
  free(c);
}

mgt_status mgt_comm_cuda_create(const mgt_grid *grid, void *stream_ptr, int use_nccl,
                                mgt_comm_stats *stats, mgt_dist_mode *mode, mgt_comm **out) {
  *out = NULL;
#ifndef MGT_HAVE_NCCL
  MGT_REQUIRE(!use_nccl, "--distributed-backend nccl: this build has no NCCL (configure with "
                         "-DMGT_NCCL=ON)");
#endif
  cudaStream_t stream = (cudaStream_t)stream_ptr;
  MGT_REQUIRE(stream, "device collectives need the CUDA backend's stream");
  mgt_comm *comm = calloc(1, sizeof *comm);
  cuda_comm *c = comm ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    free(comm);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the communicator");
  }
  mgt_comm_mpi_init(&c->host, grid, stats);
  c->stats = stats;
  c->stream = stream;
  c->mode = use_nccl ? MGT_DIST_NCCL
                     : (mgt_mpi_cuda_aware() ? MGT_DIST_MPI_CUDA_AWARE : MGT_DIST_MPI_STAGED);
  mgt_status st = MGT_OK;
#ifdef MGT_HAVE_NCCL
  if (use_nccl) { /* no world communicator: see cuda_comm */
    st = nccl_over(grid->tp_comm, "tensor-parallel", &c->nccl[MGT_AXIS_TP]);
    /* every rank takes the next step or none: a failure in one tensor-parallel group must not
       leave the other groups' ranks waiting for it in the data-parallel setup */
    st = mgt_mpi_agree(grid->world, st);
    if (st == MGT_OK) st = nccl_over(grid->dp_comm, "data-parallel", &c->nccl[MGT_AXIS_DP]);
    if (st == MGT_OK && c->nccl[MGT_AXIS_DP]) st = side_create(c);
    if (grid->ep > 1) { /* expert parallelism: its groups and the ranks holding the same experts */
      st = mgt_mpi_agree(grid->world, st);
      if (st == MGT_OK) st = nccl_over(grid->ep_comm, "expert-parallel", &c->nccl[MGT_AXIS_EP]);
      st = mgt_mpi_agree(grid->world, st);
      if (st == MGT_OK)
        st = nccl_over(grid->edp_comm, "expert-data-parallel", &c->nccl[MGT_AXIS_EDP]);
    }
  }
#endif
  comm->name = "cuda";
  comm->grid = grid;
  comm->ctx = c;
  comm->wait = cu_wait;
  comm->test = cu_test;
  comm->destroy = cu_destroy;
#define MGT_COMM_PREFIXED(name) cu_##name
  MGT_COMM_OPERATIONS(MGT_COMM_FILL_SLOT)
#undef MGT_COMM_PREFIXED
  if (mode) *mode = c->mode;
  if (st != MGT_OK) {
    mgt_comm_destroy(&comm);
    return st;
  }
  *out = comm;
  return MGT_OK;
}
