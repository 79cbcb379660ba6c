/* Builds against the installed headers and library: every public header, flags parsed, memory
   planned, a model described as the state list its checkpoints hold. */
#include <stdio.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/checkpoint.h"
#include "mgt/comm.h"
#include "mgt/common.h"
#include "mgt/config.h"
#include "mgt/data.h"
#include "mgt/dataset.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "mgt/optim.h"
#include "mgt/state.h"
#include "mgt/tokenizer.h"
#include "mgt/train.h"

int main(void) {
  mgt_config c;
  mgt_config_defaults(&c);
  char *argv[] = {"mgt", "train", "--mock-data", "--num-layers", "3"};
  int help = 0;
  if (mgt_config_parse(&c, 5, argv, 2, &help) != MGT_OK || mgt_config_finalize(&c, 1) != MGT_OK) {
    mgt_error_print(stderr);
    return 1;
  }
  mgt_gpt_memory m;
  mgt_gpt_memory_plan(&c, 1, &m);
  mgt_state s = {0};
  if (mgt_gpt_describe(&c, 1, 0, 0, &s) != MGT_OK) return 1;
  int64_t n = 0;
  for (int i = 0; i < s.n; i++)
    n += mgt_state_numel(&s.t[i]);
  printf("consumer: %d layers, %zu parameter bytes, %d tensors of %lld elements\n", c.num_layers,
         m.params, s.n, (long long)n);
  int ok =
      c.num_layers == 3 && m.params > 0 && s.n == 2 + 12 * 3 + 2 && n == mgt_gpt_logical_params(&c);
  mgt_state_fini(&s);
  return ok ? 0 : 1;
}
