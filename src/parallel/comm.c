/* The checked wrappers of the communicator's table (include/mgt/comm.h), made from the list of
   collectives: the one place that calls through its function pointers. */
#include <stdlib.h>

#include "mgt/comm_impl.h"

static mgt_status lacks(const mgt_comm *c, const char *op) {
  MGT_FAIL(MGT_ERR_INTERNAL, "communicator %s lacks operation %s", c->name, op);
}

#define WRAPPER(name, NAME, params, args)                                                          \
  mgt_status mgt_comm_##name(const mgt_comm *c, mgt_axis axis, MGT_COMM_UNPACK params) {           \
    if (!c->name) return lacks(c, #name);                                                          \
    return c->name(c->ctx, c->grid, axis, MGT_COMM_UNPACK args);                                   \
  }
MGT_COMM_OPERATIONS(WRAPPER)
#undef WRAPPER

mgt_status mgt_comm_wait(const mgt_comm *c, mgt_comm_req *req) {
  if (!c->wait) return lacks(c, "wait");
  return c->wait(c->ctx, req);
}

mgt_status mgt_comm_test(const mgt_comm *c, mgt_comm_req *req, int *done) {
  if (!c->test) return lacks(c, "test");
  return c->test(c->ctx, req, done);
}

int mgt_comm_has(const mgt_comm *c, mgt_comm_op op) {
  switch (op) {
#define HAS(name, NAME, params, args)                                                              \
  case MGT_COMM_##NAME: return c->name != NULL;
    MGT_COMM_OPERATIONS(HAS)
#undef HAS
  default: return 0;
  }
}

const char *mgt_comm_op_name(mgt_comm_op op) {
  static const char *const names[] = {
#define NAME_OF(name, NAME, params, args) #name,
      MGT_COMM_OPERATIONS(NAME_OF)
#undef NAME_OF
  };
  return (unsigned)op < MGT_COMM_N_OPS ? names[op] : NULL;
}

const char *mgt_comm_name(const mgt_comm *c) { return c->name; }
const mgt_grid *mgt_comm_grid(const mgt_comm *c) { return c->grid; }

mgt_status mgt_comm_mpi_create(const mgt_grid *grid, mgt_comm_stats *stats, mgt_comm **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for a communicator");
  mgt_comm_mpi_init(*out, grid, stats);
  return MGT_OK;
}

void mgt_comm_destroy(mgt_comm **pc) {
  mgt_comm *c = *pc;
  if (!c) return;
  if (c->destroy) c->destroy(c->ctx);
  free(c);
  *pc = NULL;
}
