/* Private to the checkpoint files (io/tensors/checkpoint.c, ckpt_verify.c). */
#pragma once

#include <hdf5.h>

#include "mgt/common.h"

/* Opens the checkpoint file at path read-only and checks it is complete and of a format this
   version reads (1 or 2). */
mgt_status ckpt_open(const char *path, hid_t *out);
