/* Sample sources: see include/mgt/data.h. */
#include "mgt/data.h"

void mgt_data_destroy(mgt_data *data) {
  if (data->destroy && data->ctx) data->destroy(data->ctx);
  data->ctx = NULL;
}
