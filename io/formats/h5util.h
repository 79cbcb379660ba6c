/* Private to io/: checking HDF5 calls, small attribute helpers, and publishing finished files. */
#pragma once

#include <hdf5.h>
#include <stdint.h>

#include "mgt/common.h"

/* HDF5 1.10.7 through 1.14, whatever default API the library was built with (api=v18 ... v114):
   the object visitor's info struct changed in 1.12 (H5Ovisit3, H5O_info2_t), and per-file
   locking exists from 1.10.7 and 1.12.1 (not in 1.12.0). */
#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t mgt_h5_oinfo;
#define MGT_H5_VISIT(obj, cb, data)                                                                \
  H5Ovisit3((obj), H5_INDEX_NAME, H5_ITER_INC, (cb), (data), H5O_INFO_BASIC)
#else
typedef H5O_info_t mgt_h5_oinfo;
#define MGT_H5_VISIT(obj, cb, data)                                                                \
  H5Ovisit2((obj), H5_INDEX_NAME, H5_ITER_INC, (cb), (data), H5O_INFO_BASIC)
#endif
#if H5_VERSION_GE(1, 12, 1) || (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)
#define MGT_H5_NO_LOCK(fapl) H5Pset_file_locking((fapl), 0, 1)
#else
#define MGT_H5_NO_LOCK(fapl) 0 /* 1.12.0: HDF5_USE_FILE_LOCKING=FALSE in the environment */
#endif

/* Opens the dataset at path (from loc) where every link on the way is a hard one and its
   elements lie in this file: an external or soft link, external storage or a virtual dataset
   would have HDF5 open another file when read (a FIFO there blocks for ever; any file would lend
   its bytes), and is refused with MGT_ERR_INPUT naming `what`. *out = -1 (and MGT_OK) when
   nothing is at path, which the caller reports in its own words. */
MGT_NODISCARD mgt_status mgt_h5_open_dataset(hid_t loc, const char *path, const char *what,
                                             hid_t *out);

/* Turns off HDF5's printing of error stacks; errors are reported through mgt_status. */
void mgt_h5_quiet(void);

/* Fails with MGT_ERR_IO if `ret` is negative, naming the call, `what` (a file) and HDF5's
   innermost error description. */
MGT_NODISCARD mgt_status mgt_h5_status(int64_t ret, const char *what, const char *file, int line,
                                       const char *func, const char *call);
#define MGT_H5(call, what)                                                                         \
  MGT_CHECK(mgt_h5_status((int64_t)(call), (what), __FILE__, __LINE__, __func__, #call))
#define MGT_H5_TRY(call, what)                                                                     \
  MGT_TRY(mgt_h5_status((int64_t)(call), (what), __FILE__, __LINE__, __func__, #call))

/* Scalar attributes on an object. Writes are collective when the file is open in parallel. */
MGT_NODISCARD mgt_status mgt_h5_write_i64(hid_t obj, const char *name, int64_t v, const char *what);
MGT_NODISCARD mgt_status mgt_h5_write_str(hid_t obj, const char *name, const char *v,
                                          const char *what);
/* Reads fail with MGT_ERR_INPUT naming `what` when the attribute is missing or mistyped. */
MGT_NODISCARD mgt_status mgt_h5_write_u64(hid_t obj, const char *name, uint64_t v,
                                          const char *what);
/* Parallel files are written in phases that every rank agrees on (create, reserve, write,
   attributes). mgt_h5_reserve, once every dataset is created, reserves the file's blocks
   (mgt_reserve_file, by rank 0 of comm; the file's size, or `at_least` bytes where that is
   larger or HDF5 cannot tell the size) so that no collective write runs out of space on one
   rank only. mgt_h5_close closes the file for everyone with the agreed status `st`: after a
   failure it first gives the space back (truncates the file, which the caller then removes)
   and returns `st` unchanged. Both collective over comm. */
MGT_NODISCARD mgt_status mgt_h5_reserve(hid_t file, const char *path, MPI_Comm comm,
                                        uint64_t at_least, const char *what);
MGT_NODISCARD mgt_status mgt_h5_close(hid_t file, const char *path, MPI_Comm comm, mgt_status st,
                                      const char *what);

/* Integers must be stored as one integer (not a float, not an array). */
MGT_NODISCARD mgt_status mgt_h5_read_i64(hid_t obj, const char *name, int64_t *v, const char *what);
MGT_NODISCARD mgt_status mgt_h5_read_u64(hid_t obj, const char *name, uint64_t *v,
                                         const char *what);
/* Strings may be fixed-length or variable-length (h5py writes str as the latter). */
MGT_NODISCARD mgt_status mgt_h5_read_str(hid_t obj, const char *name, char *buf, size_t n,
                                         const char *what);
/* The whole string, allocated with mgt_calloc; the caller frees it with mgt_free. */
MGT_NODISCARD mgt_status mgt_h5_read_str_dup(hid_t obj, const char *name, char **out,
                                             const char *what);
