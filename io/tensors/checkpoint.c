/* Checkpoints: see include/mgt/checkpoint.h and docs/checkpoint-format.md. The tensors come
   from a state list; nothing here knows which model or optimizer made it. */
#define _GNU_SOURCE
#include "mgt/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"
#include "h5util.h"
#include "mgt/log.h"
#include "mgt/progress.h"
#include "mgt/sha256.h"

/* Format 3 adds the model section (its spec, with a checksum); format 2 added checksums of the
   configuration and the trainer state; formats 1 and 2 are still read. */
static const char *const FORMAT = "megatron-c checkpoint 3";
static const char *const FORMAT_2 = "megatron-c checkpoint 2";
static const char *const FORMAT_1 = "megatron-c checkpoint 1";

/* Checksums of the root attributes: the configuration's JSON text, and the trainer state in a
   fixed order of 64-bit words (then the loss scale's text). */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = mgt_fmix64(h ^ ((uint64_t)b[i] + 0x100));
  return h;
}

static uint64_t config_hash(const char *json) {
  return hash_bytes(0x636f6e666967ull, json, strlen(json));
}

static uint64_t model_hash(const char *json) {
  return hash_bytes(0x6d6f64656cull, json, strlen(json));
}

static uint64_t state_hash(const mgt_ckpt_state *s) {
  const int64_t w[] = {s->iteration, (int64_t)s->consumed_samples, s->optimizer_steps,
                       (int64_t)s->seed, s->has_optimizer, s->tensor_model_parallel_size,
                       s->data_parallel_size, s->loss_scale > 0,
                       /* the scaler's counters are stored only with a loss scale */
                       s->loss_scale > 0 ? s->loss_scale_growth : 0,
                       s->loss_scale > 0 ? s->loss_scale_hysteresis : 0};
  uint64_t h = 0x7374617465ull;
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    h = mgt_fmix64(h ^ (uint64_t)w[i]) + i;
  if (s->consumed_valid_samples >= 0) /* stored only where recorded: older hashes stand */
    h = mgt_fmix64(h ^ (uint64_t)s->consumed_valid_samples ^ 0x76616c6964ull) + 17;
  if (s->lr_skipped_iterations > 0) /* the same */
    h = mgt_fmix64(h ^ (uint64_t)s->lr_skipped_iterations ^
                   mgt_fmix64((uint64_t)s->lr_skipped_samples ^ 0x736b6970ull)) +
        19;
  if (s->loss_scale > 0) {
    char ls[64];
    snprintf(ls, sizeof ls, "%.17g", s->loss_scale);
    h = hash_bytes(h, ls, strlen(ls));
  }
  return h;
}

uint64_t mgt_ckpt_hash(uint64_t index, float value) {
  uint32_t b;
  memcpy(&b, &value, sizeof b);
  return mgt_fmix64(mgt_fmix64(index + 1) ^ b);
}

/* The part of a logical tensor a slab holds (padding excluded). */
typedef struct region {
  int ndim;
  hsize_t full[3], start[3], count[3], local[3];
  size_t n;
} region;

static void region_of(const mgt_shard *s, region *r) {
  memset(r, 0, sizeof *r);
  r->ndim = s->ndim;
  r->n = 1;
  for (int d = 0; d < 3; d++) {
    int in = d < r->ndim;
    r->full[d] = in ? (hsize_t)s->full[d] : 1;
    r->local[d] = in ? (hsize_t)s->shape[d] : 1;
    r->start[d] = (in && d == s->split_dim) ? (hsize_t)s->offset : 0;
    if (in && d == 0 && s->split_dim != 0) r->start[d] = (hsize_t)s->lead;
    r->count[d] = r->local[d];
    if (r->start[d] + r->count[d] > r->full[d])
      r->count[d] = r->full[d] > r->start[d] ? r->full[d] - r->start[d] : 0;
    r->n *= r->count[d];
  }
}

/* Checksum of the region held in `local` (laid out in the slab's local shape). The sum is
   order-free, so rows are spread over threads and the inner loop vectorizes. */
static uint64_t region_sum(const region *r, const float *local) {
  /* the real dimensions right-aligned in three, so the last one is the contiguous one */
  hsize_t f[3] = {1, 1, 1}, st[3] = {0, 0, 0}, c[3] = {1, 1, 1}, l[3] = {1, 1, 1};
  for (int d = 0; d < r->ndim; d++) {
    int e = 3 - r->ndim + d;
    f[e] = r->full[d], st[e] = r->start[d], c[e] = r->count[d], l[e] = r->local[d];
  }
  uint64_t s = 0;
  const hsize_t rows = c[0] * c[1];
#pragma omp parallel for reduction(+ : s) schedule(static) if (rows * c[2] > 65536)
  for (hsize_t ij = 0; ij < rows; ij++) {
    hsize_t i = ij / c[1], j = ij % c[1];
    const uint32_t *row = (const uint32_t *)(local + (i * l[1] + j) * l[2]);
    uint64_t g = ((st[0] + i) * f[1] + st[1] + j) * f[2] + st[2];
    uint64_t acc = 0;
#pragma omp simd reduction(+ : acc)
    for (hsize_t k = 0; k < c[2]; k++)
      acc += mgt_fmix64(mgt_fmix64(g + k + 1) ^ row[k]);
    s += acc;
  }
  return s;
}

/* A rank's part of a tensor: its slab's region and, for a ranged entry, the element range of
   the slab it holds (state.h). */
typedef struct part {
  region r;
  int ranged;
  hsize_t first, count;
} part;

static void part_of(const mgt_state_tensor *t, part *p) {
  region_of(&t->shard, &p->r);
  p->ranged = t->ranged;
  p->first = t->ranged ? (hsize_t)t->first : 0;
  p->count = t->ranged ? (hsize_t)t->count : 0;
}

/* The dimensions right-aligned in three, so that the last one is the contiguous one. */
typedef struct dims3 {
  hsize_t f[3], st[3], c[3], l[3];
} dims3;

static void dims3_of(const region *r, dims3 *v) {
  for (int d = 0; d < 3; d++)
    v->f[d] = v->c[d] = v->l[d] = 1, v->st[d] = 0;
  for (int d = 0; d < r->ndim; d++) {
    int e = 3 - r->ndim + d;
    v->f[e] = r->full[d], v->st[e] = r->start[d], v->c[e] = r->count[d], v->l[e] = r->local[d];
  }
}

/* Plane i, rows [j0, j1), columns [k0, k1) of a slab (right-aligned, padding clipped); mem is
   the index in the part's data of element (i, j0, k0). */
typedef struct box {
  hsize_t i, j0, j1, k0, k1, mem;
} box;

static void add_box(const dims3 *v, hsize_t first, hsize_t i, hsize_t j0, hsize_t j1, hsize_t k0,
                    hsize_t k1, box *out, size_t *n) {
  const hsize_t mem = (i * v->l[1] + j0) * v->l[2] + k0 - first;
  if (j1 > v->c[1]) j1 = v->c[1];
  if (k1 > v->c[2]) k1 = v->c[2];
  if (i >= v->c[0] || j0 >= j1 || k0 >= k1) return; /* padding only */
  out[(*n)++] = (box){i, j0, j1, k0, k1, mem};
}

/* Most boxes a ranged part can need: per plane a partial row, whole rows, a partial row. */
static size_t max_boxes(const part *p) {
  dims3 v;
  dims3_of(&p->r, &v);
  return 3 * (size_t)v.l[0];
}

/* The boxes of elements [first, first + count) of the slab, in row-major order. */
static size_t part_boxes(const part *p, box *out) {
  dims3 v;
  dims3_of(&p->r, &v);
  const hsize_t P = v.l[1] * v.l[2], L = v.l[2], a = p->first, b = p->first + p->count;
  size_t n = 0;
  for (hsize_t i = a / P; p->count > 0 && i * P < b; i++) {
    const hsize_t pa = (a > i * P ? a : i * P) - i * P,
                  pb = (b < (i + 1) * P ? b : (i + 1) * P) - i * P;
    const hsize_t ja = pa / L, ka = pa % L, jb = (pb - 1) / L, kb = (pb - 1) % L + 1;
    if (ja == jb) {
      add_box(&v, a, i, ja, ja + 1, ka, kb, out, &n);
      continue;
    }
    hsize_t j = ja;
    if (ka > 0) add_box(&v, a, i, ja, ja + 1, ka, L, out, &n), j = ja + 1;
    const hsize_t jend = kb < L ? jb : jb + 1;
    if (jend > j) add_box(&v, a, i, j, jend, 0, L, out, &n);
    if (kb < L) add_box(&v, a, i, jb, jb + 1, 0, kb, out, &n);
  }
  return n;
}

/* Checksum of the elements a part holds, `data` laid out as the part holds them. */
static uint64_t part_sum(const part *p, const float *data);

/* Selects the part in the file space and creates the matching memory space in *mspace. */
static mgt_status select_part(hid_t fspace, hid_t *mspace, const part *p, int active,
                              const char *what);

static mgt_status select_region(hid_t fspace, hid_t mspace, const region *r, int active,
                                const char *what) {
  if (!active || r->n == 0) {
    MGT_H5(H5Sselect_none(fspace), what);
    MGT_H5(H5Sselect_none(mspace), what);
    return MGT_OK;
  }
  hsize_t zero[3] = {0, 0, 0};
  MGT_H5(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, r->start, NULL, r->count, NULL), what);
  MGT_H5(H5Sselect_hyperslab(mspace, H5S_SELECT_SET, zero, NULL, r->count, NULL), what);
  return MGT_OK;
}

static uint64_t part_sum(const part *p, const float *data) {
  if (!p->ranged) return region_sum(&p->r, data);
  box bx[3 * 64], *boxes = max_boxes(p) <= 3 * 64 ? bx : malloc(sizeof(box) * max_boxes(p));
  if (!boxes) return 0; /* cannot happen for this project's tensors (at most 3 planes) */
  const size_t nb = part_boxes(p, boxes);
  dims3 v;
  dims3_of(&p->r, &v);
  uint64_t s = 0;
  for (size_t q = 0; q < nb; q++) {
    const box *x = &boxes[q];
    for (hsize_t j = x->j0; j < x->j1; j++) {
      const uint32_t *row = (const uint32_t *)(data + x->mem + (j - x->j0) * v.l[2]);
      const uint64_t g = ((v.st[0] + x->i) * v.f[1] + v.st[1] + j) * v.f[2] + v.st[2] + x->k0;
      uint64_t acc = 0;
#pragma omp simd reduction(+ : acc)
      for (hsize_t k = 0; k < x->k1 - x->k0; k++)
        acc += mgt_fmix64(mgt_fmix64(g + k + 1) ^ row[k]);
      s += acc;
    }
  }
  if (boxes != bx) free(boxes);
  return s;
}

static mgt_status select_part(hid_t fspace, hid_t *mspace, const part *p, int active,
                              const char *what) {
  if (!p->ranged) {
    MGT_H5(*mspace = H5Screate_simple(p->r.ndim, p->r.local, NULL), what);
    return select_region(fspace, *mspace, &p->r, active, what);
  }
  const hsize_t mn = p->count > 0 ? p->count : 1;
  MGT_H5(*mspace = H5Screate_simple(1, &mn, NULL), what);
  box bx[3 * 64], *boxes = max_boxes(p) <= 3 * 64 ? bx : malloc(sizeof(box) * max_boxes(p));
  if (!boxes) MGT_FAIL(MGT_ERR_NOMEM, "%s: out of memory selecting a tensor part", what);
  const size_t nb = active ? part_boxes(p, boxes) : 0;
  mgt_status st = MGT_OK;
  if (nb == 0) {
    MGT_H5_TRY(H5Sselect_none(fspace), what);
    MGT_H5_TRY(H5Sselect_none(*mspace), what);
  }
  for (size_t q = 0; q < nb; q++) { /* both sides are visited in row-major order */
    const box *x = &boxes[q];
    const hsize_t b3[3] = {x->i, x->j0, x->k0}, c3[3] = {1, x->j1 - x->j0, x->k1 - x->k0};
    hsize_t start[3], count[3];
    for (int d = 0; d < p->r.ndim; d++) {
      const int e = 3 - p->r.ndim + d;
      start[d] = b3[e] + p->r.start[d], count[d] = c3[e];
    }
    const H5S_seloper_t op = q ? H5S_SELECT_OR : H5S_SELECT_SET;
    const hsize_t ms0 = x->mem, mstride = p->r.local[p->r.ndim - 1], mcount = x->j1 - x->j0,
                  mblock = x->k1 - x->k0;
    MGT_H5_TRY(H5Sselect_hyperslab(fspace, op, start, NULL, count, NULL), what);
    MGT_H5_TRY(H5Sselect_hyperslab(*mspace, op, &ms0, &mstride, &mcount, &mblock), what);
  }
done:
  if (boxes != bx) free(boxes);
  return st;
}

/* ---- the list ---- */

static size_t max_staging(const mgt_state *s) {
  size_t m = 0;
  for (int i = 0; i < s->n; i++)
    if (s->t[i].mem && mgt_state_local_numel(&s->t[i]) > m) m = mgt_state_local_numel(&s->t[i]);
  return m;
}

/* Every rank must list the same tensors: HDF5 creates datasets collectively, and copies are
   matched by position. A mismatch is a bug of the caller. Collective over world. */
static mgt_status check_same_list(MPI_Comm world, const mgt_state *s) {
  uint64_t h = mgt_fmix64((uint64_t)s->n + 1);
  for (int i = 0; i < s->n; i++) {
    const mgt_state_tensor *t = &s->t[i];
    for (const char *c = t->name; *c; c++)
      h = mgt_fmix64(h ^ (unsigned char)*c);
    h = mgt_fmix64(h ^ ((uint64_t)t->dtype << 8 | (uint64_t)t->shard.ndim));
    for (int d = 0; d < t->shard.ndim; d++)
      h = mgt_fmix64(h ^ (uint64_t)t->shard.full[d]);
  }
  uint64_t v[2] = {h, ~h};
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, world));
  if (v[0] != h || v[1] != ~h)
    MGT_FAIL(MGT_ERR_INTERNAL, "the ranks describe different checkpoint tensors");
  return MGT_OK;
}

/* This rank's slab on the host: the data itself when it is in host memory. */
static mgt_status slab_to_host(const mgt_state_tensor *t, float *staging, const float **out) {
  if (!t->mem) {
    *out = t->data;
    return MGT_OK;
  }
  MGT_CHECK(mgt_be_download(t->mem, staging, t->data, mgt_state_local_numel(t) * 4));
  *out = staging;
  return MGT_OK;
}

/* ---- saving ---- */

static mgt_status write_config_attr(hid_t file, const char *config, const char *model,
                                    const char *what) {
  MGT_CHECK(mgt_h5_write_str(file, "model", model, what));
  MGT_CHECK(mgt_h5_write_u64(file, "model_checksum", model_hash(model), what));
  MGT_CHECK(mgt_h5_write_str(file, "config", config, what));
  return mgt_h5_write_u64(file, "config_checksum", config_hash(config), what);
}

static mgt_status write_state_attrs(hid_t file, const mgt_ckpt_state *s, const char *what) {
  MGT_CHECK(mgt_h5_write_str(file, "format", FORMAT, what));
  MGT_CHECK(mgt_h5_write_i64(file, "iteration", s->iteration, what));
  MGT_CHECK(mgt_h5_write_i64(file, "consumed_samples", (int64_t)s->consumed_samples, what));
  MGT_CHECK(mgt_h5_write_i64(file, "optimizer_steps", s->optimizer_steps, what));
  MGT_CHECK(mgt_h5_write_i64(file, "seed", (int64_t)s->seed, what));
  if (s->loss_scale > 0) { /* a string keeps every bit of the double */
    char ls[64];
    snprintf(ls, sizeof ls, "%.17g", s->loss_scale);
    MGT_CHECK(mgt_h5_write_str(file, "loss_scale", ls, what));
    MGT_CHECK(mgt_h5_write_i64(file, "loss_scale_growth", s->loss_scale_growth, what));
    MGT_CHECK(mgt_h5_write_i64(file, "loss_scale_hysteresis", s->loss_scale_hysteresis, what));
  }
  MGT_CHECK(mgt_h5_write_i64(file, "has_optimizer", s->has_optimizer != 0, what));
  MGT_CHECK(
      mgt_h5_write_i64(file, "tensor_model_parallel_size", s->tensor_model_parallel_size, what));
  MGT_CHECK(mgt_h5_write_i64(file, "data_parallel_size", s->data_parallel_size, what));
  if (s->consumed_valid_samples >= 0)
    MGT_CHECK(mgt_h5_write_i64(file, "consumed_valid_samples", s->consumed_valid_samples, what));
  if (s->lr_skipped_iterations > 0) {
    MGT_CHECK(mgt_h5_write_i64(file, "lr_skipped_iterations", s->lr_skipped_iterations, what));
    MGT_CHECK(mgt_h5_write_i64(file, "lr_skipped_samples", s->lr_skipped_samples, what));
  }
  MGT_CHECK(mgt_h5_write_u64(file, "state_checksum", state_hash(s), what));
  return MGT_OK;
}

/* Creates every dataset of the list (collective, the same on every writer). */
static mgt_status create_datasets(hid_t file, hid_t lcpl, const mgt_state *s, const char *what) {
  for (int i = 0; i < s->n; i++) {
    region r;
    region_of(&s->t[i].shard, &r);
    mgt_status st = MGT_OK;
    hid_t space = -1, dcpl = -1, d = -1;
    MGT_H5_TRY(space = H5Screate_simple(r.ndim, r.full, NULL), what);
    MGT_H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), what);
    MGT_H5_TRY(H5Pset_layout(dcpl, H5D_CONTIGUOUS), what);
    MGT_H5_TRY(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), what); /* sizes the file now */
    MGT_H5_TRY(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), what);   /* every byte is written */
    MGT_H5_TRY(d = H5Dcreate2(file, s->t[i].name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT),
               what);
  done:
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    MGT_CHECK(st);
  }
  return MGT_OK;
}

/* The bytes of tensor i: a save or load in list order adds them up as its progress. */
static double bytes_of(const mgt_state *s, int i) {
  return (double)mgt_state_numel(&s->t[i]) * mgt_dtype_size(s->t[i].dtype);
}

static double bytes_all(const mgt_state *s) {
  double b = 0;
  for (int i = 0; i < s->n; i++)
    b += bytes_of(s, i);
  return b;
}

/* Writes this rank's primary slabs (collective writes) and sums their checksums into sums;
   progress on prog (NULL: none). */
static mgt_status write_slabs(hid_t file, hid_t dxpl, const mgt_state *s, float *staging,
                              uint64_t *sums, const char *what, FILE *prog) {
  mgt_progress pr;
  mgt_progress_start(&pr, prog, "checkpoint save", bytes_all(s), "GB", 1e-9, 0);
  double so_far = 0;
  for (int i = 0; i < s->n; so_far += bytes_of(s, i), i++) {
    mgt_progress_update(&pr, so_far, NULL);
    const mgt_state_tensor *t = &s->t[i];
    part pt;
    part_of(t, &pt);
    const int active = t->replica == MGT_REPLICA_PRIMARY;
    const float *host = NULL;
    mgt_status st = MGT_OK;
    hid_t d = -1, fs = -1, ms = -1;
    if (active) {
      MGT_CHECK(slab_to_host(t, staging, &host));
      sums[i] = part_sum(&pt, host);
    }
    MGT_H5_TRY(d = H5Dopen2(file, t->name, H5P_DEFAULT), what);
    MGT_H5_TRY(fs = H5Dget_space(d), what);
    MGT_TRY(select_part(fs, &ms, &pt, active, what));
    MGT_H5_TRY(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, host ? host : staging), what);
  done:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    MGT_CHECK(st);
  }
  mgt_progress_end(&pr, pr.total, NULL);
  return MGT_OK;
}

/* The checksums, the trainer state and the configuration; the completion mark last. */
static mgt_status write_attrs(hid_t file, const mgt_state *s, const uint64_t *sums,
                              const char *config, const char *model, const mgt_ckpt_state *state,
                              const char *what) {
  for (int i = 0; i < s->n; i++) {
    mgt_status st = MGT_OK;
    hid_t d = -1, sp = -1, a = -1;
    MGT_H5_TRY(d = H5Dopen2(file, s->t[i].name, H5P_DEFAULT), what);
    MGT_H5_TRY(sp = H5Screate(H5S_SCALAR), what);
    MGT_H5_TRY(a = H5Acreate2(d, "checksum", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT), what);
    MGT_H5_TRY(H5Awrite(a, H5T_NATIVE_UINT64, &sums[i]), what);
  done:
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    MGT_CHECK(st);
  }
  MGT_CHECK(write_state_attrs(file, state, what));
  MGT_CHECK(write_config_attr(file, config, model, what));
  MGT_H5(H5Fflush(file, H5F_SCOPE_GLOBAL), what);
  MGT_CHECK(mgt_h5_write_i64(file, "complete", 1, what)); /* last, after the data is flushed */
  if (H5Fget_obj_count(file, H5F_OBJ_ALL) != 1)
    MGT_FAIL(MGT_ERR_INTERNAL, "%s: HDF5 objects left open before closing", what);
  return MGT_OK;
}

/* The writers (ranks that hold primary slabs) write the file together over `comm`, in phases
   whose outcome they agree on before the next, so that a failure on one rank (above all a
   full disk) makes every writer stop at the same point instead of waiting for it. */
static mgt_status write_file(const char *tmp, MPI_Comm comm, const mgt_state *s, const char *config,
                             const char *model, const mgt_ckpt_state *state, FILE *prog) {
  const char *what = tmp;
  int rank;
  MGT_MPI(MPI_Comm_rank(comm, &rank));
  hid_t fapl = -1, file = -1, dxpl = -1, lcpl = -1;
  float *staging = NULL;
  uint64_t *sums = NULL;
  size_t stage_n = max_staging(s);
  mgt_status st =
      mgt_calloc((stage_n ? stage_n : 1) * sizeof(float), "checkpoint staging", (void **)&staging);
  if (st == MGT_OK)
    st = mgt_calloc(sizeof(uint64_t) * (size_t)(s->n ? s->n : 1), "checksums", (void **)&sums);
  if (st == MGT_OK) {
    if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
        H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0 ||
        H5Pset_coll_metadata_write(fapl, 1) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
        /* HDF5 1.8's objects: its indexed groups and attributes keep adding a dataset and its
           checksum constant in time (1.6's grow quadratically past ~50,000 tensors) */
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
        (dxpl = H5Pcreate(H5P_DATASET_XFER)) < 0 ||
        H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0 ||
        (lcpl = H5Pcreate(H5P_LINK_CREATE)) < 0 ||
        H5Pset_create_intermediate_group(lcpl, 1) < 0) /* "optimizer/exp_avg/..." */
      st = mgt_h5_status(-1, what, __FILE__, __LINE__, __func__, "H5Pcreate");
  }
  MGT_CHECK(mgt_mpi_agree(comm, st));
  file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  st = mgt_h5_status(file, what, __FILE__, __LINE__, __func__, "H5Fcreate");
  st = mgt_mpi_agree(comm, st);
  if (st == MGT_OK) st = mgt_mpi_agree(comm, create_datasets(file, lcpl, s, what));
  /* every dataset is allocated: the file's size is known before any data is written */
  if (st == MGT_OK) st = mgt_h5_reserve(file, tmp, comm, mgt_ckpt_bytes(s), what);
  if (st == MGT_OK)
    st = mgt_mpi_agree(comm, write_slabs(file, dxpl, s, staging, sums, what, rank ? NULL : prog));
  if (st == MGT_OK) {
    /* the primary slabs add up to the logical tensors' checksums */
    int rc = MPI_Allreduce(MPI_IN_PLACE, sums, s->n, MPI_UINT64_T, MPI_SUM, comm);
    st = mgt_mpi_status(rc, __FILE__, __LINE__, __func__, "MPI_Allreduce(sums)");
  }
  if (st == MGT_OK)
    st = mgt_mpi_agree(comm, write_attrs(file, s, sums, config, model, state, what));
  st = mgt_h5_close(file, tmp, comm, st, what); /* the caller removes a failed file */
  if (lcpl >= 0) H5Pclose(lcpl);
  if (dxpl >= 0) H5Pclose(dxpl);
  if (fapl >= 0) H5Pclose(fapl);
  mgt_free(staging);
  mgt_free(sums);
  return mgt_mpi_agree(comm, st);
}

/* DIR/latest holds the iteration number; replaced atomically after the file is in place. */
static mgt_status write_latest(const char *dir, int64_t iteration) {
  char tmp[MGT_PATH_MAX + 64], final[MGT_PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  snprintf(final, sizeof final, "%s/latest", dir);
  FILE *f;
  MGT_CHECK(mgt_create_file("--save", tmp, 0, &f));
  int ok = fprintf(f, "%lld\n", (long long)iteration) > 0;
  ok &= fclose(f) == 0;
  if (!ok) MGT_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  return mgt_publish_file(tmp, final);
}

mgt_status mgt_ckpt_save(const char *dir, MPI_Comm world, const mgt_state *s, const char *config,
                         const char *model, const mgt_ckpt_state *state, FILE *log) {
  mgt_h5_quiet();
  double t0 = mgt_now();
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  char final[MGT_PATH_MAX + 64], tmp[MGT_PATH_MAX + 80];
  snprintf(final, sizeof final, "%s/iter_%07lld.h5", dir, (long long)state->iteration);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  mgt_status st = MGT_OK;
  if (rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) {
    st = MGT_ERROR(MGT_ERR_INPUT, "--save %s: cannot create: %s", dir, strerror(errno));
  }
  if (st == MGT_OK && rank == 0) st = mgt_check_space(dir, mgt_ckpt_bytes(s), final);
  MGT_CHECK(mgt_mpi_agree(world, st));
  MGT_CHECK(check_same_list(world, s));
  int writer = 0;
  for (int i = 0; i < s->n && !writer; i++)
    writer = s->t[i].replica == MGT_REPLICA_PRIMARY;
  MPI_Comm wcomm = MPI_COMM_NULL;
  MGT_MPI(MPI_Comm_split(world, writer ? 0 : MPI_UNDEFINED, rank, &wcomm));
  if (writer)
    st = write_file(tmp, wcomm, s, config, model, state, rank == 0 && log ? stderr : NULL);
  if (wcomm != MPI_COMM_NULL) MPI_Comm_free(&wcomm);
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK && rank == 0) {
    st = mgt_publish_file(tmp, final);
    if (st == MGT_OK) st = write_latest(dir, state->iteration);
  }
  if (st != MGT_OK && rank == 0) unlink(tmp);
  MGT_CHECK(mgt_mpi_agree(world, st));
  if (rank == 0 && log) {
    struct stat sb;
    double gb = stat(final, &sb) == 0 ? sb.st_size / 1e9 : 0.0, dt = mgt_now() - t0;
    fprintf(log, "saved checkpoint %s: iteration %lld, %.3f GB in %.2f s (%.2f GB/s)\n", final,
            (long long)state->iteration, gb, dt, gb / (dt > 0 ? dt : 1));
    fflush(log);
  }
  return MGT_OK;
}

uint64_t mgt_ckpt_bytes(const mgt_state *s) {
  uint64_t need = (1u << 20) + (uint64_t)s->n * 4096; /* HDF5's metadata, the attributes */
  for (int i = 0; i < s->n; i++)
    need += (uint64_t)mgt_state_numel(&s->t[i]) * mgt_dtype_size(s->t[i].dtype);
  return need;
}

/* ---- reading ---- */

static hid_t open_ro(const char *path) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  (void)MGT_H5_NO_LOCK(fapl);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  return f;
}

/* Opens a checkpoint and checks it is complete and of this format. */
mgt_status ckpt_open(const char *path, hid_t *out) {
  mgt_h5_quiet();
  *out = -1;
  struct stat sb;
  MGT_REQUIRE(stat(path, &sb) == 0, "checkpoint %s: %s", path, strerror(errno));
  MGT_REQUIRE(S_ISREG(sb.st_mode), "checkpoint %s: not a regular file", path);
  hid_t f = open_ro(path);
  MGT_REQUIRE(f >= 0, "checkpoint %s: not a readable HDF5 file (truncated or not a checkpoint?)",
              path);
  char format[64] = "";
  int64_t complete = 0;
  mgt_status st = MGT_OK;
  int later = 0; /* the format of a later version: "megatron-c checkpoint N", N > 3 */
  if (H5Aexists(f, "format") <= 0 ||
      mgt_h5_read_str(f, "format", format, sizeof format, path) != MGT_OK ||
      (strcmp(format, FORMAT) != 0 && strcmp(format, FORMAT_2) != 0 &&
       strcmp(format, FORMAT_1) != 0)) {
    if (sscanf(format, "megatron-c checkpoint %d", &later) == 1 && later > 3)
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "checkpoint %s: format %d, written by a later version of mgt (this one "
                     "reads formats 1-3)",
                     path, later);
    else
      st = MGT_ERROR(MGT_ERR_INPUT, "checkpoint %s: not a megatron-c checkpoint", path);
  } else if (H5Aexists(f, "complete") <= 0 ||
             mgt_h5_read_i64(f, "complete", &complete, path) != MGT_OK || complete != 1) {
    st =
        MGT_ERROR(MGT_ERR_INPUT,
                  "checkpoint %s: incomplete (no completion mark: the save was interrupted)", path);
  }
  if (st != MGT_OK) {
    H5Fclose(f);
    return st;
  }
  *out = f;
  return MGT_OK;
}

/* Format 1 files carry no checksums of their root attributes. */
static int has_checksums(hid_t f, const char *path) {
  char format[64] = "";
  return mgt_h5_read_str(f, "format", format, sizeof format, path) == MGT_OK &&
         strcmp(format, FORMAT_1) != 0;
}

static mgt_status read_checksum_attr(hid_t f, const char *path, const char *name, uint64_t want,
                                     const char *what) {
  uint64_t got = 0;
  MGT_CHECK(mgt_h5_read_u64(f, name, &got, path));
  MGT_REQUIRE(got == want, "checkpoint %s: %s was changed after the save (%s does not match)", path,
              what, name);
  return MGT_OK;
}

static mgt_status read_state(hid_t f, const char *path, mgt_ckpt_state *s) {
  int64_t it, consumed, steps, seed;
  memset(s, 0, sizeof *s);
  MGT_CHECK(mgt_h5_read_i64(f, "iteration", &it, path));
  MGT_CHECK(mgt_h5_read_i64(f, "consumed_samples", &consumed, path));
  MGT_CHECK(mgt_h5_read_i64(f, "optimizer_steps", &steps, path));
  MGT_CHECK(mgt_h5_read_i64(f, "seed", &seed, path));
  MGT_CHECK(mgt_h5_read_i64(f, "has_optimizer", &s->has_optimizer, path));
  MGT_CHECK(mgt_h5_read_i64(f, "tensor_model_parallel_size", &s->tensor_model_parallel_size, path));
  MGT_CHECK(mgt_h5_read_i64(f, "data_parallel_size", &s->data_parallel_size, path));
  s->iteration = it;
  s->consumed_samples = (uint64_t)consumed;
  s->optimizer_steps = steps;
  s->seed = (uint64_t)seed;
  s->consumed_valid_samples = -1;
  if (H5Aexists(f, "consumed_valid_samples") > 0)
    MGT_CHECK(mgt_h5_read_i64(f, "consumed_valid_samples", &s->consumed_valid_samples, path));
  if (H5Aexists(f, "lr_skipped_iterations") > 0) {
    MGT_CHECK(mgt_h5_read_i64(f, "lr_skipped_iterations", &s->lr_skipped_iterations, path));
    MGT_CHECK(mgt_h5_read_i64(f, "lr_skipped_samples", &s->lr_skipped_samples, path));
  }
  if (H5Aexists(f, "loss_scale") > 0) {
    char ls[64];
    char *end = NULL;
    MGT_CHECK(mgt_h5_read_str(f, "loss_scale", ls, sizeof ls, path));
    s->loss_scale = strtod(ls, &end);
    MGT_REQUIRE(end != ls && *end == 0 && s->loss_scale > 0,
                "checkpoint %s: loss_scale '%s' is not a positive number", path, ls);
    MGT_CHECK(mgt_h5_read_i64(f, "loss_scale_growth", &s->loss_scale_growth, path));
    MGT_CHECK(mgt_h5_read_i64(f, "loss_scale_hysteresis", &s->loss_scale_hysteresis, path));
  }
  /* the ranges the trainer produces, whatever the checksum says */
  const struct {
    const char *name;
    int64_t v, lo, hi;
  } range[] = {
      {"iteration", it, 0, INT64_MAX},
      {"consumed_samples", consumed, 0, INT64_MAX},
      {"optimizer_steps", steps, 0, it},
      {"has_optimizer", s->has_optimizer, 0, 1},
      {"tensor_model_parallel_size", s->tensor_model_parallel_size, 1, 1 << 20},
      {"data_parallel_size", s->data_parallel_size, 1, 1 << 30},
      {"loss_scale_growth", s->loss_scale_growth, 0, INT32_MAX},
      {"loss_scale_hysteresis", s->loss_scale_hysteresis, 0, INT32_MAX},
      {"consumed_valid_samples", s->consumed_valid_samples, -1, INT64_MAX},
      {"lr_skipped_iterations", s->lr_skipped_iterations, 0, it - steps},
      {"lr_skipped_samples", s->lr_skipped_samples, 0, consumed},
  };
  for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
    MGT_REQUIRE(range[i].v >= range[i].lo && range[i].v <= range[i].hi,
                "checkpoint %s: trainer state %s is %lld, outside [%lld, %lld]", path,
                range[i].name, (long long)range[i].v, (long long)range[i].lo,
                (long long)range[i].hi);
  MGT_REQUIRE(isfinite(s->loss_scale), "checkpoint %s: loss_scale is not finite", path);
  if (has_checksums(f, path))
    MGT_CHECK(read_checksum_attr(f, path, "state_checksum", state_hash(s), "the trainer state"));
  return MGT_OK;
}

/* The stored configuration text, checked against its checksum (format 2). */
static mgt_status read_config_attr(hid_t f, const char *path, char **out) {
  mgt_status st = MGT_OK;
  char *buf = NULL;
  *out = NULL;
  MGT_REQUIRE(H5Aexists(f, "config") > 0, "checkpoint %s: no configuration attribute", path);
  MGT_TRY(mgt_h5_read_str_dup(f, "config", &buf, path));
  if (has_checksums(f, path))
    MGT_TRY(read_checksum_attr(f, path, "config_checksum", config_hash(buf), "the configuration"));
  *out = buf;
  buf = NULL;
done:
  mgt_free(buf);
  return st;
}

/* The stored model section, checked against its checksum (format 3; NULL before). */
static mgt_status read_model_attr(hid_t f, const char *path, char **out) {
  mgt_status st = MGT_OK;
  char *buf = NULL, format[64] = "";
  *out = NULL;
  MGT_CHECK(mgt_h5_read_str(f, "format", format, sizeof format, path));
  if (strcmp(format, FORMAT) != 0) return MGT_OK; /* formats 1 and 2 have none */
  MGT_REQUIRE(H5Aexists(f, "model") > 0, "checkpoint %s: no model attribute", path);
  MGT_TRY(mgt_h5_read_str_dup(f, "model", &buf, path));
  MGT_TRY(read_checksum_attr(f, path, "model_checksum", model_hash(buf), "the model section"));
  *out = buf;
  buf = NULL;
done:
  mgt_free(buf);
  return st;
}

mgt_status mgt_ckpt_read_config_text(const char *path, char **config, char **model,
                                     mgt_ckpt_state *state) {
  hid_t f;
  *config = NULL;
  if (model) *model = NULL;
  MGT_CHECK(ckpt_open(path, &f));
  mgt_status st = read_config_attr(f, path, config);
  if (st == MGT_OK && model) st = read_model_attr(f, path, model);
  if (st == MGT_OK && state) st = read_state(f, path, state);
  H5Fclose(f);
  if (st != MGT_OK) {
    mgt_free(*config), *config = NULL;
    if (model) mgt_free(*model), *model = NULL;
  }
  return st;
}

/* Reads this rank's part of one tensor into `local` (laid out as the part holds it, padding
   zeroed). */
static mgt_status read_part(hid_t f, const char *file, const char *name, const part *pt,
                            float *local, size_t local_n) {
  const region *r = &pt->r;
  mgt_status st = MGT_OK;
  hid_t d = -1, fs = -1, ms = -1;
  if (local_n) memset(local, 0, local_n * sizeof(float));
  MGT_CHECK(mgt_h5_open_dataset(f, name, file, &d));
  if (d < 0) MGT_FAIL(MGT_ERR_INPUT, "checkpoint %s: tensor /%s is missing", file, name);
  MGT_H5_TRY(fs = H5Dget_space(d), file);
  hsize_t dims[H5S_MAX_RANK];
  int nd = H5Sget_simple_extent_ndims(fs);
  int same = nd == r->ndim;
  if (nd >= 0 && nd <= H5S_MAX_RANK) H5Sget_simple_extent_dims(fs, dims, NULL);
  for (int i = 0; same && i < nd; i++)
    same = dims[i] == r->full[i];
  if (!same) {
    char got[160] = "", want[160] = "";
    for (int i = 0; i < nd && i < H5S_MAX_RANK; i++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
               (unsigned long long)dims[i]);
    for (int i = 0; i < r->ndim; i++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%llu", i ? ", " : "",
               (unsigned long long)r->full[i]);
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "checkpoint %s: tensor /%s has shape [%s], the model wants [%s]",
                  file, name, got, want);
  }
  { /* as saved and as mgt ckpt verify checks: HDF5 would convert any other type silently */
    const hid_t t = H5Dget_type(d);
    const int f32 = t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
    if (t >= 0) H5Tclose(t);
    if (!f32) MGT_GOTO_FAIL(MGT_ERR_INPUT, "checkpoint %s: tensor /%s is not float32", file, name);
  }
  MGT_TRY(select_part(fs, &ms, pt, 1, file));
  if (r->n && (!pt->ranged || H5Sget_select_npoints(ms) > 0))
    MGT_H5_TRY(H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, local), file);
done:
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  if (d >= 0) H5Dclose(d);
  return st;
}

static mgt_status read_checksum(hid_t f, const char *file, const char *name, uint64_t *sum) {
  mgt_status st = MGT_OK;
  hid_t d = -1;
  char what[512];
  snprintf(what, sizeof what, "checkpoint %s: tensor /%s", file, name);
  MGT_CHECK(mgt_h5_open_dataset(f, name, file, &d));
  if (d < 0) MGT_FAIL(MGT_ERR_INPUT, "%s is missing", what);
  if (H5Aexists(d, "checksum") <= 0) MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s has no checksum", what);
  MGT_TRY(mgt_h5_read_u64(d, "checksum", sum, what));
done:
  H5Dclose(d);
  return st;
}

/* Reads every slab of the list; sums[2 (i R + replica)] += its checksum and the next word
   counts the slabs, for every copy (replica >= 0). */
static mgt_status read_slabs(hid_t f, const char *path, const mgt_state *s, int R, float *staging,
                             uint64_t *sums, uint64_t *want, FILE *prog) {
  mgt_progress pr;
  mgt_progress_start(&pr, prog, "checkpoint load", bytes_all(s), "GB", 1e-9, 0);
  double so_far = 0;
  for (int i = 0; i < s->n; so_far += bytes_of(s, i), i++) {
    mgt_progress_update(&pr, so_far, NULL);
    const mgt_state_tensor *t = &s->t[i];
    part pt;
    part_of(t, &pt);
    const size_t n = mgt_state_local_numel(t);
    float *local = t->mem ? staging : t->data;
    MGT_CHECK(read_part(f, path, t->name, &pt, local, n));
    for (size_t k = 0; k < n; k++) /* saves are finite: a run skips a non-finite step */
      MGT_REQUIRE(isfinite(local[k]),
                  "checkpoint %s: %s holds %s (element %zu of this rank's part): edited or "
                  "damaged, not a save of mgt",
                  path, t->name, isnan(local[k]) ? "a NaN" : "an infinity", k);
    MGT_CHECK(read_checksum(f, path, t->name, &want[i]));
    if (t->mem) MGT_CHECK(mgt_be_upload(t->mem, t->data, local, n * sizeof(float)));
    if (t->replica >= 0) {
      sums[2 * ((size_t)i * R + t->replica)] += part_sum(&pt, local);
      sums[2 * ((size_t)i * R + t->replica) + 1]++;
    }
  }
  mgt_progress_end(&pr, pr.total, NULL);
  return MGT_OK;
}

mgt_status mgt_ckpt_load(const char *path, MPI_Comm world, const mgt_state *s,
                         mgt_ckpt_state *state) {
  int R = 0;
  for (int i = 0; i < s->n; i++)
    if (s->t[i].replica + 1 > R) R = s->t[i].replica + 1;
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, &R, 1, MPI_INT, MPI_MAX, world));
  if (R < 1) R = 1;
  hid_t f = -1;
  float *staging = NULL;
  uint64_t *sums = NULL, *want = NULL;
  const size_t stage_n = max_staging(s), nsum = 2 * (size_t)(s->n ? s->n : 1) * (size_t)R;
  mgt_status st =
      mgt_calloc((stage_n ? stage_n : 1) * sizeof(float), "checkpoint staging", (void **)&staging);
  if (st == MGT_OK) st = mgt_calloc(sizeof(uint64_t) * nsum, "checksums", (void **)&sums);
  if (st == MGT_OK)
    st = mgt_calloc(sizeof(uint64_t) * (size_t)(s->n ? s->n : 1), "checksums", (void **)&want);
  if (st == MGT_OK) st = ckpt_open(path, &f);
  if (st == MGT_OK) st = read_state(f, path, state);
  int rank;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  if (st == MGT_OK) st = read_slabs(f, path, s, R, staging, sums, want, rank ? NULL : stderr);
  if (f >= 0) H5Fclose(f);
  st = mgt_mpi_agree(world, st);
  if (st == MGT_OK) {
    /* each copy is checked: the slabs of one copy add up to the stored checksum */
    MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, (int)nsum, MPI_UINT64_T, MPI_SUM, world));
    char bad[512] = "";
    int n_bad = 0;
    for (int i = 0; i < s->n; i++) {
      int ok = 1;
      for (int r = 0; r < R; r++)
        if (sums[2 * ((size_t)i * R + r) + 1] && sums[2 * ((size_t)i * R + r)] != want[i]) ok = 0;
      if (!ok && n_bad++ < 3)
        snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s/%s", n_bad > 1 ? ", " : "",
                 s->t[i].name);
    }
    if (n_bad) {
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "checkpoint %s is damaged: %d tensor(s) fail their checksum (%s%s)", path,
                     n_bad, bad, n_bad > 3 ? ", ..." : "");
    }
    st = mgt_mpi_agree(world, st);
  }
  mgt_free(staging);
  mgt_free(sums);
  mgt_free(want);
  return st;
}
