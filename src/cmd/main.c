/* The mgt executable: MPI setup around the command line. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/cli.h"
#include "mgt/common.h"

int main(int argc, char **argv) {
  int provided = 0, want = MPI_THREAD_FUNNELED;
  /* a background checkpoint writer calls MPI beside the training thread */
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--async-save") == 0) want = MPI_THREAD_MULTIPLE;
  if (MPI_Init_thread(&argc, &argv, want, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "mgt: error: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mgt_error_set_rank(rank);
  mgt_cli_configure_threads(MPI_COMM_WORLD);
  int rc = mgt_cli_main(argc, argv, MPI_COMM_WORLD);
  fflush(stdout);
  MPI_Finalize();
  return rc;
}
