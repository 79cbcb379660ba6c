/* CUDA conformance of the fused operations (cuBLASLt epilogues for bias, bias gradient and GeLU
   gradient + bias gradient; bias + dropout + residual + LayerNorm in one kernel) and of the
   16-bit weight copies, against their CPU twins (kernels/cpu/fused.c, tested in test_fused) at
   fp32, bf16 and fp16. Tolerances are on the result's scale: 1e-5 at fp32 and 1e-4 with
   16-bit inputs (both sides multiply the same rounded numbers; only the fp32 order of
   accumulation differs); cuBLASLt's GeLU gradient may use an approximate tanh (about 2^-11
   relative, as its forward GeLU), so the fused GeLU gradient is held to 2e-3. Which path each
   epilogue took is printed per precision, and every shape set includes one that must take
   the fallback; and the GeLU output kept in 16 bits. Exits 77 (skipped) without a GPU. */
#include <stdio.h>

#include "cudautil.h"

static const char *prec_name[3] = {"fp32", "bf16", "fp16"};
static int fused_calls[4][3], calls[4][3];

static void count(int epi, int prec) {
  calls[epi][prec]++;
  fused_calls[epi][prec] += mgt_backend_cuda_fused(gpu, epi);
}

static void set_prec(int prec) {
  T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
  T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
}

/* linear_bias: out = A W^T + b; b NULL is a plain GEMM (never fused). */
static void test_linear_bias(int prec) {
  const int shapes[][3] = {{64, 256, 128}, {33, 96, 40}, {1, 512, 64}, {40, 100, 24}};
  const double tol = prec ? 1e-4 : 1e-5;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int with_b = 0; with_b < 2; with_b++) {
      const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
      const size_t na = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
      float *A = rnd(na, 1.0f), *W = rnd(nw, 0.1f), *b = rnd(N, 0.5f), *out = malloc(no * 4);
      float *dA = dev(A, na * 4), *dW = dev(W, nw * 4), *db = dev(b, N * 4);
      float *dout = dev(NULL, no * 4);
      T_OK(mgt_be_linear_bias(cpu, M, N, K, A, K, W, K, with_b ? b : NULL, out));
      T_OK(mgt_be_linear_bias(gpu, M, N, K, dA, K, dW, K, with_b ? db : NULL, dout));
      if (with_b) count(MGT_CUDA_EPI_BIAS, prec);
      char what[128];
      snprintf(what, sizeof what, "linear_bias %s %dx%dx%d%s", prec_name[prec], M, N, K,
               with_b ? "" : " without bias");
      same(what, dout, out, no, tol);
      mgt_be_free(gpu, dA), mgt_be_free(gpu, dW), mgt_be_free(gpu, db);
      mgt_be_free(gpu, dout);
      free(A), free(W), free(b), free(out);
    }
}

/* linear_param_grads: dW = [dW +] dy^T x, db = [db +] column sums of dy (rounded under 16
   bits); db NULL leaves only the GEMM. dy has a mean of 0.5 so that the sums do not cancel
   to a small scale. */
static void test_param_grads(int prec) {
  const int shapes[][3] = {{256, 96, 64}, {37, 40, 24}, {1, 64, 32}, {100, 24, 100}};
  const double tol = prec ? 1e-4 : 1e-5;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int mode = 0; mode < 3; mode++) { /* 0: overwrite, 1: accumulate, 2: no db */
      const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], acc = mode == 1;
      const size_t ny = (size_t)M * N, nx = (size_t)M * K, nw = (size_t)N * K;
      float *dy = rnd(ny, 1.0f), *x = rnd(nx, 1.0f), *dW = rnd(nw, 1.0f), *db = rnd(N, 1.0f);
      for (size_t i = 0; i < ny; i++)
        dy[i] += 0.5f;
      float *ddy = dev(dy, ny * 4), *dx = dev(x, nx * 4), *ddW = dev(dW, nw * 4),
            *ddb = dev(db, N * 4);
      T_OK(mgt_be_linear_param_grads(cpu, M, N, K, dy, x, dW, mode == 2 ? NULL : db, acc));
      T_OK(mgt_be_linear_param_grads(gpu, M, N, K, ddy, dx, ddW, mode == 2 ? NULL : ddb, acc));
      if (mode != 2) count(MGT_CUDA_EPI_BGRAD, prec);
      char what[128];
      snprintf(what, sizeof what, "linear_param_grads %s %dx%dx%d %s", prec_name[prec], M, N, K,
               mode == 0 ? "" : (mode == 1 ? "accumulated" : "without db"));
      char w2[160];
      snprintf(w2, sizeof w2, "%s dW", what);
      same(w2, ddW, dW, nw, tol);
      snprintf(w2, sizeof w2, "%s db", what);
      same(w2, ddb, db, N, tol);
      mgt_be_free(gpu, ddy), mgt_be_free(gpu, dx), mgt_be_free(gpu, ddW);
      mgt_be_free(gpu, ddb);
      free(dy), free(x), free(dW), free(db);
    }
}

/* linear_dgelu: dpre = (dy W) * gelu'(pre), db = [db +] its column sums; N = 100 is not a
   multiple of 8 and always takes the fallback. */
static void test_dgelu(int prec) {
  const int shapes[][3] = {{64, 256, 128}, {33, 96, 40}, {1, 512, 64}, {40, 100, 24}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int acc = 0; acc < 2; acc++) {
      const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
      const size_t ny = (size_t)M * K, nw = (size_t)K * N, no = (size_t)M * N;
      float *dy = rnd(ny, 1.0f), *W = rnd(nw, 0.2f), *pre = rnd(no, 1.5f), *db = rnd(N, 1.0f);
      float *dpre = malloc(no * 4);
      float *ddy = dev(dy, ny * 4), *dW = dev(W, nw * 4), *dp = dev(pre, no * 4),
            *ddb = dev(db, N * 4), *ddpre = dev(NULL, no * 4);
      T_OK(mgt_be_linear_dgelu(cpu, M, N, K, dy, W, pre, dpre, db, acc));
      T_OK(mgt_be_linear_dgelu(gpu, M, N, K, ddy, dW, dp, ddpre, ddb, acc));
      const int fused = mgt_backend_cuda_fused(gpu, MGT_CUDA_EPI_DGELU);
      count(MGT_CUDA_EPI_DGELU, prec);
      T_CHECK(!(fused && N % 8), "linear_dgelu %dx%dx%d ran fused with N not a multiple of 8", M, N,
              K);
      const double tol = fused ? 2e-3 : (prec ? 1e-4 : 1e-5);
      char what[160];
      snprintf(what, sizeof what, "linear_dgelu %s %s %dx%dx%d%s dpre", prec_name[prec],
               fused ? "fused" : "fallback", M, N, K, acc ? " accumulated" : "");
      same(what, ddpre, dpre, no, tol);
      snprintf(what, sizeof what, "linear_dgelu %s %s %dx%dx%d%s db", prec_name[prec],
               fused ? "fused" : "fallback", M, N, K, acc ? " accumulated" : "");
      same(what, ddb, db, N, tol);
      mgt_be_free(gpu, ddy), mgt_be_free(gpu, dW), mgt_be_free(gpu, dp);
      mgt_be_free(gpu, ddb), mgt_be_free(gpu, ddpre);
      free(dy), free(W), free(pre), free(db), free(dpre);
    }
}

/* bias_dropout_add_ln: with and without the LayerNorm (or RMSNorm: mean NULL), bias and
   residual; dropout from an odd first element, the rows spanning samples (row elements per
   sample). */
static void test_bias_dropout_add_ln(void) {
  const int shapes[][2] = {{12, 64}, {7, 768}, {5, 1000}, {1, 33}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int v = 0; v < 16; v++) {
      const int N = shapes[s][0], C = shapes[s][1], with_ln = v & 1, with_b = v & 2,
                with_drop = v & 4, rms = v & 8;
      if (rms && !with_ln) continue;
      const size_t n = (size_t)N * C, row = (size_t)3 * C;
      mgt_dropout d = {with_drop ? 0.1f : 0.0f, 1234, 17, 3, 1, (uint64_t)C * 5 + 11};
      float *x = rnd(n, 1.0f), *b = rnd(C, 0.5f), *res = rnd(n, 1.0f), *w = rnd(C, 1.0f),
            *lb = rnd(C, 0.5f);
      float *out = malloc(n * 4), *ln = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
      float *dx = dev(x, n * 4), *dbias = dev(b, C * 4), *dres = dev(res, n * 4),
            *dw = dev(w, C * 4), *dlb = dev(lb, C * 4), *dout = dev(NULL, n * 4),
            *dln = dev(NULL, n * 4), *dmean = dev(NULL, N * 4), *drstd = dev(NULL, N * 4);
      float *xc = dup(x, n);
      T_OK(mgt_be_bias_dropout_add_ln(cpu, out, xc, with_b ? b : NULL, res, N, C, row, &d,
                                      with_ln ? ln : NULL, rms ? NULL : mean, rstd, w, lb, 1e-5f));
      T_OK(mgt_be_bias_dropout_add_ln(gpu, dout, dx, with_b ? dbias : NULL, dres, N, C, row, &d,
                                      with_ln ? dln : NULL, rms ? NULL : dmean, drstd, dw, dlb,
                                      1e-5f));
      char what[128];
      snprintf(what, sizeof what, "bias_dropout_add_ln %dx%d ln %d rms %d bias %d dropout %d", N, C,
               with_ln, !!rms, !!with_b, !!with_drop);
      same(what, dout, out, n, 1e-6);
      if (with_ln) {
        same(rms ? "bias_dropout_add_ln: RMSNorm" : "bias_dropout_add_ln: LayerNorm", dln, ln, n,
             1e-5);
        if (!rms) same("bias_dropout_add_ln: mean", dmean, mean, N, 1e-5);
        same("bias_dropout_add_ln: rstd", drstd, rstd, N, 1e-5);
      }
      void *all[] = {dx, dbias, dres, dw, dlb, dout, dln, dmean, drstd};
      for (size_t i = 0; i < 9; i++)
        mgt_be_free(gpu, all[i]);
      free(x), free(b), free(res), free(w), free(lb), free(out), free(ln), free(mean), free(rstd);
      free(xc);
    }
}

/* GEMMs whose weights are registered (set_weights) read the copies made by refresh_weights:
   the same numbers as rounding per call, on both backends; after the weights change, a GEMM
   before the refresh would see the old copy (so the test refreshes, as the model does), and a
   change of precision drops the copies. */
static void test_weight_copies(void) {
  const int M = 48, N = 64, K = 96;
  const size_t nw = (size_t)N * K + 40, na = (size_t)M * K, no = (size_t)M * N;
  for (int prec = 1; prec < 3; prec++) {
    set_prec(prec);
    float *W = rnd(nw, 0.3f), *A = rnd(na, 1.0f), *ref = malloc(no * 4);
    float *hW = dup(W, nw);
    float *dW = dev(W, nw * 4), *dA = dev(A, na * 4), *dout = dev(NULL, no * 4);
    /* the rounding per GEMM first, unregistered */
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, K, hW + 40, K, 0.0f, ref, N));
    T_OK(mgt_be_set_weights(cpu, hW, nw));
    T_OK(mgt_be_set_weights(gpu, dW, nw));
    T_OK(mgt_be_refresh_weights(cpu, 0, nw));
    T_OK(mgt_be_refresh_weights(gpu, 0, nw));
    float *got = malloc(no * 4);
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, K, hW + 40, K, 0.0f, got, N));
    T_CHECK(!memcmp(got, ref, no * 4), "%s: the CPU's GEMM on the weight copy differs",
            prec_name[prec]);
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, dA, K, dW + 40, K, 0.0f, dout, N));
    same("gemm on the GPU's weight copy", dout, ref, no, 1e-4);
    /* new weights, refreshed in two ranges */
    for (size_t i = 0; i < nw; i++)
      hW[i] = W[i] * -0.5f;
    T_OK(mgt_be_upload(gpu, dW, hW, nw * 4));
    T_OK(mgt_be_refresh_weights(cpu, 0, 1000));
    T_OK(mgt_be_refresh_weights(cpu, 1000, nw - 1000));
    T_OK(mgt_be_refresh_weights(gpu, 0, 1000));
    T_OK(mgt_be_refresh_weights(gpu, 1000, nw - 1000));
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, A, K, hW + 40, K, 0.0f, got, N));
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, dA, K, dW + 40, K, 0.0f, dout, N));
    same("gemm on the refreshed weight copy", dout, got, no, 1e-4);
    /* fused linear + bias + GeLU reads the copy too */
    float *b = rnd(N, 0.1f), *pre = malloc(no * 4), *out = malloc(no * 4);
    float *db = dev(b, N * 4), *dpre = dev(NULL, no * 4), *dout2 = dev(NULL, no * 4);
    T_OK(mgt_be_linear_bias_gelu(cpu, M, N, K, A, K, hW + 40, K, b, pre, out));
    T_OK(mgt_be_linear_bias_gelu(gpu, M, N, K, dA, K, dW + 40, K, db, dpre, dout2));
    same("linear_bias_gelu on the weight copy: pre", dpre, pre, no, 1e-4);
    T_OK(mgt_be_set_weights(cpu, hW, 0));
    T_OK(mgt_be_set_weights(gpu, dW, 0));
    void *all[] = {dW, dA, dout, db, dpre, dout2};
    for (size_t i = 0; i < 6; i++)
      mgt_be_free(gpu, all[i]);
    free(W), free(A), free(ref), free(hW), free(got), free(b), free(pre), free(out);
  }
  set_prec(0);
}

/* The GeLU output kept in 16 bits (set_act16): the GPU writes bf16/half elements there and its
   GEMMs read them as they are; against the CPU, which keeps floats holding the same values. The
   bf16 bits are also read back and compared with the CPU's rounded values exactly (up to the
   GeLU's own fp32 difference, 1 unit of the 16-bit format at most). */
static void test_act16(void) {
  const int M = 40, K = 64, F = 256, C = 96;
  for (int prec = 1; prec < 3; prec++) {
    set_prec(prec);
    float *A = rnd((size_t)M * K, 1.0f), *W1 = rnd((size_t)F * K, 0.3f), *b1 = rnd(F, 0.2f);
    float *W2 = rnd((size_t)C * F, 0.1f), *dy = rnd((size_t)M * C, 1.0f);
    float *pre = malloc((size_t)M * F * 4), *h = malloc((size_t)M * F * 4);
    float *y = malloc((size_t)M * C * 4), *dW = malloc((size_t)C * F * 4);
    T_OK(mgt_be_set_act16(cpu, h, (size_t)M * F * 4));
    T_OK(mgt_be_linear_bias_gelu(cpu, M, F, K, A, K, W1, K, b1, pre, h));
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_TRANS, M, C, F, 1.0f, h, F, W2, F, 0.0f, y, C));
    T_OK(mgt_be_linear_param_grads(cpu, M, C, F, dy, h, dW, NULL, 0));
    T_OK(mgt_be_set_act16(cpu, h, 0));
    float *dA = dev(A, (size_t)M * K * 4), *dW1 = dev(W1, (size_t)F * K * 4), *db1 = dev(b1, F * 4);
    float *dW2 = dev(W2, (size_t)C * F * 4), *ddy = dev(dy, (size_t)M * C * 4);
    float *dpre = dev(NULL, (size_t)M * F * 4), *dh = dev(NULL, (size_t)M * F * 2);
    float *dyo = dev(NULL, (size_t)M * C * 4), *ddW = dev(NULL, (size_t)C * F * 4);
    T_OK(mgt_be_set_act16(gpu, dh, (size_t)M * F * 2));
    T_OK(mgt_be_linear_bias_gelu(gpu, M, F, K, dA, K, dW1, K, db1, dpre, dh));
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, C, F, 1.0f, dh, F, dW2, F, 0.0f, dyo, C));
    T_OK(mgt_be_linear_param_grads(gpu, M, C, F, ddy, dh, ddW, NULL, 0));
    T_OK(mgt_be_set_act16(gpu, dh, 0));
    same("16-bit activations: pre", dpre, pre, (size_t)M * F, 1e-4);
    same("16-bit activations: the next GEMM", dyo, y, (size_t)M * C, 1e-3);
    same("16-bit activations: its weight gradient", ddW, dW, (size_t)C * F, 1e-3);
    { /* a LayerNorm output in the region read by the next GEMM (QKV, first MLP layer) */
      float *x = rnd((size_t)M * F, 1.0f), *lw = rnd(F, 1.0f), *lb = rnd(F, 0.5f);
      float *mean = malloc(M * 4), *rstd = malloc(M * 4);
      float *dx = dev(x, (size_t)M * F * 4), *dlw = dev(lw, F * 4), *dlb = dev(lb, F * 4);
      float *dmean = dev(NULL, M * 4), *drstd = dev(NULL, M * 4);
      T_OK(mgt_be_set_act16(cpu, h, (size_t)M * F * 4));
      T_OK(mgt_be_layernorm_forward(cpu, h, mean, rstd, x, lw, lb, M, F, 1e-5f));
      T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_TRANS, M, C, F, 1.0f, h, F, W2, F, 0.0f, y, C));
      T_OK(mgt_be_set_act16(cpu, h, 0));
      T_OK(mgt_be_set_act16(gpu, dh, (size_t)M * F * 2));
      T_OK(mgt_be_layernorm_forward(gpu, dh, dmean, drstd, dx, dlw, dlb, M, F, 1e-5f));
      T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, C, F, 1.0f, dh, F, dW2, F, 0.0f, dyo, C));
      T_OK(mgt_be_set_act16(gpu, dh, 0));
      same("16-bit LayerNorm output: rstd", drstd, rstd, M, 1e-5);
      same("16-bit LayerNorm output: the next GEMM", dyo, y, (size_t)M * C, 1e-3);
      mgt_be_free(gpu, dx), mgt_be_free(gpu, dlw), mgt_be_free(gpu, dlb);
      mgt_be_free(gpu, dmean), mgt_be_free(gpu, drstd);
      free(x), free(lw), free(lb), free(mean), free(rstd);
    }
    if (prec == 1) { /* bf16 bits are the top half of a float's */
      uint16_t *bits = malloc((size_t)M * F * 2);
      T_OK(mgt_be_download(gpu, bits, dh, (size_t)M * F * 2));
      size_t far = 0;
      for (size_t i = 0; i < (size_t)M * F; i++) {
        uint32_t u = (uint32_t)bits[i] << 16;
        float g;
        memcpy(&g, &u, sizeof g);
        far += fabsf(g - h[i]) > fabsf(h[i]) * (1.0f / 128.0f) + 1e-30f;
      }
      T_CHECK(far == 0, "16-bit activations: %zu bf16 GeLU outputs more than a unit from the CPU's",
              far);
      free(bits);
    }
    void *all[] = {dA, dW1, db1, dW2, ddy, dpre, dh, dyo, ddW};
    for (size_t i = 0; i < 9; i++)
      mgt_be_free(gpu, all[i]);
    free(A), free(W1), free(b1), free(W2), free(dy), free(pre), free(h), free(y), free(dW);
  }
  set_prec(0);
}

int main(void) {
  if (mgt_cuda_device_count() == 0) {
    printf("test_cuda_fused: skipped: no CUDA device is visible\n");
    return 77;
  }
  T_OK(mgt_backend_cpu_create(&cpu));
  T_OK(mgt_backend_cuda_create(0, &gpu));
  for (int prec = 0; prec < 3; prec++) {
    set_prec(prec);
    test_linear_bias(prec);
    test_param_grads(prec);
    test_dgelu(prec);
  }
  set_prec(0);
  test_bias_dropout_add_ln();
  test_weight_copies();
  test_act16();
  static const char *names[4] = {"bias + GeLU", "bias", "bias gradient (BGRADB)",
                                 "GeLU gradient + bias gradient (DGELU_BGRAD)"};
  for (int e = 1; e < 4; e++)
    for (int prec = 0; prec < 3; prec++)
      printf("test_cuda_fused: %s %s: fused in %d of %d calls\n", names[e], prec_name[prec],
             fused_calls[e][prec], calls[e][prec]);
  T_OK(mgt_be_sync(gpu));
  mgt_backend_destroy(&gpu);
  mgt_backend_destroy(&cpu);
  return t_report("test_cuda_fused");
}
