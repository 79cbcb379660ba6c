/* The CPU twins of the fused operations (kernels/cpu/fused.c) against float64 references of
   what backend.h says they compute: linear_bias, linear_param_grads (at 16 bits the bias
   gradient sums the rounded dy), linear_dgelu (tanh GeLU's derivative), bias_dropout_add_ln
   (the dropout mask read back from dropout_forward on ones, which test_kernels checks); and
   that each equals the unfused operations the model called before, bit for bit; and the 16-bit
   activations, in floats and (native bf16 GEMMs) in bf16 itself. */
#include <stdio.h>
#include <string.h>

#include "mgt/backend.h"
#include "testutil.h"

static mgt_backend *be;

static float *rnd(size_t n, float scale) {
  float *x = malloc(n * sizeof(float) + 1);
  t_fill(x, n, scale);
  return x;
}

static double round_to(int prec, float x) {
  return prec == MGT_PREC_BF16 ? mgt_round_bf16(x)
                               : (prec == MGT_PREC_FP16 ? mgt_round_fp16(x) : x);
}

static double dgelu64(double x) {
  const double k0 = 0.7978845608028654, k1 = 0.044715;
  const double u = k0 * (x + k1 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k0 * (1.0 + 3.0 * k1 * x * x);
}

static void check(const char *what, const float *x, const double *ref, size_t n, double tol) {
  double scale = 1e-30, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    const double e = fabs(x[i] - ref[i]);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = i;
  }
  T_CHECK(worst <= tol * scale, "%s: element %zu is %.9g, float64 reference %.9g (scale %.3g)",
          what, at, n ? x[at] : 0.0, n ? ref[at] : 0.0, scale);
}

static void test_linear(int prec) {
  const int M = 37, N = 24, K = 40;
  const size_t na = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
  float *A = rnd(na, 1.0f), *W = rnd(nw, 0.3f), *b = rnd(N, 0.5f), *out = malloc(no * 4);
  double *ref = malloc(no * 8);
  T_OK(mgt_be_linear_bias(be, M, N, K, A, K, W, K, b, out));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = b[j];
      for (int k = 0; k < K; k++)
        s += round_to(prec, A[i * K + k]) * round_to(prec, W[j * K + k]);
      ref[i * N + j] = s;
    }
  check("linear_bias", out, ref, no, 1e-5);
  /* the unfused steps, bit for bit */
  float *two = malloc(no * 4);
  T_OK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, K, W, K, 0.0f, two, N));
  T_OK(mgt_be_add_bias(be, two, b, M, N));
  T_CHECK(!memcmp(two, out, no * 4), "linear_bias differs from gemm + add_bias");

  /* parameter gradients, overwritten then accumulated */
  float *dy = rnd(no, 1.0f), *dW = malloc(nw * 4), *db = malloc(N * 4);
  double *rW = malloc(nw * 8), *rb = malloc(N * 8);
  for (int acc = 0; acc < 2; acc++) {
    float *W0 = acc ? malloc(nw * 4) : NULL, *b0 = acc ? malloc(N * 4) : NULL;
    if (acc) memcpy(W0, dW, nw * 4), memcpy(b0, db, N * 4);
    T_OK(mgt_be_linear_param_grads(be, M, N, K, dy, A, dW, db, acc));
    for (int j = 0; j < N; j++) {
      double s = acc ? b0[j] : 0.0;
      for (int i = 0; i < M; i++)
        s += round_to(prec, dy[i * N + j]);
      rb[j] = s;
      for (int k = 0; k < K; k++) {
        double t = acc ? W0[j * K + k] : 0.0;
        for (int i = 0; i < M; i++)
          t += round_to(prec, dy[i * N + j]) * round_to(prec, A[i * K + k]);
        rW[j * K + k] = t;
      }
    }
    check(acc ? "linear_param_grads dW accumulated" : "linear_param_grads dW", dW, rW, nw, 1e-5);
    check(acc ? "linear_param_grads db accumulated" : "linear_param_grads db", db, rb, N, 1e-5);
    free(W0), free(b0);
  }

  /* the GeLU gradient through W (K2 = N inputs of the next layer, N2 = K outputs) */
  const int N2 = K, K2 = N;
  float *pre = rnd((size_t)M * N2, 1.5f), *dpre = malloc((size_t)M * N2 * 4), *db2 = malloc(N2 * 4);
  double *rp = malloc((size_t)M * N2 * 8), *rb2 = malloc(N2 * 8);
  T_OK(mgt_be_linear_dgelu(be, M, N2, K2, dy, W, pre, dpre, db2, 0));
  for (int j = 0; j < N2; j++)
    rb2[j] = 0.0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N2; j++) {
      double s = 0.0;
      for (int k = 0; k < K2; k++)
        s += round_to(prec, dy[i * K2 + k]) * round_to(prec, W[k * N2 + j]);
      rp[i * N2 + j] = s * dgelu64(pre[i * N2 + j]);
      rb2[j] += rp[i * N2 + j];
    }
  check("linear_dgelu dpre", dpre, rp, (size_t)M * N2, 1e-5);
  check("linear_dgelu db", db2, rb2, N2, 1e-5);
  float *g2 = malloc((size_t)M * N2 * 4), *b2 = malloc(N2 * 4);
  T_OK(mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, M, N2, K2, 1.0f, dy, K2, W, N2, 0.0f, g2, N2));
  T_OK(mgt_be_gelu_backward(be, g2, g2, pre, (size_t)M * N2));
  T_OK(mgt_be_bias_backward(be, b2, g2, M, N2, 0));
  T_CHECK(!memcmp(g2, dpre, (size_t)M * N2 * 4) && !memcmp(b2, db2, N2 * 4),
          "linear_dgelu differs from gemm + gelu_backward + bias_backward");
  free(A), free(W), free(b), free(out), free(ref), free(two), free(dy), free(dW), free(db);
  free(rW), free(rb), free(pre), free(dpre), free(db2), free(rp), free(rb2), free(g2), free(b2);
}

static void test_bias_dropout_add_ln(void) {
  const int N = 9, C = 50;
  const size_t n = (size_t)N * C, row = (size_t)4 * C;
  for (int v = 0; v < 6; v++) { /* v 4, 5: RMSNorm (mean NULL) */
    const int with_drop = v & 1, with_ln = v & 6, rms = v & 4;
    mgt_dropout d = {with_drop ? 0.2f : 0.0f, 99, 5, 2, 1, (uint64_t)C * 3 + 7};
    float *x = rnd(n, 1.0f), *b = rnd(C, 0.5f), *res = rnd(n, 1.0f), *w = rnd(C, 1.0f),
          *lb = rnd(C, 0.5f), *ones = malloc(n * 4), *mask = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
      ones[i] = 1.0f;
    T_OK(mgt_be_dropout_forward(be, mask, ones, NULL, n, row, &d));
    float *out = malloc(n * 4), *ln = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *xs = malloc(n * 4);
    memcpy(xs, x, n * 4);
    T_OK(mgt_be_bias_dropout_add_ln(be, out, xs, b, res, N, C, row, &d, with_ln ? ln : NULL,
                                    rms ? NULL : mean, rstd, w, lb, 1e-5f));
    double *ro = malloc(n * 8), *rl = malloc(n * 8), *rm = malloc(N * 8), *rr = malloc(N * 8);
    for (int r = 0; r < N; r++) {
      double s = 0.0, q = 0.0;
      for (int c = 0; c < C; c++) {
        const size_t i = (size_t)r * C + c;
        ro[i] = res[i] + (double)mask[i] * ((double)x[i] + b[c]);
        s += ro[i];
      }
      rm[r] = rms ? 0.0 : s / C; /* RMSNorm: no centring, no bias */
      for (int c = 0; c < C; c++)
        q += (ro[(size_t)r * C + c] - rm[r]) * (ro[(size_t)r * C + c] - rm[r]);
      rr[r] = 1.0 / sqrt(q / C + 1e-5);
      for (int c = 0; c < C; c++)
        rl[(size_t)r * C + c] = (ro[(size_t)r * C + c] - rm[r]) * rr[r] * w[c] + (rms ? 0 : lb[c]);
    }
    char what[96];
    snprintf(what, sizeof what, "bias_dropout_add_ln out (dropout %d, ln %d, rms %d)", with_drop,
             !!with_ln, !!rms);
    check(what, out, ro, n, 1e-6);
    if (with_ln) {
      check(rms ? "bias_dropout_add_ln RMSNorm" : "bias_dropout_add_ln LayerNorm", ln, rl, n, 1e-5);
      if (!rms) check("bias_dropout_add_ln mean", mean, rm, N, 1e-5);
      check("bias_dropout_add_ln rstd", rstd, rr, N, 1e-5);
    }
    free(x), free(b), free(res), free(w), free(lb), free(ones), free(mask), free(out), free(ln);
    free(mean), free(rstd), free(xs), free(ro), free(rl), free(rm), free(rr);
  }
}

/* The MLP's GeLU output (M x F) written by linear_bias_gelu into h (k = 0) and into the 16-bit
   activation region [region, region + bytes) (k = 1), each read by the next layer's GEMMs:
   y[k] its forward (M x C), dW[k] its weight gradient (C x F). */
enum { GM = 29, GK = 48, GF = 64, GC = 40 };
static void gelu_then_gemms(float *h, void *region, size_t bytes, float *y[2], float *dW[2]) {
  const int M = GM, K = GK, F = GF, C = GC;
  float *A = rnd((size_t)M * K, 1.0f), *W1 = rnd((size_t)F * K, 0.3f), *b1 = rnd(F, 0.2f);
  float *W2 = rnd((size_t)C * F, 0.3f), *dy = rnd((size_t)M * C, 1.0f);
  float *pre = malloc((size_t)M * F * 4);
  for (int k = 0; k < 2; k++) {
    float *out = k ? (float *)region : h;
    if (k) T_OK(mgt_be_set_act16(be, region, bytes));
    T_OK(mgt_be_linear_bias_gelu(be, M, F, K, A, K, W1, K, b1, pre, out));
    T_OK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, M, C, F, 1.0f, out, F, W2, F, 0.0f, y[k], C));
    T_OK(mgt_be_linear_param_grads(be, M, C, F, dy, out, dW[k], NULL, 0));
    if (k) T_OK(mgt_be_set_act16(be, region, 0));
  }
  free(A), free(W1), free(b1), free(W2), free(dy), free(pre);
}

/* The MLP's GeLU output kept in 16 bits (set_act16): linear_bias_gelu writes it rounded, and
   the next layer's GEMMs (forward and weight gradient) read it as it is; the same numbers, bit
   for bit, as the fp32 output each GEMM rounds itself. */
static void test_act16(int prec) {
  const int M = GM, F = GF, C = GC;
  float *h = malloc((size_t)M * F * 4), *region = malloc((size_t)M * F * 4 + 64), *y[2], *dW[2];
  for (int k = 0; k < 2; k++)
    y[k] = malloc((size_t)M * C * 4), dW[k] = malloc((size_t)C * F * 4);
  gelu_then_gemms(h, region, (size_t)M * F * 4 + 64, y, dW);
  float *b1 = rnd(F, 0.2f); /* the attention block's output bias below */
  size_t off = 0;
  for (size_t i = 0; i < (size_t)M * F; i++)
    off += region[i] != (float)round_to(prec, h[i]);
  T_CHECK(off == 0,
          "precision %d: %zu GeLU outputs in the 16-bit region are not the rounded fp32 ones", prec,
          off);
  T_CHECK(!memcmp(y[0], y[1], (size_t)M * C * 4) && !memcmp(dW[0], dW[1], (size_t)C * F * 4),
          "precision %d: GEMMs on the 16-bit activations differ from rounding per GEMM", prec);
  /* LayerNorm outputs (the QKV and first MLP layer inputs) in the region: rounded once */
  float *x = rnd((size_t)M * F, 1.0f), *lw = rnd(F, 1.0f), *lb = rnd(F, 0.5f), mean[29], rstd[29];
  T_OK(mgt_be_layernorm_forward(be, h, mean, rstd, x, lw, lb, M, F, 1e-5f));
  T_OK(mgt_be_set_act16(be, region, (size_t)M * F * 4));
  T_OK(mgt_be_layernorm_forward(be, region, mean, rstd, x, lw, lb, M, F, 1e-5f));
  float *res = rnd((size_t)M * F, 1.0f), *sum = malloc((size_t)M * F * 4);
  mgt_dropout nod = {0};
  float *x2 = malloc((size_t)M * F * 4);
  memcpy(x2, x, (size_t)M * F * 4);
  float *ln2 = region + 0; /* the fused end of the attention block writes its LayerNorm there */
  size_t offl = 0;
  for (size_t i = 0; i < (size_t)M * F; i++)
    offl += region[i] != (float)round_to(prec, h[i]);
  T_OK(mgt_be_bias_dropout_add_ln(be, sum, x2, b1, res, M, F, (size_t)F, &nod, ln2, mean, rstd, lw,
                                  lb, 1e-5f));
  T_OK(mgt_be_set_act16(be, region, 0));
  float *ref = malloc((size_t)M * F * 4);
  T_OK(mgt_be_layernorm_forward(be, ref, mean, rstd, sum, lw, lb, M, F, 1e-5f));
  for (size_t i = 0; i < (size_t)M * F; i++)
    offl += ln2[i] != (float)round_to(prec, ref[i]);
  T_CHECK(offl == 0, "precision %d: %zu LayerNorm outputs in the 16-bit region are not rounded",
          prec, offl);
  free(x), free(lw), free(lb), free(res), free(sum), free(x2), free(ref);
  free(b1), free(h), free(region);
  for (int k = 0; k < 2; k++)
    free(y[k]), free(dW[k]);
}

static uint16_t bf16_bits(float x) {
  const float r = mgt_round_bf16(x);
  uint32_t u;
  memcpy(&u, &r, sizeof u);
  return (uint16_t)(u >> 16);
}

/* Under native bf16 GEMMs the region holds bf16 itself (2 bytes an element, as on GPUs): the
   writers store the bits of what rounding their fp32 output gives, and the GEMMs that read it
   there give the numbers of the same GEMMs on that fp32 output, bit for bit. */
static void test_act16_native(void) {
  char what[128];
  if (!mgt_cpu_bf16_units(what, sizeof what)) {
    printf("test_fused: native bf16 activations not checked: %s\n", what);
    return;
  }
  const int M = GM, F = GF, C = GC;
  T_OK(mgt_be_set_precision(be, MGT_PREC_BF16));
  T_OK(mgt_backend_cpu_native(be, 1));
  T_CHECK(mgt_be_act16_bytes(be) == 2, "native bf16 keeps activations in %d bytes",
          mgt_be_act16_bytes(be));
  float *h = malloc((size_t)M * F * 4), *y[2], *dW[2];
  uint16_t *region = malloc((size_t)M * F * 2 + 64);
  for (int k = 0; k < 2; k++)
    y[k] = malloc((size_t)M * C * 4), dW[k] = malloc((size_t)C * F * 4);
  gelu_then_gemms(h, region, (size_t)M * F * 2 + 64, y, dW);
  float *b1 = rnd(F, 0.2f); /* the attention block's output bias below */
  size_t off = 0;
  for (size_t i = 0; i < (size_t)M * F; i++)
    off += region[i] != bf16_bits(h[i]);
  T_CHECK(off == 0, "native: %zu GeLU outputs in the bf16 region are not the rounded fp32 ones",
          off);
  T_CHECK(!memcmp(y[0], y[1], (size_t)M * C * 4) && !memcmp(dW[0], dW[1], (size_t)C * F * 4),
          "native: GEMMs on the bf16 activations differ from those on the fp32 ones");
  /* the norms' outputs, alone and at the fused end of a block */
  float *x = rnd((size_t)M * F, 1.0f), *lw = rnd(F, 1.0f), *lb = rnd(F, 0.5f), mean[29], rstd[29];
  float *res = rnd((size_t)M * F, 1.0f), *sum = malloc((size_t)M * F * 4);
  float *x2 = malloc((size_t)M * F * 4), *r16 = (float *)(void *)region;
  mgt_dropout nod = {0};
  for (int rms = 0; rms < 2; rms++) {
    size_t offl = 0;
    if (rms)
      T_OK(mgt_be_rmsnorm_forward(be, h, rstd, x, lw, M, F, 1e-5f));
    else
      T_OK(mgt_be_layernorm_forward(be, h, mean, rstd, x, lw, lb, M, F, 1e-5f));
    T_OK(mgt_be_set_act16(be, region, (size_t)M * F * 2));
    if (rms)
      T_OK(mgt_be_rmsnorm_forward(be, r16, rstd, x, lw, M, F, 1e-5f));
    else
      T_OK(mgt_be_layernorm_forward(be, r16, mean, rstd, x, lw, lb, M, F, 1e-5f));
    for (size_t i = 0; i < (size_t)M * F; i++)
      offl += region[i] != bf16_bits(h[i]);
    memcpy(x2, x, (size_t)M * F * 4);
    T_OK(mgt_be_bias_dropout_add_ln(be, sum, x2, b1, res, M, F, (size_t)F, &nod, r16,
                                    rms ? NULL : mean, rstd, lw, rms ? NULL : lb, 1e-5f));
    T_OK(mgt_be_set_act16(be, region, 0));
    if (rms)
      T_OK(mgt_be_rmsnorm_forward(be, h, rstd, sum, lw, M, F, 1e-5f));
    else
      T_OK(mgt_be_layernorm_forward(be, h, mean, rstd, sum, lw, lb, M, F, 1e-5f));
    for (size_t i = 0; i < (size_t)M * F; i++)
      offl += region[i] != bf16_bits(h[i]);
    T_CHECK(offl == 0, "native: %zu %s outputs in the bf16 region are not the rounded fp32 ones",
            offl, rms ? "RMSNorm" : "LayerNorm");
  }
  /* the region's element size is the mode's: it cannot change under it */
  T_OK(mgt_be_set_act16(be, region, 64));
  T_CHECK(mgt_backend_cpu_native(be, 0) != MGT_OK,
          "native GEMMs switched off under bf16 activations");
  mgt_error_clear();
  T_OK(mgt_be_set_act16(be, region, 0));
  T_OK(mgt_backend_cpu_native(be, 0));
  T_CHECK(mgt_be_act16_bytes(be) == 4, "emulated bf16 keeps activations in %d bytes",
          mgt_be_act16_bytes(be));
  free(x), free(lw), free(lb), free(res), free(sum), free(x2);
  free(b1), free(h), free(region);
  for (int k = 0; k < 2; k++)
    free(y[k]), free(dW[k]);
}

int main(void) {
  T_OK(mgt_backend_cpu_create(&be));
  for (int prec = 0; prec < 3; prec++) {
    T_OK(mgt_be_set_precision(be, (mgt_precision)prec));
    test_linear(prec);
    if (prec) test_act16(prec);
  }
  /* a 16-bit region pins the precision */
  T_OK(mgt_be_set_precision(be, MGT_PREC_BF16));
  float pin[16];
  T_OK(mgt_be_set_act16(be, pin, sizeof pin));
  T_CHECK(mgt_be_set_precision(be, MGT_PREC_FP32) != MGT_OK,
          "the precision changed under 16-bit activations");
  mgt_error_clear();
  T_OK(mgt_be_set_act16(be, pin, 0));
  T_OK(mgt_be_set_precision(be, MGT_PREC_FP32));
  test_bias_dropout_add_ln();
  test_act16_native();
  mgt_backend_destroy(&be);
  return t_report("test_fused");
}
