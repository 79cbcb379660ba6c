/* Checkpoints of state lists that no model made: synthetic tensors split along each dimension
   (with padding), replicated ones, one spread over all ranks in a single copy (as a distributed
   optimizer's), and one in a backend's memory. Saved on every tensor-parallel layout of the
   job's ranks and loaded on every other; each loaded element must be exactly the value of its
   logical index, padding zero. Also: one process reading the whole tensors, a missing tensor,
   a wrong shape, a flipped value and ranks that list different tensors. Run under mpiexec. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgt/backend.h"
#include "mgt/checkpoint.h"
#include "mgt/config.h"
#include "mgt/state.h"
#include "testutil.h"

static int W, rank;
static mgt_backend *cpu;

/* The value of logical element i of tensor k: exact in float32. */
static float value(int k, int64_t i) { return (float)(k * 1000 + i) * 0.25f - 7.0f; }

typedef struct spec {
  const char *name;
  int ndim;
  int64_t full[3];
  int split;  /* dimension split over tensor-parallel ranks, -1 replicated */
  int world;  /* split dimension 0 over every rank, one copy */
  int on_mem; /* data in the backend's memory */
  int ranged; /* the slab cut at uneven elements over the data-parallel ranks, one copy */
} spec;

static const spec specs[] = {
    {"synth/rows", 2, {13, 5, 0}, 0, 0, 0, 0},   /* padded rows, as a vocabulary */
    {"synth/cube", 3, {3, 8, 6}, 1, 0, 0, 0},    /* whole "heads" of a 3-D tensor */
    {"synth/cols", 2, {7, 12, 0}, 1, 0, 0, 0},   /* columns, as a row-parallel weight */
    {"synth/vec", 1, {9, 0, 0}, -1, 0, 0, 0},    /* replicated over tensor parallelism */
    {"opt/flat", 1, {27, 0, 0}, 0, 1, 0, 0},     /* one copy over the whole world */
    {"synth/device", 2, {4, 10, 0}, 0, 0, 1, 0}, /* in backend memory */
    /* a distributed optimizer's shards: each tensor-parallel slab (padding included) cut into
       element ranges over the data-parallel ranks, starting and ending inside rows */
    {"opt/rows", 2, {13, 5, 0}, 0, 0, 0, 1},
    {"opt/cube", 3, {3, 8, 6}, 1, 0, 0, 1},
    {"opt/cols", 2, {7, 12, 0}, 1, 0, 0, 1},
    {"opt/vec", 1, {9, 0, 0}, -1, 0, 0, 1},
    {"opt/device", 2, {4, 10, 0}, 0, 0, 1, 1},
};
enum { NT = sizeof specs / sizeof specs[0] };

/* This rank's slab of tensor k on layout tp; host[] keeps a host copy of what it holds. */
static void make_list(int tp, mgt_state *s, float *host[NT]) {
  const int t = rank % tp, d = rank / tp;
  memset(s, 0, sizeof *s);
  for (int k = 0; k < NT; k++) {
    const spec *p = &specs[k];
    mgt_state_tensor e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", p->name);
    e.shard.ndim = p->ndim;
    for (int i = 0; i < p->ndim; i++)
      e.shard.shape[i] = e.shard.full[i] = p->full[i];
    int parts = p->world ? W : tp, part = p->world ? rank : t, dim = p->world ? 0 : p->split;
    e.shard.split_dim = dim;
    if (dim >= 0) {
      int64_t local = (p->full[dim] + parts - 1) / parts; /* the last slab may hold padding */
      e.shard.shape[dim] = local;
      e.shard.offset = part * local;
    }
    e.replica =
        p->world ? MGT_REPLICA_PRIMARY : (p->split < 0 && t != 0 ? MGT_REPLICA_DUPLICATE : d);
    size_t n = mgt_state_local_numel(&e);
    host[k] = calloc(n, sizeof(float));
    /* fill: logical values, NaN on padding (which must never reach the file) */
    int64_t l[3] = {1, 1, 1}, f[3] = {1, 1, 1}, o[3] = {0, 0, 0};
    for (int i = 0; i < p->ndim; i++) {
      l[3 - p->ndim + i] = e.shard.shape[i];
      f[3 - p->ndim + i] = e.shard.full[i];
      if (i == dim) o[3 - p->ndim + i] = e.shard.offset;
    }
    for (int64_t a = 0; a < l[0]; a++)
      for (int64_t b = 0; b < l[1]; b++)
        for (int64_t c = 0; c < l[2]; c++) {
          int64_t ga = a + o[0], gb = b + o[1], gc = c + o[2];
          int pad = ga >= f[0] || gb >= f[1] || gc >= f[2];
          host[k][(a * l[1] + b) * l[2] + c] = pad ? NAN : value(k, (ga * f[1] + gb) * f[2] + gc);
        }
    if (p->ranged) { /* uneven cuts: rank d of dp holds [cut(d), cut(d + 1)) */
      const int dp = W / tp;
      int64_t lo = (int64_t)n * d / dp + (d > 0 && d % 2), hi = (int64_t)n * (d + 1) / dp;
      if (d + 1 < dp && (d + 1) % 2) hi++;
      if (hi > (int64_t)n) hi = (int64_t)n;
      if (lo > hi) lo = hi;
      e.ranged = 1, e.first = lo, e.count = hi - lo;
      e.replica = p->split < 0 && t != 0 ? MGT_REPLICA_DUPLICATE : MGT_REPLICA_PRIMARY;
      memmove(host[k], host[k] + lo, sizeof(float) * (size_t)(hi - lo));
      n = (size_t)(hi - lo);
    }
    if (p->on_mem) {
      T_OK(mgt_be_alloc(cpu, n * sizeof(float), p->name, &e.data));
      T_OK(mgt_be_upload(cpu, e.data, host[k], n * sizeof(float)));
      e.mem = cpu;
    } else {
      e.data = malloc(n * sizeof(float));
      memcpy(e.data, host[k], n * sizeof(float));
    }
    T_OK(mgt_state_add(s, &e));
  }
}

static void free_list(mgt_state *s, float *host[NT]) {
  for (int k = 0; k < s->n; k++) {
    if (s->t[k].mem)
      mgt_be_free(cpu, s->t[k].data);
    else
      free(s->t[k].data);
    free(host[k]);
  }
  mgt_state_fini(s);
}

/* Every element loaded equals the logical value; padding is zero. */
static void check_loaded(const mgt_state *s, float *const expect[NT], const char *what) {
  for (int k = 0; k < NT; k++) {
    const mgt_state_tensor *e = &s->t[k];
    size_t n = mgt_state_local_numel(e);
    float *got = malloc(n * sizeof(float));
    if (e->mem)
      T_OK(mgt_be_download(cpu, got, e->data, n * sizeof(float)));
    else
      memcpy(got, e->data, n * sizeof(float));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
      float want = isnan(expect[k][i]) ? 0.0f : expect[k][i];
      if (memcmp(&got[i], &want, 4) != 0 && bad++ == 0) first = i;
    }
    T_CHECK(bad == 0, "%s: rank %d, %s: %zu elements differ (first %zu: %g, want %g)", what, rank,
            e->name, bad, first, bad ? got[first] : 0.0, bad ? expect[k][first] : 0.0);
    free(got);
  }
}

static void clear(mgt_state *s) {
  for (int k = 0; k < s->n; k++) {
    size_t bytes = mgt_state_local_numel(&s->t[k]) * sizeof(float);
    if (s->t[k].mem)
      T_OK(mgt_be_zero(cpu, s->t[k].data, bytes));
    else
      memset(s->t[k].data, 0xFF, bytes); /* NaNs: a slab that is not read stays wrong */
  }
}

/* Expects an input error on every rank whose message contains `want`. */
static void expect_input_error(mgt_status st, const char *want, const char *what) {
  int ok = st == MGT_ERR_INPUT && strstr(mgt_error_message(), want) != NULL;
  T_CHECK(ok, "%s: got status %d '%s', wanted an input error with '%s'", what, st,
          mgt_error_message(), want);
  if (ok && rank == 0) printf("ok: %s: %s\n", what, mgt_error_message());
  mgt_error_clear();
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  mgt_error_set_rank(rank);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  T_OK(mgt_backend_cpu_create(&cpu));
  char dir[256] = "/tmp/mgt-state-XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) return 1;
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  /* io/ stores the run's configuration as text it does not read */
  const char *config = "{\"synthetic\": [1, 2.5, \"\\u00e9\"]}";
  const char *model = "{\"layers\": 2}"; /* opaque to the checkpoint layer, as the config */

  int layouts[8], nl = 0;
  for (int tp = 1; tp <= W; tp++)
    if (W % tp == 0) layouts[nl++] = tp;
  int64_t it = 0;
  for (int a = 0; a < nl; a++) {
    mgt_state s;
    float *host[NT];
    make_list(layouts[a], &s, host);
    mgt_ckpt_state st0;
    memset(&st0, 0, sizeof st0);
    st0.iteration = ++it;
    st0.consumed_samples = 1000 + (uint64_t)it;
    st0.optimizer_steps = it - 1;
    st0.seed = 0xFEEDull + (uint64_t)it;
    st0.loss_scale = 65536.0 / 3.0; /* every bit of the double must survive */
    st0.loss_scale_growth = 5, st0.loss_scale_hysteresis = 1;
    st0.has_optimizer = 1;
    st0.tensor_model_parallel_size = layouts[a], st0.data_parallel_size = W / layouts[a];
    st0.consumed_valid_samples = a == 0 ? -1 : 96 * it; /* not recorded, then recorded */
    T_OK(mgt_ckpt_save(dir, MPI_COMM_WORLD, &s, config, model, &st0, NULL));
    free_list(&s, host);
    char path[512];
    snprintf(path, sizeof path, "%s/iter_%07lld.h5", dir, (long long)it);
    char *text = NULL, *mtext = NULL;
    mgt_ckpt_state back;
    T_OK(mgt_ckpt_read_config_text(path, &text, &mtext, &back));
    T_CHECK(!strcmp(text, config) && mtext && !strcmp(mtext, model) &&
                back.iteration == st0.iteration,
            "the configuration and model texts read back: \"%s\", \"%s\"", text,
            mtext ? mtext : "(none)");
    mgt_free(text);
    mgt_free(mtext);
    for (int b = 0; b < nl; b++) {
      make_list(layouts[b], &s, host);
      clear(&s);
      mgt_ckpt_state got;
      T_OK(mgt_ckpt_load(path, MPI_COMM_WORLD, &s, &got));
      char what[96];
      snprintf(what, sizeof what, "saved at tp %d, loaded at tp %d", layouts[a], layouts[b]);
      check_loaded(&s, host, what);
      T_CHECK(got.iteration == st0.iteration && got.consumed_samples == st0.consumed_samples &&
                  got.optimizer_steps == st0.optimizer_steps && got.seed == st0.seed &&
                  got.loss_scale == st0.loss_scale && got.loss_scale_growth == 5 &&
                  got.loss_scale_hysteresis == 1 && got.has_optimizer == 1 &&
                  got.tensor_model_parallel_size == layouts[a] &&
                  got.consumed_valid_samples == st0.consumed_valid_samples,
              "%s: the trainer state differs", what);
      free_list(&s, host);
      if (rank == 0 && t_failures == 0) printf("ok: %s: every element exact\n", what);
    }
  }
  char path[512];
  snprintf(path, sizeof path, "%s/iter_%07lld.h5", dir, (long long)it);

  /* one process reads whole tensors of a file written by every rank */
  if (rank == 0) {
    mgt_state s, whole = {0};
    float *host[NT];
    make_list(1, &s, host); /* at tp 1 the slabs are the tensors, but opt/flat is split */
    for (int k = 0; k < NT; k++) {
      mgt_state_tensor e;
      mgt_state_whole(&s.t[k], &e);
      e.data = calloc((size_t)mgt_state_numel(&e), sizeof(float));
      T_OK(mgt_state_add(&whole, &e));
    }
    mgt_ckpt_state got;
    T_OK(mgt_ckpt_load(path, MPI_COMM_SELF, &whole, &got));
    size_t bad = 0;
    for (int k = 0; k < NT; k++)
      for (int64_t i = 0; i < mgt_state_numel(&whole.t[k]); i++)
        bad += ((float *)whole.t[k].data)[i] != value(k, i);
    T_CHECK(bad == 0, "one process reading whole tensors: %zu elements differ", bad);
    if (!bad) printf("ok: one process reads the whole tensors exactly\n");
    for (int k = 0; k < NT; k++)
      free(whole.t[k].data);
    mgt_state_fini(&whole);
    free_list(&s, host);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* refusals, agreed on every rank */
  {
    mgt_state s;
    float *host[NT];
    mgt_ckpt_state got;
    make_list(layouts[nl - 1], &s, host);
    mgt_state_tensor extra = s.t[3];
    snprintf(extra.name, sizeof extra.name, "synth/absent");
    T_OK(mgt_state_add(&s, &extra));
    expect_input_error(mgt_ckpt_load(path, MPI_COMM_WORLD, &s, &got),
                       "tensor /synth/absent is "
                       "missing",
                       "a tensor the file lacks");
    s.n--;
    s.t[3].shard.full[0] = 10;
    expect_input_error(mgt_ckpt_load(path, MPI_COMM_WORLD, &s, &got),
                       "tensor /synth/vec has shape [9], the model wants [10]", "a wrong shape");
    s.t[3].shard.full[0] = 9;
    /* ranks that list different tensors are a bug of the caller: refused on every rank */
    char keep[MGT_STATE_NAME];
    snprintf(keep, sizeof keep, "%s", s.t[0].name);
    if (rank == W - 1) snprintf(s.t[0].name, sizeof s.t[0].name, "synth/other");
    mgt_status st = mgt_ckpt_save(dir, MPI_COMM_WORLD, &s, config, model,
                                  &(mgt_ckpt_state){.iteration = 99}, NULL);
    T_CHECK(W == 1 || st == MGT_ERR_INTERNAL, "different lists on the ranks were saved (%d)", st);
    mgt_error_clear();
    snprintf(s.t[0].name, sizeof s.t[0].name, "%s", keep);
    /* one value flipped in the file: the load names the tensor */
    if (rank == 0) {
      hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT),
            d = H5Dopen2(f, "synth/cube", H5P_DEFAULT);
      float *buf = malloc(3 * 8 * 6 * sizeof(float));
      H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
      buf[100] += 1.0f;
      H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
      free(buf);
      H5Dclose(d);
      H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_input_error(mgt_ckpt_load(path, MPI_COMM_WORLD, &s, &got),
                       "1 tensor(s) fail their checksum (/synth/cube)", "a flipped value");
    free_list(&s, host);
  }
  if (rank == 0) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  mgt_backend_destroy(&cpu);
  int fails = t_failures;
  MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  t_failures = fails;
  int rc = rank == 0 ? t_report("state") : (fails ? 1 : 0);
  MPI_Finalize();
  return rc;
}
