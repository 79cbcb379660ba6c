/* The safetensors file format (Hugging Face): an 8-byte little-endian header length, a JSON
   header naming each tensor's dtype, shape and byte range, then the data. Named tensors only:
   which model they belong to is the caller's business. Not collective. */
#pragma once

#include <stdint.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MGT_ST_MAX_DIMS = 8 };

/* A float32 tensor to write. */
typedef struct mgt_st_tensor {
  const char *name;
  int ndim;
  int64_t shape[MGT_ST_MAX_DIMS];
  const float *data; /* row-major, prod(shape) floats */
} mgt_st_tensor;

/* Writes the tensors (float32, in the given order) to `path` through a temporary file that is
   published durably (mgt_publish_file) once complete. */
MGT_NODISCARD mgt_status mgt_safetensors_write(const char *path, const mgt_st_tensor *t, int n);

typedef struct mgt_safetensors mgt_safetensors;

/* Maps `path` and parses its header. Refused: a file shorter than its header, a tensor whose
   dtype, shape and byte range disagree or fall outside the file, tensors sharing bytes. */
MGT_NODISCARD mgt_status mgt_safetensors_open(const char *path, mgt_safetensors **out);
void mgt_safetensors_close(mgt_safetensors **f);
/* The shape of tensor `name` (up to MGT_ST_MAX_DIMS) and its number of dimensions, or -1 when
   the file has no such tensor. */
int mgt_safetensors_dims(const mgt_safetensors *f, const char *name, int64_t *shape);
/* Reads tensor `name` (F32, F16 or BF16) as float32 into out. It must exist with exactly the
   shape (ndim, shape), and its byte range must lie in the file; otherwise MGT_ERR_INPUT naming
   the tensor and what is wrong. */
MGT_NODISCARD mgt_status mgt_safetensors_read(const mgt_safetensors *f, const char *name, int ndim,
                                              const int64_t *shape, float *out);

/* A directory of Hugging Face weights: DIR/model.safetensors, or the files that
   DIR/model.safetensors.index.json's weight_map names (a large model's shards), each tensor read
   from the file the map gives it. */
typedef struct mgt_st_dir mgt_st_dir;
MGT_NODISCARD mgt_status mgt_st_dir_open(const char *dir, mgt_st_dir **out);
void mgt_st_dir_close(mgt_st_dir **d);
/* Whether DIR has both model.safetensors and an index: the single file is read, as transformers
   does, and the index is not. */
int mgt_st_dir_index_ignored(const mgt_st_dir *d);
/* The tensors the directory holds (the index's names, or the single file's): how many, and the
   name of the i-th (valid while d is open). */
int mgt_st_dir_count(const mgt_st_dir *d);
const char *mgt_st_dir_name(const mgt_st_dir *d, int i);
/* As mgt_safetensors_dims and mgt_safetensors_read, in the file holding the tensor. */
int mgt_st_dir_dims(const mgt_st_dir *d, const char *name, int64_t *shape);
MGT_NODISCARD mgt_status mgt_st_dir_read(const mgt_st_dir *d, const char *name, int ndim,
                                         const int64_t *shape, float *out);
/* Writes the tensors into dir: one model.safetensors, or where they hold more than max_bytes,
   model-0000k-of-0000n.safetensors files of whole tensors in order (each at most max_bytes unless
   one tensor is larger) with model.safetensors.index.json, as Hugging Face's save_pretrained
   shards. After them, what an earlier export into dir left and this one did not write (shards of
   another count, the other form's index or file, temporary files) is removed. *files: how many. */
MGT_NODISCARD mgt_status mgt_st_dir_write(const char *dir, const mgt_st_tensor *t, int n,
                                          size_t max_bytes, int *files);

#ifdef __cplusplus
}
#endif
