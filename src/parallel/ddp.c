/* Data parallelism over flat buffers: see src/mgt/ddp.h. */
#include "mgt/ddp.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

struct mgt_ddp {
  const mgt_grid *grid;
  const mgt_comm *comm;
  const mgt_backend *be;
  mgt_ddp_opts o;
  float *w, *g;
  size_t n;
  int n_buckets;
  size_t *lo, *hi;   /* each bucket's range */
  int *bucket_first; /* n_buckets + 1 indices into the pieces */
  size_t *piece_off, *piece_n;
  char *piece_expert; /* summed over the expert-data-parallel axis */
  mgt_comm_req *reqs;
  int n_pieces, n_started, n_done;
  /* distributed: the rest's elements, numbered in order, are cut in dp even parts, data-parallel
     rank q owning the q-th; the experts' alike in edp parts over the expert-data-parallel ranks.
     This rank's elements are the spans, packed in that order into gshard (g itself when it owns
     everything); a piece's reduce-scatter over its axis gives each rank its part (piece_counts,
     an axis's size per piece), at piece_out[p] of gshard. */
  mgt_span *spans;
  int n_spans;
  size_t owned;
  size_t *piece_out;
  int *piece_counts, *piece_displs;
  float *gshard;
  mgt_span whole;      /* the one span without `distributed` */
  mgt_comm_req *greqs; /* overlap_param_gather: each bucket's all-gathers in flight ... */
  char *gathering;     /* ... until the forward needs the bucket (gathering[b]) */
  char *stale;         /* weight_copies: bucket b's copies are to be remade before a read */
};

/* The end of the run of elements from o within [o, hi) that are all experts or all not (*expert
   says which). */
static size_t run_end(const mgt_ddp *d, size_t o, size_t hi, int *expert) {
  *expert = 0;
  size_t end = hi;
  for (int i = 0; i < d->o.n_expert; i++) {
    const size_t a = d->o.expert_lo[i], b = d->o.expert_hi[i];
    if (o >= a && o < b) {
      *expert = 1;
      return b < hi ? b : hi;
    }
    if (a > o && a < end) end = a;
  }
  return end;
}

static mgt_status plan_pieces(mgt_ddp *d) {
  const size_t cap = d->o.bucket_size;
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)(d->n_buckets + 1), "bucket index",
                       (void **)&d->bucket_first));
  for (int pass = 0; pass < 2; pass++) {
    int np = 0;
    for (int b = 0; b < d->n_buckets; b++) {
      if (pass) d->bucket_first[b] = np;
      for (size_t o = d->lo[b]; o < d->hi[b];) { /* runs of experts or not, cut at cap */
        int expert;
        const size_t end = run_end(d, o, d->hi[b], &expert);
        for (; o < end; o += cap, np++)
          if (pass) {
            d->piece_off[np] = o;
            d->piece_n[np] = end - o < cap ? end - o : cap;
            d->piece_expert[np] = (char)expert;
          }
        o = end;
      }
    }
    if (!pass) {
      d->n_pieces = np;
      MGT_CHECK(mgt_calloc(sizeof(size_t) * (size_t)np, "bucket pieces", (void **)&d->piece_off));
      MGT_CHECK(mgt_calloc(sizeof(size_t) * (size_t)np, "bucket pieces", (void **)&d->piece_n));
      MGT_CHECK(mgt_calloc((size_t)np + 1, "bucket pieces", (void **)&d->piece_expert));
      MGT_CHECK(
          mgt_calloc(sizeof(mgt_comm_req) * (size_t)np, "bucket requests", (void **)&d->reqs));
    } else {
      d->bucket_first[d->n_buckets] = np;
    }
  }
  return MGT_OK;
}

/* The expert elements before flat offset o. */
static size_t experts_before(const mgt_ddp *d, size_t o) {
  size_t k = 0;
  for (int i = 0; i < d->o.n_expert; i++)
    if (d->o.expert_lo[i] < o)
      k += (d->o.expert_hi[i] < o ? d->o.expert_hi[i] : o) - d->o.expert_lo[i];
  return k;
}

/* Of [o, o + n), all experts or all not, the part that member q of its axis owns: [*a, *b). */
static void owned_part(const mgt_ddp *d, size_t o, size_t n, int expert, int q, size_t *a,
                       size_t *b) {
  const size_t nx = experts_before(d, d->n), total = expert ? nx : d->n - nx,
               members = (size_t)(expert ? d->grid->edp : d->grid->dp),
               i0 = expert ? experts_before(d, o) : o - experts_before(d, o);
  const size_t c0 = (size_t)((uint64_t)total * (uint64_t)q / members),
               c1 = (size_t)((uint64_t)total * (uint64_t)(q + 1) / members);
  const size_t lo = i0 > c0 ? i0 : c0, hi = i0 + n < c1 ? i0 + n : c1;
  *a = o + (hi > lo ? lo - i0 : 0), *b = o + (hi > lo ? hi - i0 : 0);
}

static int member(const mgt_ddp *d, int expert) {
  return expert ? d->grid->edp_rank : d->grid->dp_rank;
}

/* This rank's spans, in the order of the buffers, and each piece's parts over its axis. */
static mgt_status plan_shards(mgt_ddp *d) {
  const int dp = d->grid->dp;
  for (int pass = 0; pass < 2; pass++) {
    int nr = 0;
    size_t owned = 0;
    for (size_t o = 0; o < d->n;) {
      int expert;
      const size_t end = run_end(d, o, d->n, &expert);
      size_t a, b;
      owned_part(d, o, end - o, expert, member(d, expert), &a, &b);
      if (pass && b > a && nr && d->spans[nr - 1].at + d->spans[nr - 1].n == a)
        d->spans[nr - 1].n += b - a; /* merged: pass 0 counted at most this many */
      else if (b > a && pass)
        d->spans[nr++] = (mgt_span){a, b - a, owned};
      else if (b > a)
        nr++;
      owned += b - a, o = end;
    }
    if (!pass) {
      MGT_CHECK(mgt_calloc(sizeof(mgt_span) * (size_t)(nr ? nr : 1), "optimizer shards",
                           (void **)&d->spans));
    } else {
      d->n_spans = nr, d->owned = owned;
    }
  }
  if (d->n_spans == 1 && d->owned == d->n) {
    d->gshard = d->g; /* nothing to reduce: the shard is everything */
    return MGT_OK;
  }
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)d->n_pieces * (size_t)dp, "shard counts",
                       (void **)&d->piece_counts));
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)d->n_pieces * (size_t)dp, "shard offsets",
                       (void **)&d->piece_displs));
  MGT_CHECK(
      mgt_calloc(sizeof(size_t) * (size_t)d->n_pieces, "shard places", (void **)&d->piece_out));
  MGT_CHECK(mgt_calloc(sizeof(mgt_comm_req) * (size_t)d->n_pieces, "gather requests",
                       (void **)&d->greqs));
  MGT_CHECK(mgt_calloc((size_t)d->n_buckets, "gather flags", (void **)&d->gathering));
  for (int p = 0; p < d->n_pieces; p++) {
    const size_t o = d->piece_off[p], n = d->piece_n[p];
    const int e = d->piece_expert[p], members = e ? d->grid->edp : dp;
    MGT_REQUIRE(n <= INT_MAX, "--ddp-bucket-size: pieces above 2^31 elements");
    for (int q = 0; q < members; q++) {
      size_t a, b;
      owned_part(d, o, n, e, q, &a, &b);
      d->piece_counts[(size_t)p * dp + q] = (int)(b - a);
      d->piece_displs[(size_t)p * dp + q] = b > a ? (int)(a - o) : (int)n;
      if (q != member(d, e) || b == a) continue;
      int r = 0; /* the span that holds it */
      while (r + 1 < d->n_spans && d->spans[r + 1].at <= a)
        r++;
      d->piece_out[p] = d->spans[r].to + (a - d->spans[r].at);
    }
  }
  return mgt_be_alloc(d->be, sizeof(float) * (d->owned ? d->owned : 1), "gradient shard",
                      (void **)&d->gshard);
}

mgt_status mgt_ddp_create(const mgt_grid *grid, const mgt_comm *comm, const mgt_backend *be,
                          float *w, float *g, size_t n, int n_buckets, const size_t *lo,
                          const size_t *hi, const mgt_ddp_opts *o, mgt_ddp **out) {
  *out = NULL;
  MGT_REQUIRE(o->bucket_size > 0, "--ddp-bucket-size must be positive");
  MGT_REQUIRE(n_buckets > 0, "no gradient buckets");
  for (int b = 0; b < n_buckets; b++)
    MGT_REQUIRE(lo[b] <= hi[b] && hi[b] <= n, "bucket %d [%zu, %zu) is outside the %zu elements", b,
                lo[b], hi[b], n);
  mgt_ddp *d = NULL;
  MGT_CHECK(mgt_calloc(sizeof *d, "data parallelism", (void **)&d));
  mgt_status st = MGT_OK;
  d->grid = grid, d->comm = comm, d->be = be, d->o = *o;
  if (o->n_expert) { /* kept: the caller's ranges are borrowed for the call only */
    size_t *r = NULL;
    MGT_TRY(mgt_calloc(sizeof(size_t) * 2 * (size_t)o->n_expert, "expert ranges", (void **)&r));
    memcpy(r, o->expert_lo, sizeof(size_t) * (size_t)o->n_expert);
    memcpy(r + o->n_expert, o->expert_hi, sizeof(size_t) * (size_t)o->n_expert);
    d->o.expert_lo = r, d->o.expert_hi = r + o->n_expert;
  }
  d->w = w, d->g = g, d->n = n, d->n_buckets = n_buckets;
  MGT_TRY(mgt_calloc(sizeof(size_t) * (size_t)n_buckets, "buckets", (void **)&d->lo));
  MGT_TRY(mgt_calloc(sizeof(size_t) * (size_t)n_buckets, "buckets", (void **)&d->hi));
  memcpy(d->lo, lo, sizeof(size_t) * (size_t)n_buckets);
  memcpy(d->hi, hi, sizeof(size_t) * (size_t)n_buckets);
  MGT_TRY(plan_pieces(d));
  if (o->distributed) MGT_TRY(plan_shards(d));
  if (o->weight_copies)
    MGT_TRY(mgt_calloc((size_t)n_buckets, "weight copy flags", (void **)&d->stale));
  *out = d;
  return MGT_OK;
done:
  mgt_ddp_destroy(&d);
  return st;
}

void mgt_ddp_destroy(mgt_ddp **ptr) {
  mgt_ddp *d = *ptr;
  if (!d) return;
  (void)!mgt_ddp_params_ready(d, -1);            /* no all-gather left writing into freed memory */
  for (int p = d->n_done; p < d->n_started; p++) /* nor a gradient reduction (a failed step) */
    (void)!mgt_comm_wait(d->comm, &d->reqs[p]);
  if (d->gshard && d->gshard != d->g) {
    (void)!mgt_be_sync(d->be);
    mgt_be_free(d->be, d->gshard);
  }
  mgt_free(d->lo);
  mgt_free(d->hi);
  mgt_free(d->bucket_first);
  mgt_free(d->piece_off);
  mgt_free(d->piece_n);
  mgt_free(d->piece_expert);
  mgt_free((void *)d->o.expert_lo);
  mgt_free(d->reqs);
  mgt_free(d->spans);
  mgt_free(d->piece_out);
  mgt_free(d->piece_counts);
  mgt_free(d->piece_displs);
  mgt_free(d->greqs);
  mgt_free(d->gathering);
  mgt_free(d->stale);
  mgt_free(d);
  *ptr = NULL;
}

mgt_status mgt_ddp_params_ready(mgt_ddp *d, int b) {
  if (!d->gathering) return MGT_OK;
  for (int k = 0; k < d->n_buckets; k++) {
    if (!d->gathering[k] || (b >= 0 && k != b)) continue;
    for (int p = d->bucket_first[k]; p < d->bucket_first[k + 1]; p++)
      MGT_CHECK(mgt_comm_wait(d->comm, &d->greqs[p]));
    d->gathering[k] = 0;
  }
  for (int k = 0; b >= 0 && k < d->n_buckets; k++)
    if (d->gathering[k]) {
      int done = 0;
      MGT_CHECK(mgt_comm_test(d->comm, &d->greqs[d->bucket_first[k]], &done));
    }
  return MGT_OK;
}

void mgt_ddp_weights_changed(mgt_ddp *d) {
  if (d->stale) memset(d->stale, 1, (size_t)d->n_buckets);
}

void mgt_ddp_copies_fresh(mgt_ddp *d) {
  if (d->stale) memset(d->stale, 0, (size_t)d->n_buckets);
}

mgt_status mgt_ddp_weights_ready(mgt_ddp *d, int b) {
  MGT_CHECK(mgt_ddp_params_ready(d, b));
  for (int k = 0; d->stale && k < d->n_buckets; k++) {
    if (!d->stale[k] || (b >= 0 && k != b)) continue;
    MGT_CHECK(mgt_be_refresh_weights(d->be, d->lo[k], d->hi[k] - d->lo[k]));
    d->stale[k] = 0;
  }
  return MGT_OK;
}

void mgt_ddp_begin(mgt_ddp *d) { d->n_started = d->n_done = 0; }

mgt_status mgt_ddp_start_bucket(mgt_ddp *d, int b) {
  const int overlap = d->o.overlap_grad_reduce;
  for (int p = d->bucket_first[b]; p < d->bucket_first[b + 1]; p++, d->n_started++) {
    float *buf = d->g + d->piece_off[p];
    const mgt_axis axis = d->piece_expert[p] ? MGT_AXIS_EDP : MGT_AXIS_DP;
    if (d->piece_counts) { /* distributed optimizer: only the owned part is summed here */
      MGT_CHECK(mgt_comm_reduce_scatter(d->comm, axis, buf, d->gshard + d->piece_out[p],
                                        d->piece_counts + (size_t)p * d->grid->dp,
                                        overlap ? &d->reqs[p] : NULL));
      continue;
    }
    if (overlap)
      MGT_CHECK(mgt_comm_iallreduce(d->comm, axis, buf, d->piece_n[p], MGT_SUM, &d->reqs[p]));
    else
      MGT_CHECK(mgt_comm_allreduce(d->comm, axis, buf, d->piece_n[p], MGT_SUM));
  }
  if (!overlap) d->n_done = d->n_started;
  return MGT_OK;
}

mgt_status mgt_ddp_progress(mgt_ddp *d) {
  while (d->n_done < d->n_started) {
    int done = 0;
    MGT_CHECK(mgt_comm_test(d->comm, &d->reqs[d->n_done], &done));
    if (!done) break;
    d->n_done++;
  }
  return MGT_OK;
}

mgt_status mgt_ddp_finish(mgt_ddp *d) {
  for (; d->n_done < d->n_started; d->n_done++)
    MGT_CHECK(mgt_comm_wait(d->comm, &d->reqs[d->n_done]));
  return MGT_OK;
}

float *mgt_ddp_grad_shard(mgt_ddp *d, const mgt_span **spans, int *n_spans, size_t *n) {
  if (!d->spans) {
    d->whole = (mgt_span){0, d->n, 0};
    *spans = &d->whole, *n_spans = 1, *n = d->n;
    return d->g;
  }
  *spans = d->spans, *n_spans = d->n_spans, *n = d->owned;
  return d->gshard;
}

mgt_status mgt_ddp_gather_params(mgt_ddp *d) {
  if (!d->piece_counts) return MGT_OK;
  MGT_CHECK(mgt_ddp_params_ready(d, -1)); /* a second step before any forward */
  const int overlap = d->o.overlap_param_gather;
  for (int k = 0; k < d->n_buckets; k++) {
    const int b = d->n_buckets - 1 - k;
    for (int p = d->bucket_first[b]; p < d->bucket_first[b + 1]; p++)
      MGT_CHECK(mgt_comm_allgatherv(
          d->comm, d->piece_expert[p] ? MGT_AXIS_EDP : MGT_AXIS_DP, d->w + d->piece_off[p],
          d->piece_counts + (size_t)p * d->grid->dp, d->piece_displs + (size_t)p * d->grid->dp,
          overlap ? &d->greqs[p] : NULL));
    d->gathering[b] = (char)overlap;
  }
  mgt_ddp_weights_changed(d);
  return MGT_OK;
}
