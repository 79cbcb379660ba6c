/* TensorBoard event files, written by hand: each record is TFRecord framing (little-endian
   uint64 length, masked CRC32C of the length, the data, masked CRC32C of the data) around a
   serialized tensorflow.Event (wall_time = 1, step = 2, file_version = 3, summary = 5; a
   Summary's Value: tag = 1, simple_value = 2). Scalars only. One writer per file, used by one
   thread; not collective (the trainer writes from rank 0). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes: TFRecord's checksum. */
uint32_t mgt_crc32c(const void *data, size_t n);

/* Creates `dir` (mkdir -p) and checks that a file can be created in it (a probe file, removed
   again). Failures are MGT_ERR_INPUT naming --tensorboard-dir and why. */
MGT_NODISCARD mgt_status mgt_tb_check_dir(const char *dir);

typedef struct mgt_tb mgt_tb;

/* Creates `dir` if missing and a new event file in it, events.out.tfevents.<unix
   seconds>.<hostname> (with a counter appended should that name exist), whose first record
   (step 0) carries file_version "brain.Event:2"; flushed. Free with mgt_tb_destroy. */
MGT_NODISCARD mgt_status mgt_tb_create(const char *dir, mgt_tb **out);
/* Closes the file; NULLs *w. */
void mgt_tb_destroy(mgt_tb **w);
/* The event file's path. */
const char *mgt_tb_path(const mgt_tb *w);

/* Adds the scalar `tag` = (float)value to the summary of the next event. NaN and infinities
   are written as such. Fails (MGT_ERR_INTERNAL) when the event would exceed 64 KiB. */
MGT_NODISCARD mgt_status mgt_tb_add(mgt_tb *w, const char *tag, double value);
/* Writes one event at `step` holding the scalars added since the last commit (none: nothing
   is written) and flushes the file, so that a live TensorBoard, or a reader after the process
   is killed, sees it. A failed write is MGT_ERR_IO. */
MGT_NODISCARD mgt_status mgt_tb_commit(mgt_tb *w, int64_t step);

#ifdef __cplusplus
}
#endif
