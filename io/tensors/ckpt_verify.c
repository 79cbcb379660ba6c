/* mgt ckpt verify and info: every tensor of a checkpoint read back and checked against its
   checksum and the shapes a state list expects, or listed. */
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

/* ---- verify and info ---- */

typedef struct visit {
  FILE *out;
  int damaged, tensors;
  int info;                /* list shapes instead of checking */
  int64_t elements;        /* under /model, counted by info */
  const mgt_state *expect; /* what the configuration implies (verify; may be NULL) */
  mgt_state_index names;   /* of expect */
  char *seen;              /* per expected tensor */
} visit;

/* The dataset against what the configuration implies: known, float32, of its logical shape. */
static int check_expected(visit *v, hid_t d, const char *name, int nd, const hsize_t *dims) {
  if (!v->expect) return 1;
  const int k = mgt_state_index_find(&v->names, name);
  if (k < 0) {
    fprintf(v->out, "damaged: /%s (not a tensor of the stored configuration)\n", name);
    return 0;
  }
  v->seen[k] = 1;
  const mgt_shard *s = &v->expect->t[k].shard;
  int same = nd == s->ndim;
  for (int i = 0; same && i < nd; i++)
    same = dims[i] == (hsize_t)s->full[i];
  if (!same) {
    char want[160] = "", got[160] = "";
    for (int i = 0; i < s->ndim; i++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "",
               (long long)s->full[i]);
    for (int i = 0; i < nd; i++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
               (unsigned long long)dims[i]);
    fprintf(v->out, "damaged: /%s (shape [%s], the configuration implies [%s])\n", name, got, want);
    return 0;
  }
  hid_t t = H5Dget_type(d);
  int f32 = t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
  if (t >= 0) H5Tclose(t);
  if (!f32) fprintf(v->out, "damaged: /%s (not float32)\n", name);
  return f32;
}

static herr_t visit_cb(hid_t obj, const char *name, const mgt_h5_oinfo *info, void *data) {
  visit *v = data;
  if (info->type != H5O_TYPE_DATASET) return 0;
  hid_t d = -1;
  if (mgt_h5_open_dataset(obj, name, "stored elsewhere", &d) != MGT_OK) { /* not in the file */
    fprintf(v->out, "damaged: /%s (%s)\n", name, mgt_error_message());
    mgt_error_clear();
    const int k = v->expect ? mgt_state_index_find(&v->names, name) : -1;
    if (k >= 0) v->seen[k] = 1; /* damaged, not also missing */
    H5Eclear2(H5E_DEFAULT);
    v->damaged++;
    return 0;
  }
  hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
  int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
  hsize_t dims[H5S_MAX_RANK];
  if (nd >= 0) H5Sget_simple_extent_dims(sp, dims, NULL);
  if (sp >= 0) H5Sclose(sp);
  if (d < 0 || nd < 0 || np < 0) {
    if (d >= 0) H5Dclose(d);
    fprintf(v->out, "damaged: /%s (unreadable)\n", name);
    v->damaged++;
    H5Eclear2(H5E_DEFAULT);
    return 0;
  }
  size_t n = (size_t)np;
  v->tensors++;
  if (!v->info && !check_expected(v, d, name, nd, dims)) {
    v->damaged++;
    H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    return 0;
  }
  if (v->info) {
    fprintf(v->out, "  /%-52s [", name);
    for (int i = 0; i < nd; i++)
      fprintf(v->out, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    fprintf(v->out, "] %.2f MB\n", n * 4 / 1e6);
    if (strncmp(name, "model/", 6) == 0) v->elements += (int64_t)n;
    H5Dclose(d);
    return 0;
  }
  uint64_t want = 0, got = 0;
  float *buf = malloc((n ? n : 1) * sizeof(float));
  const char *why = !buf ? "out of memory" : NULL;
  if (!why && H5Aexists(d, "checksum") <= 0) why = "no checksum";
  if (!why && mgt_h5_read_u64(d, "checksum", &want, name) != MGT_OK)
    why = "its checksum is not one integer", mgt_error_clear();
  if (!why && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    why = "unreadable";
  int ok = !why;
  if (ok) {
    const uint32_t *bits = (const uint32_t *)buf;
#pragma omp parallel for simd reduction(+ : got) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
      got += mgt_fmix64(mgt_fmix64(i + 1) ^ bits[i]);
    ok = got == want;
  }
  if (why) {
    fprintf(v->out, "damaged: /%s (%s)\n", name, why);
    v->damaged++;
  } else if (!ok) {
    fprintf(v->out, "damaged: /%s (checksum %016" PRIx64 ", stored %016" PRIx64 ")\n", name, got,
            want);
    v->damaged++;
  }
  free(buf);
  H5Dclose(d);
  H5Eclear2(H5E_DEFAULT);
  return 0;
}

mgt_status mgt_ckpt_verify(const char *path, const mgt_state *expect, FILE *out, int *damaged) {
  hid_t f;
  MGT_CHECK(ckpt_open(path, &f));
  visit v = {.out = out, .expect = expect};
  if (expect && (!(v.seen = calloc((size_t)expect->n + 1, 1)) ||
                 mgt_state_index_init(&v.names, expect) != MGT_OK)) {
    free(v.seen);
    H5Fclose(f);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory verifying %s", path);
  }
  herr_t rc = MGT_H5_VISIT(f, visit_cb, &v);
  H5Fclose(f);
  for (int i = 0; expect && rc >= 0 && i < expect->n; i++)
    if (!v.seen[i]) {
      fprintf(out, "damaged: /%s (missing)\n", expect->t[i].name);
      v.damaged++;
    }
  free(v.seen);
  mgt_state_index_fini(&v.names);
  MGT_REQUIRE(rc >= 0, "checkpoint %s: cannot list its tensors", path);
  *damaged = v.damaged;
  fprintf(out, "%s: %d tensors, %d damaged\n", path, v.tensors, v.damaged);
  return MGT_OK;
}

mgt_status mgt_ckpt_list(const char *path, FILE *out, int64_t *model_elements) {
  hid_t f;
  MGT_CHECK(ckpt_open(path, &f));
  visit v = {.out = out, .info = 1};
  herr_t rc = MGT_H5_VISIT(f, visit_cb, &v);
  H5Fclose(f);
  MGT_REQUIRE(rc >= 0, "checkpoint %s: cannot list its tensors", path);
  *model_elements = v.elements;
  return MGT_OK;
}
