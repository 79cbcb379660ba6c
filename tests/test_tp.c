/* Each tensor-parallel layer against the unsplit layer on random inputs, run under mpiexec
   with 2 or 4 ranks. Every rank draws the same full tensors, takes its shard, and compares
   with a float64 computation of the whole layer. Shard sizes of 1 are included. */
#include <mpi.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/grid.h"
#include "mgt/rng.h"
#include "mgt/tp.h"
#include "testutil.h"

static mgt_tp tp;
static int R, P; /* tp rank and size */

static float *rnd(size_t n) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  t_fill(x, n, 1);
  return x;
}
static double *dz(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void test_column(int N, int in, int out) {
  int ol = out / P;
  float *x = rnd((size_t)N * in), *W = rnd((size_t)out * in), *b = rnd(out),
        *dy = rnd((size_t)N * out);
  float *y = malloc(sizeof(float) * N * ol), *dyl = malloc(sizeof(float) * N * ol);
  float *dx = malloc(sizeof(float) * N * in), *dW = malloc(sizeof(float) * ol * in),
        *db = malloc(sizeof(float) * ol);
  double *ry = dz((size_t)N * ol), *rdx = dz((size_t)N * in), *rdW = dz((size_t)ol * in),
         *rdb = dz(ol);
  const float *Wl = W + (size_t)R * ol * in, *bl = b + R * ol;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < ol; o++) {
      double s = bl[o];
      for (int i = 0; i < in; i++)
        s += (double)x[n * in + i] * Wl[o * in + i];
      ry[n * ol + o] = s;
      dyl[n * ol + o] = dy[n * out + R * ol + o];
    }
  for (int n = 0; n < N; n++)
    for (int i = 0; i < in; i++)
      for (int o = 0; o < out; o++)
        rdx[n * in + i] += (double)dy[n * out + o] * W[o * in + i];
  for (int o = 0; o < ol; o++) {
    for (int n = 0; n < N; n++) {
      rdb[o] += dyl[n * ol + o];
      for (int i = 0; i < in; i++)
        rdW[o * in + i] += (double)dyl[n * ol + o] * x[n * in + i];
    }
  }
  T_OK(mgt_tp_column_forward(&tp, y, x, Wl, bl, N, in, ol));
  T_CLOSE("column forward", y, ry, (size_t)N * ol, 1e-5, 1e-5);
  T_OK(mgt_tp_column_backward(&tp, dx, dW, db, dyl, x, Wl, N, in, ol, 0));
  T_CLOSE("column backward dx (all-reduced)", dx, rdx, (size_t)N * in, 1e-5, 1e-5);
  T_CLOSE("column backward dW", dW, rdW, (size_t)ol * in, 1e-5, 1e-5);
  T_CLOSE("column backward db", db, rdb, ol, 1e-5, 1e-5);
  free(x), free(W), free(b), free(dy), free(y), free(dyl), free(dx), free(dW), free(db);
  free(ry), free(rdx), free(rdW), free(rdb);
}

static void test_row(int N, int in, int out) {
  int il = in / P;
  float *x = rnd((size_t)N * in), *W = rnd((size_t)out * in), *b = rnd(out),
        *dy = rnd((size_t)N * out);
  float *xl = malloc(sizeof(float) * N * il), *Wl = malloc(sizeof(float) * out * il);
  float *y = malloc(sizeof(float) * N * out), *dx = malloc(sizeof(float) * N * il),
        *dW = malloc(sizeof(float) * out * il), *db = malloc(sizeof(float) * out);
  double *ry = dz((size_t)N * out), *rdx = dz((size_t)N * il), *rdW = dz((size_t)out * il),
         *rdb = dz(out);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < il; i++)
      xl[n * il + i] = x[n * in + R * il + i];
  for (int o = 0; o < out; o++)
    for (int i = 0; i < il; i++)
      Wl[o * il + i] = W[o * in + R * il + i];
  for (int n = 0; n < N; n++)
    for (int o = 0; o < out; o++) {
      double s = b[o];
      for (int i = 0; i < in; i++)
        s += (double)x[n * in + i] * W[o * in + i];
      ry[n * out + o] = s;
      rdb[o] += dy[n * out + o];
    }
  for (int n = 0; n < N; n++)
    for (int i = 0; i < il; i++)
      for (int o = 0; o < out; o++) {
        rdx[n * il + i] += (double)dy[n * out + o] * Wl[o * il + i];
        rdW[o * il + i] += (double)dy[n * out + o] * xl[n * il + i];
      }
  T_OK(mgt_tp_row_forward(&tp, y, xl, Wl, b, N, il, out));
  T_CLOSE("row forward (all-reduced)", y, ry, (size_t)N * out, 1e-5, 1e-5);
  T_OK(mgt_tp_row_backward(&tp, dx, dW, db, dy, xl, Wl, N, il, out, 0));
  T_CLOSE("row backward dx", dx, rdx, (size_t)N * il, 1e-5, 1e-5);
  T_CLOSE("row backward dW", dW, rdW, (size_t)out * il, 1e-5, 1e-5);
  T_CLOSE("row backward db", db, rdb, out, 1e-5, 1e-5);
  free(x), free(W), free(b), free(dy), free(xl), free(Wl), free(y), free(dx), free(dW), free(db);
  free(ry), free(rdx), free(rdW), free(rdb);
}

static void test_embedding(int N, int C, int Vl) {
  int V = Vl * P;
  float *wte = rnd((size_t)V * C), *out = malloc(sizeof(float) * N * C);
  int32_t *tok = malloc(sizeof(int32_t) * N);
  double *r = dz((size_t)N * C);
  for (int n = 0; n < N; n++)
    tok[n] = (int32_t)(t_next() % (uint64_t)V);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      r[n * C + c] = wte[(size_t)tok[n] * C + c];
  T_OK(mgt_tp_embedding_forward(&tp, out, tok, wte + (size_t)R * Vl * C, N, C, R * Vl, Vl));
  T_CLOSE("vocab-parallel embedding", out, r, (size_t)N * C, 0, 0);
  free(wte), free(out), free(tok), free(r);
}

/* V real ids over P shards of Vl columns; the last shards may be padding. */
static void test_xent(int N, int V, int Vl) {
  float *full = rnd((size_t)N * V), *lg = malloc(sizeof(float) * N * Vl);
  int32_t *tg = malloc(sizeof(int32_t) * N);
  float bufs[3][64];
  mgt_tp_xent x = {bufs[0], bufs[1], bufs[2]};
  double *rg = dz((size_t)N * Vl), ref = 0;
  int v0 = R * Vl, nv = V - v0 < 0 ? 0 : (V - v0 > Vl ? Vl : V - v0);
  float scale = 0.5f;
  for (int n = 0; n < N; n++)
    tg[n] = (int32_t)(t_next() % (uint64_t)V);
  for (int n = 0; n < N; n++) {
    double mx = -1e300, s = 0;
    for (int j = 0; j < V; j++)
      mx = full[n * V + j] > mx ? full[n * V + j] : mx;
    for (int j = 0; j < V; j++)
      s += exp(full[n * V + j] - mx);
    ref += log(s) + mx - full[n * V + tg[n]];
    for (int j = 0; j < Vl; j++) {
      lg[n * Vl + j] = j < nv ? full[n * V + v0 + j] : 1e3f; /* padding must not count */
      if (j < nv) rg[n * Vl + j] = scale * (exp(full[n * V + v0 + j] - mx) / s - (tg[n] == v0 + j));
    }
  }
  double loss = 0;
  T_OK(mgt_tp_xent_forward(&tp, &x, lg, tg, N, Vl, nv, v0, 1, &loss));
  T_CHECK(fabs(loss - ref) <= 1e-5 * fabs(ref), "vocab-parallel loss %.9g, unsplit %.9g", loss,
          ref);
  T_OK(mgt_tp_xent_backward(&tp, &x, lg, tg, N, Vl, nv, v0, scale));
  T_CLOSE("vocab-parallel cross-entropy gradient", lg, rg, (size_t)N * Vl, 1e-7, 1e-4);
  free(full), free(lg), free(tg), free(rg);
}

/* QKV column-parallel by heads, attention local, output row-parallel: the split block
   against the same block computed unsplit with the backend on one rank. */
static void test_attention_block(int B, int T, int H, int hd) {
  const mgt_backend *be = tp.be;
  int C = H * hd, Hl = H / P, Cl = Hl * hd, N = B * T;
  mgt_dropout d = {0.2f, 3, 11, 0, MGT_DROPOUT_ATTN, 0};
  float *x = rnd((size_t)N * C), *Wqkv = rnd((size_t)3 * C * C), *bqkv = rnd(3 * C),
        *Wo = rnd((size_t)C * C), *bo = rnd(C), *dy = rnd((size_t)N * C);
  /* unsplit: plain GEMMs on this rank */
  float *qkv = malloc(sizeof(float) * N * 3 * C), *att = malloc(sizeof(float) * N * C),
        *Pm = malloc(sizeof(float) * B * H * T * T), *scr = malloc(sizeof(float) * B * H * T * T),
        *yref = malloc(sizeof(float) * N * C);
  T_OK(mgt_be_gemm(be, 0, 1, N, 3 * C, C, 1, x, C, Wqkv, C, 0, qkv, 3 * C));
  T_OK(mgt_be_add_bias(be, qkv, bqkv, N, 3 * C));
  T_OK(mgt_be_attention_forward(be, att, Pm, qkv, B, T, H, hd, 0, H, NULL, NULL, &d, scr));
  T_OK(mgt_be_gemm(be, 0, 1, N, C, C, 1, att, C, Wo, C, 0, yref, C));
  T_OK(mgt_be_add_bias(be, yref, bo, N, C));
  /* split: rows [q_r; k_r; v_r] of Wqkv and columns r of Wo */
  float *Wq = malloc(sizeof(float) * 3 * Cl * C), *bq = malloc(sizeof(float) * 3 * Cl),
        *Wol = malloc(sizeof(float) * C * Cl), *ql = malloc(sizeof(float) * N * 3 * Cl),
        *al = malloc(sizeof(float) * N * Cl), *y = malloc(sizeof(float) * N * C);
  for (int part = 0; part < 3; part++) {
    memcpy(Wq + (size_t)part * Cl * C, Wqkv + ((size_t)part * C + R * Cl) * C,
           sizeof(float) * Cl * C);
    memcpy(bq + part * Cl, bqkv + part * C + R * Cl, sizeof(float) * Cl);
  }
  for (int o = 0; o < C; o++)
    memcpy(Wol + (size_t)o * Cl, Wo + (size_t)o * C + R * Cl, sizeof(float) * Cl);
  T_OK(mgt_tp_column_forward(&tp, ql, x, Wq, bq, N, C, 3 * Cl));
  T_OK(mgt_be_attention_forward(be, al, Pm, ql, B, T, Hl, hd, R * Hl, H, NULL, NULL, &d, scr));
  T_OK(mgt_tp_row_forward(&tp, y, al, Wol, bo, N, Cl, C));
  double *r = dz((size_t)N * C);
  for (size_t i = 0; i < (size_t)N * C; i++)
    r[i] = yref[i];
  T_CLOSE("attention block split by heads", y, r, (size_t)N * C, 1e-5, 1e-5);
  free(x), free(Wqkv), free(bqkv), free(Wo), free(bo), free(dy), free(qkv), free(att), free(Pm),
      free(scr), free(yref), free(Wq), free(bq), free(Wol), free(ql), free(al), free(y), free(r);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, size, &grid));
  T_OK(mgt_backend_cpu_create(&be));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  tp.be = be, tp.comm = comm, tp.grid = grid;
  R = grid->tp_rank, P = grid->tp;
  test_column(7, 5, P); /* one output per rank */
  test_column(9, 6, 3 * P);
  test_row(7, P, 6); /* one input per rank */
  test_row(5, 2 * P, 3);
  test_embedding(11, 4, 1); /* one vocabulary row per rank */
  test_embedding(13, 5, 3);
  test_xent(6, P, 1);
  test_xent(7, 2 * P - 1, 2);       /* the last shard holds one padding column */
  test_attention_block(2, 6, P, 4); /* one head per rank */
  test_attention_block(1, 9, 2 * P, 3);
  int fails = t_failures, total = 0;
  MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (grid->rank == 0)
    printf("test_tp (tp=%d): %d checks per rank, %d failures on all ranks\n", P, t_checks, total);
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return total ? 1 : 0;
}
