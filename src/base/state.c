/* Lists of sharded tensors: see include/mgt/state.h. */
#include "mgt/state.h"

#include <stdlib.h>
#include <string.h>

mgt_status mgt_state_add(mgt_state *s, const mgt_state_tensor *t) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    mgt_state_tensor *p = realloc(s->t, sizeof *p * (size_t)cap);
    if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory listing the state tensors");
    s->t = p, s->cap = cap;
  }
  s->t[s->n++] = *t;
  return MGT_OK;
}

void mgt_state_fini(mgt_state *s) {
  free(s->t);
  memset(s, 0, sizeof *s);
}

const mgt_state_tensor *mgt_state_find(const mgt_state *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->t[i].name, name) == 0) return &s->t[i];
  return NULL;
}

static size_t name_hash(const char *k) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *k; k++)
    h = (h ^ (unsigned char)*k) * 1099511628211ull;
  return (size_t)(h ^ (h >> 29));
}

mgt_status mgt_state_index_init(mgt_state_index *ix, const mgt_state *s) {
  memset(ix, 0, sizeof *ix);
  size_t cap = 64;
  while (cap < 2 * (size_t)s->n)
    cap *= 2;
  ix->slot = calloc(cap, sizeof *ix->slot);
  if (!ix->slot) MGT_FAIL(MGT_ERR_NOMEM, "out of memory indexing %d tensor names", s->n);
  ix->s = s;
  ix->mask = cap - 1;
  for (int i = 0; i < s->n; i++) {
    size_t j = name_hash(s->t[i].name) & ix->mask;
    while (ix->slot[j] && strcmp(s->t[ix->slot[j] - 1].name, s->t[i].name) != 0)
      j = (j + 1) & ix->mask;
    if (!ix->slot[j]) ix->slot[j] = i + 1;
  }
  return MGT_OK;
}

int mgt_state_index_find(const mgt_state_index *ix, const char *name) {
  for (size_t j = name_hash(name) & ix->mask; ix->slot[j]; j = (j + 1) & ix->mask)
    if (strcmp(ix->s->t[ix->slot[j] - 1].name, name) == 0) return ix->slot[j] - 1;
  return -1;
}

void mgt_state_index_fini(mgt_state_index *ix) {
  free(ix->slot);
  memset(ix, 0, sizeof *ix);
}

size_t mgt_state_local_numel(const mgt_state_tensor *t) {
  if (t->ranged) return (size_t)t->count;
  size_t n = 1;
  for (int d = 0; d < t->shard.ndim; d++)
    n *= (size_t)t->shard.shape[d];
  return n;
}

int64_t mgt_state_numel(const mgt_state_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->shard.ndim; d++)
    n *= t->shard.full[d];
  return n;
}

void mgt_state_whole(const mgt_state_tensor *described, mgt_state_tensor *out) {
  *out = *described;
  for (int d = 0; d < out->shard.ndim; d++)
    out->shard.shape[d] = out->shard.full[d];
  out->shard.split_dim = -1;
  out->shard.offset = 0;
  out->replica = MGT_REPLICA_PRIMARY;
  out->data = NULL;
  out->mem = NULL;
  out->ranged = 0;
  out->first = out->count = 0;
}

size_t mgt_dtype_size(mgt_dtype t) {
  (void)t;
  return 4;
}
