/* Every CPU kernel against an independent float64 reference on random inputs of several
   shapes (odd sizes included); every backward against central finite differences of the
   float64 forward. */
#include <float.h>
#include <string.h>

#include "backend_impl.h" /* a copy of the table with a slot emptied */
#include "cpu/cpu.h"
#include "mgt/backend.h"
#include "mgt/config.h"
#include "mgt/rng.h"
#include "testutil.h"

static mgt_backend *be;

static float *fa(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *da(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* Central differences of f at x over every coordinate. */
typedef double (*objective)(const double *x, void *ctx);
static void fd_grad(objective f, double *x, size_t n, void *ctx, double *g) {
  for (size_t i = 0; i < n; i++) {
    double h = 1e-5 * (1.0 + fabs(x[i])), x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x, ctx);
    x[i] = x0 - h;
    double fm = f(x, ctx);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
}

static void to_double(const float *x, double *y, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] = x[i];
}

/* The reference dropout decision for word e of a stream, from the public RNG API. */
static int ref_keep(const mgt_dropout *d, int row, uint64_t e) {
  uint32_t w[4];
  mgt_rng_block(d->seed, mgt_rng_dropout_stream(d->sample_base + (uint64_t)row, d->layer, d->site),
                e >> 2, w);
  uint32_t thr = (uint32_t)((double)d->p * 4294967296.0);
  return w[e & 3] >= thr;
}

/* ---------------- GEMM ---------------- */
static void test_gemm(void) {
  int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 48, 80}, {2, 129, 31}};
  mgt_backend *dnn = NULL; /* fp32 GEMMs through oneDNN, where it is built in */
  T_OK(mgt_backend_cpu_create(&dnn));
  if (mgt_backend_cpu_fp32_onednn(dnn, 1) != MGT_OK) mgt_error_clear(), mgt_backend_destroy(&dnn);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 2; bi++) {
          int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
          float alpha = 0.7f, beta = bi ? 0.5f : 0.0f;
          int lda = ta ? M : K, ldb = tb ? K : N;
          float *A = fa((size_t)M * K), *B = fa((size_t)K * N), *C = fa((size_t)M * N);
          double *R = da((size_t)M * N);
          t_fill(A, (size_t)M * K, 1);
          t_fill(B, (size_t)K * N, 1);
          t_fill(C, (size_t)M * N, 1);
          for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
              double acc = 0;
              for (int k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
              }
              R[i * N + j] = alpha * acc + beta * C[i * N + j];
            }
          float *C0 = malloc(sizeof(float) * (size_t)M * N);
          memcpy(C0, C, sizeof(float) * (size_t)M * N);
          T_OK(mgt_be_gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, N));
          T_CLOSE("gemm", C, R, (size_t)M * N, 1e-5 * sqrt(K), 1e-5);
          if (dnn) { /* the same through oneDNN's fp32 matmul (--cpu-gemm-fp32 onednn) */
            T_OK(mgt_be_gemm(dnn, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, N));
            T_CLOSE("gemm through oneDNN", C0, R, (size_t)M * N, 1e-5 * sqrt(K), 1e-5);
          }
          free(A), free(B), free(C), free(C0), free(R);
        }
  mgt_backend_destroy(&dnn);
}

/* Grouped GEMMs as the experts make them: three with their own M, N and K (one of no rows, one
   of K = 0: C = beta C), in blocks of shared matrices with shared leading dimensions, every
   transposition, against float64. */
static void test_gemm_grouped(void) {
  const int M[] = {5, 0, 9, 3}, N[] = {7, 4, 6, 7}, K[] = {8, 3, 0, 11}, G = 4;
  const int ld = 16; /* wider than every M, N, K */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      const float alpha = 0.7f, beta = ta ? 0.5f : 0.0f;
      float *A = fa(16 * (size_t)ld * G), *B = fa(16 * (size_t)ld * G),
            *C = fa(16 * (size_t)ld * G);
      double *R = da(16 * (size_t)ld * G);
      t_fill(A, 16 * (size_t)ld * G, 1);
      t_fill(B, 16 * (size_t)ld * G, 1);
      t_fill(C, 16 * (size_t)ld * G, 1);
      to_double(C, R, 16 * (size_t)ld * G);
      const float *pa[4], *pb[4];
      float *pc[4];
      for (int g = 0; g < G; g++) {
        const size_t o = 16 * (size_t)ld * g;
        pa[g] = A + o, pb[g] = B + o, pc[g] = C + o;
        for (int i = 0; i < M[g]; i++)
          for (int j = 0; j < N[g]; j++) {
            double acc = 0;
            for (int k = 0; k < K[g]; k++)
              acc += (double)(ta ? A[o + k * ld + i] : A[o + i * ld + k]) *
                     (tb ? B[o + j * ld + k] : B[o + k * ld + j]);
            R[o + i * ld + j] = alpha * acc + beta * C[o + i * ld + j];
          }
      }
      T_OK(mgt_be_gemm_grouped(be, ta, tb, G, M, N, K, alpha, pa, ld, pb, ld, beta, pc, ld));
      T_CLOSE("gemm_grouped (the rest of each block untouched)", C, R, 16 * (size_t)ld * G,
              1e-5 * sqrt(11), 1e-5);
      free(A), free(B), free(C), free(R);
    }
  T_OK(mgt_be_gemm_grouped(be, 0, 0, 0, NULL, NULL, NULL, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1));
  const int m1 = 2, n1 = 2, k1 = 3;
  float v[8] = {0};
  const float *pv = v;
  float *qv = v;
  T_CHECK(mgt_be_gemm_grouped(be, 0, 0, 1, &m1, &n1, &k1, 1.0f, &pv, 2, &pv, 2, 0.0f, &qv, 2) ==
              MGT_ERR_INPUT,
          "a GEMM wider than its leading dimension refused");
}

/* ---------------- bias ---------------- */
static void test_bias(void) {
  int N = 13, C = 37;
  float *y = fa((size_t)N * C), *b = fa(C), *db = fa(C);
  double *r = da((size_t)N * C), *rb = da(C);
  t_fill(y, (size_t)N * C, 1);
  t_fill(b, C, 1);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      r[n * C + c] = (double)y[n * C + c] + b[c];
  T_OK(mgt_be_add_bias(be, y, b, N, C));
  T_CLOSE("add_bias", y, r, (size_t)N * C, 1e-6, 1e-6);
  for (int acc = 0; acc < 2; acc++) {
    t_fill(db, C, 1);
    for (int c = 0; c < C; c++) {
      rb[c] = acc ? db[c] : 0;
      for (int n = 0; n < N; n++)
        rb[c] += y[n * C + c];
    }
    T_OK(mgt_be_bias_backward(be, db, y, N, C, acc));
    T_CLOSE("bias_backward", db, rb, C, 1e-5, 1e-5);
  }
  free(y), free(b), free(db), free(r), free(rb);
}

/* ---------------- LayerNorm ---------------- */
typedef struct ln_ctx {
  int N, C;
  const double *dout; /* objective = sum dout * LN(x; w, b) */
} ln_ctx;

static void ln_ref(const double *x, const double *w, const double *b, int N, int C, double *out) {
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++)
      m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; c++)
      v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    double r = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < C; c++)
      out[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
  }
}

/* x packs [x (N*C) | w (C) | b (C)] */
static double ln_obj(const double *x, void *p) {
  ln_ctx *c = p;
  size_t nc = (size_t)c->N * c->C;
  double *o = da(nc), s = 0;
  ln_ref(x, x + nc, x + nc + c->C, c->N, c->C, o);
  for (size_t i = 0; i < nc; i++)
    s += o[i] * c->dout[i];
  free(o);
  return s;
}

static void test_layernorm(void) {
  int shapes[][2] = {{1, 1}, {3, 7}, {16, 64}, {5, 130}};
  for (size_t s = 0; s < 4; s++) {
    int N = shapes[s][0], C = shapes[s][1];
    size_t nc = (size_t)N * C, np = nc + 2 * (size_t)C;
    float *x = fa(nc), *w = fa(C), *b = fa(C), *out = fa(nc), *mean = fa(N), *rstd = fa(N);
    float *dout = fa(nc), *dx = fa(nc), *dx0 = fa(nc), *dw = fa(C), *db = fa(C);
    double *P = da(np), *ref = da(nc), *g = da(np), *dd = da(nc), *rx = da(nc), *rw = da(C),
           *rb = da(C);
    t_fill(x, nc, 2);
    for (size_t i = 0; i < nc; i++)
      x[i] += 0.5f; /* nonzero mean */
    t_fill(w, C, 1);
    t_fill(b, C, 1);
    t_fill(dout, nc, 1);
    t_fill(dx0, nc, 1);
    to_double(x, P, nc);
    to_double(w, P + nc, C);
    to_double(b, P + nc + C, C);
    ln_ref(P, P + nc, P + nc + C, N, C, ref);
    T_OK(mgt_be_layernorm_forward(be, out, mean, rstd, x, w, b, N, C, 1e-5f));
    T_CLOSE("layernorm_forward", out, ref, nc, 1e-5, 1e-5);
    if (C == 1) { /* the normalized value is 0; only b flows */
      free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dx), free(dx0),
          free(dw), free(db), free(P), free(ref), free(g), free(dd), free(rx), free(rw), free(rb);
      continue;
    }
    to_double(dout, dd, nc);
    ln_ctx c = {N, C, dd};
    fd_grad(ln_obj, P, np, &c, g);
    for (int acc = 0; acc < 2; acc++) {
      memcpy(dx, dx0, nc * sizeof(float));
      t_fill(dw, C, 1);
      t_fill(db, C, 1);
      for (size_t i = 0; i < nc; i++)
        rx[i] = dx0[i] + g[i];
      for (int k = 0; k < C; k++) {
        rw[k] = (acc ? dw[k] : 0) + g[nc + k];
        rb[k] = (acc ? db[k] : 0) + g[nc + C + k];
      }
      T_OK(mgt_be_layernorm_backward(be, dx, dw, db, dout, x, w, mean, rstd, N, C, acc));
      T_CLOSE("layernorm_backward dx", dx, rx, nc, 1e-4, 1e-3);
      T_CLOSE("layernorm_backward dw", dw, rw, C, 1e-4, 1e-3);
      T_CLOSE("layernorm_backward db", db, rb, C, 1e-4, 1e-3);
    }
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dx), free(dx0),
        free(dw), free(db), free(P), free(ref), free(g), free(dd), free(rx), free(rw), free(rb);
  }
}

/* RMSNorm (Llama's): the float64 reference, and finite differences of sum dout * RMSNorm. */
static void rms_ref(const double *x, const double *w, int N, int C, double *out) {
  for (int n = 0; n < N; n++) {
    double v = 0;
    for (int c = 0; c < C; c++)
      v += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++)
      out[n * C + c] = x[n * C + c] * r * w[c];
  }
}

static double rms_obj(const double *x, void *p) {
  ln_ctx *c = p;
  size_t nc = (size_t)c->N * c->C;
  double *o = da(nc), s = 0;
  rms_ref(x, x + nc, c->N, c->C, o);
  for (size_t i = 0; i < nc; i++)
    s += o[i] * c->dout[i];
  free(o);
  return s;
}

static void test_rmsnorm(void) {
  int shapes[][2] = {{1, 1}, {3, 7}, {16, 64}, {5, 130}};
  for (size_t s = 0; s < 4; s++) {
    int N = shapes[s][0], C = shapes[s][1];
    size_t nc = (size_t)N * C, np = nc + (size_t)C;
    float *x = fa(nc), *w = fa(C), *out = fa(nc), *rstd = fa(N), *dout = fa(nc), *dx = fa(nc),
          *dx0 = fa(nc), *dw = fa(C);
    double *P = da(np), *ref = da(nc), *g = da(np), *dd = da(nc), *rx = da(nc), *rw = da(C);
    t_fill(x, nc, 2);
    t_fill(w, C, 1);
    t_fill(dout, nc, 1);
    t_fill(dx0, nc, 1);
    to_double(x, P, nc);
    to_double(w, P + nc, C);
    rms_ref(P, P + nc, N, C, ref);
    T_OK(mgt_be_rmsnorm_forward(be, out, rstd, x, w, N, C, 1e-5f));
    T_CLOSE("rmsnorm_forward", out, ref, nc, 1e-5, 1e-5);
    to_double(dout, dd, nc);
    ln_ctx c = {N, C, dd};
    fd_grad(rms_obj, P, np, &c, g);
    for (int acc = 0; acc < 2; acc++) {
      memcpy(dx, dx0, nc * sizeof(float));
      t_fill(dw, C, 1);
      for (size_t i = 0; i < nc; i++)
        rx[i] = dx0[i] + g[i];
      for (int k = 0; k < C; k++)
        rw[k] = (acc ? dw[k] : 0) + g[nc + k];
      T_OK(mgt_be_rmsnorm_backward(be, dx, dw, dout, x, w, rstd, N, C, acc));
      T_CLOSE("rmsnorm_backward dx", dx, rx, nc, 1e-4, 1e-3);
      T_CLOSE("rmsnorm_backward dw", dw, rw, C, 1e-4, 1e-3);
    }
    free(x), free(w), free(out), free(rstd), free(dout), free(dx), free(dx0), free(dw);
    free(P), free(ref), free(g), free(dd), free(rx), free(rw);
  }
}

/* RMSNorm over each head (Qwen 3's q/k norm) in place on strided rows: a float64 reference
   forward, finite differences for the backward; the columns after the heads stay untouched. */
typedef struct hn_ctx {
  int N, heads, hd, ld;
  const double *dout;
} hn_ctx;

static void head_rms_ref(const double *x, const double *w, const hn_ctx *c, double *out) {
  memcpy(out, x, sizeof(double) * (size_t)c->N * c->ld);
  for (int n = 0; n < c->N; n++)
    for (int j = 0; j < c->heads; j++) {
      const double *v = x + (size_t)n * c->ld + (size_t)j * c->hd;
      double q = 0;
      for (int k = 0; k < c->hd; k++)
        q += v[k] * v[k];
      const double r = 1.0 / sqrt(q / c->hd + 1e-6);
      for (int k = 0; k < c->hd; k++)
        out[(size_t)n * c->ld + (size_t)j * c->hd + k] = v[k] * r * w[k];
    }
}

static double head_rms_obj(const double *P, void *vc) {
  const hn_ctx *c = vc;
  const size_t n = (size_t)c->N * c->ld;
  double *out = da(n), s = 0;
  head_rms_ref(P, P + n, c, out);
  for (int r = 0; r < c->N; r++)
    for (int i = 0; i < c->heads * c->hd; i++)
      s += c->dout[(size_t)r * c->ld + i] * out[(size_t)r * c->ld + i];
  free(out);
  return s;
}

static void test_head_rmsnorm(void) {
  const int cases[][3] = {{1, 1, 1}, {3, 2, 8}, {5, 4, 16}, {2, 3, 64}}; /* N, heads, hd */
  for (size_t k = 0; k < 4; k++) {
    const int N = cases[k][0], heads = cases[k][1], hd = cases[k][2], ld = heads * hd + 5;
    const size_t n = (size_t)N * ld, np = n + (size_t)hd, S = (size_t)N * heads;
    float *x = fa(n), *w = fa(hd), *raw = fa(S * hd), *rstd = fa(S), *dx = fa(n), *dw = fa(hd);
    double *P = da(np), *ref = da(n), *g = da(np), *dd = da(n), *rx = da(n), *rw = da(hd);
    t_fill(x, n, 2);
    t_fill(w, hd, 1);
    to_double(x, P, n);
    to_double(w, P + n, hd);
    hn_ctx c = {N, heads, hd, ld, dd};
    head_rms_ref(P, P + n, &c, ref);
    T_OK(mgt_be_head_rmsnorm_forward(be, x, ld, raw, rstd, w, N, heads, hd, 1e-6f, NULL, 0));
    T_CLOSE("head_rmsnorm_forward (the other columns unchanged)", x, ref, n, 1e-5, 1e-5);
    t_fill(dx, n, 1);
    to_double(dx, dd, n);
    fd_grad(head_rms_obj, P, np, &c, g);
    for (int acc = 0; acc < 2; acc++) {
      float *d = fa(n);
      memcpy(d, dx, n * sizeof(float));
      t_fill(dw, hd, 1);
      for (int r = 0; r < N; r++)
        for (int i = 0; i < ld; i++) { /* the gradient in the heads, the rest untouched */
          const size_t o = (size_t)r * ld + i;
          rx[o] = i < heads * hd ? g[o] : dd[o];
        }
      for (int i = 0; i < hd; i++)
        rw[i] = (acc ? dw[i] : 0) + g[n + i];
      T_OK(mgt_be_head_rmsnorm_backward(be, d, ld, dw, raw, rstd, w, N, heads, hd, acc, NULL, 0));
      T_CLOSE("head_rmsnorm_backward dx", d, rx, n, 1e-4, 1e-3);
      T_CLOSE("head_rmsnorm_backward dw", dw, rw, hd, 1e-4, 1e-3);
      free(d);
    }
    free(x), free(w), free(raw), free(rstd), free(dx), free(dw);
    free(P), free(ref), free(g), free(dd), free(rx), free(rw);
  }
  float v[4] = {0};
  T_CHECK(mgt_be_head_rmsnorm_forward(be, v, 3, v, v, v, 1, 2, 2, 1e-6f, NULL, 0) == MGT_ERR_INPUT,
          "heads wider than the row refused");
  T_CHECK(mgt_be_head_rmsnorm_forward(be, v, 4, v, v, v, 1, 2, 2, 1e-6f, v, 4) == MGT_ERR_INPUT,
          "sums over a norm for two heads refused");
  T_CHECK(mgt_be_row_dots(be, v, v, 1, v, 2, NULL, 1, 2) == MGT_ERR_INPUT,
          "row_dots wider than its stride refused");
}

/* One norm over rows of W floats split in two parts (OLMoE's q/k norm over tensor ranks): each
   part's row_dots summed, then each part normalized with the sums, against the unsplit float64
   reference forward and its finite differences backward. */
static void test_head_rmsnorm_split(void) {
  const int N = 5, W = 24, p0 = 10, ld = W + 3, part[2][2] = {{0, p0}, {p0, W - p0}};
  const size_t n = (size_t)N * ld, np = n + (size_t)W;
  float *x = fa(n), *w = fa(W), *raw = fa((size_t)N * W), *rstd = fa(2 * (size_t)N);
  float *sums = fa(N), *one = fa(N), *dx = fa(n), *dw = fa(W);
  double *P = da(np), *ref = da(n), *g = da(np), *dd = da(n), *rw = da(W);
  t_fill(x, n, 2);
  t_fill(w, W, 1);
  to_double(x, P, n);
  to_double(w, P + n, W);
  hn_ctx c = {N, 1, W, ld, dd};
  head_rms_ref(P, P + n, &c, ref);
  for (int s = 0; s < 2; s++) { /* the sum of squares over both parts */
    T_OK(mgt_be_row_dots(be, one, x + part[s][0], ld, x + part[s][0], ld, NULL, N, part[s][1]));
    for (int r = 0; r < N; r++)
      sums[r] = s ? sums[r] + one[r] : one[r];
  }
  for (int s = 0; s < 2; s++)
    T_OK(mgt_be_head_rmsnorm_forward(be, x + part[s][0], ld, raw + (size_t)N * part[s][0],
                                     rstd + (size_t)N * s, w + part[s][0], N, 1, part[s][1], 1e-6f,
                                     sums, W));
  T_CLOSE("head_rmsnorm_forward in two parts of one norm", x, ref, n, 1e-5, 1e-5);
  t_fill(dx, n, 1);
  to_double(dx, dd, n);
  fd_grad(head_rms_obj, P, np, &c, g);
  for (int r = 0; r < N; r++)
    for (int i = W; i < ld; i++) /* the columns after the norm untouched */
      g[(size_t)r * ld + i] = dd[(size_t)r * ld + i];
  for (int s = 0; s < 2; s++) { /* the sums of dout * w * raw over both parts */
    const float *rs = raw + (size_t)N * part[s][0];
    T_OK(mgt_be_row_dots(be, one, dx + part[s][0], ld, rs, part[s][1], w + part[s][0], N,
                         part[s][1]));
    for (int r = 0; r < N; r++)
      sums[r] = s ? sums[r] + one[r] : one[r];
  }
  for (int s = 0; s < 2; s++)
    T_OK(mgt_be_head_rmsnorm_backward(be, dx + part[s][0], ld, dw + part[s][0],
                                      raw + (size_t)N * part[s][0], rstd + (size_t)N * s,
                                      w + part[s][0], N, 1, part[s][1], 0, sums, W));
  for (int i = 0; i < W; i++)
    rw[i] = g[n + i];
  T_CLOSE("head_rmsnorm_backward dx in two parts", dx, g, n, 1e-4, 1e-3);
  T_CLOSE("head_rmsnorm_backward dw in two parts", dw, rw, W, 1e-4, 1e-3);
  free(x), free(w), free(raw), free(rstd), free(sums), free(one), free(dx), free(dw);
  free(P), free(ref), free(g), free(dd), free(rw);
}

/* MoE routing: a float64 reference of Megatron-LM's score functions at a fixed choice of experts
   (the logits have no near ties, so finite differences keep the choice), its backward against
   finite differences of dw . w + aux . probs + zc lse^2; the combination and its backward. */
typedef struct route_ctx {
  int N, E, k, score, pre, aux_rows; /* aux_rows > 0: aux has E values each aux_rows rows */
  double scale, zc;
  const int32_t *idx;
  const double *dw, *aux;
} route_ctx;

/* w (N,k), probs (N,E), lse (N) of logits z at the experts idx. */
static void route_ref(const double *z, const route_ctx *c, double *w, double *p, double *lse) {
  const int E = c->E, k = c->k;
  for (int t = 0; t < c->N; t++) {
    const double *zt = z + (size_t)t * E;
    const int32_t *it = c->idx + (size_t)t * k;
    double mx = zt[0], s = 0, sig = 0;
    for (int e = 1; e < E; e++)
      mx = fmax(mx, zt[e]);
    for (int e = 0; e < E; e++)
      s += exp(zt[e] - mx), sig += 1 / (1 + exp(-zt[e]));
    lse[t] = mx + log(s);
    for (int e = 0; e < E; e++)
      p[(size_t)t * E + e] =
          c->score == MGT_MOE_SOFTMAX ? exp(zt[e] - mx) / s : 1 / (1 + exp(-zt[e])) / sig;
    double chosen = 0;
    for (int j = 0; j < k; j++) {
      double v = c->score == MGT_MOE_SIGMOID ? 1 / (1 + exp(-zt[it[j]]))
                 : c->pre                    ? p[(size_t)t * E + it[j]]
                                             : exp(zt[it[j]] - mx);
      w[(size_t)t * k + j] = v, chosen += v;
    }
    for (int j = 0; j < k; j++) {
      double *wj = &w[(size_t)t * k + j];
      if ((c->score == MGT_MOE_SOFTMAX && !c->pre) || (c->score == MGT_MOE_SIGMOID && k > 1))
        *wj /= chosen;
      if (c->scale != 0) *wj *= c->scale;
    }
  }
}

static double route_obj(const double *z, void *vc) {
  const route_ctx *c = vc;
  const size_t nw = (size_t)c->N * c->k, np = (size_t)c->N * c->E;
  double *w = da(nw), *p = da(np), *lse = da(c->N), f = 0;
  route_ref(z, c, w, p, lse);
  for (size_t i = 0; i < nw; i++)
    f += c->dw[i] * w[i];
  for (size_t i = 0; i < np; i++) /* row t = i / E takes its sequence's aux */
    f += c->aux[(c->aux_rows ? (int)(i / c->E) / c->aux_rows * c->E : 0) + i % c->E] * p[i];
  for (int t = 0; t < c->N; t++)
    f += c->zc * lse[t] * lse[t];
  free(w), free(p), free(lse);
  return f;
}

static void test_moe_route(void) {
  /* N, E, k, score, pre, scale */
  const int cases[][6] = {{6, 4, 2, 0, 0, 0}, {5, 8, 3, 0, 1, 0}, {7, 6, 1, 1, 0, 0},
                          {4, 8, 2, 1, 0, 1}, {3, 5, 5, 0, 0, 1}, {9, 16, 4, 0, 1, 1}};
  for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
    const int N = cases[q][0], E = cases[q][1], k = cases[q][2];
    const int rows = N % 3 == 0 ? 3 : 0; /* a load-balancing loss per sequence of 3 rows */
    route_ctx c = {N,    E,    k,    cases[q][3], cases[q][4], rows, cases[q][5] ? 2.5 : 0,
                   0.01, NULL, NULL, NULL};
    const size_t nz = (size_t)N * E, nw = (size_t)N * k, na = (size_t)(rows ? N / rows : 1) * E;
    float *z = fa(nz), *w = fa(nw), *p = fa(nz), *lse = fa(N), *dw = fa(nw), *aux = fa(na);
    float *dz = fa(nz);
    int32_t *idx = calloc(nw, sizeof(int32_t)), *ridx = calloc(nw, sizeof(int32_t));
    double *Z = da(nz), *rw = da(nw), *rp = da(nz), *rl = da(N), *g = da(nz), *ddw = da(nw);
    double *daux = da(na);
    for (size_t i = 0; i < nz; i++) /* distinct, well separated: a stable choice */
      z[i] = (float)(((i * 7919) % nz) * 0.37 - nz * 0.15) / (float)E;
    t_fill(dw, nw, 1);
    t_fill(aux, na, 1);
    for (int t = 0; t < N; t++) /* the choice, by its definition: the k largest scores */
      for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
          int taken = 0;
          for (int i = 0; i < j; i++)
            taken |= ridx[(size_t)t * k + i] == e;
          if (!taken && (best < 0 || z[(size_t)t * E + e] > z[(size_t)t * E + best])) best = e;
        }
        ridx[(size_t)t * k + j] = best; /* softmax and sigmoid are increasing: the same order */
      }
    to_double(z, Z, nz);
    to_double(dw, ddw, nw);
    to_double(aux, daux, na);
    c.idx = ridx, c.dw = ddw, c.aux = daux;
    route_ref(Z, &c, rw, rp, rl);
    T_OK(mgt_be_moe_route(be, z, N, E, k, c.score, c.pre, (float)c.scale, NULL, idx, w, p, lse));
    T_CHECK(!memcmp(idx, ridx, nw * sizeof(int32_t)), "moe_route case %zu: the chosen experts", q);
    T_CLOSE("moe_route weights", w, rw, nw, 1e-6, 1e-5);
    T_CLOSE("moe_route probs", p, rp, nz, 1e-6, 1e-5);
    T_CLOSE("moe_route lse", lse, rl, N, 1e-6, 1e-5);
    fd_grad(route_obj, Z, nz, &c, g);
    T_OK(mgt_be_moe_route_backward(be, dz, dw, z, idx, w, p, lse, N, E, k, c.score, c.pre,
                                   (float)c.scale, aux, rows, (float)c.zc));
    T_CLOSE("moe_route_backward", dz, g, nz, 1e-5, 1e-3);
    free(z), free(w), free(p), free(lse), free(dw), free(aux), free(dz), free(idx), free(ridx);
    free(Z), free(rw), free(rp), free(rl), free(g), free(ddw), free(daux);
  }
  { /* an expert bias (sigmoid): the top-2 of sigmoid + bias choose, the sigmoids weigh */
    const float z[6] = {2.0f, 1.0f, 0.0f, -1.0f, 0.5f, -0.5f}, bias[6] = {0, 0, 0, 3.0f, 0, 2.0f};
    float w[2], p[6], lse[1];
    int32_t idx[2];
    T_OK(mgt_be_moe_route(be, z, 1, 6, 2, MGT_MOE_SIGMOID, 0, 0, bias, idx, w, p, lse));
    const double s3 = 1 / (1 + exp(1.0)), s5 = 1 / (1 + exp(0.5));
    const double ref[2] = {s3 / (s3 + s5), s5 / (s3 + s5)};
    T_CHECK(idx[0] == 3 && idx[1] == 5, "the expert bias chooses experts 3 and 5, got %d and %d",
            idx[0], idx[1]);
    T_CLOSE("moe_route weights with an expert bias: the sigmoids alone", w, ref, 2, 1e-6, 1e-5);
    T_CHECK(mgt_be_moe_route(be, z, 1, 6, 2, MGT_MOE_SOFTMAX, 0, 0, bias, idx, w, p, lse) ==
                MGT_ERR_INPUT,
            "an expert bias with softmax scores refused");
  }
  float v[4] = {0};
  int32_t i4[4];
  T_CHECK(mgt_be_moe_route(be, v, 1, 2, 3, 0, 0, 0, NULL, i4, v, v, v) == MGT_ERR_INPUT,
          "top-3 of 2 experts refused");
}

static void test_moe_combine(void) {
  const int N = 5, k = 3, C = 7, M = 13; /* row 12: no slot names it */
  const int32_t pos[15] = {0, 4, -1, 1, 5, 8, 2, -1, 9, 3, 6, 10, 7, 11, -1};
  float *src = fa((size_t)M * C), *w = fa(N * k), *y = fa((size_t)N * C), *dy = fa((size_t)N * C);
  float *dsrc = fa((size_t)M * C), *dw = fa(N * k);
  double *ref = da((size_t)N * C), *rs = da((size_t)M * C), *rw = da(N * k);
  t_fill(src, (size_t)M * C, 1), t_fill(w, N * k, 1), t_fill(dy, (size_t)N * C, 1);
  for (int acc = 0; acc < 2; acc++) {
    t_fill(y, (size_t)N * C, 1);
    for (int t = 0; t < N; t++)
      for (int c = 0; c < C; c++) {
        double v = acc ? y[t * C + c] : 0;
        for (int s = 0; s < k; s++)
          if (pos[t * k + s] >= 0) v += (double)w[t * k + s] * src[pos[t * k + s] * C + c];
        ref[t * C + c] = v;
      }
    T_OK(mgt_be_moe_combine(be, y, src, pos, w, N, k, C, acc));
    T_CLOSE("moe_combine", y, ref, (size_t)N * C, 1e-6, 1e-6);
  }
  for (size_t i = 0; i < (size_t)M * C; i++)
    dsrc[i] = 7.0f, rs[i] = 7.0; /* rows no slot names stay */
  for (int t = 0; t < N; t++)
    for (int s = 0; s < k; s++) {
      const int p = pos[t * k + s];
      double dot = 0;
      for (int c = 0; c < C && p >= 0; c++) {
        rs[p * C + c] = (double)w[t * k + s] * dy[t * C + c];
        dot += (double)dy[t * C + c] * src[p * C + c];
      }
      rw[t * k + s] = dot;
    }
  T_OK(mgt_be_moe_combine_backward(be, dsrc, dw, dy, src, pos, w, N, k, C));
  T_CLOSE("moe_combine_backward dsrc", dsrc, rs, (size_t)M * C, 1e-6, 1e-6);
  T_CLOSE("moe_combine_backward dw", dw, rw, N * k, 1e-6, 1e-5);
  free(src), free(w), free(y), free(dy), free(dsrc), free(dw), free(ref), free(rs), free(rw);
}

/* gemm32 multiplies in fp32 under a 16-bit precision: within fp32 rounding of the float64
   product, where bf16 inputs would be off by about 2^-9. */
static void test_gemm32(void) {
  const int M = 9, N = 7, K = 33;
  float *A = fa(M * K), *B = fa(N * K), *C = fa(M * N);
  double *ref = da(M * N);
  t_fill(A, M * K, 1), t_fill(B, N * K, 1);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double v = 0;
      for (int q = 0; q < K; q++)
        v += (double)A[i * K + q] * B[j * K + q];
      ref[i * N + j] = v;
    }
  T_OK(mgt_be_set_precision(be, MGT_PREC_BF16));
  T_OK(mgt_be_gemm32(be, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N));
  T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
  T_CLOSE("gemm32 under bf16", C, ref, M * N, 1e-5, 1e-5);
  free(A), free(B), free(C), free(ref);
}

/* SwiGLU: x(N, 2F) = [gate | up], the float64 reference and finite differences of
   sum dout * SwiGLU. */
typedef struct swiglu_ctx {
  int N, F;
  const double *dout;
} swiglu_ctx;

static void swiglu_ref(const double *x, int N, int F, double *out) {
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      const double g = x[(size_t)n * 2 * F + f], u = x[(size_t)n * 2 * F + F + f];
      out[(size_t)n * F + f] = g / (1.0 + exp(-g)) * u;
    }
}

static double swiglu_obj(const double *x, void *p) {
  swiglu_ctx *c = p;
  size_t nf = (size_t)c->N * c->F;
  double *o = da(nf), s = 0;
  swiglu_ref(x, c->N, c->F, o);
  for (size_t i = 0; i < nf; i++)
    s += o[i] * c->dout[i];
  free(o);
  return s;
}

static void test_swiglu(void) {
  int shapes[][2] = {{1, 1}, {3, 7}, {16, 64}};
  for (size_t s = 0; s < 3; s++) {
    int N = shapes[s][0], F = shapes[s][1];
    size_t nf = (size_t)N * F, nx = 2 * nf;
    float *x = fa(nx), *out = fa(nf), *dout = fa(nf), *dx = fa(nx);
    double *P = da(nx), *ref = da(nf), *g = da(nx), *dd = da(nf);
    t_fill(x, nx, 4); /* gates from -4 to 4: both tails of the sigmoid */
    t_fill(dout, nf, 1);
    to_double(x, P, nx);
    swiglu_ref(P, N, F, ref);
    T_OK(mgt_be_swiglu_forward(be, out, x, N, F));
    T_CLOSE("swiglu_forward", out, ref, nf, 1e-6, 1e-5);
    to_double(dout, dd, nf);
    swiglu_ctx c = {N, F, dd};
    fd_grad(swiglu_obj, P, nx, &c, g);
    T_OK(mgt_be_swiglu_backward(be, dx, dout, x, N, F));
    T_CLOSE("swiglu_backward", dx, g, nx, 1e-5, 1e-4);
    free(x), free(out), free(dout), free(dx), free(P), free(ref), free(g), free(dd);
  }
}

/* Rotary positions: Hugging Face's half-split rotation against a float64 reference (forward,
   and the backward as the transposed rotation), on rows whose stride leaves other columns
   (a QKV row: only q and k rotate), which must stay untouched. */
static void rope_ref(const double *x, double *out, int N, int T, int pos0, const int32_t *pos,
                     int heads, int hd, int ld, const float *inv_freq, int transpose) {
  for (int n = 0; n < N; n++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < hd / 2; i++) {
        const double a = (double)(pos ? pos[n] : pos0 + n % T) * inv_freq[i], c = cos(a),
                     s = transpose ? -sin(a) : sin(a);
        const size_t o = (size_t)n * ld + (size_t)h * hd;
        const double x1 = x[o + i], x2 = x[o + i + hd / 2];
        out[o + i] = x1 * c - x2 * s;
        out[o + i + hd / 2] = x2 * c + x1 * s;
      }
}

static void test_rope(void) {
  /* the last case: positions of their own (restarting after each document) */
  const int cases[][5] = {
      {1, 1, 2, 1, 0}, {12, 6, 8, 3, 0}, {10, 5, 16, 2, 7}, {4, 1, 64, 4, 40}, {12, 6, 8, 3, -1}};
  const int32_t own[12] = {0, 1, 2, 0, 1, 0, 3, 4, 5, 6, 0, 1};
  for (size_t k = 0; k < 5; k++) {
    const int N = cases[k][0], T = cases[k][1], hd = cases[k][2], heads = cases[k][3];
    const int32_t *pos = cases[k][4] < 0 ? own : NULL;
    const int pos0 = cases[k][4], ld = heads * hd * 2 + 3; /* q, k, then v and padding */
    const size_t n = (size_t)N * ld;
    float *inv = fa(hd / 2), *x = fa(n), *y = fa(n);
    double *X = da(n), *ref = da(n);
    for (int i = 0; i < hd / 2; i++) /* Llama 3's base */
      inv[i] = (float)(1.0 / pow(500000.0, 2.0 * i / hd));
    t_fill(x, n, 1);
    for (int inverse = 0; inverse < 2; inverse++) {
      memcpy(y, x, n * sizeof(float));
      to_double(x, X, n);
      memcpy(ref, X, n * sizeof(double));
      rope_ref(X, ref, N, T, pos0, pos, 2 * heads, hd, ld, inv, inverse);
      T_OK(mgt_be_rope(be, y, N, T, pos0, pos, 2 * heads, hd, ld, inv, inverse));
      T_CLOSE(inverse ? "rope backward (transposed rotation)" : "rope forward", y, ref, n, 1e-5,
              1e-5);
    }
    T_OK(mgt_be_rope(be, y, N, T, pos0, pos, 2 * heads, hd, ld, inv, 0)); /* y: back to x */
    to_double(x, X, n);
    T_CLOSE("rope inverse undoes forward", y, X, n, 1e-5, 1e-5);
    free(inv), free(x), free(y), free(X), free(ref);
  }
  float v[3] = {1, 2, 3}, f[1] = {1};
  T_CHECK(mgt_be_rope(be, v, 1, 1, 0, NULL, 1, 3, 3, f, 0) == MGT_ERR_INPUT,
          "an odd head size refused");
}

/* ---------------- GeLU ---------------- */
static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void) {
  int N = 7, C = 129;
  size_t n = (size_t)N * C;
  float *pre = fa(n), *pre0 = fa(n), *b = fa(C), *out = fa(n), *dout = fa(n), *dpre = fa(n);
  double *r = da(n), *rp = da(n), *rg = da(n);
  t_fill(pre, n, 3);
  pre[0] = 0.0f, pre[1] = -12.0f, pre[2] = 12.0f, pre[3] = 1e-4f;
  t_fill(b, C, 0.5f);
  memcpy(pre0, pre, n * sizeof(float));
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      double x = (double)pre0[i * C + c] + b[c];
      rp[i * C + c] = x;
      r[i * C + c] = gelu_ref(x);
    }
  T_OK(mgt_be_bias_gelu_forward(be, out, pre, b, N, C));
  T_CLOSE("bias_gelu pre", pre, rp, n, 1e-6, 1e-6);
  T_CLOSE("bias_gelu out", out, r, n, 1e-6, 1e-5);
  t_fill(dout, n, 1);
  for (size_t i = 0; i < n; i++) {
    double x = pre[i], h = 1e-5 * (1 + fabs(x));
    rg[i] = dout[i] * (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
  }
  T_OK(mgt_be_gelu_backward(be, dpre, dout, pre, n));
  T_CLOSE("gelu_backward", dpre, rg, n, 1e-5, 1e-4);
  free(pre), free(pre0), free(b), free(out), free(dout), free(dpre), free(r), free(rp), free(rg);
}

/* BERT's head activations: the erf GeLU and tanh against float64 values and central
   differences of them (the tanh GeLU too, through the same entry). */
static double act_ref(int act, double x) {
  if (act == MGT_ACT_GELU_ERF) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  if (act == MGT_ACT_TANH) return tanh(x);
  return gelu_ref(x);
}

static void test_head_activations(void) {
  int N = 5, C = 67;
  size_t n = (size_t)N * C;
  for (int act = 0; act < 3; act++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      float *pre = fa(n), *pre0 = fa(n), *b = fa(C), *out = fa(n), *dout = fa(n), *dpre = fa(n);
      double *r = da(n), *rp = da(n), *rg = da(n);
      t_fill(pre, n, 3);
      pre[0] = 0.0f, pre[1] = -12.0f, pre[2] = 12.0f, pre[3] = 1e-4f, pre[4] = -0.7f;
      t_fill(b, C, 0.5f);
      memcpy(pre0, pre, n * sizeof(float));
      for (size_t i = 0; i < n; i++) {
        double x = (double)pre0[i] + (with_bias ? b[i % C] : 0.0f);
        rp[i] = x;
        r[i] = act_ref(act, x);
      }
      T_OK(mgt_be_bias_act_forward(be, act, out, pre, with_bias ? b : NULL, N, C));
      T_CLOSE("bias_act pre", pre, rp, n, 1e-6, 1e-6);
      T_CLOSE("bias_act out", out, r, n, 1e-6, 1e-5);
      t_fill(dout, n, 1);
      for (size_t i = 0; i < n; i++) {
        double x = pre[i], h = 1e-5 * (1 + fabs(x));
        rg[i] = dout[i] * (act_ref(act, x + h) - act_ref(act, x - h)) / (2 * h);
      }
      T_OK(mgt_be_act_backward(be, act, dpre, dout, pre, n));
      T_CLOSE("act_backward", dpre, rg, n, 1e-5, 1e-4);
      T_OK(mgt_be_act_backward(be, act, dout, dout, pre, n)); /* in place */
      T_CHECK(memcmp(dout, dpre, n * sizeof(float)) == 0, "act_backward in place differs");
      free(pre), free(pre0), free(b), free(out), free(dout), free(dpre), free(r), free(rp),
          free(rg);
    }
}

/* Rows out by index and their gradients back: exact copies and sums. */
static void test_gather_rows(void) {
  const int R = 11, C = 9, M = 4;
  const int32_t idx[4] = {7, 0, 10, 3};
  float *x = fa((size_t)R * C), *out = fa((size_t)M * C), *dx = fa((size_t)R * C);
  float *dx0 = fa((size_t)R * C), *dy = fa((size_t)M * C);
  t_fill(x, (size_t)R * C, 1);
  t_fill(dx, (size_t)R * C, 1);
  t_fill(dy, (size_t)M * C, 1);
  memcpy(dx0, dx, sizeof(float) * (size_t)R * C);
  T_OK(mgt_be_gather_rows(be, out, x, idx, M, C));
  int same = 1;
  for (int m = 0; m < M; m++)
    same &= memcmp(out + (size_t)m * C, x + (size_t)idx[m] * C, sizeof(float) * C) == 0;
  T_CHECK(same, "gather_rows copies the wrong rows");
  T_OK(mgt_be_scatter_add_rows(be, dx, dy, idx, M, C));
  same = 1;
  for (int r = 0; r < R; r++) {
    int m = -1;
    for (int k = 0; k < M; k++)
      if (idx[k] == r) m = k;
    for (int c = 0; c < C; c++) {
      float want = m < 0 ? dx0[r * C + c] : dx0[r * C + c] + dy[m * C + c];
      same &= dx[r * C + c] == want;
    }
  }
  T_CHECK(same, "scatter_add_rows adds to the wrong rows");
  free(x), free(out), free(dx), free(dx0), free(dy);
}

/* ---------------- attention ---------------- */
typedef struct att_ctx {
  int B, T, Hl, hd, head_offset;
  const mgt_dropout *d;
  const double *dout;
  const int32_t *keylen; /* NULL: causal */
  const int32_t *kfirst; /* NULL: from key 0; else each row's document's first key */
} att_ctx;

/* Documents of 3 or 5 tokens (samples in turn), of 70 or 40 where T spans tiles: each row's
   first key, its document's first row (--reset-attention-mask). */
static int32_t *doc_starts(int B, int T) {
  int32_t *f = malloc(sizeof(int32_t) * (size_t)B * T);
  for (int b = 0; b < B; b++) {
    const int len = T > 64 ? (b ? 40 : 70) : (b % 2 ? 5 : 3);
    for (int i = 0; i < T; i++)
      f[(size_t)b * T + i] = i - i % len;
  }
  return f;
}

/* Keys row i of sample b sees: j <= i (causal) or j < keylen[b] (padding mask). */
static int ref_lim(const att_ctx *c, int b, int i) { return c->keylen ? c->keylen[b] : i + 1; }

/* out (B*T, Hl*hd) and P (B,Hl,T,T) of masked attention over qkv, in float64. */
static void att_ref(const double *qkv, const att_ctx *c, double *out, double *P) {
  int Cl = c->Hl * c->hd, ld = 3 * Cl, T = c->T;
  double scale = 1.0 / sqrt((double)c->hd), ds = c->d->p > 0 ? 1.0 / (1.0 - c->d->p) : 1.0;
  double *row = da((size_t)T);
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->Hl; h++)
      for (int i = 0; i < T; i++) {
        const double *q = qkv + ((size_t)b * T + i) * ld + h * c->hd;
        double mx = -1e300, s = 0;
        const int lim = ref_lim(c, b, i), lo = c->kfirst ? c->kfirst[(size_t)b * T + i] : 0;
        for (int j = 0; j < lo; j++)
          row[j] = 0;
        for (int j = lo; j < lim; j++) {
          const double *k = qkv + ((size_t)b * T + j) * ld + Cl + h * c->hd;
          double dot = 0;
          for (int e = 0; e < c->hd; e++)
            dot += q[e] * k[e];
          row[j] = dot * scale;
          if (row[j] > mx) mx = row[j];
        }
        for (int j = lo; j < lim; j++)
          s += (row[j] = exp(row[j] - mx));
        for (int j = 0; j < T; j++) {
          double p = j >= lo && j < lim ? row[j] / s : 0.0;
          if (P) P[(((size_t)b * c->Hl + h) * T + i) * T + j] = p;
          row[j] = p;
        }
        double *o = out + ((size_t)b * T + i) * Cl + h * c->hd;
        for (int e = 0; e < c->hd; e++)
          o[e] = 0;
        for (int j = lo; j < lim; j++) {
          double p = row[j];
          if (c->d->p > 0) {
            uint64_t word = (((uint64_t)(c->head_offset + h) * T) + i) * T + j;
            p = ref_keep(c->d, b, word) ? p * ds : 0.0;
          }
          const double *v = qkv + ((size_t)b * T + j) * ld + 2 * Cl + h * c->hd;
          for (int e = 0; e < c->hd; e++)
            o[e] += p * v[e];
        }
      }
  free(row);
}

static double att_obj(const double *qkv, void *p) {
  att_ctx *c = p;
  size_t n = (size_t)c->B * c->T * c->Hl * c->hd;
  double *o = da(n), s = 0;
  att_ref(qkv, c, o, NULL);
  for (size_t i = 0; i < n; i++)
    s += o[i] * c->dout[i];
  free(o);
  return s;
}

/* Causal, the padding mask with lengths from 1 to T (keys past a length must neither receive
   probability nor gradient), and documents kept apart (keys before a row's document neither). */
static void test_attention(void) {
  int shapes[][5] = {/* B, T, Hl, hd, head_offset */
                     {1, 1, 1, 4, 0},
                     {2, 5, 2, 3, 0},
                     {1, 17, 3, 8, 3},
                     {3, 8, 1, 16, 1}};
  float drops[] = {0.0f, 0.3f};
  const int32_t lens[4][3] = {{1, 1, 1}, {5, 2, 1}, {11, 1, 1}, {8, 1, 3}};
  for (int masked = 0; masked < 3; masked++)
    for (size_t s = 0; s < 4; s++)
      for (int di = 0; di < 2; di++) {
        const int32_t *kl = masked == 1 ? lens[s] : NULL;
        int B = shapes[s][0], T = shapes[s][1], Hl = shapes[s][2], hd = shapes[s][3];
        int32_t *kf = masked == 2 ? doc_starts(B, T) : NULL;
        int Cl = Hl * hd, H = shapes[s][4] + Hl;
        mgt_dropout d = {drops[di], 99, 1000, 3, MGT_DROPOUT_ATTN, 0};
        size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl, np = (size_t)B * Hl * T * T;
        float *qkv = fa(nq), *out = fa(no), *P = fa(np), *scr = fa(np), *dout = fa(no),
              *dqkv = fa(nq);
        double *Q = da(nq), *ro = da(no), *rP = da(np), *dd = da(no), *g = da(nq);
        t_fill(qkv, nq, 1.5f);
        to_double(qkv, Q, nq);
        att_ctx c = {B, T, Hl, hd, shapes[s][4], &d, NULL, kl, kf};
        att_ref(Q, &c, ro, rP);
        T_OK(mgt_be_attention_forward(be, out, P, qkv, B, T, Hl, hd, shapes[s][4], H, kl, kf, &d,
                                      scr));
        T_CLOSE("attention_forward out", out, ro, no, 1e-5, 1e-4);
        T_CLOSE("attention_forward P", P, rP, np, 1e-6, 1e-4);
        t_fill(dout, no, 1);
        to_double(dout, dd, no);
        c.dout = dd;
        fd_grad(att_obj, Q, nq, &c, g);
        T_OK(mgt_be_attention_backward(be, dqkv, dout, qkv, P, B, T, Hl, hd, shapes[s][4], H, kl,
                                       kf, &d, scr));
        T_CLOSE("attention_backward", dqkv, g, nq, 1e-4, 1e-3);
        free(qkv), free(out), free(P), free(scr), free(dout), free(dqkv), free(Q), free(ro),
            free(rP), free(dd), free(g), free(kf);
      }
}

/* Flash attention (tiles of 64 keys and 64 queries): the float64 reference's output, and the
   gradient of the materialized kernel (itself checked against finite differences above) or,
   on the small shapes, the finite differences themselves; shapes of several tiles with ragged
   ends, causal and padding-masked, with and without dropout. */
static void test_flash_attention(void) {
  int shapes[][5] = {/* B, T, Hl, hd, head_offset */
                     {1, 1, 1, 4, 0},  {2, 5, 2, 3, 0},   {1, 17, 3, 8, 3},
                     {3, 8, 1, 16, 1}, {2, 150, 2, 8, 1}, {1, 130, 1, 16, 0}};
  const int32_t lens[6][3] = {{1, 1, 1}, {5, 2, 1}, {11, 1, 1}, {8, 1, 3}, {150, 77}, {64}};
  float drops[] = {0.0f, 0.3f};
  for (int masked = 0; masked < 3; masked++) /* causal, padding, documents kept apart */
    for (size_t s = 0; s < 6; s++)
      for (int di = 0; di < 2; di++) {
        const int32_t *kl = masked == 1 ? lens[s] : NULL;
        int B = shapes[s][0], T = shapes[s][1], Hl = shapes[s][2], hd = shapes[s][3];
        int32_t *kf = masked == 2 ? doc_starts(B, T) : NULL;
        int Cl = Hl * hd, H = shapes[s][4] + Hl, small = T < 64;
        mgt_dropout d = {drops[di], 99, 1000, 3, MGT_DROPOUT_ATTN, 0};
        size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl, np = (size_t)B * Hl * T * T;
        float *qkv = fa(nq), *out = fa(no), *lse = fa((size_t)B * Hl * T), *P = fa(np),
              *scr = fa(np), *ref_out = fa(no), *dout = fa(no), *dqkv = fa(nq), *ref_d = fa(nq);
        double *Q = da(nq), *ro = da(no), *dd = da(no), *g = da(nq);
        t_fill(qkv, nq, 1.5f);
        to_double(qkv, Q, nq);
        att_ctx c = {B, T, Hl, hd, shapes[s][4], &d, NULL, kl, kf};
        att_ref(Q, &c, ro, NULL);
        T_OK(mgt_be_flash_attention_forward(be, out, lse, qkv, B, T, Hl, hd, shapes[s][4], kl, kf,
                                            &d));
        T_CLOSE("flash_attention_forward out", out, ro, no, 1e-5, 1e-4);
        t_fill(dout, no, 1);
        T_OK(mgt_be_flash_attention_backward(be, dqkv, dout, qkv, out, lse, B, T, Hl, hd,
                                             shapes[s][4], kl, kf, &d));
        if (small) {
          to_double(dout, dd, no);
          c.dout = dd;
          fd_grad(att_obj, Q, nq, &c, g);
        } else {
          T_OK(mgt_be_attention_forward(be, ref_out, P, qkv, B, T, Hl, hd, shapes[s][4], H, kl, kf,
                                        &d, scr));
          T_OK(mgt_be_attention_backward(be, ref_d, dout, qkv, P, B, T, Hl, hd, shapes[s][4], H, kl,
                                         kf, &d, scr));
          to_double(ref_d, g, nq);
        }
        T_CLOSE(small ? "flash_attention_backward (finite differences)"
                      : "flash_attention_backward (materialized kernel)",
                dqkv, g, nq, 1e-4, 1e-3);
        free(qkv), free(out), free(lse), free(P), free(scr), free(ref_out), free(dout), free(dqkv),
            free(ref_d), free(Q), free(ro), free(dd), free(g), free(kf);
      }
}

/* Heads split over two shards give the same result as all heads on one, dropout included. */
static void test_attention_shards(void) {
  int B = 2, T = 9, H = 4, hd = 5, C = H * hd;
  mgt_dropout d = {0.25f, 7, 40, 1, MGT_DROPOUT_ATTN, 0};
  float *qkv = fa((size_t)B * T * 3 * C), *out = fa((size_t)B * T * C),
        *P = fa((size_t)B * H * T * T), *scr = fa((size_t)B * H * T * T);
  t_fill(qkv, (size_t)B * T * 3 * C, 1);
  T_OK(mgt_be_attention_forward(be, out, P, qkv, B, T, H, hd, 0, H, NULL, NULL, &d, scr));
  int Hl = 2, Cl = Hl * hd;
  float *sq = fa((size_t)B * T * 3 * Cl), *so = fa((size_t)B * T * Cl);
  for (int r = 0; r < 2; r++) {
    for (int n = 0; n < B * T; n++)
      for (int part = 0; part < 3; part++)
        memcpy(sq + (size_t)n * 3 * Cl + part * Cl, qkv + (size_t)n * 3 * C + part * C + r * Cl,
               Cl * sizeof(float));
    T_OK(mgt_be_attention_forward(be, so, P, sq, B, T, Hl, hd, r * Hl, H, NULL, NULL, &d, scr));
    int same = 1;
    for (int n = 0; n < B * T; n++)
      same &= memcmp(so + (size_t)n * Cl, out + (size_t)n * C + r * Cl, Cl * sizeof(float)) == 0;
    T_CHECK(same, "attention shard %d differs from the unsplit heads", r);
  }
  free(qkv), free(out), free(P), free(scr), free(sq), free(so);
}

/* One query against a cache: the float64 softmax-weighted sum of the first len rows; with
   grouped key/value heads, query head h reads group h / (Hl/Gl) of the cache. */
static void test_attention_decode(void) {
  int shapes[][4] = {/* len, Hl, Gl, hd */ {1, 1, 1, 4},
                     {7, 3, 3, 5},
                     {33, 2, 2, 16},
                     {9, 6, 2, 8},
                     {20, 4, 1, 6}};
  for (size_t s = 0; s < 5; s++) {
    int len = shapes[s][0], Hl = shapes[s][1], Gl = shapes[s][2], hd = shapes[s][3], per = Hl / Gl,
        Cl = Gl * hd, rows = len + 3;
    float *q = fa((size_t)Hl * hd), *kc = fa((size_t)rows * Cl), *vc = fa((size_t)rows * Cl),
          *out = fa((size_t)Hl * hd);
    double *ref = da((size_t)Hl * hd);
    t_fill(q, (size_t)Hl * hd, 1.5f);
    t_fill(kc, (size_t)rows * Cl, 1.5f);
    t_fill(vc, (size_t)rows * Cl, 1);
    for (int h = 0; h < Hl; h++) {
      const int g = h / per;
      double w[64], mx = -1e300, sum = 0;
      for (int t = 0; t < len; t++) {
        double dot = 0;
        for (int e = 0; e < hd; e++)
          dot += (double)q[h * hd + e] * kc[(size_t)t * Cl + g * hd + e];
        w[t] = dot / sqrt((double)hd);
        mx = w[t] > mx ? w[t] : mx;
      }
      for (int t = 0; t < len; t++)
        sum += (w[t] = exp(w[t] - mx));
      for (int e = 0; e < hd; e++)
        for (int t = 0; t < len; t++)
          ref[h * hd + e] += w[t] / sum * vc[(size_t)t * Cl + g * hd + e];
    }
    /* rows past len must not matter */
    for (size_t i = (size_t)len * Cl; i < (size_t)rows * Cl; i++)
      kc[i] = 1e30f, vc[i] = 1e30f;
    T_OK(mgt_be_attention_decode(be, out, q, kc, vc, len, Hl, Gl, hd));
    T_CLOSE(Gl < Hl ? "attention_decode, grouped key/value heads" : "attention_decode", out, ref,
            (size_t)Hl * hd, 1e-5, 1e-4);
    free(q), free(kc), free(vc), free(out), free(ref);
  }
  float z[4] = {0};
  T_CHECK(mgt_be_attention_decode(be, z, z, z, z, 1, 3, 2, 1) == MGT_ERR_INPUT,
          "3 heads in groups of 2 refused");
}

/* Grouped-query attention's key/value heads repeated for their query heads, and the gradient
   summed back: against an independent float64 walk of the same layout, the sum checked as the
   transpose of the repetition (<expand(x), y> == <x, reduce(y)>). */
static void test_kv_group(void) {
  int shapes[][4] = {/* N, Hl, Gl, hd */ {1, 1, 1, 2}, {5, 4, 2, 3}, {7, 8, 1, 4}, {3, 6, 3, 5}};
  for (size_t s = 0; s < 4; s++) {
    const int N = shapes[s][0], Hl = shapes[s][1], Gl = shapes[s][2], hd = shapes[s][3];
    const size_t q = (size_t)Hl * hd, kv = (size_t)Gl * hd, nf = (size_t)N * 3 * q,
                 ng = (size_t)N * (q + 2 * kv);
    float *x = fa(ng), *xf = fa(nf), *y = fa(nf), *yg = fa(ng);
    double *ref = da(nf), *refg = da(ng);
    t_fill(x, ng, 1), t_fill(y, nf, 2);
    for (int n = 0; n < N; n++)
      for (int h = 0; h < Hl; h++)
        for (int e = 0; e < hd; e++) {
          const int g = h / (Hl / Gl);
          const size_t f = (size_t)n * 3 * q + (size_t)h * hd + e,
                       gr = (size_t)n * (q + 2 * kv) + (size_t)g * hd + e;
          ref[f] = x[gr - (size_t)g * hd + (size_t)h * hd]; /* q */
          ref[f + q] = x[gr + q];                           /* k of its group */
          ref[f + 2 * q] = x[gr + q + kv];                  /* v of its group */
          refg[gr - (size_t)g * hd + (size_t)h * hd] = y[f];
          refg[gr + q] += y[f + q];
          refg[gr + q + kv] += y[f + 2 * q];
        }
    T_OK(mgt_be_kv_group(be, xf, x, N, Hl, Gl, hd, 0));
    T_CLOSE("kv_group repeats each group's k and v for its heads", xf, ref, nf, 0, 0);
    T_OK(mgt_be_kv_group(be, yg, y, N, Hl, Gl, hd, 1));
    T_CLOSE("kv_group sums the heads' gradients per group", yg, refg, ng, 1e-6, 1e-6);
    double a = 0, b = 0;
    for (size_t i = 0; i < nf; i++)
      a += (double)xf[i] * y[i];
    for (size_t i = 0; i < ng; i++)
      b += (double)x[i] * yg[i];
    T_CHECK(fabs(a - b) <= 1e-5 * (fabs(a) + 1), "kv_group: reduce is the transpose of expand");
    free(x), free(xf), free(y), free(yg), free(ref), free(refg);
  }
  float z[8] = {0};
  T_CHECK(mgt_be_kv_group(be, z, z, 1, 3, 2, 1, 0) == MGT_ERR_INPUT,
          "3 heads in groups of 2 refused");
}

/* Row argmax over the first nv columns, lowest index on ties; copy. */
static void test_argmax_copy(void) {
  int N = 5, Vl = 13, nv = 11;
  float *x = fa((size_t)N * Vl), val[5];
  int32_t idx[5];
  t_fill(x, (size_t)N * Vl, 1);
  x[1 * Vl + 3] = x[1 * Vl + 8] = 50.0f; /* a tie */
  x[2 * Vl + 12] = 99.0f;                /* padding, not eligible */
  for (int i = 0; i < Vl; i++)
    x[4 * Vl + i] = -2.0f; /* all equal */
  T_OK(mgt_be_argmax(be, x, N, Vl, nv, val, idx));
  for (int n = 0; n < N; n++) {
    int b = 0;
    for (int j = 1; j < nv; j++)
      if (x[n * Vl + j] > x[n * Vl + b]) b = j;
    T_CHECK(idx[n] == b && val[n] == x[n * Vl + b], "argmax row %d: %d, want %d", n, idx[n], b);
  }
  T_OK(mgt_be_argmax(be, x, 1, Vl, 0, val, idx));
  T_CHECK(idx[0] == -1 && val[0] == -FLT_MAX, "argmax of no columns");
  float *y = fa((size_t)N * Vl);
  T_OK(mgt_be_copy(be, y, x, sizeof(float) * (size_t)N * Vl));
  T_CHECK(memcmp(x, y, sizeof(float) * (size_t)N * Vl) == 0, "copy");
  free(x), free(y);
}

/* ---------------- embedding ---------------- */
static void test_embedding(void) {
  int B = 3, T = 5, C = 11, Vl = 4, v0 = 4, N = B * T;
  int32_t tok[15] = {0, 4, 5, 7, 9, 4, 4, 3, 8, 7, 6, 5, 1, 2, 7};
  float *wte = fa((size_t)Vl * C), *wpe = fa((size_t)T * C), *out = fa((size_t)N * C);
  float *dout = fa((size_t)N * C), *dwte = fa((size_t)Vl * C), *dwpe = fa((size_t)T * C);
  double *r = da((size_t)N * C), *rw = da((size_t)Vl * C), *rp = da((size_t)T * C);
  t_fill(wte, (size_t)Vl * C, 1);
  t_fill(wpe, (size_t)T * C, 1);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      int t = tok[n] - v0;
      r[n * C + c] = (t >= 0 && t < Vl ? wte[t * C + c] : 0.0) + wpe[(n % T) * C + c];
    }
  T_OK(mgt_be_embedding_forward(be, out, tok, wte, N, C, v0, Vl));
  T_OK(mgt_be_add_position(be, out, wpe, N, 0, T, C, NULL));
  T_CLOSE("embedding_forward", out, r, (size_t)N * C, 1e-6, 1e-6);
  /* rows 7..13 alone (a sequence-parallel rank's), starting mid-sample */
  T_OK(mgt_be_embedding_forward(be, out, tok + 7, wte, 7, C, v0, Vl));
  T_OK(mgt_be_add_position(be, out, wpe, 7, 7 % T, T, C, NULL));
  T_CLOSE("add_position from row 7", out, r + 7 * C, (size_t)7 * C, 1e-6, 1e-6);
  /* positions of their own (restarting after each document): each row its pos */
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)N);
  for (int n = 0; n < N; n++)
    pos[n] = (n * 7 + 3) % 5 % T;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      int t = tok[n] - v0;
      r[n * C + c] = (t >= 0 && t < Vl ? wte[t * C + c] : 0.0) + wpe[pos[n] * C + c];
    }
  T_OK(mgt_be_embedding_forward(be, out, tok, wte, N, C, v0, Vl));
  T_OK(mgt_be_add_position(be, out, wpe, N, 0, T, C, pos));
  T_CLOSE("add_position at positions of their own", out, r, (size_t)N * C, 1e-6, 1e-6);
  for (int own = 0; own < 2; own++)
    for (int acc = 0; acc < 2; acc++) {
      t_fill(dout, (size_t)N * C, 1);
      t_fill(dwte, (size_t)Vl * C, 1);
      t_fill(dwpe, (size_t)T * C, 1);
      for (int i = 0; i < Vl * C; i++)
        rw[i] = dwte[i];
      for (int i = 0; i < T * C; i++)
        rp[i] = acc ? dwpe[i] : 0.0;
      for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
          int t = tok[n] - v0;
          if (t >= 0 && t < Vl) rw[t * C + c] += dout[n * C + c];
          rp[(own ? pos[n] : n % T) * C + c] += dout[n * C + c];
        }
      T_OK(mgt_be_embedding_backward(be, dwte, dwpe, dout, tok, own ? pos : NULL, B, T, C, v0, Vl,
                                     acc));
      T_CLOSE("embedding_backward wte", dwte, rw, (size_t)Vl * C, 1e-5, 1e-5);
      T_CLOSE("embedding_backward wpe", dwpe, rp, (size_t)T * C, 1e-5, 1e-5);
    }
  free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(r), free(rw), free(rp);
  free(pos);
}

/* ---------------- dropout ---------------- */
static void test_dropout(void) {
  int B = 3;
  size_t row = 4099; /* odd, spans several chunks */
  size_t n = (size_t)B * row;
  float *x = fa(n), *res = fa(n), *out = fa(n), *dx = fa(n);
  double *r = da(n), *rg = da(n);
  t_fill(x, n, 1);
  t_fill(res, n, 1);
  mgt_dropout d = {0.1f, 5, 123456789, 7, MGT_DROPOUT_MLP, 0};
  size_t dropped = 0;
  for (int b = 0; b < B; b++)
    for (size_t e = 0; e < row; e++) {
      int k = ref_keep(&d, b, e);
      dropped += !k;
      size_t i = (size_t)b * row + e;
      r[i] = res[i] + (k ? x[i] / (1.0 - d.p) : 0.0);
      rg[i] = k ? x[i] / (1.0 - d.p) : 0.0;
    }
  T_OK(mgt_be_dropout_forward(be, out, x, res, n, row, &d));
  T_CLOSE("dropout_forward", out, r, n, 1e-6, 1e-6);
  T_OK(mgt_be_dropout_backward(be, dx, x, n, row, &d));
  T_CLOSE("dropout_backward", dx, rg, n, 1e-6, 1e-6);
  /* windows of the micro-batch (sequence parallelism: a rank's rows) from odd offsets, across
     sample and chunk boundaries, see the same mask */
  const size_t win[][2] = {{3, 4099}, {4097, 4101}, {1023, 7000}, {8197, 1}, {0, 1}};
  for (size_t k = 0; k < sizeof win / sizeof win[0]; k++) {
    mgt_dropout dw = d;
    dw.first = win[k][0];
    T_OK(mgt_be_dropout_forward(be, out, x + dw.first, res + dw.first, win[k][1], row, &dw));
    T_CLOSE("dropout_forward window", out, r + dw.first, win[k][1], 1e-6, 1e-6);
    T_OK(mgt_be_dropout_backward(be, dx, x + dw.first, win[k][1], row, &dw));
    T_CLOSE("dropout_backward window", dx, rg + dw.first, win[k][1], 1e-6, 1e-6);
  }
  double rate = (double)dropped / n, sd = sqrt(0.1 * 0.9 / n);
  T_CHECK(fabs(rate - 0.1) < 5 * sd, "dropout rate %.4f, expected 0.1 +- %.4f", rate, 5 * sd);
  /* p = 0 is a plain residual add */
  mgt_dropout d0 = {0.0f, 5, 0, 0, 0, 0};
  for (size_t i = 0; i < n; i++)
    r[i] = (double)res[i] + x[i];
  T_OK(mgt_be_dropout_forward(be, out, x, res, n, row, &d0));
  T_CLOSE("dropout_forward p=0", out, r, n, 1e-6, 1e-6);
  free(x), free(res), free(out), free(dx), free(r), free(rg);
}

/* ---------------- cross-entropy ---------------- */
typedef struct xe_ctx {
  int N, nv;
  const int32_t *tg;
} xe_ctx;

static double xe_obj(const double *l, void *p) {
  xe_ctx *c = p;
  double total = 0;
  for (int n = 0; n < c->N; n++) {
    double mx = -1e300, s = 0;
    if (c->tg[n] < 0) continue; /* a token without loss */
    for (int j = 0; j < c->nv; j++)
      mx = l[n * c->nv + j] > mx ? l[n * c->nv + j] : mx;
    for (int j = 0; j < c->nv; j++)
      s += exp(l[n * c->nv + j] - mx);
    total += log(s) + mx - l[n * c->nv + c->tg[n]];
  }
  return total;
}

/* The vocabulary (V = 13) split into two shards of Vl = 8 columns, the second padded; one row
   without loss (target -1: no loss, no gradient). */
static void test_xent(void) {
  const int N = 7, V = 13, Vl = 8;
  int32_t tg[7] = {0, 12, 7, -1, 8, 3, 9};
  float *lg[2], *mx[2], *st[2], *loss = fa(N);
  double *full = da((size_t)N * V), *g = da((size_t)N * V);
  for (int r = 0; r < 2; r++) {
    lg[r] = fa((size_t)N * Vl), mx[r] = fa(N), st[r] = fa(2 * N);
    t_fill(lg[r], (size_t)N * Vl, 3);
  }
  lg[0][3] = 40.0f; /* a large logit */
  for (int n = 0; n < N; n++)
    for (int j = 0; j < V; j++)
      full[n * V + j] = lg[j / Vl][n * Vl + j % Vl];
  xe_ctx c = {N, V, tg};
  double ref_total = xe_obj(full, &c);
  fd_grad(xe_obj, full, (size_t)N * V, &c, g);
  float scale = 0.25f;
  int nv[2] = {8, 5};
  for (int r = 0; r < 2; r++)
    T_OK(mgt_be_xent_max(be, mx[r], lg[r], N, Vl, nv[r]));
  for (int n = 0; n < N; n++)
    mx[0][n] = mx[1][n] = fmaxf(mx[0][n], mx[1][n]);
  for (int r = 0; r < 2; r++)
    T_OK(mgt_be_xent_sumexp(be, st[r], st[r] + N, lg[r], mx[r], tg, N, Vl, nv[r], r * Vl, 1));
  for (int i = 0; i < 2 * N; i++)
    st[0][i] = st[1][i] = st[0][i] + st[1][i];
  double total = 0;
  T_OK(mgt_be_xent_loss(be, loss, mx[0], st[0], st[0] + N, tg, N, &total));
  T_CHECK(fabs(total - ref_total) <= 1e-5 * fabs(ref_total) + 1e-5,
          "xent loss %.9g, reference %.9g", total, ref_total);
  for (int r = 0; r < 2; r++) {
    T_OK(mgt_be_xent_backward(be, lg[r], st[r], tg, N, Vl, nv[r], r * Vl, scale));
    double *rg = da((size_t)N * Vl);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < Vl; j++) {
        int gj = r * Vl + j;
        rg[n * Vl + j] = gj < V ? scale * g[n * V + gj] : 0.0;
      }
    T_CLOSE("xent_backward", lg[r], rg, (size_t)N * Vl, 1e-6, 1e-4);
    free(rg);
  }
  for (int r = 0; r < 2; r++)
    free(lg[r]), free(mx[r]), free(st[r]);
  free(loss), free(full), free(g);
}

/* ---------------- optimizer kernels ---------------- */
static void test_optimizer(void) {
  size_t n = 10007;
  mgt_segment segs[3] = {{0, 5000, 0.1f, 1, 0}, {5008, 3, 0.0f, 0, 0}, {5024, 4983, 0.0f, 1, 0}};
  float *p = fa(n), *g = fa(n), *m = fa(n), *v = fa(n);
  double *rp = da(n), *rm = da(n), *rv = da(n);
  t_fill(p, n, 1), t_fill(g, n, 1), t_fill(m, n, 0.1f);
  for (size_t i = 0; i < n; i++)
    v[i] = fabsf(t_randn()) * 0.01f;
  double ss = 0, want = 0;
  for (int s = 0; s < 3; s++)
    if (segs[s].count_in_norm)
      for (size_t i = 0; i < segs[s].n; i++)
        want += (double)g[segs[s].offset + i] * g[segs[s].offset + i];
  T_OK(mgt_be_sumsq(be, g, segs, 3, &ss));
  T_CHECK(fabs(ss - want) <= 1e-6 * want, "sumsq %.12g, reference %.12g", ss, want);
  mgt_adamw_step st = {1e-2f, 0.9f, 0.95f, 1e-8f, 1 - 0.9f * 0.9f, 1 - 0.95f * 0.95f, 0.5f, 0};
  to_double(p, rp, n), to_double(m, rm, n), to_double(v, rv, n);
  for (int s = 0; s < 3; s++)
    for (size_t k = 0; k < segs[s].n; k++) {
      size_t i = segs[s].offset + k;
      double gi = g[i] * 0.5;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      double mh = rm[i] / st.bias_correction1, vh = rv[i] / st.bias_correction2;
      rp[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + segs[s].weight_decay * rp[i]);
    }
  T_OK(mgt_be_adamw(be, p, g, m, v, segs, 3, &st));
  T_CLOSE("adamw p", p, rp, n, 1e-6, 1e-5);
  T_CLOSE("adamw m", m, rm, n, 1e-7, 1e-5);
  T_CLOSE("adamw v", v, rv, n, 1e-9, 1e-5);
  free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

/* AdamW writing the weights' 16-bit copies in its pass (s.copies): a GEMM reading the weights
   through their copy afterwards gives what it gives on the updated weights outside the
   registered region (rounded per GEMM), bit for bit; emulated bf16 and fp16, and native bf16
   where the CPU has bf16 units. */
static void test_adamw_copies(void) {
  const size_t n = 10007;
  const int M = 7, K = 23, N = n / K; /* the weights as an N x K matrix, and a spare tail */
  mgt_segment segs[3] = {{0, 5000, 0.1f, 1, 0}, {5008, 3, 0.0f, 0, 0}, {5024, 4983, 0.0f, 1, 0}};
  mgt_backend *b2 = NULL;
  T_OK(mgt_backend_cpu_create(&b2));
  for (int mode = 0; mode < 3; mode++) { /* emulated bf16, fp16, native bf16 */
    if (mode == 2 && !mgt_cpu_bf16_units(NULL, 0)) break;
    T_OK(mgt_be_set_precision(b2, mode == 1 ? MGT_PREC_FP16 : MGT_PREC_BF16));
    T_OK(mgt_backend_cpu_native(b2, mode == 2));
    float *p = fa(n), *g = fa(n), *m = fa(n), *v = fa(n), *q = fa(n), *x = fa((size_t)M * K);
    float *y = fa((size_t)M * N), *yr = fa((size_t)M * N);
    t_fill(p, n, 1), t_fill(g, n, 1), t_fill(m, n, 0.1f), t_fill(x, (size_t)M * K, 1);
    for (size_t i = 0; i < n; i++)
      v[i] = fabsf(t_randn()) * 0.01f;
    T_OK(mgt_be_set_weights(b2, p, n));
    T_OK(mgt_be_refresh_weights(b2, 0, n));
    mgt_adamw_step st = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 0.5f, 1};
    T_CHECK(mgt_be_adamw(b2, q, g, m, v, segs, 3, &st) != MGT_OK,
            "AdamW wrote copies of buffers that are not the weights");
    mgt_error_clear();
    T_OK(mgt_be_adamw(b2, p, g, m, v, segs, 3, &st));
    memcpy(q, p, n * sizeof(float));
    T_OK(mgt_be_gemm(b2, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, x, K, p, K, 0.0f, y, N));
    T_OK(mgt_be_gemm(b2, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, x, K, q, K, 0.0f, yr, N));
    T_CHECK(!memcmp(y, yr, sizeof(float) * (size_t)M * N),
            "mode %d: a GEMM through the copies AdamW wrote differs from the updated weights'",
            mode);
    T_OK(mgt_be_set_weights(b2, p, 0));
    free(p), free(g), free(m), free(v), free(q), free(x), free(y), free(yr);
  }
  mgt_backend_destroy(&b2);
}

/* hold: under 16 bits a held output gradient is converted once for its layer's two GEMMs (the
   same numbers as converting it for each); seen by breaking the promise (writing it while held:
   the GEMM still multiplies the old values), and forgotten when released, when held anew, when
   the precision changes and when another operand takes its slot. */
static void test_hold(void) {
  const int M = 9, N = 13, K = 11;
  const size_t MN = (size_t)M * N, MK = (size_t)M * K, sz = sizeof(float) * MK;
  mgt_backend *b2 = NULL;
  T_OK(mgt_backend_cpu_create(&b2));
  float *dy = fa(MN), *dy2 = fa(MN), *y = fa(MN), *o = fa(MN), *W = fa((size_t)N * K);
  float *x = fa(MK), *dx = fa(MK), *dxr = fa(MK), *dx2 = fa(MK), *dW = fa((size_t)N * K),
        *dWr = fa((size_t)N * K), *db = fa(N), *dbr = fa(N);
  t_fill(dy, MN, 1), t_fill(dy2, MN, 1), t_fill(W, (size_t)N * K, 1), t_fill(x, MK, 1);
  t_fill(o, MN, 1); /* a third operand */
#define DX(out)                                                                                    \
  T_OK(mgt_be_gemm(b2, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, y, N, W, K, 0.0f, out, K))
#define SET(v) memcpy(y, v, sizeof(float) * MN)
  for (int mode = 0; mode < 3; mode++) { /* emulated bf16, fp16, native bf16 */
    if (mode == 2 && !mgt_cpu_bf16_units(NULL, 0)) break;
    T_OK(mgt_be_set_precision(b2, mode == 1 ? MGT_PREC_FP16 : MGT_PREC_BF16));
    T_OK(mgt_backend_cpu_native(b2, mode == 2));
    /* the references: each GEMM converting dy itself */
    SET(dy2);
    DX(dx2);
    SET(dy);
    DX(dxr);
    T_OK(mgt_be_linear_param_grads(b2, M, N, K, y, x, dWr, dbr, 0));
    T_OK(mgt_be_hold(b2, y, MN));
    DX(dx);
    T_OK(mgt_be_linear_param_grads(b2, M, N, K, y, x, dW, db, 0));
    const int same = !memcmp(dx, dxr, sz) && !memcmp(dW, dWr, sizeof(float) * (size_t)N * K) &&
                     !memcmp(db, dbr, sizeof(float) * N);
    SET(dy2);
    DX(dx); /* the promise broken: still the conversion made once */
    const int once = !memcmp(dx, dxr, sz);
    T_OK(mgt_be_gemm(b2, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, o, N, W, K, 0.0f, dx, K));
    DX(dx); /* another operand took the slot: converted again, the new values */
    const int slot = !memcmp(dx, dx2, sz);
    T_OK(mgt_be_hold(b2, NULL, 0));
    SET(dy);
    DX(dx);
    const int released = !memcmp(dx, dxr, sz);
    T_OK(mgt_be_hold(b2, y, MN));
    DX(dx);
    T_OK(mgt_be_hold(b2, y, MN)); /* held anew: the last hold's conversion is not used */
    SET(dy2);
    DX(dx);
    const int anew = !memcmp(dx, dx2, sz);
    T_OK(mgt_be_set_precision(b2, mode == 1 ? MGT_PREC_BF16 : MGT_PREC_FP16));
    DX(dx); /* held across a change of precision: converted again in the new format */
    T_OK(mgt_be_hold(b2, NULL, 0));
    DX(dxr);
    const int format = !memcmp(dx, dxr, sz);
    T_CHECK(same && once && slot && released && anew && format,
            "mode %d: held output gradient: same numbers %d, converted once %d, converted again "
            "after its slot was taken %d, after release %d, when held anew %d, in a new format %d",
            mode, same, once, slot, released, anew, format);
  }
#undef DX
#undef SET
  mgt_backend_destroy(&b2);
  free(dy), free(dy2), free(y), free(o), free(W), free(x), free(dx), free(dxr), free(dx2);
  free(dW), free(dWr), free(db), free(dbr);
}

/* ---------------- fast math ---------------- */
static void test_fast_exp(void) {
  double worst = 0;
  float at = 0;
  for (int i = 0; i <= 2000000; i++) {
    float x = -87.0f + 175.0f * (float)i / 2000000.0f;
    double e = fabs(mgt_fast_expf(x) / exp((double)x) - 1.0);
    if (e > worst) worst = e, at = x;
  }
  T_CHECK(worst < 3.0 * FLT_EPSILON, "fast exp relative error %.3g at %g", worst, at);
  T_CHECK(mgt_fast_expf(-1000.0f) < 1e-37f && mgt_fast_expf(-1000.0f) >= 0.0f, "exp(-1000)");
}

/* ---------------- mixed precision ---------------- */
/* Round-to-nearest-even to `bits` significant bits in double, with a subnormal quantum and an
   overflow threshold: an independent statement of the two formats. */
static double ref_round(double x, int bits, int min_exp, double max_finite) {
  if (x == 0.0) return x;
  int e;
  frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
  int q = e - bits;
  if (q < min_exp - bits + 1) q = min_exp - bits + 1; /* subnormals share the smallest quantum */
  double r = nearbyint(ldexp(x, -q)) * ldexp(1.0, q);
  if (fabs(r) > max_finite) return copysign(INFINITY, x);
  return r;
}

static void test_precision(void) {
  T_CHECK(mgt_round_bf16(1.0f + 0x1p-8f) == 1.0f, "bf16 tie to even, down");
  T_CHECK(mgt_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "bf16 tie to even, up");
  T_CHECK(mgt_round_fp16(65519.0f) == 65504.0f && isinf(mgt_round_fp16(65520.0f)),
          "fp16 overflow threshold");
  T_CHECK(mgt_round_fp16(0x1p-25f) == 0.0f && mgt_round_fp16(3 * 0x1p-25f) == 0x1p-23f,
          "fp16 subnormal ties");
  int bad16 = 0, bad32 = 0;
  for (int i = 0; i < 200000; i++) {
    float x = (float)(t_randn() * ldexp(1.0, (int)(t_next() % 60) - 30));
    double r16 = ref_round(x, 11, -14, 65504.0), rb = ref_round(x, 8, -126, 3.3895313892515355e38);
    float g16 = mgt_round_fp16(x), gb = mgt_round_bf16(x);
    bad16 += !((double)g16 == r16);
    bad32 += !((double)gb == rb);
  }
  T_CHECK(bad16 == 0, "fp16 rounding differs from the reference on %d of 200000 values", bad16);
  T_CHECK(bad32 == 0, "bf16 rounding differs from the reference on %d of 200000 values", bad32);
  /* a GEMM in 16-bit precision is the float64 product of the rounded inputs */
  const int M = 19, N = 23, K = 37;
  for (int prec = 1; prec <= 2; prec++) {
    float A[M * K], B[K * N], C[M * N];
    double ref[M * N];
    t_fill(A, M * K, 1.0f);
    t_fill(B, K * N, 1.0f);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double acc = 0.0;
        for (int k = 0; k < K; k++) {
          float a = prec == 1 ? mgt_round_bf16(A[i * K + k]) : mgt_round_fp16(A[i * K + k]);
          float b = prec == 1 ? mgt_round_bf16(B[k * N + j]) : mgt_round_fp16(B[k * N + j]);
          acc += (double)a * b;
        }
        ref[i * N + j] = acc;
      }
    T_OK(mgt_be_set_precision(be, (mgt_precision)prec));
    T_OK(mgt_be_gemm(be, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N));
    T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
    T_CLOSE(prec == 1 ? "bf16 gemm" : "fp16 gemm", C, ref, (size_t)M * N, 1e-5, 1e-5);
    /* and differs from the fp32 product: the rounding happened */
    float C32[M * N];
    T_OK(mgt_be_gemm(be, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C32, N));
    double diff = 0;
    for (int i = 0; i < M * N; i++)
      diff = fmax(diff, fabs(C32[i] - C[i]));
    T_CHECK(diff > 1e-4, "16-bit gemm equals the fp32 one (max diff %g)", diff);
  }
}

/* ---------------- native bf16 GEMMs ---------------- */

/* One native GEMM against the float64 product of the bf16-rounded operands: the products are
   exact in fp32, so the only error is fp32 accumulation, bounded by K 2^-24 sum |a b|. */
static double native_case(mgt_backend *nb, int ta, int tb, int M, int N, int K, float alpha,
                          float beta, int pad, int weights) {
  const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int ar = ta ? K : M, br = tb ? N : K;
  float *A = malloc(sizeof(float) * ar * lda), *W = malloc(sizeof(float) * (br * ldb + 64));
  float *C = malloc(sizeof(float) * M * ldc), *C0 = malloc(sizeof(float) * M * ldc);
  float *B = W + 64; /* inside the registered weights, past another tensor */
  t_fill(A, (size_t)ar * lda, 1.0f);
  t_fill(W, (size_t)br * ldb + 64, 1.0f);
  t_fill(C0, (size_t)M * ldc, 1.0f);
  memcpy(C, C0, sizeof(float) * M * ldc);
  if (weights) {
    T_OK(mgt_be_set_weights(nb, W, (size_t)br * ldb + 64));
    T_OK(mgt_be_refresh_weights(nb, 0, (size_t)br * ldb + 64));
  }
  T_OK(mgt_be_gemm(nb, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
  double worst = 0.0; /* error over its bound */
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0.0, mag = 0.0;
      for (int k = 0; k < K; k++) {
        double a = mgt_round_bf16(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        double b = mgt_round_bf16(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
        acc += a * b, mag += fabs(a * b);
      }
      double ref = alpha * acc + beta * (double)C0[(size_t)i * ldc + j];
      double bound = (K + 2) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * C0[(size_t)i * ldc + j]));
      worst = fmax(worst, fabs(C[(size_t)i * ldc + j] - ref) / (bound + 1e-30));
    }
  for (int i = 0; i < M; i++) /* the padding of C is not written */
    for (int j = N; j < ldc; j++)
      T_CHECK(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j], "native gemm wrote C's padding");
  if (weights) T_OK(mgt_be_set_weights(nb, W, 0));
  free(A), free(W), free(C), free(C0);
  return worst;
}

static void test_native_gemm(void) {
  char what[128];
  mgt_backend *nb = NULL;
  T_OK(mgt_backend_cpu_create(&nb));
  if (!mgt_cpu_bf16_units(what, sizeof what)) {
    /* refused with the reason, and the emulated GEMMs stay */
    T_CHECK(mgt_backend_cpu_native(nb, 1) != MGT_OK, "native GEMMs accepted without bf16 units");
    mgt_error_clear();
    printf("native bf16 GEMMs: not here (%s)\n", what);
    mgt_backend_destroy(&nb);
    return;
  }
  T_OK(mgt_be_set_precision(nb, MGT_PREC_BF16));
  T_OK(mgt_backend_cpu_native(nb, 1));
  { /* a NaN operand whose mantissa lies in its low 16 bits is a NaN in bf16 (not an infinity),
       as the emulated GEMMs' and the GPU's conversions keep it */
    const uint32_t nan_bits[2] = {0x7F800001u, 0xFF800001u};
    for (int k = 0; k < 2; k++) {
      float A[2] = {1.0f, 1.0f}, B[4] = {1.0f, 2.0f, 3.0f, 4.0f}, C[2] = {0.0f, 0.0f};
      memcpy(&A[0], &nan_bits[k], sizeof A[0]);
      T_OK(mgt_be_gemm(nb, MGT_NOTRANS, MGT_NOTRANS, 1, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2));
      T_CHECK(isnan(C[0]) && isnan(C[1]), "native bf16 GEMM of the NaN %08x: %g %g",
              (unsigned)nan_bits[k], C[0], C[1]);
    }
  }
  double worst = 0.0;
  /* the last two: inner dimensions that AMX machines multiply in blocks (native.c), one with a
     shorter last block */
  const int shapes[][3] = {{19, 23, 37},   {1, 5, 3},    {64, 96, 770},
                           {256, 300, 64}, {5, 7, 9000}, {3, 130, 12289}};
  for (int s = 0; s < 6; s++)
    for (int t = 0; t < 4; t++) {
      const int *d = shapes[s];
      worst = fmax(worst, native_case(nb, t & 1, t >> 1, d[0], d[1], d[2], 1.0f, 0.0f, 0, 0));
      worst = fmax(worst, native_case(nb, t & 1, t >> 1, d[0], d[1], d[2], 0.125f, 1.0f, 3, 1));
      worst = fmax(worst, native_case(nb, t & 1, t >> 1, d[0], d[1], d[2], -2.0f, 0.5f, 1, t & 1));
    }
  T_CHECK(worst <= 1.0, "native bf16 gemm: error %.2f times the fp32 accumulation bound", worst);
  printf("native bf16 GEMMs (%s): worst error %.3f of the fp32 accumulation bound\n", what, worst);
  /* the weights' copy is the one of the last refresh: a GEMM after a change without one reads
     the old values, after the refresh the new */
  const int M = 8, N = 16, K = 32;
  float A[M * K], W[N * K], C[M * N], Cr[M * N];
  t_fill(A, M * K, 1.0f);
  t_fill(W, N * K, 1.0f);
  T_OK(mgt_be_set_weights(nb, W, N * K));
  T_OK(mgt_be_refresh_weights(nb, 0, N * K));
  T_OK(mgt_be_gemm(nb, 0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, Cr, N));
  for (int i = 0; i < N * K; i++)
    W[i] *= 2.0f;
  T_OK(mgt_be_gemm(nb, 0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N));
  T_CHECK(!memcmp(C, Cr, sizeof C), "a native GEMM read weights the copy does not hold yet");
  T_OK(mgt_be_refresh_weights(nb, 0, N * K));
  T_OK(mgt_be_gemm(nb, 0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N));
  int doubled = 1;
  for (int i = 0; i < M * N; i++)
    doubled &= C[i] == 2.0f * Cr[i]; /* exact: scaling by 2 commutes with every rounding */
  T_CHECK(doubled, "after the refresh a native GEMM does not read the new weights");
  T_OK(mgt_be_set_weights(nb, W, 0));
  /* emulation again on request: bit for bit the emulated backend's */
  T_OK(mgt_backend_cpu_native(nb, 0));
  T_OK(mgt_be_gemm(nb, 0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N));
  T_OK(mgt_be_set_precision(be, MGT_PREC_BF16));
  T_OK(mgt_be_gemm(be, 0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, Cr, N));
  T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
  T_CHECK(!memcmp(C, Cr, sizeof C), "emulated GEMMs after native ones differ from emulation");
  mgt_backend_destroy(&nb);
}

/* ---------------- 16-bit flash attention ---------------- */
/* The contract of kernels/cpu/flash.c under bf16/fp16 (the CUDA tensor-core kernel's) in
   float64: the same operands rounded, by ref_round, everything else exact. A kernel rounds
   its fp32 value of a probability or of dS, which may sit on the other side of a rounding
   midpoint than the exact value; the reference bounds that fp32 error for each element and,
   where the bound straddles a midpoint, allows the two neighbours (a "budget" per output).
   Everything else must agree to fp32 accumulation. */
static double f16_round(double x, int prec) {
  return prec == MGT_PREC_BF16 ? ref_round(x, 8, -126, 3.3895313892515355e38)
                               : ref_round(x, 11, -14, 65504.0);
}

/* The 16-bit value nearest x; *spread how far the rounding of anything within err of x can
   land from it. */
static double f16_round_within(double x, double err, int prec, double *spread) {
  const double r = f16_round(x, prec), lo = f16_round(x - err, prec), hi = f16_round(x + err, prec);
  *spread = fmax(hi - r, r - lo);
  return r;
}

/* Inputs that round to a coarse grid: +-(k/8 + delta), k in 9..15, |delta| below 0.9 of half
   a 16-bit unit in [1, 2), so that rounding gives exactly k/8 and the products of rounded
   operands (multiples of 1/64, sums below 2^9) accumulate exactly in fp32 in any order; the
   unrounded values differ by delta, so a kernel that skips a rounding is off by delta. */
static void f16_fill_grid(float *x, size_t n, int prec) {
  const double half_unit = prec == MGT_PREC_BF16 ? 0x1p-8 : 0x1p-11;
  for (size_t i = 0; i < n; i++) {
    const double k = (double)(9 + t_next() % 7) / 8.0, sign = (t_next() & 1) ? -1.0 : 1.0;
    x[i] = (float)(sign * (k + (2.0 * t_uniform() - 1.0) * 0.9 * half_unit));
  }
}

typedef struct f16_case {
  int B, T, Hl, hd, off, prec;
  const int32_t *keylen; /* NULL: causal */
  const mgt_dropout *d;
} f16_case;

enum { F16_KEYS = 64 }; /* the contract's key tile: the running maximum is taken per tile */
static const double f16_u = 0x1p-24; /* fp32 unit roundoff */

/* The forward under the contract: out, its budget and the sum of |terms| (for the fp32
   accumulation), and lse. */
static void f16_forward_ref(const f16_case *c, const float *qkv, double *O, double *bud,
                            double *abs_sum, double *lse) {
  const int T = c->T, hd = c->hd, Cl = c->Hl * hd, ld = 3 * Cl, prec = c->prec;
  const float scale = 1.0f / sqrtf((float)hd);
  const int drop = c->d->p > 0.0f;
  const double dscale = drop ? 1.0f / (1.0f - c->d->p) : 1.0;
  const att_ctx ac = {c->B, T, c->Hl, hd, c->off, c->d, NULL, c->keylen, NULL};
  double *S = da((size_t)T), *mt = da((size_t)T / F16_KEYS + 1);
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->Hl; h++)
      for (int i = 0; i < T; i++) {
        const int lim = ref_lim(&ac, b, i);
        const float *q = qkv + ((size_t)b * T + i) * ld + (size_t)h * hd;
        for (int j = 0; j < lim; j++) {
          const float *k = qkv + ((size_t)b * T + j) * ld + Cl + (size_t)h * hd;
          double dot = 0;
          for (int e = 0; e < hd; e++)
            dot += f16_round(q[e], prec) * f16_round(k[e], prec);
          S[j] = (double)scale * dot;
        }
        double M = -INFINITY, l = 0;
        for (int j = 0; j < lim; j++) {
          M = fmax(M, S[j]);
          if (j % F16_KEYS == F16_KEYS - 1 || j == lim - 1) mt[j / F16_KEYS] = M;
        }
        for (int j = 0; j < lim; j++)
          l += exp(S[j] - M);
        const size_t o0 = ((size_t)b * T + i) * Cl + (size_t)h * hd;
        for (int e = 0; e < hd; e++)
          O[o0 + e] = bud[o0 + e] = abs_sum[o0 + e] = 0;
        for (int j = 0; j < lim; j++) {
          const double m = mt[j / F16_KEYS], p = exp(S[j] - m);
          const uint64_t word = (((uint64_t)(c->off + h) * T) + i) * T + j;
          const double kd = drop ? (ref_keep(c->d, b, word) ? dscale : 0.0) : 1.0;
          /* fp32: S, m and S - m each rounded, exp within 3 ulp, the dropout product */
          const double err = 2 * p * kd * ((fabs(S[j]) + fabs(m) + fabs(S[j] - m) + 12) * f16_u);
          double spread;
          const double P = f16_round_within(p * kd, err, prec, &spread), w = exp(m - M) / l;
          const float *v = qkv + ((size_t)b * T + j) * ld + 2 * Cl + (size_t)h * hd;
          for (int e = 0; e < hd; e++) {
            const double vr = f16_round(v[e], prec);
            O[o0 + e] += w * P * vr;
            bud[o0 + e] += w * spread * fabs(vr);
            abs_sum[o0 + e] += w * fabs(P * vr);
          }
        }
        lse[((size_t)b * c->Hl + h) * T + i] = M + log(l);
      }
  free(S), free(mt);
}

/* The backward under the contract, from the given out and lse (as the kernel takes them): the
   gradient, its budget and the sums of |terms|, laid out as dqkv. */
static void f16_backward_ref(const f16_case *c, const float *qkv, const float *dout,
                             const float *out, const float *lse, double *G, double *bud,
                             double *abs_sum) {
  const int T = c->T, hd = c->hd, Cl = c->Hl * hd, ld = 3 * Cl, prec = c->prec;
  const float scale = 1.0f / sqrtf((float)hd);
  const int drop = c->d->p > 0.0f;
  const double dscale = drop ? 1.0f / (1.0f - c->d->p) : 1.0, u = f16_u;
  const att_ctx ac = {c->B, T, c->Hl, hd, c->off, c->d, NULL, c->keylen, NULL};
  const size_t nq = (size_t)c->B * T * ld;
  for (size_t x = 0; x < nq; x++)
    G[x] = bud[x] = abs_sum[x] = 0;
  for (int b = 0; b < c->B; b++)
    for (int h = 0; h < c->Hl; h++)
      for (int i = 0; i < T; i++) {
        const int lim = ref_lim(&ac, b, i);
        const size_t o0 = ((size_t)b * T + i) * Cl + (size_t)h * hd;
        const size_t qi = ((size_t)b * T + i) * ld + (size_t)h * hd;
        double D = 0, absD = 0;
        for (int e = 0; e < hd; e++) {
          D += (double)dout[o0 + e] * out[o0 + e];
          absD += fabs((double)dout[o0 + e] * out[o0 + e]);
        }
        const double L = lse[((size_t)b * c->Hl + h) * T + i];
        for (int j = 0; j < lim; j++) {
          const size_t kj = ((size_t)b * T + j) * ld + Cl + (size_t)h * hd, vj = kj + Cl;
          double dot = 0, dP = 0;
          for (int e = 0; e < hd; e++) {
            dot += f16_round(qkv[qi + e], prec) * f16_round(qkv[kj + e], prec);
            dP += f16_round(dout[o0 + e], prec) * f16_round(qkv[vj + e], prec);
          }
          const double S = (double)scale * dot, p = exp(S - L);
          const uint64_t word = (((uint64_t)(c->off + h) * T) + i) * T + j;
          const double kd = drop ? (ref_keep(c->d, b, word) ? dscale : 0.0) : 1.0;
          const double ep = (fabs(S) + fabs(L) + fabs(S - L) + 12) * u; /* of fp32 p, relative */
          const double g = dP * kd - D, x = p * g * scale;
          /* fp32 dS: p's error, dP * kd and the subtraction rounded, D summed over hd terms */
          const double ex =
              2 * p * scale * (fabs(g) * (ep + 3 * u) + fabs(dP * kd) * u + hd * u * absD);
          double s1, s2;
          const double Pd = f16_round_within(p * kd, 2 * p * kd * ep, prec, &s1);
          const double dS = f16_round_within(x, ex, prec, &s2);
          for (int e = 0; e < hd; e++) {
            const double dor = f16_round(dout[o0 + e], prec), kr = f16_round(qkv[kj + e], prec),
                         qr = f16_round(qkv[qi + e], prec);
            G[vj + e] += Pd * dor, bud[vj + e] += s1 * fabs(dor), abs_sum[vj + e] += fabs(Pd * dor);
            G[qi + e] += dS * kr, bud[qi + e] += s2 * fabs(kr), abs_sum[qi + e] += fabs(dS * kr);
            G[kj + e] += dS * qr, bud[kj + e] += s2 * fabs(qr), abs_sum[kj + e] += fabs(dS * qr);
          }
        }
      }
}

/* |x - ref| <= rtol * abs_sum + budget + atol for every element. */
static void f16_close(const char *what, const float *x, const double *ref, const double *bud,
                      const double *abs_sum, size_t n, double rtol, double atol) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const double r = fabs((double)x[i] - ref[i]) / (rtol * abs_sum[i] + bud[i] + atol);
    if (!(r <= worst)) worst = isnan(r) ? INFINITY : r, at = i;
  }
  T_CHECK(worst <= 1.0,
          "%s: element %zu is %.9g, reference %.9g (budget %.3g, |terms| %.3g, ratio %.3g)", what,
          at, n ? (double)x[at] : 0.0, n ? ref[at] : 0.0, n ? bud[at] : 0.0, n ? abs_sum[at] : 0.0,
          worst);
}

/* Largest |a - b| over the largest |b|. */
static double rel_gap(const float *a, const float *b, size_t n) {
  double gap = 0, scale = 1e-30;
  for (size_t i = 0; i < n; i++)
    gap = fmax(gap, fabs((double)a[i] - b[i])), scale = fmax(scale, fabs((double)b[i]));
  return gap / scale;
}

/* The 16-bit twin (bf16 and fp16; head dims 32, 64, 128; causal and padding-masked; with and
   without dropout; one tile, a ragged tile, several tiles): out and lse against the float64
   contract, then the backward against it twice: from the forward's out and lse, and from
   out = 0, where D = 0 is exact and the bound on each dS is tight enough that a twin skipping
   dS's rounding fails. The fp32 sums are allowed 4e-5 of their |terms|: the fp32 bound for
   the T + 64 additions of the longest sum here (T = 150) and the rescalings is about 2.4e-5.
   Then: fp32 on the same shapes matches the float64 reference of test_flash_attention;
   a head dim without a tensor-core kernel (48) is fp32 bit for bit under bf16; and on plain
   random inputs, the twin is as far from the fp32 kernel as 16-bit rounding puts it. */
static void test_flash_attention_16(void) {
  const int shapes[][5] = {/* B, T, Hl, hd, head_offset */
                           {1, 1, 1, 32, 0},
                           {2, 17, 2, 64, 1},
                           {2, 150, 2, 32, 1},
                           {1, 130, 1, 64, 0},
                           {1, 70, 2, 128, 3}};
  const int32_t lens[5][2] = {{1, 1}, {17, 5}, {150, 77}, {64, 1}, {33, 1}};
  const float drops[] = {0.0f, 0.3f};
  const double rtol = 4e-5, atol = 1e-6;
  mgt_backend *nb = NULL; /* native bf16 tiles (oneDNN) keep the same contract */
  if (mgt_cpu_bf16_units(NULL, 0)) {
    T_OK(mgt_backend_cpu_create(&nb));
    T_OK(mgt_backend_cpu_native(nb, 1));
  }
  for (int nat = 0; nat < 2; nat++)
    for (int prec = MGT_PREC_BF16; prec <= MGT_PREC_FP16; prec++)
      for (int masked = 0; masked < 2; masked++)
        for (size_t s = 0; s < 5; s++)
          for (int di = 0; di < 2; di++) {
            if (nat && (!nb || prec != MGT_PREC_BF16)) continue;
            mgt_backend *tb = nat ? nb : be;
            const int B = shapes[s][0], T = shapes[s][1], Hl = shapes[s][2], hd = shapes[s][3];
            const int off = shapes[s][4], Cl = Hl * hd;
            const int32_t *kl = masked ? lens[s] : NULL;
            mgt_dropout d = {drops[di], 99, 1000, 3, MGT_DROPOUT_ATTN, 0};
            const size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl,
                         nl = (size_t)B * Hl * T;
            float *qkv = fa(nq), *dout = fa(no), *out = fa(no), *lse = fa(nl), *dqkv = fa(nq),
                  *zero = fa(no);
            double *ro = da(no), *ob = da(no), *oa = da(no), *rl = da(nl), *g = da(nq),
                   *gb = da(nq), *ga = da(nq);
            f16_fill_grid(qkv, nq, prec);
            f16_fill_grid(dout, no, prec);
            const f16_case c = {B, T, Hl, hd, off, prec, kl, &d};
            char what[128];
            snprintf(what, sizeof what, "%s%s flash B%d T%d Hl%d hd%d %s drop %.1f",
                     nat ? "native " : "", prec == MGT_PREC_BF16 ? "bf16" : "fp16", B, T, Hl, hd,
                     masked ? "masked" : "causal", (double)d.p);
            T_OK(mgt_be_set_precision(tb, (mgt_precision)prec));
            T_OK(
                mgt_be_flash_attention_forward(tb, out, lse, qkv, B, T, Hl, hd, off, kl, NULL, &d));
            f16_forward_ref(&c, qkv, ro, ob, oa, rl);
            char w2[160];
            snprintf(w2, sizeof w2, "%s out", what);
            f16_close(w2, out, ro, ob, oa, no, rtol, atol);
            snprintf(w2, sizeof w2, "%s lse", what);
            T_CLOSE(w2, lse, rl, nl, 2e-5, 2e-6);
            for (int from_zero = 0; from_zero < 2; from_zero++) {
              const float *o = from_zero ? zero : out;
              T_OK(mgt_be_flash_attention_backward(tb, dqkv, dout, qkv, o, lse, B, T, Hl, hd, off,
                                                   kl, NULL, &d));
              f16_backward_ref(&c, qkv, dout, o, lse, g, gb, ga);
              snprintf(w2, sizeof w2, "%s dqkv%s", what, from_zero ? " (out = 0)" : "");
              f16_close(w2, dqkv, g, gb, ga, nq, rtol, atol);
            }
            T_OK(mgt_be_set_precision(tb, MGT_PREC_FP32));
            if (prec == MGT_PREC_BF16 &&
                !nat) { /* fp32 on these head dims: the existing reference */
              const int H = off + Hl;
              float *P = fa((size_t)B * Hl * T * T), *scr = fa((size_t)B * Hl * T * T),
                    *mo = fa(no), *md = fa(nq);
              double *Q = da(nq), *r32 = da(no), *g32 = da(nq);
              to_double(qkv, Q, nq);
              const att_ctx ac = {B, T, Hl, hd, off, &d, NULL, kl, NULL};
              att_ref(Q, &ac, r32, NULL);
              T_OK(mgt_be_flash_attention_forward(be, out, lse, qkv, B, T, Hl, hd, off, kl, NULL,
                                                  &d));
              snprintf(w2, sizeof w2, "fp32 flash B%d T%d hd%d out", B, T, hd);
              T_CLOSE(w2, out, r32, no, 1e-5, 1e-4);
              T_OK(mgt_be_flash_attention_backward(be, dqkv, dout, qkv, out, lse, B, T, Hl, hd, off,
                                                   kl, NULL, &d));
              T_OK(mgt_be_attention_forward(be, mo, P, qkv, B, T, Hl, hd, off, H, kl, NULL, &d,
                                            scr));
              T_OK(mgt_be_attention_backward(be, md, dout, qkv, P, B, T, Hl, hd, off, H, kl, NULL,
                                             &d, scr));
              to_double(md, g32, nq);
              snprintf(w2, sizeof w2, "fp32 flash B%d T%d hd%d dqkv (materialized kernel)", B, T,
                       hd);
              T_CLOSE(w2, dqkv, g32, nq, 1e-4, 1e-3);
              free(P), free(scr), free(mo), free(md), free(Q), free(r32), free(g32);
            }
            free(qkv), free(dout), free(out), free(lse), free(dqkv), free(zero), free(ro), free(ob),
                free(oa), free(rl), free(g), free(gb), free(ga);
          }

  /* plain random inputs: bf16/fp16 against fp32 (hd 64), and hd 48 (no tensor-core kernel) */
  const int B = 2, T = 150, Hl = 2;
  mgt_dropout d = {0.1f, 5, 20, 1, MGT_DROPOUT_ATTN, 0};
  for (int hd = 48; hd <= 64; hd += 16) {
    const int Cl = Hl * hd;
    const size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl, nl = (size_t)B * Hl * T;
    float *qkv = fa(nq), *dout = fa(no), *o32 = fa(no), *l32 = fa(nl), *g32 = fa(nq), *o16 = fa(no),
          *l16 = fa(nl), *g16 = fa(nq);
    t_fill(qkv, nq, 1.0f);
    t_fill(dout, no, 1.0f);
    T_OK(mgt_be_flash_attention_forward(be, o32, l32, qkv, B, T, Hl, hd, 0, NULL, NULL, &d));
    T_OK(mgt_be_flash_attention_backward(be, g32, dout, qkv, o32, l32, B, T, Hl, hd, 0, NULL, NULL,
                                         &d));
    for (int prec = MGT_PREC_BF16; prec <= MGT_PREC_FP16; prec++) {
      T_OK(mgt_be_set_precision(be, (mgt_precision)prec));
      T_OK(mgt_be_flash_attention_forward(be, o16, l16, qkv, B, T, Hl, hd, 0, NULL, NULL, &d));
      T_OK(mgt_be_flash_attention_backward(be, g16, dout, qkv, o16, l16, B, T, Hl, hd, 0, NULL,
                                           NULL, &d));
      T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
      const char *name = prec == MGT_PREC_BF16 ? "bf16" : "fp16";
      if (hd == 48) {
        T_CHECK(!memcmp(o16, o32, no * 4) && !memcmp(l16, l32, nl * 4) && !memcmp(g16, g32, nq * 4),
                "%s flash attention at hd 48 (no tensor-core kernel) is not the fp32 one", name);
        continue;
      }
      /* the gap in units of the operands' roundoff, 2^-8 (bf16) or 2^-11 (fp16): measured 1.0
         (bf16) and 0.8 (fp16) on out, 0.85 and 1.2 on dqkv; a twin that rounds nothing is the
         fp32 kernel, 0 units away */
      const double unit = prec == MGT_PREC_BF16 ? 0x1p-8 : 0x1p-11;
      const double go = rel_gap(o16, o32, no), gg = rel_gap(g16, g32, nq);
      printf("%s flash attention vs fp32 (hd 64): out %.3g, dqkv %.3g (unit roundoff %.3g)\n", name,
             go, gg, unit);
      T_CHECK(go >= 0.25 * unit && go <= 8 * unit, "%s flash out is %.3g from fp32, not ~%.3g",
              name, go, unit);
      T_CHECK(gg >= 0.25 * unit && gg <= 8 * unit, "%s flash dqkv is %.3g from fp32, not ~%.3g",
              name, gg, unit);
    }
    /* documents kept apart: the GPU runs its fp32 tiles there, so the twin rounds nothing */
    int32_t *kf = doc_starts(B, T);
    T_OK(mgt_be_flash_attention_forward(be, o32, l32, qkv, B, T, Hl, hd, 0, NULL, kf, &d));
    T_OK(mgt_be_flash_attention_backward(be, g32, dout, qkv, o32, l32, B, T, Hl, hd, 0, NULL, kf,
                                         &d));
    T_OK(mgt_be_set_precision(be, MGT_PREC_BF16));
    T_OK(mgt_be_flash_attention_forward(be, o16, l16, qkv, B, T, Hl, hd, 0, NULL, kf, &d));
    T_OK(mgt_be_flash_attention_backward(be, g16, dout, qkv, o16, l16, B, T, Hl, hd, 0, NULL, kf,
                                         &d));
    T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
    T_CHECK(!memcmp(o16, o32, no * 4) && !memcmp(l16, l32, nl * 4) && !memcmp(g16, g32, nq * 4),
            "bf16 flash attention (hd %d) with documents kept apart is not the fp32 one", hd);
    free(kf);
    free(qkv), free(dout), free(o32), free(l32), free(g32), free(o16), free(l16), free(g16);
  }
  mgt_backend_destroy(&nb);
}

/* Materialized attention with native bf16 products (Q, K, V, the dropped probabilities, dO
   and dS rounded to bf16, fp32 accumulation) against the fp32 attention: about one bf16
   roundoff away, never 0 (then nothing was rounded); causal and padding-masked, with dropout,
   twice (the second call reuses the kept primitives). */
static void test_native_attention(void) {
  mgt_backend *nb = NULL;
  if (!mgt_cpu_bf16_units(NULL, 0)) return; /* test_native_gemm says why */
  T_OK(mgt_backend_cpu_create(&nb));
  T_OK(mgt_be_set_precision(nb, MGT_PREC_BF16));
  T_OK(mgt_backend_cpu_native(nb, 1));
  const int B = 2, T = 70, Hl = 3, hd = 32, Cl = Hl * hd;
  const size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl, np = (size_t)B * Hl * T * T;
  float *qkv = fa(nq), *dout = fa(no), *o32 = fa(no), *p32 = fa(np), *g32 = fa(nq), *s32 = fa(np);
  float *o16 = fa(no), *p16 = fa(np), *g16 = fa(nq), *s16 = fa(np);
  int32_t keylen[2] = {T, 41};
  mgt_dropout d = {0.1f, 9, 3, 1, MGT_DROPOUT_ATTN, 0};
  t_fill(qkv, nq, 1.0f);
  t_fill(dout, no, 1.0f);
  const double unit = 0x1p-8;
  for (int mask = 0; mask < 2; mask++)
    for (int rep = 0; rep < 2; rep++) {
      const int32_t *kl = mask ? keylen : NULL;
      T_OK(mgt_be_attention_forward(be, o32, p32, qkv, B, T, Hl, hd, 1, 4, kl, NULL, &d, s32));
      T_OK(mgt_be_attention_backward(be, g32, dout, qkv, p32, B, T, Hl, hd, 1, 4, kl, NULL, &d,
                                     s32));
      T_OK(mgt_be_attention_forward(nb, o16, p16, qkv, B, T, Hl, hd, 1, 4, kl, NULL, &d, s16));
      T_OK(mgt_be_attention_backward(nb, g16, dout, qkv, p16, B, T, Hl, hd, 1, 4, kl, NULL, &d,
                                     s16));
      const double go = rel_gap(o16, o32, no), gp = rel_gap(p16, p32, np),
                   gg = rel_gap(g16, g32, nq);
      if (rep == 0)
        printf("native bf16 attention (%s) vs fp32: out %.3g, P %.3g, dqkv %.3g (unit roundoff "
               "%.3g)\n",
               mask ? "padding mask" : "causal", go, gp, gg, unit);
      T_CHECK(go >= 0.25 * unit && go <= 8 * unit, "native attention out is %.3g from fp32", go);
      T_CHECK(gp > 0 && gp <= 8 * unit, "native attention P is %.3g from fp32", gp);
      T_CHECK(gg >= 0.25 * unit && gg <= 8 * unit, "native attention dqkv is %.3g from fp32", gg);
    }
  free(qkv), free(dout), free(o32), free(p32), free(g32), free(s32);
  free(o16), free(p16), free(g16), free(s16);
  mgt_backend_destroy(&nb);
}

/* The wrappers: an empty slot is one line naming the backend and the operation, never a call
   through NULL; mgt_be_has tells which are there. */
static void test_wrappers(void) {
  struct mgt_backend partial = *be;
  partial.gemm = NULL;
  partial.set_act16 = NULL;
  float a = 1, b = 2, c = 0;
  mgt_status st = mgt_be_gemm(&partial, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  T_CHECK(st == MGT_ERR_BACKEND && !strcmp(mgt_error_message(), "backend cpu lacks operation gemm"),
          "an empty slot: status %d, \"%s\"", st, mgt_error_message());
  mgt_error_clear();
  T_OK(mgt_be_gemm(be, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1));
  T_CHECK(c == 2.0f, "gemm through the wrapper: %g", c);
  int all = 1;
  for (int op = 0; op < MGT_BE_N_OPS; op++)
    all &= mgt_be_has(be, (mgt_be_op)op);
  T_CHECK(all && !mgt_be_has(&partial, MGT_BE_GEMM) && !mgt_be_has(&partial, MGT_BE_SET_ACT16) &&
              mgt_be_has(&partial, MGT_BE_ADAMW) && !mgt_be_has(be, MGT_BE_N_OPS),
          "mgt_be_has");
  T_CHECK(!strcmp(mgt_be_name(be), "cpu") && mgt_be_act16_bytes(be) == 4, "name and act16 bytes");
  /* every operation of the list: its slot filled, seen by mgt_be_has, named as in the list */
  int bad = 0, n = 0;
#define ONE(name, NAME, params, args, kind)                                                        \
  {                                                                                                \
    struct mgt_backend without = *be;                                                              \
    without.name = NULL;                                                                           \
    bad += be->name == NULL || mgt_be_has(&without, MGT_BE_##NAME) ||                              \
           strcmp(mgt_be_op_name(MGT_BE_##NAME), #name) != 0 || MGT_BE_##NAME != n;                \
    n++;                                                                                           \
  }
  MGT_BE_OPERATIONS(ONE)
#undef ONE
  T_CHECK(bad == 0 && n == MGT_BE_N_OPS && mgt_be_op_name(MGT_BE_N_OPS) == NULL,
          "the list of %d operations: %d slots, names or enum values wrong", n, bad);
}

/* --attention-backend auto picks the tiles where the kernels run them fast: on CPUs (but native
   bf16 below 2048), and on GPUs only under 16 bits at the head sizes the tensor-core kernels
   take (cpu_flash16_hd), never for fp32; an explicit choice always wins. */
static void test_attention_choice(void) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.num_attention_heads = 4;
  int wrong = 0;
  for (int hd = 1; hd <= 256; hd++) {
    c.hidden_size = 4 * hd;
    c.device = MGT_DEVICE_CPU, c.bf16 = 0;
    wrong += mgt_config_flash(&c, NULL, 0) != 1;
    c.device = MGT_DEVICE_CUDA;
    wrong += mgt_config_flash(&c, NULL, 0) != 0;
    c.bf16 = 1;
    wrong += mgt_config_flash(&c, NULL, 0) != cpu_flash16_hd(hd);
    c.bf16 = 0, c.fp16 = 1;
    wrong += mgt_config_flash(&c, NULL, 0) != cpu_flash16_hd(hd);
    c.attention_backend = MGT_ATTN_UNFUSED;
    wrong += mgt_config_flash(&c, NULL, 0) != 0;
    c.attention_backend = MGT_ATTN_FLASH, c.fp16 = 0, c.device = MGT_DEVICE_CPU;
    wrong += mgt_config_flash(&c, NULL, 0) != 1;
    c.attention_backend = MGT_ATTN_AUTO;
  }
  /* native bf16 GEMMs: the materialized products below sequence 2048 */
  const int units = mgt_cpu_bf16_units(NULL, 0);
  c.device = MGT_DEVICE_CPU, c.bf16 = 1, c.hidden_size = 256;
  for (int T = 64; T <= 8192; T *= 2) {
    c.seq_length = T, c.cpu_gemm = -1;
    wrong += mgt_config_flash(&c, NULL, 0) != (!units || T >= 2048);
    c.cpu_gemm = MGT_CPU_GEMM_EMULATED;
    wrong += mgt_config_flash(&c, NULL, 0) != 1;
  }
  T_CHECK(wrong == 0, "--attention-backend auto: %d wrong choices", wrong);
  printf("ok: --attention-backend auto: tiles on CPUs (materialized under native bf16 below 2048, "
         "bf16 units: %d), tensor-core head sizes on GPUs\n",
         units);
}

int main(void) {
  T_OK(mgt_backend_cpu_create(&be));
  test_attention_choice();
  test_wrappers();
  test_precision();
  test_gemm();
  test_gemm_grouped();
  test_native_gemm();
  test_bias();
  test_layernorm();
  test_rmsnorm();
  test_head_rmsnorm();
  test_head_rmsnorm_split();
  test_moe_route();
  test_moe_combine();
  test_gemm32();
  test_swiglu();
  test_rope();
  test_gelu();
  test_head_activations();
  test_gather_rows();
  test_attention();
  test_native_attention();
  test_flash_attention();
  test_flash_attention_16();
  test_attention_shards();
  test_attention_decode();
  test_kv_group();
  test_argmax_copy();
  test_embedding();
  test_dropout();
  test_xent();
  test_optimizer();
  test_adamw_copies();
  test_hold();
  test_fast_exp();
  mgt_backend_destroy(&be);
  return t_report("test_kernels");
}
