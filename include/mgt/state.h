/* Sharded state: how the model and the optimizer describe what they hold, tensor by tensor,
   and the one thing io/ saves, loads, verifies and exports. Adding a model or a kind of state
   is adding entries to such a list; the checkpoint format does not change. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/backend.h"
#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mgt_dtype { MGT_DTYPE_F32 = 0 } mgt_dtype;

enum { MGT_STATE_NAME = 128 };

/* Which copy a rank's slab belongs to. The slabs of one copy partition the logical tensor. */
enum {
  MGT_REPLICA_DUPLICATE = -1, /* the same values as another slab of its copy (a replicated
                                 tensor on tensor-parallel rank > 0): read, never written */
  MGT_REPLICA_PRIMARY = 0,    /* the copy that is saved; every copy is checked on load */
};

/* One tensor of the state and this rank's slab of it. */
typedef struct mgt_state_tensor {
  char name[MGT_STATE_NAME]; /* its path in a checkpoint, "model/layers.0.attention.qkv.weight" */
  mgt_dtype dtype;
  mgt_shard shard; /* logical (unpadded) shape, local slab shape, split dimension and start */
  int replica;     /* MGT_REPLICA_*, or k > 0 for the k-th other copy (a data-parallel replica) */
  void *data;      /* the slab, row-major in shard.shape; NULL when only described */
  const mgt_backend *mem; /* whose memory data is in; NULL for host memory */
  /* Part of the slab only (a distributed optimizer's shard, cut at any element): when ranged,
     data holds elements [first, first + count) of the slab's row-major order (padding
     included); count may be 0. The parts of one copy's slabs, over the ranks, partition it. */
  int ranged;
  int64_t first, count;
} mgt_state_tensor;

/* A list of tensors. Every rank of a job lists the same names with the same logical shapes in
   the same order; only slabs, replicas and data differ. */
typedef struct mgt_state {
  mgt_state_tensor *t;
  int n, cap;
} mgt_state;

/* Appends a copy of *t. */
MGT_NODISCARD mgt_status mgt_state_add(mgt_state *s, const mgt_state_tensor *t);
/* Frees the list (not the tensors' data) and empties it. */
void mgt_state_fini(mgt_state *s);
/* The entry called `name`, or NULL (a linear search: for many lookups, an index). */
const mgt_state_tensor *mgt_state_find(const mgt_state *s, const char *name);

/* Names of a list in a hash table, for lookups in constant time (a model of 100,000 layers
   lists over a million tensors). The list must not change while the index is used. */
typedef struct mgt_state_index {
  const mgt_state *s;
  int *slot; /* 1 + entry, 0: empty */
  size_t mask;
} mgt_state_index;

MGT_NODISCARD mgt_status mgt_state_index_init(mgt_state_index *ix, const mgt_state *s);
/* The entry called `name`, or -1. With duplicate names, the first. */
int mgt_state_index_find(const mgt_state_index *ix, const char *name);
void mgt_state_index_fini(mgt_state_index *ix);
/* Elements data holds (the local slab, padding included, or its range), and of the logical
   tensor. */
size_t mgt_state_local_numel(const mgt_state_tensor *t);
int64_t mgt_state_numel(const mgt_state_tensor *t);
/* A whole logical tensor in host memory on one process (local = logical, primary copy), for
   tools that read or write named tensors without a model. data stays NULL. */
void mgt_state_whole(const mgt_state_tensor *described, mgt_state_tensor *out);
/* Bytes of one element of a dtype. */
size_t mgt_dtype_size(mgt_dtype t);

#ifdef __cplusplus
}
#endif
