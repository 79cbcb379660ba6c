/* The data-parallel collectives of one GPT-2 124M step on their own: N floats in pieces of the
   default --ddp-bucket-size, reduced as the trainer reduces them. Prints seconds per pass for
   the all-reduce, the distributed optimizer's reduce-scatter with its counts (each rank owns
   one contiguous cut of the buffer, so most pieces go to one rank), the same with every piece
   cut evenly, and its all-gather. Usage: mpiexec -n P bench_pieces [floats] [piece] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* The counts of piece [o, o + n) over P contiguous cuts of N, and their offsets in the piece. */
static void owner_counts(size_t N, int P, size_t o, size_t n, int *cnt, int *dis) {
  for (int q = 0; q < P; q++) {
    size_t lo = N * (size_t)q / (size_t)P, hi = N * (size_t)(q + 1) / (size_t)P;
    size_t a = o > lo ? o : lo, b = o + n < hi ? o + n : hi;
    cnt[q] = b > a ? (int)(b - a) : 0;
    dis[q] = b > a ? (int)(a - o) : 0;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const size_t N = argc > 1 ? strtoull(argv[1], NULL, 10) : 124439808,
               piece = argc > 2 ? strtoull(argv[2], NULL, 10) : 4194304;
  float *g = calloc(N, sizeof(float)), *out = calloc(N / (size_t)P + piece, sizeof(float));
  int *cnt = malloc(sizeof(int) * (size_t)P), *dis = malloc(sizeof(int) * (size_t)P);
  if (!g || !out || !cnt || !dis) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int rep = 0; rep < 3; rep++) {
    double t[5];
    t[0] = MPI_Wtime();
    for (size_t o = 0; o < N; o += piece) {
      size_t n = N - o < piece ? N - o : piece;
      MPI_Allreduce(MPI_IN_PLACE, g + o, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    t[1] = MPI_Wtime();
    for (size_t o = 0; o < N; o += piece) {
      size_t n = N - o < piece ? N - o : piece;
      owner_counts(N, P, o, n, cnt, dis);
      MPI_Reduce_scatter(g + o, out, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    t[2] = MPI_Wtime();
    for (size_t o = 0; o < N; o += piece) {
      size_t n = N - o < piece ? N - o : piece;
      for (int q = 0; q < P; q++)
        cnt[q] = (int)(n * (size_t)(q + 1) / (size_t)P - n * (size_t)q / (size_t)P);
      MPI_Reduce_scatter(g + o, out, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    t[3] = MPI_Wtime();
    for (size_t o = 0; o < N; o += piece) {
      size_t n = N - o < piece ? N - o : piece;
      owner_counts(N, P, o, n, cnt, dis);
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g + o, cnt, dis, MPI_FLOAT,
                     MPI_COMM_WORLD);
    }
    t[4] = MPI_Wtime();
    if (rank == 0)
      printf("%zu floats in pieces of %zu on %d ranks: all-reduce %.3f s, reduce-scatter "
             "(owner cuts) %.3f s, reduce-scatter (even cuts) %.3f s, all-gather (owner cuts) "
             "%.3f s\n",
             N, piece, P, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]);
  }
  free(g), free(out), free(cnt), free(dis);
  MPI_Finalize();
  return 0;
}
