/* The communication interface over MPI on host buffers. */
#include "mgt/comm_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/log.h"

void mgt_comm_stats_add(mgt_comm_stats *st, mgt_axis axis, double t0, size_t bytes) {
  if (!st) return;
  st->seconds[axis] += mgt_now() - t0;
  st->calls[axis]++;
  st->bytes[axis] += bytes;
}

static void account(void *ctx, mgt_axis axis, double t0, size_t bytes) {
  mgt_comm_stats_add(ctx, axis, t0, bytes);
}

MPI_Comm mgt_grid_axis_comm(const mgt_grid *g, mgt_axis axis, int *size) {
  switch (axis) {
  case MGT_AXIS_TP: *size = g->tp; return g->tp_comm;
  case MGT_AXIS_DP: *size = g->dp; return g->dp_comm;
  case MGT_AXIS_EP: *size = g->ep; return g->ep > 1 ? g->ep_comm : MPI_COMM_SELF;
  case MGT_AXIS_EDP: *size = g->edp; return g->ep > 1 ? g->edp_comm : g->dp_comm;
  default: *size = g->size; return g->world;
  }
}

static MPI_Op mpi_op(mgt_redop op) { return op == MGT_MAX ? MPI_MAX : MPI_SUM; }

static mgt_status mpi_allreduce(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf, size_t n,
                                mgt_redop op) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1 || n == 0) return MGT_OK;
  MGT_REQUIRE(n <= INT_MAX, "all-reduce of %zu floats exceeds MPI's count limit", n);
  double t0 = mgt_now();
  MGT_MPI_WATCHED("all-reduce", axis,
                  MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mpi_op(op), c));
  account(ctx, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status mpi_allreduce_f64(void *ctx, const mgt_grid *g, mgt_axis axis, double *buf,
                                    size_t n, mgt_redop op) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1 || n == 0) return MGT_OK;
  MGT_REQUIRE(n <= INT_MAX, "all-reduce of %zu doubles exceeds MPI's count limit", n);
  double t0 = mgt_now();
  MGT_MPI_WATCHED("all-reduce", axis,
                  MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, mpi_op(op), c));
  account(ctx, axis, t0, n * sizeof(double));
  return MGT_OK;
}

static mgt_status mpi_allreduce_maxloc(void *ctx, const mgt_grid *g, mgt_axis axis, float *val,
                                       int32_t *idx, size_t n) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1 || n == 0) return MGT_OK;
  MGT_REQUIRE(n <= INT_MAX, "all-reduce of %zu pairs exceeds MPI's count limit", n);
  struct pair {
    float v;
    int i;
  } *p = malloc(n * sizeof *p);
  if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for %zu (value, index) pairs", n);
  for (size_t k = 0; k < n; k++)
    p[k].v = val[k], p[k].i = idx[k];
  double t0 = mgt_now();
  mgt_watch_begin("all-reduce", axis);
  int rc = MPI_Allreduce(MPI_IN_PLACE, p, (int)n, MPI_FLOAT_INT, MPI_MAXLOC, c);
  mgt_watch_end();
  account(ctx, axis, t0, n * sizeof *p);
  for (size_t k = 0; k < n; k++)
    val[k] = p[k].v, idx[k] = p[k].i;
  free(p);
  MGT_MPI(rc);
  return MGT_OK;
}

static mgt_status mpi_iallreduce(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf, size_t n,
                                 mgt_redop op, mgt_comm_req *req) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  req->mpi = MPI_REQUEST_NULL;
  req->axis = axis;
  req->event = NULL;
  if (size == 1 || n == 0) return MGT_OK;
  MGT_REQUIRE(n <= INT_MAX, "all-reduce of %zu floats exceeds MPI's count limit", n);
  double t0 = mgt_now();
  MGT_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mpi_op(op), c, &req->mpi));
  account(ctx, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status mpi_wait(void *ctx, mgt_comm_req *req) {
  if (req->mpi == MPI_REQUEST_NULL) return MGT_OK;
  double t0 = mgt_now();
  MGT_MPI_WATCHED("a non-blocking collective's wait", req->axis,
                  MPI_Wait(&req->mpi, MPI_STATUS_IGNORE));
  account(ctx, req->axis, t0, 0);
  return MGT_OK;
}

static mgt_status mpi_test(void *ctx, mgt_comm_req *req, int *done) {
  *done = 1;
  if (req->mpi == MPI_REQUEST_NULL) return MGT_OK;
  double t0 = mgt_now();
  MGT_MPI(MPI_Test(&req->mpi, done, MPI_STATUS_IGNORE));
  account(ctx, req->axis, t0, 0);
  return MGT_OK;
}

static mgt_status mpi_allgather(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                                float *out, size_t n) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  MGT_REQUIRE(n <= INT_MAX, "all-gather of %zu floats exceeds MPI's count limit", n);
  MGT_MPI_WATCHED("all-gather", axis,
                  MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, c));
  return MGT_OK;
}

static mgt_status mpi_broadcast(void *ctx, const mgt_grid *g, mgt_axis axis, void *buf,
                                size_t bytes, int root) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1) return MGT_OK;
  MGT_REQUIRE(bytes <= INT_MAX, "broadcast of %zu bytes exceeds MPI's count limit", bytes);
  MGT_MPI_WATCHED("broadcast", axis, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c));
  return MGT_OK;
}

static mgt_status mpi_reduce_scatter(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                                     float *out, const int *counts, mgt_comm_req *req) {
  int size, rank;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  MGT_MPI(MPI_Comm_rank(c, &rank));
  if (req) req->mpi = MPI_REQUEST_NULL, req->axis = axis, req->event = NULL;
  if (size == 1) {
    if (counts[0] > 0 && out != in) memcpy(out, in, sizeof(float) * (size_t)counts[0]);
    return MGT_OK;
  }
  size_t n = 0;
  for (int q = 0; q < size; q++)
    n += (size_t)counts[q];
  double t0 = mgt_now();
  /* the non-blocking collective either way: Open MPI sums MPI_Reduce_scatter in another order
     than MPI_Ireduce_scatter (from 3 ranks), and --overlap-grad-reduce must not change a bit */
  MPI_Request own = MPI_REQUEST_NULL;
  MGT_MPI(MPI_Ireduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, c, req ? &req->mpi : &own));
  if (!req) MGT_MPI_WATCHED("reduce-scatter", axis, MPI_Wait(&own, MPI_STATUS_IGNORE));
  account(ctx, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status mpi_allgatherv(void *ctx, const mgt_grid *g, mgt_axis axis, float *buf,
                                 const int *counts, const int *displs, mgt_comm_req *req) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (req) req->mpi = MPI_REQUEST_NULL, req->axis = axis, req->event = NULL;
  if (size == 1) return MGT_OK;
  size_t n = 0;
  for (int q = 0; q < size; q++)
    n += (size_t)counts[q];
  double t0 = mgt_now();
  if (req)
    MGT_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, c,
                            &req->mpi));
  else
    MGT_MPI_WATCHED(
        "all-gather", axis,
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, c));
  account(ctx, axis, t0, n * sizeof(float));
  return MGT_OK;
}

static mgt_status mpi_exchange_counts(void *ctx, const mgt_grid *g, mgt_axis axis, const int *send,
                                      int *recv) {
  (void)ctx;
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  if (size == 1) {
    recv[0] = send[0];
    return MGT_OK;
  }
  MGT_MPI_WATCHED("all-to-all", axis, MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, c));
  return MGT_OK;
}

/* The displacements of counts (its prefix sums) into displs (size ints), and their total. */
static size_t displacements(const int *counts, int size, int *displs) {
  size_t at = 0;
  for (int q = 0; q < size; q++)
    displs[q] = (int)at, at += (size_t)counts[q];
  return at;
}

static mgt_status mpi_alltoallv(void *ctx, const mgt_grid *g, mgt_axis axis, const float *in,
                                const int *send_counts, float *out, const int *recv_counts) {
  int size;
  MPI_Comm c = mgt_grid_axis_comm(g, axis, &size);
  int *sd = malloc(sizeof(int) * 2 * (size_t)size);
  if (!sd) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for an all-to-all of %d ranks", size);
  int *rd = sd + size;
  const size_t ns = displacements(send_counts, size, sd), nr = displacements(recv_counts, size, rd);
  mgt_status st = MGT_OK;
  if (ns > INT_MAX || nr > INT_MAX) {
    st = MGT_ERROR(MGT_ERR_INPUT, "all-to-all of %zu floats exceeds MPI's count limit",
                   ns > nr ? ns : nr);
  } else if (size == 1) {
    if (send_counts[0] != recv_counts[0])
      st = MGT_ERROR(MGT_ERR_INTERNAL, "all-to-all with oneself: %d floats sent, %d received",
                     send_counts[0], recv_counts[0]);
    else if (ns)
      memcpy(out, in, ns * sizeof(float));
  } else {
    const double t0 = mgt_now();
    mgt_watch_begin("all-to-all", axis);
    const int err =
        MPI_Alltoallv(in, send_counts, sd, MPI_FLOAT, out, recv_counts, rd, MPI_FLOAT, c);
    mgt_watch_end();
    st = mgt_mpi_status(err, __FILE__, __LINE__, __func__, "MPI_Alltoallv");
    account(ctx, axis, t0, (ns + nr) * sizeof(float));
  }
  free(sd);
  return st;
}

void mgt_comm_mpi_init(mgt_comm *comm, const mgt_grid *grid, mgt_comm_stats *stats) {
  memset(comm, 0, sizeof *comm);
  comm->name = "mpi";
  comm->grid = grid;
  comm->ctx = stats;
  comm->wait = mpi_wait;
  comm->test = mpi_test;
#define MGT_COMM_PREFIXED(name) mpi_##name
  MGT_COMM_OPERATIONS(MGT_COMM_FILL_SLOT)
#undef MGT_COMM_PREFIXED
}
