/* CUDA conformance: every operation of the CUDA backend against its CPU twin on the same
   random inputs (the CPU kernels are themselves checked against float64 references and finite
   differences in test_kernels). fp32 results agree within 1e-5 of the result's scale; GEMMs
   with bf16/fp16 inputs within 1e-4 (both sides round the inputs the same way, so only the
   order of fp32 accumulation differs); the fused linear + bias + GeLU also against float64
   tanh-GeLU, per precision and path (test_linear_bias_gelu); hold's reuse of a conversion
   (test_hold). Exits 77 (skipped) without a
   GPU. */
#include <float.h>
#include <string.h>

#include "cudautil.h"

static void test_memory(void) {
  const size_t n = 1000;
  float *x = rnd(n, 1.0f);
  float *d = dev(x, n * sizeof(float)), *e = dev(NULL, n * sizeof(float));
  T_OK(mgt_be_copy(gpu, e, d, n * sizeof(float)));
  same("upload/copy/download", e, x, n, 0.0);
  T_OK(mgt_be_zero(gpu, e, n * sizeof(float)));
  float *z = calloc(n, sizeof(float));
  same("zero", e, z, n, 0.0);
  T_OK(mgt_be_fill(gpu, e, n, 2.5f));
  T_OK(mgt_be_fill(cpu, z, n, 2.5f));
  same("fill", e, z, n, 0.0);
  mgt_be_free(gpu, d);
  mgt_be_free(gpu, e);
  free(x), free(z);
}

static void test_init(void) {
  mgt_shard sh = {3, {5, 7, 9}, {10, 7, 8}, 0, 5, 0}; /* a shard with padding in dims 0 and 2 */
  size_t n = 5 * 7 * 9;
  float *c = malloc(n * sizeof(float));
  float *d = dev(NULL, n * sizeof(float));
  T_OK(mgt_be_init_normal(cpu, c, &sh, 42, 7, 0.02f));
  T_OK(mgt_be_init_normal(gpu, d, &sh, 42, 7, 0.02f));
  same("init_normal", d, c, n, 0.0);
  mgt_be_free(gpu, d);
  free(c);
}

static void test_gemm(void) {
  const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 96}, {33, 130, 17}, {256, 64, 512}};
  for (int prec = 0; prec < 3; prec++) {
    T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
    T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
          int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
          size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                 nc = (size_t)M * ldc;
          float *A = rnd(na, 1.0f), *B = rnd(nb, 1.0f), *Cc = rnd(nc, 1.0f);
          float *dA = dev(A, na * 4), *dB = dev(B, nb * 4), *dC = dev(Cc, nc * 4);
          for (int beta = 0; beta < 2; beta++) {
            T_OK(mgt_be_gemm(cpu, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, (float)beta, Cc, ldc));
            T_OK(mgt_be_gemm(gpu, ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, (float)beta, dC, ldc));
            char what[96];
            snprintf(what, sizeof what, "gemm prec %d %dx%dx%d ta %d tb %d beta %d", prec, M, N, K,
                     ta, tb, beta);
            same(what, dC, Cc, nc, prec ? 1e-4 : 1e-5);
          }
          mgt_be_free(gpu, dA), mgt_be_free(gpu, dB), mgt_be_free(gpu, dC);
          free(A), free(B), free(Cc);
        }
  }
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
}

/* The experts' grouped GEMM (cuBLAS's) against the CPU's gemm each, at every precision: blocks of
   rows of shared matrices (the experts' rows), an expert without rows, and one with K = 0; the
   weights registered (set_weights) so that their 16-bit copies are read as the model reads them. */
static void test_gemm_grouped(void) {
  const int M[] = {40, 0, 7, 129, 16}, N[] = {64, 64, 64, 64, 48}, K[] = {96, 96, 96, 96, 0};
  const int G = 5, ld = 160, rows = 40 + 7 + 129 + 16;
  const size_t nw = (size_t)G * 96 * ld, na = (size_t)rows * ld; /* nw > na: A's blocks too */
  for (int prec = 0; prec < 3; prec++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
        T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
        /* A: each expert's block of a shared (ta ? K x M : M x K) region; B: its own matrix */
        float *A = rnd(nw, 1.0f), *W = rnd(nw, 1.0f), *Cc = rnd(na, 1.0f);
        float *dA = dev(A, nw * 4), *dW = dev(W, nw * 4), *dC = dev(Cc, na * 4);
        T_OK(mgt_be_set_weights(cpu, W, nw));
        T_OK(mgt_be_set_weights(gpu, dW, nw));
        T_OK(mgt_be_refresh_weights(cpu, 0, nw));
        T_OK(mgt_be_refresh_weights(gpu, 0, nw));
        const float *pa[5], *pb[5], *qa[5], *qb[5];
        float *pc[5], *qc[5];
        size_t r = 0;
        for (int g = 0; g < G; g++) {
          const size_t oa = ta ? (size_t)g * 96 * ld : r * ld, ow = (size_t)g * 96 * ld;
          pa[g] = A + oa, qa[g] = dA + oa, pb[g] = W + ow, qb[g] = dW + ow;
          pc[g] = Cc + r * ld, qc[g] = dC + r * ld;
          r += M[g];
        }
        for (int beta = 0; beta < 2; beta++) {
          T_OK(mgt_be_gemm_grouped(cpu, ta, tb, G, M, N, K, 0.5f, pa, ld, pb, ld, (float)beta, pc,
                                   ld));
          T_OK(mgt_be_gemm_grouped(gpu, ta, tb, G, M, N, K, 0.5f, qa, ld, qb, ld, (float)beta, qc,
                                   ld));
          char what[96];
          snprintf(what, sizeof what, "gemm_grouped prec %d ta %d tb %d beta %d", prec, ta, tb,
                   beta);
          same(what, dC, Cc, na, prec ? 1e-4 : 1e-5);
        }
        T_OK(mgt_be_set_weights(cpu, W, 0)); /* the registration ends */
        T_OK(mgt_be_set_weights(gpu, dW, 0));
        mgt_be_free(gpu, dA), mgt_be_free(gpu, dW), mgt_be_free(gpu, dC);
        free(A), free(W), free(Cc);
      }
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
}

/* GeLU in float64: the tanh form the model uses, and the erf form (BERT's head). */
static double gelu_tanh64(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_erf64(double x) { return 0.5 * x * (1.0 + erf(x * 0.7071067811865476)); }

/* What one path (fused epilogue or fallback) of linear_bias_gelu gave at one precision. */
typedef struct {
  int calls;
  double worst_tanh, worst_erf; /* largest |out - gelu64(pre)| */
  size_t band;                  /* elements with GELU_BAND_LO <= |pre| <= GELU_BAND_HI */
  double res_band, gap_band;    /* sums over them of out - tanh-GeLU and of erf- - tanh-GeLU */
} gelu_path;

/* erf-GeLU is 2.7e-4 to 4.7e-4 below tanh-GeLU for 2.2 <= |x| <= 3.3 (and even in x). */
#define GELU_BAND_LO 2.2
#define GELU_BAND_HI 3.3

/* The MLP's fused linear + bias + GeLU at each precision, through cuBLASLt's GELU_AUX_BIAS
   epilogue or its fallback (a GEMM and the bias + GeLU kernel); which one ran is printed per
   precision, and whichever ran is tested:
   - pre (the GEMM plus the bias; the epilogue's aux output) against the CPU twin within 1e-5
     of its scale in fp32, 1e-4 with 16-bit inputs (both sides round the inputs alike; only
     the order of fp32 accumulation differs);
   - out against float64 tanh-GeLU of the GPU's own pre: the GeLU alone, free of the GEMM's
     rounding, in every precision (out and pre are fp32 in all three). The fallback kernel
     (tanhf, 2 ulp) is held to 1e-6 + 2e-6 |ref|. The epilogue may take tanh from the
     hardware approximation (tanh.approx.f32, relative error up to about 2^-11), which moves
     0.5 x (1 + tanh u) by up to 0.5 |x| |tanh u| 2^-11, so that much more is allowed per
     element (at most 2.4e-4 |x|);
   - out against the CPU twin: pre's tolerance carried through GeLU's slope (at most 1.13)
     plus both sides' GeLU tolerances as above;
   - the form of GeLU: the approximation's allowance is as large as the whole difference
     between erf- and tanh-GeLU, so the element bound alone could pass an erf epilogue. Over
     the hundreds of elements with pre in the band above, where erf-GeLU is below tanh-GeLU by
     2.7e-4 to 4.7e-4, the mean of out - tanh-GeLU must be within a third of the mean
     erf - tanh gap (out at least twice as near tanh-GeLU as erf-GeLU): an erf epilogue
     would sit on the gap, a tanh one (whose rounding errors do not all lean one way) near 0.
   The shape with N = 100 always takes the fallback (the aux matrix's leading dimension must
   be a multiple of 8), so the fallback is tested even where the epilogue runs. */
static void test_linear_bias_gelu(void) {
  const int shapes[][3] = {
      {64, 256, 128}, {8, 1024, 256}, {33, 96, 40}, {1, 512, 64}, {40, 100, 24}};
  const char *prec_name[3] = {"fp32", "bf16", "fp16"};
  const double approx_tanh = 1.0 / 2048.0; /* 2^-11 */
  for (int prec = 0; prec < 3; prec++) {
    T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
    T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
    const double tol_pre = prec ? 1e-4 : 1e-5;
    gelu_path path[2]; /* [0] fallback, [1] fused epilogue */
    memset(path, 0, sizeof path);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
      size_t na = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
      /* pre about N(0, 2): some 18% of it in the band */
      float *A = rnd(na, 1.0f), *W = rnd(nw, 2.0f / sqrtf((float)K)), *b = rnd(N, 0.5f);
      float *pre = malloc(no * 4), *out = malloc(no * 4);
      float *dA = dev(A, na * 4), *dW = dev(W, nw * 4), *db = dev(b, N * 4);
      float *dpre = dev(NULL, no * 4), *dout = dev(NULL, no * 4);
      T_OK(mgt_be_linear_bias_gelu(cpu, M, N, K, A, K, W, K, b, pre, out));
      T_OK(mgt_be_linear_bias_gelu(gpu, M, N, K, dA, K, dW, K, db, dpre, dout));
      const int fused = mgt_backend_cuda_fused_epilogue(gpu);
      gelu_path *g = &path[fused];
      g->calls++;
      char what[128];
      snprintf(what, sizeof what, "linear_bias_gelu %s %s %dx%dx%d pre", prec_name[prec],
               fused ? "fused" : "fallback", M, N, K);
      same(what, dpre, pre, no, tol_pre);
      float *gp = fetch(dpre, no), *go = fetch(dout, no);
      double pscale = 1e-30;
      for (size_t i = 0; i < no; i++)
        pscale = fmax(pscale, fabs(pre[i]));
      double worst_self = 0.0, worst_cpu = 0.0;
      size_t at_self = 0, at_cpu = 0;
      for (size_t i = 0; i < no; i++) {
        const double x = gp[i], y = go[i], ref = gelu_tanh64(x);
        const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        const double own = 1e-6 + 2e-6 * fabs(ref); /* an accurate tanh, fp32 arithmetic */
        const double appr = fused ? 0.5 * fabs(x) * fabs(tanh(u)) * approx_tanh : 0.0;
        const double e_self = fabs(y - ref) / (own + appr);
        const double e_cpu = fabs(y - out[i]) / (1.13 * tol_pre * pscale + 2.0 * own + appr);
        if (!(e_self <= worst_self)) worst_self = isnan(e_self) ? INFINITY : e_self, at_self = i;
        if (!(e_cpu <= worst_cpu)) worst_cpu = isnan(e_cpu) ? INFINITY : e_cpu, at_cpu = i;
        g->worst_tanh = fmax(g->worst_tanh, fabs(y - ref));
        g->worst_erf = fmax(g->worst_erf, fabs(y - gelu_erf64(x)));
        if (fabs(x) >= GELU_BAND_LO && fabs(x) <= GELU_BAND_HI) {
          g->band++;
          g->res_band += y - ref;
          g->gap_band += gelu_erf64(x) - ref;
        }
      }
      T_CHECK(worst_self <= 1.0,
              "%s: out %.9g for pre %.9g is %.3g of its tolerance from float64 tanh-GeLU %.9g",
              what, no ? go[at_self] : 0.0, no ? gp[at_self] : 0.0, worst_self,
              no ? gelu_tanh64(gp[at_self]) : 0.0);
      T_CHECK(worst_cpu <= 1.0, "%s: out %.9g on the GPU, %.9g on the CPU (%.3g of the tolerance)",
              what, no ? go[at_cpu] : 0.0, no ? out[at_cpu] : 0.0, worst_cpu);
      free(gp), free(go);
      void *all[] = {dA, dW, db, dpre, dout};
      for (size_t i = 0; i < 5; i++)
        mgt_be_free(gpu, all[i]);
      free(A), free(W), free(b), free(pre), free(out);
    }
    for (int f = 1; f >= 0; f--) {
      const gelu_path *g = &path[f];
      if (!g->calls) continue;
      const double res = g->band ? g->res_band / (double)g->band : 0.0;
      const double gap = g->band ? g->gap_band / (double)g->band : 0.0;
      printf("test_cuda: linear_bias_gelu ran %s: %s on %d of %zu shapes; out - GeLU(pre): "
             "worst %.2e against tanh-GeLU, %.2e against erf-GeLU; mean over %zu elements "
             "with %.1f <= |pre| <= %.1f: %+.2e (erf - tanh there: %+.2e)\n",
             prec_name[prec],
             f ? "fused (one cuBLASLt call, GELU_AUX_BIAS epilogue)"
               : "unfused (GEMM, then the bias + GeLU kernel)",
             g->calls, sizeof shapes / sizeof shapes[0], g->worst_tanh, g->worst_erf, g->band,
             GELU_BAND_LO, GELU_BAND_HI, res, gap);
      T_CHECK(g->band >= 200, "linear_bias_gelu %s %s: only %zu elements in the band",
              prec_name[prec], f ? "fused" : "fallback", g->band);
      T_CHECK(fabs(res) <= fabs(gap) / 3.0,
              "linear_bias_gelu %s %s: out is %+.2e from tanh-GeLU on average where erf-GeLU is "
              "%+.2e from it: not the model's tanh GeLU",
              prec_name[prec], f ? "fused" : "fallback", res, gap);
    }
  }
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
}

/* hold under 16 bits: a layer's output gradient converted once for its two GEMMs, as on the
   CPU; writing it while held (breaking the promise) shows the GEMM reusing the first copy,
   a release shows it converted again. */
static void test_hold(void) {
  const int M = 33, N = 40, K = 24;
  const size_t MN = (size_t)M * N, MK = (size_t)M * K, NK = (size_t)N * K;
  float *dy = rnd(MN, 1.0f), *dy2 = rnd(MN, 1.0f), *W = rnd(NK, 1.0f), *x = rnd(MK, 1.0f);
  float *dx = malloc(MK * 4), *dx2 = malloc(MK * 4), *dW = malloc(NK * 4), *db = malloc(N * 4);
  float *ddy = dev(dy, MN * 4), *dW_ = dev(W, NK * 4), *dx_ = dev(x, MK * 4);
  float *ddx = dev(NULL, MK * 4), *ddW = dev(NULL, NK * 4), *ddb = dev(NULL, N * 4);
  for (int prec = 1; prec < 3; prec++) {
    T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
    T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, dy, N, W, K, 0.0f, dx, K));
    T_OK(mgt_be_linear_param_grads(cpu, M, N, K, dy, x, dW, db, 0));
    T_OK(mgt_be_gemm(cpu, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, dy2, N, W, K, 0.0f, dx2, K));
    T_OK(mgt_be_upload(gpu, ddy, dy, MN * 4));
    T_OK(mgt_be_hold(gpu, ddy, MN));
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, ddy, N, dW_, K, 0.0f, ddx, K));
    T_OK(mgt_be_linear_param_grads(gpu, M, N, K, ddy, dx_, ddW, ddb, 0));
    same("held gemm", ddx, dx, MK, 1e-4);
    same("held linear_param_grads dW", ddW, dW, NK, 1e-4);
    same("held linear_param_grads db", ddb, db, N, 1e-4);
    T_OK(mgt_be_upload(gpu, ddy, dy2, MN * 4)); /* the promise broken: the first copy reused */
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, ddy, N, dW_, K, 0.0f, ddx, K));
    same("held gemm after a write", ddx, dx, MK, 1e-4);
    T_OK(mgt_be_hold(gpu, NULL, 0)); /* released: converted again */
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_NOTRANS, M, K, N, 1.0f, ddy, N, dW_, K, 0.0f, ddx, K));
    same("gemm after the release", ddx, dx2, MK, 1e-4);
  }
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
  void *all[] = {ddy, dW_, dx_, ddx, ddW, ddb};
  for (size_t i = 0; i < 6; i++)
    mgt_be_free(gpu, all[i]);
  free(dy), free(dy2), free(W), free(x), free(dx), free(dx2), free(dW), free(db);
}

static void test_rowwise(void) {
  const int N = 37, C = 300;
  const size_t n = (size_t)N * C;
  float *x = rnd(n, 2.0f), *w = rnd(C, 1.0f), *b = rnd(C, 1.0f), *dy = rnd(n, 1.0f);
  /* bias */
  float *y = dup(x, n), *dydev = dev(x, n * 4), *db = rnd(C, 1.0f), *bd = dev(b, C * 4);
  float *dbd = dev(db, C * 4), *dyd = dev(dy, n * 4);
  T_OK(mgt_be_add_bias(cpu, y, b, N, C));
  T_OK(mgt_be_add_bias(gpu, dydev, bd, N, C));
  same("add_bias", dydev, y, n, 1e-6);
  for (int acc = 0; acc < 2; acc++) {
    T_OK(mgt_be_bias_backward(cpu, db, dy, N, C, acc));
    T_OK(mgt_be_bias_backward(gpu, dbd, dyd, N, C, acc));
    same(acc ? "bias_backward accumulate" : "bias_backward", dbd, db, C, 1e-5);
  }
  /* LayerNorm */
  float *out = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
  float *xd = dev(x, n * 4), *wd = dev(w, C * 4), *outd = dev(NULL, n * 4);
  float *meand = dev(NULL, N * 4), *rstdd = dev(NULL, N * 4);
  T_OK(mgt_be_layernorm_forward(cpu, out, mean, rstd, x, w, b, N, C, 1e-5f));
  T_OK(mgt_be_layernorm_forward(gpu, outd, meand, rstdd, xd, wd, bd, N, C, 1e-5f));
  same("layernorm out", outd, out, n, 1e-5);
  same("layernorm mean", meand, mean, N, 1e-5);
  same("layernorm rstd", rstdd, rstd, N, 1e-5);
  float *gx = rnd(n, 1.0f), *gw = rnd(C, 1.0f), *gb = rnd(C, 1.0f);
  float *gxd = dev(gx, n * 4), *gwd = dev(gw, C * 4), *gbd = dev(gb, C * 4);
  for (int acc = 0; acc < 2; acc++) {
    T_OK(mgt_be_layernorm_backward(cpu, gx, gw, gb, dy, x, w, mean, rstd, N, C, acc));
    T_OK(mgt_be_layernorm_backward(gpu, gxd, gwd, gbd, dyd, xd, wd, meand, rstdd, N, C, acc));
    same("layernorm dx", gxd, gx, n, 1e-5);
    same("layernorm dw", gwd, gw, C, 1e-5);
    same("layernorm db", gbd, gb, C, 1e-5);
  }
  /* RMSNorm */
  T_OK(mgt_be_rmsnorm_forward(cpu, out, rstd, x, w, N, C, 1e-5f));
  T_OK(mgt_be_rmsnorm_forward(gpu, outd, rstdd, xd, wd, N, C, 1e-5f));
  same("rmsnorm out", outd, out, n, 1e-5);
  same("rmsnorm rstd", rstdd, rstd, N, 1e-5);
  for (int acc = 0; acc < 2; acc++) {
    T_OK(mgt_be_rmsnorm_backward(cpu, gx, gw, dy, x, w, rstd, N, C, acc));
    T_OK(mgt_be_rmsnorm_backward(gpu, gxd, gwd, dyd, xd, wd, rstdd, N, C, acc));
    same("rmsnorm dx", gxd, gx, n, 1e-5);
    same("rmsnorm dw", gwd, gw, C, 1e-5);
  }
  /* RMSNorm over heads: rows of C floats, 3 heads of 40 normalized in place */
  {
    const int heads = 3, hd = 40;
    const size_t S = (size_t)N * heads;
    float *h = dup(x, n), *hdv = dev(x, n * 4), *raw = malloc(S * hd * 4), *hr = malloc(S * 4);
    float *rawd = dev(NULL, S * hd * 4), *hrd = dev(NULL, S * 4);
    T_OK(mgt_be_head_rmsnorm_forward(cpu, h, C, raw, hr, w, N, heads, hd, 1e-6f, NULL, 0));
    T_OK(mgt_be_head_rmsnorm_forward(gpu, hdv, C, rawd, hrd, wd, N, heads, hd, 1e-6f, NULL, 0));
    same("head_rmsnorm out", hdv, h, n, 1e-5);
    same("head_rmsnorm raw", rawd, raw, S * hd, 0.0);
    same("head_rmsnorm rstd", hrd, hr, S, 1e-5);
    float *hw = rnd(hd, 1.0f), *hwd = dev(hw, hd * 4);
    for (int acc = 0; acc < 2; acc++) {
      float *hx = dup(dy, n), *hxd = dev(dy, n * 4);
      T_OK(mgt_be_head_rmsnorm_backward(cpu, hx, C, hw, raw, hr, w, N, heads, hd, acc, NULL, 0));
      T_OK(mgt_be_head_rmsnorm_backward(gpu, hxd, C, hwd, rawd, hrd, wd, N, heads, hd, acc, NULL,
                                        0));
      same("head_rmsnorm dx", hxd, hx, n, 1e-5);
      same("head_rmsnorm dw", hwd, hw, hd, 1e-5);
      free(hx), mgt_be_free(gpu, hxd);
    }
    free(h), free(raw), free(hr), free(hw);
    void *hall[] = {hdv, rawd, hrd, hwd};
    for (size_t i = 0; i < 4; i++)
      mgt_be_free(gpu, hall[i]);
  }
  /* one part (columns 40..89) of norms over the rows' first 120 columns, with their sums */
  {
    const int c0 = 40, hd = 50, W = 120;
    float *sm = malloc((size_t)N * 4), *smd = dev(NULL, (size_t)N * 4);
    T_OK(mgt_be_row_dots(cpu, sm, x, C, x, C, NULL, N, W));
    T_OK(mgt_be_row_dots(gpu, smd, xd, C, xd, C, NULL, N, W));
    same("row_dots", smd, sm, N, 1e-5);
    float *h = dup(x, n), *hdv = dev(x, n * 4), *raw = malloc((size_t)N * hd * 4);
    float *hr = malloc((size_t)N * 4), *rawd = dev(NULL, (size_t)N * hd * 4);
    float *hrd = dev(NULL, (size_t)N * 4);
    T_OK(mgt_be_head_rmsnorm_forward(cpu, h + c0, C, raw, hr, w, N, 1, hd, 1e-6f, sm, W));
    T_OK(mgt_be_upload(gpu, smd, sm, (size_t)N * 4)); /* the same sums on both */
    T_OK(mgt_be_head_rmsnorm_forward(gpu, hdv + c0, C, rawd, hrd, wd, N, 1, hd, 1e-6f, smd, W));
    same("head_rmsnorm part out", hdv, h, n, 1e-5);
    same("head_rmsnorm part rstd", hrd, hr, N, 1e-5);
    T_OK(mgt_be_row_dots(cpu, sm, dy + c0, C, raw, hd, w, N, hd));
    T_OK(mgt_be_row_dots(gpu, smd, dyd + c0, C, rawd, hd, wd, N, hd));
    same("row_dots with weights", smd, sm, N, 1e-5);
    T_OK(mgt_be_upload(gpu, smd, sm, (size_t)N * 4));
    float *hw = malloc((size_t)hd * 4), *hwd = dev(NULL, (size_t)hd * 4);
    float *hx = dup(dy, n), *hxd = dev(dy, n * 4);
    T_OK(mgt_be_head_rmsnorm_backward(cpu, hx + c0, C, hw, raw, hr, w, N, 1, hd, 0, sm, W));
    T_OK(mgt_be_head_rmsnorm_backward(gpu, hxd + c0, C, hwd, rawd, hrd, wd, N, 1, hd, 0, smd, W));
    same("head_rmsnorm part dx", hxd, hx, n, 1e-5);
    same("head_rmsnorm part dw", hwd, hw, hd, 1e-5);
    free(sm), free(h), free(raw), free(hr), free(hw), free(hx);
    void *hall[] = {smd, hdv, rawd, hrd, hwd, hxd};
    for (size_t i = 0; i < 6; i++)
      mgt_be_free(gpu, hall[i]);
  }
  /* SwiGLU: x read as (N, 2 * (C / 2)) */
  const int F = C / 2;
  T_OK(mgt_be_swiglu_forward(cpu, out, x, N, F));
  T_OK(mgt_be_swiglu_forward(gpu, outd, xd, N, F));
  same("swiglu out", outd, out, (size_t)N * F, 1e-5);
  T_OK(mgt_be_swiglu_backward(cpu, gx, dy, x, N, F));
  T_OK(mgt_be_swiglu_backward(gpu, gxd, dyd, xd, N, F));
  same("swiglu dx", gxd, gx, n, 1e-5);
  /* RoPE: rows of C floats, 4 heads of 64 rotated, positions from 5 in windows of 9 */
  float inv[32];
  for (int i = 0; i < 32; i++)
    inv[i] = (float)(1.0 / pow(10000.0, i / 32.0));
  float *invd = dev(inv, sizeof inv), *r = dup(x, n), *rd = dev(x, n * 4);
  int32_t *own = malloc(sizeof(int32_t) * (size_t)N); /* positions restarting after documents */
  for (int i = 0; i < N; i++)
    own[i] = (i * 7 + 3) % 13;
  int32_t *ownd = dev(own, sizeof(int32_t) * (size_t)N);
  for (int inverse = 0; inverse < 4; inverse++) {
    const int with = inverse >= 2;
    T_OK(mgt_be_rope(cpu, r, N, 9, 5, with ? own : NULL, 4, 64, C, inv, inverse % 2));
    T_OK(mgt_be_rope(gpu, rd, N, 9, 5, with ? ownd : NULL, 4, 64, C, invd, inverse % 2));
    same(with ? "rope at positions of their own" : (inverse ? "rope inverse" : "rope"), rd, r, n,
         1e-5);
  }
  mgt_be_free(gpu, ownd);
  free(own);
  /* GeLU */
  float *pre = dup(x, n), *pred = dev(x, n * 4);
  T_OK(mgt_be_bias_gelu_forward(cpu, out, pre, b, N, C));
  T_OK(mgt_be_bias_gelu_forward(gpu, outd, pred, bd, N, C));
  same("bias_gelu pre", pred, pre, n, 1e-6);
  same("bias_gelu out", outd, out, n, 1e-5);
  T_OK(mgt_be_gelu_backward(cpu, gx, dy, pre, n));
  T_OK(mgt_be_gelu_backward(gpu, gxd, dyd, pred, n));
  same("gelu_backward", gxd, gx, n, 1e-5);
  /* residual add */
  T_OK(mgt_be_add(cpu, x, dy, n));
  T_OK(mgt_be_add(gpu, xd, dyd, n));
  same("add", xd, x, n, 1e-6);
  void *all[] = {dydev, bd, dbd, dyd, xd, wd, outd, meand, rstdd, gxd, gwd, gbd, pred};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    mgt_be_free(gpu, all[i]);
  free(x), free(w), free(b), free(dy), free(y), free(db), free(out), free(mean), free(rstd);
  free(gx), free(gw), free(gb), free(pre);
}

/* BERT's head activations and the row gather/scatter of its heads. */
static void test_heads(void) {
  const int N = 37, C = 300;
  const size_t n = (size_t)N * C;
  for (int act = 0; act < 3; act++) {
    float *pre = rnd(n, 3.0f), *b = rnd(C, 0.5f), *dy = rnd(n, 1.0f);
    float *out = malloc(n * 4), *gx = malloc(n * 4);
    float *pred = dev(pre, n * 4), *bd = dev(b, C * 4), *dyd = dev(dy, n * 4);
    float *outd = dev(NULL, n * 4), *gxd = dev(NULL, n * 4);
    T_OK(mgt_be_bias_act_forward(cpu, act, out, pre, b, N, C));
    T_OK(mgt_be_bias_act_forward(gpu, act, outd, pred, bd, N, C));
    same("bias_act pre", pred, pre, n, 1e-6);
    same("bias_act out", outd, out, n, 1e-5);
    T_OK(mgt_be_act_backward(cpu, act, gx, dy, pre, n));
    T_OK(mgt_be_act_backward(gpu, act, gxd, dyd, pred, n));
    same("act_backward", gxd, gx, n, 1e-5);
    void *all[] = {pred, bd, dyd, outd, gxd};
    for (size_t i = 0; i < 5; i++)
      mgt_be_free(gpu, all[i]);
    free(pre), free(b), free(dy), free(out), free(gx);
  }
  const int M = 5;
  const int32_t idx[5] = {36, 0, 12, 13, 7};
  float *x = rnd(n, 1.0f), *dx = rnd(n, 1.0f), *dy = rnd((size_t)M * C, 1.0f);
  float *g = malloc((size_t)M * C * 4);
  float *xd = dev(x, n * 4), *dxd = dev(dx, n * 4), *dyd = dev(dy, (size_t)M * C * 4);
  float *gd = dev(NULL, (size_t)M * C * 4);
  int32_t *idxd = (int32_t *)dev(idx, sizeof idx);
  T_OK(mgt_be_gather_rows(cpu, g, x, idx, M, C));
  T_OK(mgt_be_gather_rows(gpu, gd, xd, idxd, M, C));
  same("gather_rows", gd, g, (size_t)M * C, 0.0);
  T_OK(mgt_be_scatter_add_rows(cpu, dx, dy, idx, M, C));
  T_OK(mgt_be_scatter_add_rows(gpu, dxd, dyd, idxd, M, C));
  same("scatter_add_rows", dxd, dx, n, 1e-7);
  void *all[] = {xd, dxd, dyd, gd, idxd};
  for (size_t i = 0; i < 5; i++)
    mgt_be_free(gpu, all[i]);
  free(x), free(dx), free(dy), free(g);
}

/* Documents kept apart: sample 0 in documents of 1, 3, 7, ... rows, the others of 5. */
static int32_t *doc_starts(int B, int T) {
  int32_t *kf = malloc(sizeof(int32_t) * (size_t)B * T);
  for (int b = 0; b < B; b++)
    for (int i = 0, first = 0, len = 1; i < T; i++) {
      if (i - first == len) first = i, len = 2 * len + 1;
      kf[b * T + i] = b ? i / 5 * 5 : first;
    }
  return kf;
}

static void test_attention(void) {
  const int cases[][5] = {/* B, T, Hl, hd, head_offset */ {1, 1, 1, 8, 0},
                          {2, 17, 3, 16, 0},
                          {2, 64, 2, 32, 2},
                          {1, 130, 4, 64, 4}};
  const int32_t lens[4][2] = {{1, 1}, {17, 5}, {1, 40}, {129, 0}};
  /* masked 2: causal with documents kept apart, each row's first key its document's first row
     (documents of 1, 3, 7, ... rows) */
  for (int masked = 0; masked < 3; masked++)
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
      for (int drop = 0; drop < 2; drop++) {
        const int B = cases[s][0], T = cases[s][1], Hl = cases[s][2], hd = cases[s][3];
        const int off = cases[s][4], H = off + 2 * Hl, Cl = Hl * hd;
        mgt_dropout d = {drop ? 0.2f : 0.0f, 99, 1000, 3, 1, 0};
        size_t nq = (size_t)B * T * 3 * Cl, no = (size_t)B * T * Cl, np = (size_t)B * Hl * T * T;
        float *qkv = rnd(nq, 1.0f), *dout = rnd(no, 1.0f);
        float *out = malloc(no * 4), *P = malloc(np * 4), *scr = malloc(np * 4),
              *dq = malloc(nq * 4);
        float *qkvd = dev(qkv, nq * 4), *doutd = dev(dout, no * 4), *outd = dev(NULL, no * 4);
        float *Pd = dev(NULL, np * 4), *scrd = dev(NULL, np * 4), *dqd = dev(NULL, nq * 4);
        const int32_t *kl = masked == 1 ? lens[s] : NULL;
        int32_t *kld = masked == 1 ? (int32_t *)dev(lens[s], sizeof lens[s]) : NULL;
        int32_t *kf = masked == 2 ? doc_starts(B, T) : NULL;
        int32_t *kfd = kf ? (int32_t *)dev(kf, sizeof(int32_t) * (size_t)B * T) : NULL;
        T_OK(mgt_be_attention_forward(cpu, out, P, qkv, B, T, Hl, hd, off, H, kl, kf, &d, scr));
        T_OK(mgt_be_attention_forward(gpu, outd, Pd, qkvd, B, T, Hl, hd, off, H, kld, kfd, &d,
                                      scrd));
        char what[96];
        snprintf(what, sizeof what, "attention B%d T%d Hl%d hd%d drop %d masked %d", B, T, Hl, hd,
                 drop, masked);
        same(what, outd, out, no, 1e-5);
        same("attention probabilities", Pd, P, np, 1e-5);
        T_OK(mgt_be_attention_backward(cpu, dq, dout, qkv, P, B, T, Hl, hd, off, H, kl, kf, &d,
                                       scr));
        T_OK(mgt_be_attention_backward(gpu, dqd, doutd, qkvd, Pd, B, T, Hl, hd, off, H, kld, kfd,
                                       &d, scrd));
        same("attention dqkv", dqd, dq, nq, 1e-5);
        void *all[] = {qkvd, doutd, outd, Pd, scrd, dqd, kld, kfd};
        for (size_t i = 0; i < 8; i++)
          if (all[i]) mgt_be_free(gpu, all[i]);
        free(qkv), free(dout), free(out), free(P), free(scr), free(dq), free(kf);
      }
  /* one query against a cache, of every head (3) or of 2 key/value heads shared by 3 each */
  const int len = 300, Hl = 6, hd = 64, Cl = Hl * hd;
  float *q = rnd(Cl, 1.0f), *kc = rnd((size_t)len * Cl, 1.0f), *vc = rnd((size_t)len * Cl, 1.0f);
  float *o = malloc(Cl * 4);
  float *qd = dev(q, Cl * 4), *kcd = dev(kc, (size_t)len * Cl * 4),
        *vcd = dev(vc, (size_t)len * Cl * 4);
  float *od = dev(NULL, Cl * 4);
  for (int Gl = 6; Gl >= 2; Gl -= 4)
    for (int l = 1; l <= len; l += 149) {
      T_OK(mgt_be_attention_decode(cpu, o, q, kc, vc, l, Hl, Gl, hd));
      T_OK(mgt_be_attention_decode(gpu, od, qd, kcd, vcd, l, Hl, Gl, hd));
      same(Gl < Hl ? "attention_decode, grouped" : "attention_decode", od, o, Cl, 1e-5);
    }
  /* grouped key/value heads repeated and their gradients summed back: 8 heads, 2 groups */
  const int N = 37, H8 = 8, G2 = 2;
  const size_t nf = (size_t)N * 3 * H8 * hd, ng = (size_t)N * (H8 + 2 * G2) * hd;
  float *gx = rnd(ng, 1.0f), *gf = malloc(nf * 4), *gy = rnd(nf, 1.0f), *gg = malloc(ng * 4);
  float *gxd = dev(gx, ng * 4), *gfd = dev(NULL, nf * 4), *gyd = dev(gy, nf * 4),
        *ggd = dev(NULL, ng * 4);
  T_OK(mgt_be_kv_group(cpu, gf, gx, N, H8, G2, hd, 0));
  T_OK(mgt_be_kv_group(gpu, gfd, gxd, N, H8, G2, hd, 0));
  same("kv_group expand", gfd, gf, nf, 0);
  T_OK(mgt_be_kv_group(cpu, gg, gy, N, H8, G2, hd, 1));
  T_OK(mgt_be_kv_group(gpu, ggd, gyd, N, H8, G2, hd, 1));
  same("kv_group reduce", ggd, gg, ng, 1e-6);
  mgt_be_free(gpu, gxd), mgt_be_free(gpu, gfd), mgt_be_free(gpu, gyd), mgt_be_free(gpu, ggd);
  free(gx), free(gf), free(gy), free(gg);
  mgt_be_free(gpu, qd), mgt_be_free(gpu, kcd), mgt_be_free(gpu, vcd), mgt_be_free(gpu, od);
  free(q), free(kc), free(vc), free(o);
}

/* One case of the flash-attention tests: random qkv and dout (in this order, from the tests'
   random source), copied to the GPU with room for its out, lse and dqkv, and the key lengths
   (lens, two samples' worth) when masked. */
typedef struct {
  int B, T, Hl, hd, off;
  size_t nq, no, nl; /* floats in qkv and dqkv, out and dout, lse */
  mgt_dropout d;
  float *qkv, *dout;
  const int32_t *kl; /* NULL unless masked */
  int32_t *kf;       /* masked 2: each row's first key, its document's (else NULL) */
  float *qkvd, *doutd, *outd, *lsed, *dqd;
  int32_t *kld, *kfd;
} flash_case;

static flash_case flash_case_of(const int c[5], const int32_t lens[2], int masked, int drop) {
  flash_case f = {0};
  f.B = c[0], f.T = c[1], f.Hl = c[2], f.hd = c[3], f.off = c[4];
  f.d = (mgt_dropout){drop ? 0.2f : 0.0f, 99, 1000, 3, 1, 0};
  const int Cl = f.Hl * f.hd;
  f.nq = (size_t)f.B * f.T * 3 * Cl, f.no = (size_t)f.B * f.T * Cl;
  f.nl = (size_t)f.B * f.Hl * f.T;
  f.qkv = rnd(f.nq, 1.0f), f.dout = rnd(f.no, 1.0f);
  f.qkvd = dev(f.qkv, f.nq * 4), f.doutd = dev(f.dout, f.no * 4), f.outd = dev(NULL, f.no * 4);
  f.lsed = dev(NULL, f.nl * 4), f.dqd = dev(NULL, f.nq * 4);
  f.kl = masked == 1 ? lens : NULL;
  f.kld = masked == 1 ? (int32_t *)dev(lens, 2 * sizeof(int32_t)) : NULL;
  f.kf = masked == 2 ? doc_starts(f.B, f.T) : NULL;
  f.kfd = f.kf ? (int32_t *)dev(f.kf, sizeof(int32_t) * (size_t)f.B * f.T) : NULL;
  return f;
}

static void flash_case_free(flash_case *f) {
  void *all[] = {f->qkvd, f->doutd, f->outd, f->lsed, f->dqd, f->kld, f->kfd};
  for (size_t i = 0; i < 7; i++)
    if (all[i]) mgt_be_free(gpu, all[i]);
  free(f->qkv), free(f->dout), free(f->kf);
}

/* The CPU's forward into out and lse, then its backward from them into dq (host buffers). */
static void flash_cpu(const flash_case *f, float *out, float *lse, float *dq) {
  T_OK(mgt_be_flash_attention_forward(cpu, out, lse, f->qkv, f->B, f->T, f->Hl, f->hd, f->off,
                                      f->kl, f->kf, &f->d));
  T_OK(mgt_be_flash_attention_backward(cpu, dq, f->dout, f->qkv, out, lse, f->B, f->T, f->Hl, f->hd,
                                       f->off, f->kl, f->kf, &f->d));
}

/* The same on the GPU, into the case's device out, lse and dqkv. */
static void flash_gpu(const flash_case *f) {
  T_OK(mgt_be_flash_attention_forward(gpu, f->outd, f->lsed, f->qkvd, f->B, f->T, f->Hl, f->hd,
                                      f->off, f->kld, f->kfd, &f->d));
  T_OK(mgt_be_flash_attention_backward(gpu, f->dqd, f->doutd, f->qkvd, f->outd, f->lsed, f->B, f->T,
                                       f->Hl, f->hd, f->off, f->kld, f->kfd, &f->d));
}

/* Flash attention against its CPU twin (kernels/cpu/flash.c): output, row log-sum-exp and
   gradient, causal, padding-masked and with documents kept apart, dropout on and off, several
   tiles of keys. */
static void test_flash_attention(void) {
  const int cases[][5] = {/* B, T, Hl, hd, head_offset */ {1, 1, 1, 8, 0},
                          {2, 17, 3, 16, 0},
                          {2, 200, 2, 32, 2},
                          {1, 300, 4, 64, 4}};
  const int32_t lens[4][2] = {{1, 1}, {17, 5}, {1, 140}, {257, 0}};
  for (int masked = 0; masked < 3; masked++)
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
      for (int drop = 0; drop < 2; drop++) {
        flash_case f = flash_case_of(cases[s], lens[s], masked, drop);
        float *out = malloc(f.no * 4), *lse = malloc(f.nl * 4), *dq = malloc(f.nq * 4);
        flash_cpu(&f, out, lse, dq);
        flash_gpu(&f);
        char what[96];
        snprintf(what, sizeof what, "flash attention B%d T%d Hl%d hd%d drop %d masked %d", f.B, f.T,
                 f.Hl, f.hd, drop, masked);
        same(what, f.outd, out, f.no, 1e-5);
        same("flash attention log-sum-exp", f.lsed, lse, f.nl, 1e-5);
        same("flash attention dqkv", f.dqd, dq, f.nq, 1e-5);
        flash_case_free(&f);
        free(out), free(lse), free(dq);
      }
}

/* Median of |x - y| over n elements (x, y host arrays). */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y);
}
static double median_gap(const float *x, const float *y, size_t n) {
  double *e = malloc((n ? n : 1) * sizeof(double));
  for (size_t i = 0; i < n; i++)
    e[i] = fabs((double)x[i] - y[i]);
  qsort(e, n, sizeof(double), cmp_double);
  const double m = n ? e[n / 2] : 0.0;
  free(e);
  return m;
}

/* The 16-bit tensor-core flash attention (kernels/cuda/flash16.cu) against its CPU twin, both
   backends at bf16 then fp16 (head dims 32, 64, 128; T from 1 to 300; causal and
   padding-masked, a length of 0 included; dropout on and off), and head dim 48, which both
   run in fp32. Both sides round the same operands at the same points (the contract at the top
   of kernels/cpu/flash.c), so they differ only by the order of fp32 accumulation and by exp
   (__expf against mgt_fast_expf); now and then that puts a probability or a dS on the other
   side of a 16-bit rounding midpoint, and the two round one unit apart. Hence:
   - lse within 1e-5 of max(1, its scale): it is made of unrounded probabilities;
   - out and dqkv within 2e-2 (bf16) or 2.5e-3 (fp16) of their scale: one such flip moves an
     output by at most one unit of the operand, 2^-7 or 2^-10 relative, times its weight,
     which is up to max |V| (or |dO|, |Q|, |K|) against a scale of about half that;
   - flips are rare, so the median element is untouched by them: the median |GPU - CPU| must
     be below 0.04 of the median |CPU 16-bit - CPU fp32|, the rounding itself. A CPU emulation
     of the kernels (run where no GPU was) measured 0.0021 at most over these cases, and 0.11
     or more for kernels rounding differently: P before dropout, dS before its scale, l from
     rounded P, a running maximum per 128 keys. */
static void test_flash16(void) {
  const int cases[][5] = {/* B, T, Hl, hd, head_offset */ {1, 1, 1, 32, 0},
                          {2, 17, 3, 64, 1},
                          {2, 64, 2, 128, 2},
                          {1, 130, 2, 32, 0},
                          {2, 300, 1, 64, 3},
                          {1, 300, 2, 128, 0},
                          {2, 130, 2, 48, 1}};
  const int32_t lens[7][2] = {{1, 1}, {17, 5}, {64, 33}, {129, 1}, {0, 217}, {257, 1}, {130, 40}};
  const char *prec_name[3] = {"fp32", "bf16", "fp16"};
  for (int masked = 0; masked < 3; masked++) /* causal, padding, documents kept apart */
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
      for (int drop = 0; drop < 2; drop++) {
        flash_case f = flash_case_of(cases[s], lens[s], masked, drop);
        const size_t nq = f.nq, no = f.no, nl = f.nl;
        const int fallback = f.hd == 48 || masked == 2; /* documents: fp32 tiles on both */
        float *o32 = malloc(no * 4), *l32 = malloc(nl * 4), *g32 = malloc(nq * 4);
        float *o16 = malloc(no * 4), *l16 = malloc(nl * 4), *g16 = malloc(nq * 4);
        flash_cpu(&f, o32, l32, g32);
        for (int prec = MGT_PREC_BF16; prec <= MGT_PREC_FP16; prec++) {
          T_OK(mgt_be_set_precision(cpu, (mgt_precision)prec));
          T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
          flash_cpu(&f, o16, l16, g16);
          flash_gpu(&f);
          char what[128];
          snprintf(what, sizeof what, "flash16 %s B%d T%d Hl%d hd%d drop %d masked %d%s",
                   prec_name[prec], f.B, f.T, f.Hl, f.hd, drop, masked,
                   fallback ? " (fp32 fallback)" : "");
          float *go = fetch(f.outd, no), *gl = fetch(f.lsed, nl), *gg = fetch(f.dqd, nq);
          /* lse: against max(1, scale), since a one-key row's lse may be near 0 */
          double lscale = 1.0, lworst = 0.0;
          for (size_t i = 0; i < nl; i++)
            lscale = fmax(lscale, fabs(l16[i]));
          for (size_t i = 0; i < nl; i++) {
            const double e = fabs((double)gl[i] - l16[i]);
            if (!(e <= lworst)) lworst = isnan(e) ? INFINITY : e;
          }
          T_CHECK(lworst <= 1e-5 * lscale, "%s: lse %.3g apart (scale %.3g)", what, lworst, lscale);
          if (fallback) { /* both backends in fp32 here: the fp32 conformance tolerance */
            same(what, f.outd, o16, no, 1e-5);
            same("flash16 fallback dqkv", f.dqd, g16, nq, 1e-5);
          } else {
            const double tol = prec == MGT_PREC_BF16 ? 2e-2 : 2.5e-3;
            same(what, f.outd, o16, no, tol);
            same("flash16 dqkv", f.dqd, g16, nq, tol);
            const double mo = median_gap(go, o16, no), ro = median_gap(o16, o32, no);
            const double mg = median_gap(gg, g16, nq), rg = median_gap(g16, g32, nq);
            T_CHECK(mo <= 0.04 * ro && mg <= 0.04 * rg,
                    "%s: median gap to the CPU twin %.3g (out), %.3g (dqkv), against %.3g and %.3g "
                    "of 16-bit rounding",
                    what, mo, mg, ro, rg);
          }
          free(go), free(gl), free(gg);
        }
        T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
        T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
        flash_case_free(&f);
        free(o32), free(l32), free(g32), free(o16), free(l16), free(g16);
      }
}

static void test_embedding_dropout(void) {
  const int B = 3, T = 11, C = 40, Vl = 50, v0 = 25, P = 16;
  const int N = B * T;
  int32_t tok[B * T];
  for (int i = 0; i < N; i++)
    tok[i] = (int32_t)(t_next() % 100); /* about half outside [v0, v0 + Vl) */
  tok[1] = tok[5] = v0 + 3;             /* a repeated token */
  float *wte = rnd((size_t)Vl * C, 1.0f), *wpe = rnd((size_t)P * C, 1.0f);
  float *out = malloc((size_t)N * C * 4);
  int32_t *tokd = dev(tok, sizeof tok);
  float *wted = dev(wte, (size_t)Vl * C * 4), *wped = dev(wpe, (size_t)P * C * 4);
  float *outd = dev(NULL, (size_t)N * C * 4);
  T_OK(mgt_be_embedding_forward(cpu, out, tok, wte, N, C, v0, Vl));
  T_OK(mgt_be_embedding_forward(gpu, outd, tokd, wted, N, C, v0, Vl));
  same("embedding_forward", outd, out, (size_t)N * C, 0.0);
  T_OK(mgt_be_add_position(cpu, out, wpe, N, 0, T, C, NULL));
  T_OK(mgt_be_add_position(gpu, outd, wped, N, 0, T, C, NULL));
  same("add_position", outd, out, (size_t)N * C, 1e-6);
  T_OK(mgt_be_add_position(cpu, out + C, wpe, N - 3, 1 % T, T, C, NULL)); /* from row 1 */
  T_OK(mgt_be_add_position(gpu, outd + C, wped, N - 3, 1 % T, T, C, NULL));
  same("add_position from row 1", outd, out, (size_t)N * C, 1e-6);
  int32_t pos[B * T]; /* positions restarting after documents */
  for (int i = 0; i < N; i++)
    pos[i] = (i * 5 + 2) % 7;
  int32_t *posd = dev(pos, sizeof pos);
  T_OK(mgt_be_add_position(cpu, out, wpe, N, 0, T, C, pos));
  T_OK(mgt_be_add_position(gpu, outd, wped, N, 0, T, C, posd));
  same("add_position at positions of their own", outd, out, (size_t)N * C, 1e-6);
  float *dout = rnd((size_t)N * C, 1.0f), *doutd = dev(dout, (size_t)N * C * 4);
  for (int acc = 0; acc < 4; acc++) {
    const int32_t *p = acc >= 2 ? pos : NULL, *pd = acc >= 2 ? posd : NULL;
    T_OK(mgt_be_embedding_backward(cpu, wte, wpe, dout, tok, p, B, T, C, v0, Vl, acc % 2));
    T_OK(mgt_be_embedding_backward(gpu, wted, wped, doutd, tokd, pd, B, T, C, v0, Vl, acc % 2));
    same("embedding_backward wte", wted, wte, (size_t)Vl * C, 1e-6);
    same("embedding_backward wpe", wped, wpe, (size_t)T * C, 1e-6);
  }
  /* dropout with and without a residual, and its backward */
  const size_t row = (size_t)T * C;
  mgt_dropout d = {0.3f, 5, 77, 2, 3, 0};
  float *res = rnd((size_t)N * C, 1.0f), *resd = dev(res, (size_t)N * C * 4);
  for (int with_res = 0; with_res < 2; with_res++) {
    T_OK(mgt_be_dropout_forward(cpu, out, dout, with_res ? res : NULL, (size_t)N * C, row, &d));
    T_OK(mgt_be_dropout_forward(gpu, outd, doutd, with_res ? resd : NULL, (size_t)N * C, row, &d));
    same("dropout_forward", outd, out, (size_t)N * C, 1e-6);
  }
  T_OK(mgt_be_dropout_backward(cpu, out, dout, (size_t)N * C, row, &d));
  T_OK(mgt_be_dropout_backward(gpu, outd, doutd, (size_t)N * C, row, &d));
  same("dropout_backward", outd, out, (size_t)N * C, 1e-6);
  { /* a window from an odd element, across a sample boundary (sequence parallelism) */
    mgt_dropout dw = d;
    dw.first = row - 5;
    const size_t nw = (size_t)N * C - dw.first;
    T_OK(
        mgt_be_dropout_forward(cpu, out + dw.first, dout + dw.first, res + dw.first, nw, row, &dw));
    T_OK(mgt_be_dropout_forward(gpu, outd + dw.first, doutd + dw.first, resd + dw.first, nw, row,
                                &dw));
    same("dropout_forward window", outd, out, (size_t)N * C, 1e-6);
  }
  void *all[] = {tokd, wted, wped, outd, doutd, resd, posd};
  for (size_t i = 0; i < 7; i++)
    mgt_be_free(gpu, all[i]);
  free(wte), free(wpe), free(out), free(dout), free(res);
}

static void test_xent(void) {
  const int N = 29, Vl = 1000, nv = 990, v0 = 500;
  const size_t n = (size_t)N * Vl;
  float *lg = rnd(n, 3.0f);
  int32_t tgt[N];
  for (int i = 0; i < N; i++)
    tgt[i] = (int32_t)(t_next() % 2000);   /* some on this shard, some elsewhere */
  tgt[3] = -1;                             /* no loss */
  lg[5 * Vl + 7] = lg[5 * Vl + 9] = 50.0f; /* a tie for argmax */
  float *mx = malloc(N * 4), *sum = malloc(N * 4), *tv = malloc(N * 4), *loss = malloc(N * 4);
  float *lgd = dev(lg, n * 4), *mxd = dev(NULL, N * 4), *sumd = dev(NULL, N * 4);
  float *tvd = dev(NULL, N * 4), *lossd = dev(NULL, N * 4);
  int32_t *tgtd = dev(tgt, sizeof tgt);
  float va[N], vb[N];
  int32_t ia[N], ib[N];
  T_OK(mgt_be_argmax(cpu, lg, N, Vl, nv, va, ia));
  T_OK(mgt_be_argmax(gpu, lgd, N, Vl, nv, vb, ib));
  int same_idx = 1;
  for (int i = 0; i < N; i++)
    same_idx &= ia[i] == ib[i] && va[i] == vb[i];
  T_CHECK(same_idx, "argmax differs between CPU and GPU");
  T_OK(mgt_be_xent_max(cpu, mx, lg, N, Vl, nv));
  T_OK(mgt_be_xent_max(gpu, mxd, lgd, N, Vl, nv));
  same("xent_max", mxd, mx, N, 0.0);
  for (int keep = 0; keep < 2; keep++) {
    T_OK(mgt_be_xent_sumexp(cpu, sum, tv, lg, mx, tgt, N, Vl, nv, v0, keep));
    T_OK(mgt_be_xent_sumexp(gpu, sumd, tvd, lgd, mxd, tgtd, N, Vl, nv, v0, keep));
    same("xent_sumexp sum", sumd, sum, N, 1e-5);
    same("xent_sumexp target", tvd, tv, N, 0.0);
  }
  same("xent exp(logits)", lgd, lg, n, 1e-5);
  double ta = 0, tb = 0;
  T_OK(mgt_be_xent_loss(cpu, loss, mx, sum, tv, tgt, N, &ta));
  T_OK(mgt_be_xent_loss(gpu, lossd, mxd, sumd, tvd, tgtd, N, &tb));
  same("xent_loss", lossd, loss, N, 1e-5);
  T_CHECK(fabs(ta - tb) <= 1e-5 * fabs(ta), "xent total %.9g vs %.9g", ta, tb);
  T_OK(mgt_be_xent_backward(cpu, lg, sum, tgt, N, Vl, nv, v0, 0.25f));
  T_OK(mgt_be_xent_backward(gpu, lgd, sumd, tgtd, N, Vl, nv, v0, 0.25f));
  same("xent_backward", lgd, lg, n, 1e-5);
  void *all[] = {lgd, mxd, sumd, tvd, lossd, tgtd};
  for (size_t i = 0; i < 6; i++)
    mgt_be_free(gpu, all[i]);
  free(lg), free(mx), free(sum), free(tv), free(loss);
}

static void test_optimizer(void) {
  const size_t n = 100000;
  mgt_segment segs[3] = {
      {0, 40000, 0.1f, 1, 0}, {40064, 30000, 0.0f, 0, 0}, {70080, 29920, 0.1f, 1, 0}};
  float *p = rnd(n, 1.0f), *g = rnd(n, 1.0f), *m = rnd(n, 0.1f), *v = rnd(n, 0.1f);
  for (size_t i = 0; i < n; i++)
    v[i] = fabsf(v[i]);
  float *pd = dev(p, n * 4), *gd = dev(g, n * 4), *md = dev(m, n * 4), *vd = dev(v, n * 4);
  double sa = 0, sb = 0;
  T_OK(mgt_be_sumsq(cpu, g, segs, 3, &sa));
  T_OK(mgt_be_sumsq(gpu, gd, segs, 3, &sb));
  T_CHECK(fabs(sa - sb) <= 1e-6 * sa, "sumsq %.12g vs %.12g", sa, sb);
  { /* the gradient norm is the same run to run: more blocks than one pass of the grid, and a
       segment shorter than a block's chunk */
    const size_t nb = 6000000;
    mgt_segment big[3] = {
        {0, 4500000, 0.1f, 1, 0}, {4500000, 1000, 0.0f, 1, 0}, {4501024, 1498976, 0.1f, 1, 0}};
    float *x = rnd(nb, 1.0f), *xd = dev(x, nb * 4);
    double first = 0, again = 0, ref = 0;
    T_OK(mgt_be_sumsq(cpu, x, big, 3, &ref));
    T_OK(mgt_be_sumsq(gpu, xd, big, 3, &first));
    T_CHECK(fabs(first - ref) <= 1e-6 * ref, "sumsq of 6M %.12g vs %.12g", first, ref);
    int same_bits = 1;
    for (int rep = 0; rep < 5; rep++) {
      T_OK(mgt_be_sumsq(gpu, xd, big, 3, &again));
      same_bits &= memcmp(&first, &again, sizeof first) == 0;
    }
    T_CHECK(same_bits, "sumsq differs between calls: %.17g then %.17g", first, again);
    mgt_be_free(gpu, xd);
    free(x);
  }
  mgt_adamw_step st = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0.7f, 0};
  T_OK(mgt_be_adamw(cpu, p, g, m, v, segs, 3, &st));
  T_OK(mgt_be_adamw(gpu, pd, gd, md, vd, segs, 3, &st));
  same("adamw p", pd, p, n, 1e-6);
  same("adamw m", md, m, n, 1e-6);
  same("adamw v", vd, v, n, 1e-6);
  /* the weights' 16-bit copies written in the same pass (st.copies): a GEMM through them equals
     the GEMM on the updated weights outside the registered region, bit for bit */
  for (int prec = 1; prec < 3; prec++) {
    const int M = 9, K = 50, N = 1999; /* N x K of the n weights */
    float *x = rnd((size_t)M * K, 1.0f), *xd = dev(x, (size_t)M * K * 4);
    float *y = dev(NULL, (size_t)M * N * 4), *yr = dev(NULL, (size_t)M * N * 4);
    float *qd = dev(NULL, n * 4);
    T_OK(mgt_be_set_precision(gpu, (mgt_precision)prec));
    T_OK(mgt_be_set_weights(gpu, pd, n));
    T_OK(mgt_be_refresh_weights(gpu, 0, n));
    st.copies = 1;
    T_OK(mgt_be_adamw(gpu, pd, gd, md, vd, segs, 3, &st));
    T_OK(mgt_be_copy(gpu, qd, pd, n * 4));
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, xd, K, pd, K, 0.0f, y, N));
    T_OK(mgt_be_gemm(gpu, MGT_NOTRANS, MGT_TRANS, M, N, K, 1.0f, xd, K, qd, K, 0.0f, yr, N));
    float *h = malloc((size_t)M * N * 4);
    T_OK(mgt_be_download(gpu, h, yr, (size_t)M * N * 4));
    same("a GEMM through the copies adamw wrote", y, h, (size_t)M * N, 0.0);
    T_OK(mgt_be_set_weights(gpu, pd, 0));
    T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
    st.copies = 0;
    mgt_be_free(gpu, xd), mgt_be_free(gpu, y), mgt_be_free(gpu, yr), mgt_be_free(gpu, qd);
    free(x), free(h);
  }
  mgt_be_free(gpu, pd), mgt_be_free(gpu, gd), mgt_be_free(gpu, md), mgt_be_free(gpu, vd);
  free(p), free(g), free(m), free(v);
}

/* Mixture-of-Experts: the router's fp32 GEMM under bf16, the routing (the same experts chosen)
   and its backward for each score function, the combination and its backward. */
static void test_moe(void) {
  const int N = 37, E = 8, k = 2, C = 40, M = N * k;
  float *x = rnd((size_t)N * C, 1.0f), *wr = rnd((size_t)E * C, 0.3f), *z = malloc(N * E * 4);
  float *xd = dev(x, (size_t)N * C * 4), *wrd = dev(wr, (size_t)E * C * 4),
        *zd = dev(NULL, N * E * 4);
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_BF16));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_BF16));
  T_OK(mgt_be_gemm32(cpu, 0, 1, N, E, C, 1.0f, x, C, wr, C, 0.0f, z, E));
  T_OK(mgt_be_gemm32(gpu, 0, 1, N, E, C, 1.0f, xd, C, wrd, C, 0.0f, zd, E));
  T_OK(mgt_be_set_precision(cpu, MGT_PREC_FP32));
  T_OK(mgt_be_set_precision(gpu, MGT_PREC_FP32));
  same("gemm32 under bf16", zd, z, (size_t)N * E, 1e-5);
  T_OK(mgt_be_upload(gpu, zd, z, (size_t)N * E * 4)); /* the same logits on both */
  float *w = malloc(M * 4), *p = malloc(N * E * 4), *lse = malloc(N * 4), *dw = rnd(M, 1.0f);
  float *aux = rnd(E, 1.0f), *dz = malloc(N * E * 4);
  int32_t *idx = malloc(M * 4), *gidx = malloc(M * 4);
  float *wd = dev(NULL, M * 4), *pd = dev(NULL, N * E * 4), *lsed = dev(NULL, N * 4);
  float *dwd = dev(dw, M * 4), *auxd = dev(aux, E * 4), *dzd = dev(NULL, N * E * 4);
  int32_t *idxd = dev(NULL, M * 4);
  for (int score = 0; score < 2; score++)
    for (int pre = 0; pre < 2 - score; pre++) {
      T_OK(mgt_be_moe_route(cpu, z, N, E, k, score, pre, 1.5f, score ? aux : NULL, idx, w, p, lse));
      T_OK(mgt_be_moe_route(gpu, zd, N, E, k, score, pre, 1.5f, score ? auxd : NULL, idxd, wd, pd,
                            lsed)); /* sigmoid: aux as an expert bias */
      T_OK(mgt_be_download(gpu, gidx, idxd, M * 4));
      T_CHECK(!memcmp(idx, gidx, M * 4), "moe_route: the same experts (score %d, pre %d)", score,
              pre);
      same("moe_route weights", wd, w, M, 1e-5);
      same("moe_route probs", pd, p, (size_t)N * E, 1e-5);
      same("moe_route lse", lsed, lse, N, 1e-5);
      T_OK(mgt_be_moe_route_backward(cpu, dz, dw, z, idx, w, p, lse, N, E, k, score, pre, 1.5f, aux,
                                     pre ? N : 0, 0.01f)); /* one sequence's, or every row's */
      T_OK(mgt_be_moe_route_backward(gpu, dzd, dwd, zd, idxd, wd, pd, lsed, N, E, k, score, pre,
                                     1.5f, auxd, pre ? N : 0, 0.01f));
      same("moe_route_backward", dzd, dz, (size_t)N * E, 1e-5);
    }
  int32_t *pos = malloc(M * 4); /* slot (t, s) at row (t * 7 + s * 3) % M, a permutation */
  for (int i = 0; i < M; i++)
    pos[i] = (int32_t)(((i / k) * 7 + (i % k) * 3 * N) % M);
  pos[5] = -1; /* a dropped slot */
  float *src = rnd((size_t)M * C, 1.0f), *y = malloc((size_t)N * C * 4),
        *ds = malloc((size_t)M * C * 4);
  float *srcd = dev(src, (size_t)M * C * 4), *yd = dev(NULL, (size_t)N * C * 4);
  float *dsd = dev(NULL, (size_t)M * C * 4), *gw = malloc(M * 4), *gwd = dev(NULL, M * 4);
  int32_t *posd = dev(pos, M * 4);
  T_OK(mgt_be_moe_combine(cpu, y, src, pos, w, N, k, C, 0));
  T_OK(mgt_be_moe_combine(gpu, yd, srcd, posd, wd, N, k, C, 0));
  same("moe_combine", yd, y, (size_t)N * C, 1e-6);
  memset(ds, 0, (size_t)M * C * 4);
  T_OK(mgt_be_zero(gpu, dsd, (size_t)M * C * 4));
  T_OK(mgt_be_moe_combine_backward(cpu, ds, gw, x, src, pos, w, N, k, C));
  T_OK(mgt_be_moe_combine_backward(gpu, dsd, gwd, xd, srcd, posd, wd, N, k, C));
  same("moe_combine_backward dsrc", dsd, ds, (size_t)M * C, 1e-6);
  same("moe_combine_backward dw", gwd, gw, M, 1e-5);
  void *all[] = {xd, wrd, zd, wd, pd, lsed, dwd, auxd, dzd, idxd, srcd, yd, dsd, gwd, posd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    mgt_be_free(gpu, all[i]);
  free(x), free(wr), free(z), free(w), free(p), free(lse), free(dw), free(aux), free(dz);
  free(idx), free(gidx), free(pos), free(src), free(y), free(ds), free(gw);
}

int main(void) {
  int n = mgt_cuda_device_count();
  if (n == 0) {
    printf("test_cuda: skipped: no CUDA device is visible\n");
    return 77;
  }
  T_OK(mgt_backend_cpu_create(&cpu));
  T_OK(mgt_backend_cuda_create(0, &gpu));
  test_memory();
  test_init();
  test_gemm();
  test_gemm_grouped();
  test_linear_bias_gelu();
  test_hold();
  test_rowwise();
  test_moe();
  test_heads();
  test_attention();
  test_flash_attention();
  test_flash16();
  test_embedding_dropout();
  test_xent();
  test_optimizer();
  T_OK(mgt_be_sync(gpu));
  mgt_backend_destroy(&gpu);
  mgt_backend_destroy(&cpu);
  return t_report("test_cuda");
}
