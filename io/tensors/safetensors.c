/* safetensors reading and writing: see include/mgt/safetensors.h. */
#define _GNU_SOURCE
#include "mgt/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgt/json.h"

static mgt_status write_all(int fd, const void *p, size_t n, const char *what) {
  const unsigned char *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) MGT_FAIL(MGT_ERR_IO, "%s: write failed: %s", what, strerror(errno));
    b += w, n -= (size_t)w;
  }
  return MGT_OK;
}

static size_t numel(int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= (size_t)shape[d];
  return n;
}

mgt_status mgt_safetensors_write(const char *path, const mgt_st_tensor *t, int n) {
  char *header = NULL;
  size_t hl = 0;
  FILE *ms = open_memstream(&header, &hl);
  if (!ms) MGT_FAIL(MGT_ERR_NOMEM, "out of memory writing %s", path);
  fprintf(ms, "{\"__metadata__\":{\"format\":\"pt\"}");
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    fputc(',', ms);
    mgt_json_write_string(ms, t[i].name);
    fprintf(ms, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++)
      fprintf(ms, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    size_t bytes = 4 * numel(t[i].ndim, t[i].shape);
    fprintf(ms, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
    off += bytes;
  }
  fputc('}', ms);
  while ((ftell(ms) % 8) != 0) /* the data section starts 8-aligned */
    fputc(' ', ms);
  if (fclose(ms) != 0) {
    free(header);
    MGT_FAIL(MGT_ERR_NOMEM, "out of memory writing %s", path);
  }
  mgt_status st = MGT_OK;
  char tmp[MGT_PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = -1;
  MGT_TRY(mgt_create_fd("--output", tmp, 0, &fd));
  unsigned char le[8];
  for (int i = 0; i < 8; i++)
    le[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  MGT_TRY(write_all(fd, le, 8, tmp));
  MGT_TRY(write_all(fd, header, hl, tmp));
  for (int i = 0; i < n; i++)
    MGT_TRY(write_all(fd, t[i].data, 4 * numel(t[i].ndim, t[i].shape), tmp));
  int rc = close(fd);
  fd = -1;
  if (rc != 0) MGT_GOTO_FAIL(MGT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  MGT_TRY(mgt_publish_file(tmp, path));
done:
  if (fd >= 0) close(fd);
  if (st != MGT_OK) unlink(tmp);
  free(header);
  return st;
}

struct mgt_safetensors {
  char path[MGT_PATH_MAX];
  void *map;
  size_t len;
  const unsigned char *data; /* the data section */
  size_t data_len;
  mgt_json_parser *parser;
  const mgt_json *header;
};

/* A non-negative integer that a double holds exactly. */
static int as_size(const mgt_json *v, size_t *out) {
  if (!v || v->type != MGT_JSON_NUMBER || !(v->number >= 0) || v->number > 9007199254740992.0 ||
      v->number != floor(v->number))
    return 0;
  *out = (size_t)v->number;
  return 1;
}

typedef struct span {
  size_t b0, b1, i; /* bytes [b0, b1) of the data section, header entry i */
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->b0 < y->b0 ? -1 : x->b0 > y->b0 ? 1 : x->b1 < y->b1 ? -1 : x->b1 > y->b1;
}

/* Every tensor's bytes inside the file, and no two tensors sharing a byte (a file whose tensors
   overlap would load one weight's bytes as another's). Dtypes and shapes are checked against
   what the model needs as each tensor is read. */
static mgt_status check_header(const mgt_safetensors *f) {
  const mgt_json *h = f->header;
  span *sp = malloc(sizeof *sp * (h->len + 1));
  if (!sp) MGT_FAIL(MGT_ERR_NOMEM, "out of memory checking %s", f->path);
  size_t n = 0;
  for (size_t i = 0; i < h->len; i++) {
    if (!strcmp(h->keys[i], "__metadata__")) continue;
    const mgt_json *of = mgt_json_get(&h->items[i], "data_offsets");
    size_t b0 = 0, b1 = 0;
    if (!of || of->type != MGT_JSON_ARRAY || of->len != 2 || !as_size(&of->items[0], &b0) ||
        !as_size(&of->items[1], &b1) || b0 > b1 || b1 > f->data_len) {
      free(sp);
      MGT_FAIL(MGT_ERR_INPUT, "%s: tensor %s: data_offsets do not lie inside the file", f->path,
               h->keys[i]);
    }
    if (b1 > b0) sp[n++] = (span){b0, b1, i};
  }
  qsort(sp, n, sizeof *sp, span_cmp);
  for (size_t k = 1; k < n; k++)
    if (sp[k].b0 < sp[k - 1].b1) {
      const char *a = h->keys[sp[k - 1].i], *b = h->keys[sp[k].i];
      free(sp);
      MGT_FAIL(MGT_ERR_INPUT, "%s: tensors %s and %s share bytes (data_offsets overlap)", f->path,
               a, b);
    }
  free(sp);
  return MGT_OK;
}

void mgt_safetensors_close(mgt_safetensors **pf) {
  mgt_safetensors *f = *pf;
  if (!f) return;
  if (f->map && f->map != MAP_FAILED) munmap(f->map, f->len);
  mgt_json_parser_destroy(&f->parser);
  free(f);
  *pf = NULL;
}

mgt_status mgt_safetensors_open(const char *path, mgt_safetensors **out) {
  *out = NULL;
  mgt_safetensors *f = calloc(1, sizeof *f);
  if (!f) MGT_FAIL(MGT_ERR_NOMEM, "out of memory opening %s", path);
  snprintf(f->path, sizeof f->path, "%s", path);
  mgt_status st = MGT_OK;
  struct stat sb;
  int fd = -1;
  if (mgt_open_file("--input", path, &fd) != MGT_OK || fstat(fd, &sb) != 0 || sb.st_size < 8) {
    if (fd >= 0) close(fd);
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: not a readable safetensors file", path);
  }
  f->len = (size_t)sb.st_size;
  f->map = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f->map == MAP_FAILED) MGT_GOTO_FAIL(MGT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
  const unsigned char *base = f->map;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)base[i] << (8 * i);
  if (hlen > f->len - 8) MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: header longer than the file", path);
  MGT_TRY(mgt_json_parser_create(&f->parser));
  MGT_TRY(mgt_json_parse(f->parser, (const char *)base + 8, (size_t)hlen, &f->header));
  if (f->header->type != MGT_JSON_OBJECT)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: the header is not an object", path);
  f->data = base + 8 + hlen;
  f->data_len = f->len - 8 - (size_t)hlen;
  MGT_TRY(check_header(f));
  *out = f;
  return MGT_OK;
done:
  mgt_safetensors_close(&f);
  return st;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  if (e == 31)
    bits = sign | 0x7F800000u | (m << 13);
  else
    bits = sign | ((e + 112) << 23) | (m << 13);
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

int mgt_safetensors_dims(const mgt_safetensors *f, const char *name, int64_t *shape) {
  const mgt_json *t = mgt_json_get(f->header, name), *sh = t ? mgt_json_get(t, "shape") : NULL;
  if (!sh || sh->type != MGT_JSON_ARRAY || sh->len > MGT_ST_MAX_DIMS) return -1;
  for (size_t d = 0; d < sh->len; d++) {
    size_t v = 0;
    if (!as_size(&sh->items[d], &v)) return -1;
    shape[d] = (int64_t)v;
  }
  return (int)sh->len;
}

mgt_status mgt_safetensors_read(const mgt_safetensors *f, const char *name, int ndim,
                                const int64_t *shape, float *out) {
  const mgt_json *t = mgt_json_get(f->header, name);
  MGT_REQUIRE(t && t->type == MGT_JSON_OBJECT, "%s: tensor %s is missing", f->path, name);
  const mgt_json *dt = mgt_json_get(t, "dtype"), *sh = mgt_json_get(t, "shape"),
                 *of = mgt_json_get(t, "data_offsets");
  int esize = 0, bf16 = 0;
  if (dt && dt->type == MGT_JSON_STRING) {
    if (mgt_json_is(dt, "F32")) esize = 4;
    if (mgt_json_is(dt, "F16")) esize = 2;
    if (mgt_json_is(dt, "BF16")) esize = 2, bf16 = 1;
  }
  MGT_REQUIRE(esize, "%s: tensor %s is not of dtype F32, F16 or BF16", f->path, name);
  int same = sh && sh->type == MGT_JSON_ARRAY && sh->len == (size_t)ndim;
  for (int d = 0; same && d < ndim; d++) {
    size_t v;
    same = as_size(&sh->items[d], &v) && v == (size_t)shape[d];
  }
  if (!same) {
    char want[160] = "";
    for (int d = 0; d < ndim; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
               (long long)shape[d]);
    MGT_FAIL(MGT_ERR_INPUT, "%s: tensor %s does not have the shape [%s] the model needs", f->path,
             name, want);
  }
  const size_t n = numel(ndim, shape);
  size_t b0 = 0, b1 = 0;
  MGT_REQUIRE(of && of->type == MGT_JSON_ARRAY && of->len == 2 && as_size(&of->items[0], &b0) &&
                  as_size(&of->items[1], &b1) && b0 <= b1 && b1 <= f->data_len &&
                  b1 - b0 == n * (size_t)esize,
              "%s: tensor %s: data_offsets do not give %zu elements inside the file", f->path, name,
              n);
  const unsigned char *src = f->data + b0;
  for (size_t e = 0; e < n; e++) {
    if (esize == 4) {
      memcpy(&out[e], src + 4 * e, 4);
    } else {
      uint16_t h;
      memcpy(&h, src + 2 * e, 2);
      if (bf16) {
        uint32_t bits = (uint32_t)h << 16;
        memcpy(&out[e], &bits, 4);
      } else {
        out[e] = half_to_float(h);
      }
    }
  }
  return MGT_OK;
}

/* ---- a directory of Hugging Face weights, one file or several ---- */

struct mgt_st_dir {
  char dir[MGT_PATH_MAX], index[MGT_PATH_MAX + 40];
  mgt_safetensors **f; /* the files, in the order the index first names them */
  const char **names;  /* their file names (in the index's parser) */
  int n;
  char *text; /* the index, and its weight_map (NULL for one file) */
  mgt_json_parser *jp;
  const mgt_json *map;
  int index_ignored; /* model.safetensors was read, an index beside it was not */
};

void mgt_st_dir_close(mgt_st_dir **pd) {
  mgt_st_dir *d = *pd;
  if (!d) return;
  for (int i = 0; i < d->n; i++)
    mgt_safetensors_close(&d->f[i]);
  free(d->f);
  free(d->names);
  free(d->text);
  mgt_json_parser_destroy(&d->jp);
  free(d);
  *pd = NULL;
}

static mgt_status dir_add(mgt_st_dir *d, const char *name) {
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->names[i], name)) return MGT_OK;
  MGT_REQUIRE(name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, ".."),
              "%s: weight_map names '%s', not a file of the directory", d->index, name);
  mgt_safetensors **f = realloc(d->f, sizeof *f * (size_t)(d->n + 1));
  if (f) d->f = f;
  const char **nm = f ? realloc(d->names, sizeof *nm * (size_t)(d->n + 1)) : NULL;
  if (!nm) MGT_FAIL(MGT_ERR_NOMEM, "out of memory opening %s", d->index);
  d->names = nm;
  char path[2 * MGT_PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", d->dir, name);
  d->names[d->n] = name;
  d->f[d->n] = NULL;
  MGT_CHECK(mgt_safetensors_open(path, &d->f[d->n]));
  d->n++;
  return MGT_OK;
}

mgt_status mgt_st_dir_open(const char *dir, mgt_st_dir **out) {
  *out = NULL;
  mgt_st_dir *d = calloc(1, sizeof *d);
  if (!d) MGT_FAIL(MGT_ERR_NOMEM, "out of memory opening %s", dir);
  mgt_status st = MGT_OK;
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  snprintf(d->index, sizeof d->index, "%s/model.safetensors.index.json", dir);
  char one_path[MGT_PATH_MAX + 32];
  snprintf(one_path, sizeof one_path, "%s/model.safetensors", dir);
  /* one file, where there is one: transformers reads it before an index beside it */
  if (access(one_path, F_OK) == 0 || access(d->index, F_OK) != 0) {
    static const char one[] = "model.safetensors";
    d->index_ignored = access(d->index, F_OK) == 0;
    snprintf(d->index, sizeof d->index, "%s", one_path);
    MGT_TRY(dir_add(d, one));
    *out = d;
    return MGT_OK;
  }
  size_t len = 0;
  const mgt_json *root = NULL;
  MGT_TRY(mgt_read_file("--input", d->index, &d->text, &len));
  MGT_TRY(mgt_json_parser_create(&d->jp));
  MGT_TRY(mgt_json_parse(d->jp, d->text, len, &root));
  d->map = root->type == MGT_JSON_OBJECT ? mgt_json_get(root, "weight_map") : NULL;
  if (!d->map || d->map->type != MGT_JSON_OBJECT || d->map->len == 0)
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: no weight_map object of tensor names and files", d->index);
  for (size_t i = 0; i < d->map->len; i++) {
    const mgt_json *v = &d->map->items[i];
    if (v->type != MGT_JSON_STRING || strlen(v->str) != v->len)
      MGT_GOTO_FAIL(MGT_ERR_INPUT, "%s: weight_map's %s is not a file name", d->index,
                    d->map->keys[i]);
    MGT_TRY(dir_add(d, v->str));
  }
  *out = d;
  return MGT_OK;
done:
  mgt_st_dir_close(&d);
  return st;
}

/* The file holding tensor `name`, or NULL when the index maps it nowhere. */
static const mgt_safetensors *file_of(const mgt_st_dir *d, const char *name) {
  if (!d->map) return d->f[0];
  const mgt_json *v = mgt_json_get(d->map, name);
  for (int i = 0; v && v->type == MGT_JSON_STRING && i < d->n; i++)
    if (!strcmp(d->names[i], v->str)) return d->f[i];
  return NULL;
}

int mgt_st_dir_index_ignored(const mgt_st_dir *d) { return d->index_ignored; }

int mgt_st_dir_count(const mgt_st_dir *d) {
  if (d->map) return (int)d->map->len;
  int n = 0;
  for (size_t i = 0; i < d->f[0]->header->len; i++)
    n += strcmp(d->f[0]->header->keys[i], "__metadata__") != 0;
  return n;
}

const char *mgt_st_dir_name(const mgt_st_dir *d, int i) {
  if (d->map) return i >= 0 && (size_t)i < d->map->len ? d->map->keys[i] : NULL;
  const mgt_json *h = d->f[0]->header;
  for (size_t k = 0; k < h->len; k++)
    if (strcmp(h->keys[k], "__metadata__") != 0 && i-- == 0) return h->keys[k];
  return NULL;
}

int mgt_st_dir_dims(const mgt_st_dir *d, const char *name, int64_t *shape) {
  const mgt_safetensors *f = file_of(d, name);
  return f ? mgt_safetensors_dims(f, name, shape) : -1;
}

mgt_status mgt_st_dir_read(const mgt_st_dir *d, const char *name, int ndim, const int64_t *shape,
                           float *out) {
  const mgt_safetensors *f = file_of(d, name);
  MGT_REQUIRE(f, "%s: tensor %s is missing", d->index, name);
  return mgt_safetensors_read(f, name, ndim, shape, out);
}

/* The shard number and count of a name of the form model-00001-of-00003.safetensors (what
   save_pretrained and mgt_st_dir_write call them), with ".tmp" after it when tmp; 0 if not. */
static int shard_name(const char *name, int *k, int *of, int tmp) {
  if (strlen(name) != (tmp ? 36u : 32u) || strncmp(name, "model-", 6) != 0 ||
      strncmp(name + 11, "-of-", 4) != 0 || strncmp(name + 20, ".safetensors", 12) != 0 ||
      (tmp && strcmp(name + 32, ".tmp") != 0))
    return 0;
  *k = *of = 0;
  for (int i = 0; i < 5; i++) {
    if (name[6 + i] < '0' || name[6 + i] > '9' || name[15 + i] < '0' || name[15 + i] > '9')
      return 0;
    *k = *k * 10 + (name[6 + i] - '0'), *of = *of * 10 + (name[15 + i] - '0');
  }
  return 1;
}

/* Removes what an earlier export into dir left that this one (nf files) did not write: shards
   of another count or beyond nf, the other form's index or single file, and the temporary
   files of an interrupted one. */
static mgt_status prune(const char *dir, int nf) {
  DIR *dp = opendir(dir);
  if (!dp) MGT_FAIL(MGT_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
  mgt_status st = MGT_OK;
  char path[MGT_PATH_MAX + 300];
  for (struct dirent *e; st == MGT_OK && (e = readdir(dp));) {
    int k, of;
    const int shard = shard_name(e->d_name, &k, &of, 0);
    const int stale = (shard && (nf == 1 || of != nf || k < 1 || k > nf)) ||
                      shard_name(e->d_name, &k, &of, 1) ||
                      !strcmp(e->d_name, "model.safetensors.tmp") ||
                      !strcmp(e->d_name, "model.safetensors.index.json.tmp") ||
                      (nf == 1 && !strcmp(e->d_name, "model.safetensors.index.json")) ||
                      (nf > 1 && !strcmp(e->d_name, "model.safetensors"));
    if (!stale) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    st = mgt_remove_file(path);
  }
  closedir(dp);
  return st;
}

mgt_status mgt_st_dir_write(const char *dir, const mgt_st_tensor *t, int n, size_t max_bytes,
                            int *files) {
  char path[MGT_PATH_MAX + 64], index[MGT_PATH_MAX + 48];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  /* files of whole tensors in order, each at most max_bytes of data unless one tensor is more */
  int nf = 0;
  size_t total = 0, in_file = 0;
  for (int i = 0; i < n; i++) {
    const size_t b = 4 * numel(t[i].ndim, t[i].shape);
    if (i == 0 || (in_file > 0 && in_file + b > max_bytes)) nf++, in_file = 0;
    in_file += b, total += b;
  }
  *files = nf;
  MGT_REQUIRE(nf <= 99999,
              "%s: %d files of at most %zu bytes are more than the 99,999 that "
              "Hugging Face's names count: give a larger shard size",
              dir, nf, max_bytes);
  if (nf <= 1) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    MGT_CHECK(mgt_safetensors_write(path, t, n));
    return prune(dir, 1);
  }
  char *json = NULL;
  size_t jl = 0;
  FILE *ms = open_memstream(&json, &jl);
  if (!ms) MGT_FAIL(MGT_ERR_NOMEM, "out of memory writing %s", index);
  fprintf(ms, "{\n  \"metadata\": {\"total_size\": %zu},\n  \"weight_map\": {", total);
  mgt_status st = MGT_OK;
  for (int i = 0, k = 0; i < n && st == MGT_OK; k++) {
    int j = i;
    in_file = 0;
    while (j < n && (j == i || in_file + 4 * numel(t[j].ndim, t[j].shape) <= max_bytes))
      in_file += 4 * numel(t[j].ndim, t[j].shape), j++;
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, nf);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st = mgt_safetensors_write(path, t + i, j - i);
    for (; i < j; i++) {
      fprintf(ms, "%s\n    ", i ? "," : "");
      mgt_json_write_string(ms, t[i].name);
      fprintf(ms, ": \"%s\"", name);
    }
  }
  fprintf(ms, "\n  }\n}\n");
  if (fclose(ms) != 0 && st == MGT_OK) st = MGT_ERROR(MGT_ERR_NOMEM, "out of memory");
  if (st == MGT_OK) st = mgt_write_file("--output", index, json, jl);
  free(json);
  MGT_CHECK(st);
  return prune(dir, nf);
}
