#define _GNU_SOURCE /* truncate */
#include "h5util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgt/agree.h"

void mgt_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct walk {
  char desc[256];
} walk;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
  walk *w = data;
  if (e->desc && e->desc[0]) snprintf(w->desc, sizeof w->desc, "%s", e->desc);
  return 0;
}

mgt_status mgt_h5_status(int64_t ret, const char *what, const char *file, int line,
                         const char *func, const char *call) {
  if (ret >= 0) return MGT_OK;
  walk w = {""};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &w);
  H5Eclear2(H5E_DEFAULT);
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(call, "("), call);
  mgt_error_set(MGT_ERR_IO, file, line, func, "%s: HDF5 %s failed%s%s", what, name,
                w.desc[0] ? ": " : "", w.desc);
  return MGT_ERR_IO;
}

static mgt_status write_scalar(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v,
                               const char *what) {
  mgt_status st = MGT_OK;
  hid_t sp = -1, a = -1;
  MGT_H5_TRY(sp = H5Screate(H5S_SCALAR), what);
  MGT_H5_TRY(a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT), what);
  MGT_H5_TRY(H5Awrite(a, mtype, v), what);
done:
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return st;
}

mgt_status mgt_h5_write_i64(hid_t obj, const char *name, int64_t v, const char *what) {
  return write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, what);
}

mgt_status mgt_h5_write_u64(hid_t obj, const char *name, uint64_t v, const char *what) {
  return write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, what);
}

mgt_status mgt_h5_write_str(hid_t obj, const char *name, const char *v, const char *what) {
  mgt_status st = MGT_OK;
  hid_t sp = -1, a = -1, t = -1;
  size_t n = strlen(v);
  MGT_H5_TRY(t = H5Tcopy(H5T_C_S1), what);
  MGT_H5_TRY(H5Tset_size(t, n ? n : 1), what);
  MGT_H5_TRY(H5Tset_cset(t, H5T_CSET_UTF8), what);
  MGT_H5_TRY(sp = H5Screate(H5S_SCALAR), what);
  MGT_H5_TRY(a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), what);
  MGT_H5_TRY(H5Awrite(a, t, v), what);
done:
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  return st;
}

/* Reads a scalar integer attribute as `mem` (an int64 or uint64 native type). A float (2.7
   would silently become 2) or an array is refused. */
static mgt_status read_int(hid_t obj, const char *name, hid_t mem, void *v, const char *what) {
  MGT_REQUIRE(H5Aexists(obj, name) > 0, "%s: attribute '%s' is missing", what, name);
  mgt_status st = MGT_OK;
  hid_t a = -1, t = -1, sp = -1;
  MGT_H5_TRY(a = H5Aopen(obj, name, H5P_DEFAULT), what);
  MGT_H5_TRY(t = H5Aget_type(a), what);
  MGT_H5_TRY(sp = H5Aget_space(a), what);
  if (H5Tget_class(t) != H5T_INTEGER || H5Sget_simple_extent_npoints(sp) != 1)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: attribute '%s' is not one integer", what, name);
  MGT_H5_TRY(H5Aread(a, mem, v), what);
done:
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return st;
}

static int hard_link(hid_t loc, const char *path) {
#if H5_VERSION_GE(1, 12, 0)
  H5L_info2_t li;
  if (H5Lget_info2(loc, path, &li, H5P_DEFAULT) < 0) return -1;
#else
  H5L_info_t li;
  if (H5Lget_info(loc, path, &li, H5P_DEFAULT) < 0) return -1;
#endif
  return li.type == H5L_TYPE_HARD;
}

mgt_status mgt_h5_open_dataset(hid_t loc, const char *path, const char *what, hid_t *out) {
  *out = -1;
  const size_t n = strlen(path);
  char *prefix = malloc(n + 1);
  if (!prefix) MGT_FAIL(MGT_ERR_NOMEM, "%s: out of memory", what);
  mgt_status st = MGT_OK;
  hid_t d = -1, pl = -1;
  for (size_t end = 0; end <= n;
       end++) { /* each component, its links checked before it is crossed */
    if (end < n && path[end] != '/') continue;
    if (end == 0 || path[end - 1] == '/') continue;
    memcpy(prefix, path, end);
    prefix[end] = 0;
    const htri_t e = H5Lexists(loc, prefix, H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      goto done; /* nothing there */
    }
    const int hard = hard_link(loc, prefix);
    if (hard < 0) MGT_GOTO_FAIL(MGT_ERR_IO, "%s: the link /%s cannot be read", what, prefix);
    if (!hard)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "%s: /%s is a link to another file or name (only what the file holds is read)",
                    what, prefix);
  }
  MGT_H5_TRY(d = H5Dopen2(loc, path, H5P_DEFAULT), what);
  MGT_H5_TRY(pl = H5Dget_create_plist(d), what);
  const int ext = H5Pget_external_count(pl);
  const H5D_layout_t layout = H5Pget_layout(pl);
  if (ext != 0 || layout == H5D_VIRTUAL)
    MGT_GOTO_FAIL(
        MGT_ERR_INPUT,
        "%s: /%s keeps its elements in other files (%s; only what the file holds is read)", what,
        path, ext != 0 ? "external storage" : "a virtual dataset");
  *out = d, d = -1;
done:
  if (pl >= 0) H5Pclose(pl);
  if (d >= 0) H5Dclose(d);
  free(prefix);
  return st;
}

mgt_status mgt_h5_read_i64(hid_t obj, const char *name, int64_t *v, const char *what) {
  return read_int(obj, name, H5T_NATIVE_INT64, v, what);
}

mgt_status mgt_h5_read_u64(hid_t obj, const char *name, uint64_t *v, const char *what) {
  return read_int(obj, name, H5T_NATIVE_UINT64, v, what);
}

mgt_status mgt_h5_reserve(hid_t file, const char *path, MPI_Comm comm, uint64_t at_least,
                          const char *what) {
  int rank;
  MGT_MPI(MPI_Comm_rank(comm, &rank));
  mgt_status st = MGT_OK;
  if (rank == 0) {
    /* Under MPI-IO the size is unknown once HDF5 has written metadata (many datasets evict
       it from the cache): then the caller's count stands in. */
    hsize_t size = 0;
    if (H5Fget_filesize(file, &size) < 0) {
      H5Eclear2(H5E_DEFAULT);
      size = 0;
    }
    st = mgt_reserve_file(path, size > at_least ? size : at_least);
  }
  return mgt_mpi_agree(comm, st);
}

mgt_status mgt_h5_close(hid_t file, const char *path, MPI_Comm comm, mgt_status st,
                        const char *what) {
  if (file < 0) return st;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (st != MGT_OK) {
    /* the close writes metadata, which a full disk would refuse on some ranks only */
    if (rank == 0) (void)!truncate(path, 0);
    MPI_Barrier(comm);
  }
  herr_t rc = H5Fclose(file);
  if (st == MGT_OK) return mgt_h5_status(rc, what, __FILE__, __LINE__, __func__, "H5Fclose");
  H5Eclear2(H5E_DEFAULT); /* the first error is the one to report */
  return st;
}

mgt_status mgt_h5_read_str_dup(hid_t obj, const char *name, char **out, const char *what) {
  *out = NULL;
  MGT_REQUIRE(H5Aexists(obj, name) > 0, "%s: attribute '%s' is missing", what, name);
  mgt_status st = MGT_OK;
  hid_t a = -1, t = -1, mt = -1, sp = -1;
  char *vl = NULL, *buf = NULL;
  MGT_H5_TRY(a = H5Aopen(obj, name, H5P_DEFAULT), what);
  MGT_H5_TRY(t = H5Aget_type(a), what);
  MGT_H5_TRY(sp = H5Aget_space(a), what);
  if (H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: attribute '%s' is not a string", what, name);
  MGT_H5_TRY(mt = H5Tcopy(H5T_C_S1), what);
  MGT_H5_TRY(H5Tset_cset(mt, H5Tget_cset(t)), what);
  if (H5Tis_variable_str(t) > 0) { /* h5py's default for str */
    MGT_H5_TRY(H5Tset_size(mt, H5T_VARIABLE), what);
    MGT_H5_TRY(H5Aread(a, mt, &vl), what);
    size_t len = vl ? strlen(vl) : 0;
    MGT_TRY(mgt_calloc(len + 1, "string attribute", (void **)&buf));
    if (len) memcpy(buf, vl, len);
  } else {
    size_t len = H5Tget_size(t);
    MGT_TRY(mgt_calloc(len + 1, "string attribute", (void **)&buf));
    MGT_H5_TRY(H5Tset_size(mt, len + 1), what);
    MGT_H5_TRY(H5Aread(a, mt, buf), what);
    buf[len] = 0;
  }
  *out = buf;
  buf = NULL;
done:
  if (vl) H5free_memory(vl);
  mgt_free(buf);
  if (sp >= 0) H5Sclose(sp);
  if (mt >= 0) H5Tclose(mt);
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return st;
}

mgt_status mgt_h5_read_str(hid_t obj, const char *name, char *buf, size_t n, const char *what) {
  char *s = NULL;
  MGT_CHECK(mgt_h5_read_str_dup(obj, name, &s, what));
  size_t len = strlen(s);
  if (len + 1 > n) {
    mgt_free(s);
    MGT_FAIL(MGT_ERR_INPUT, "%s: attribute '%s' is longer than %zu bytes", what, name, n - 1);
  }
  memcpy(buf, s, len + 1);
  mgt_free(s);
  return MGT_OK;
}
