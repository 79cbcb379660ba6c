/* Builds against the installed headers and library: parses flags and plans memory. */
#include <stdio.h>
#include <string.h>

#include "mgt/config.h"
#include "mgt/gpt.h"

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
  printf("consumer: %d layers, %zu parameter bytes\n", c.num_layers, m.params);
  return c.num_layers == 3 && m.params > 0 ? 0 : 1;
}
