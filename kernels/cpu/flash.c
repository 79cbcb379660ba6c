/* Attention without the T x T probabilities (--use-flash-attn; Dao et al. 2022, FlashAttention
   and FlashAttention-2): keys in tiles of BC with an online softmax, each row's log-sum-exp
   kept for backward, which rebuilds each tile's probabilities from it. O(T) memory per
   (batch, head); the dropout masks are the words of the materialized kernel (attention.c), so
   both give the same model up to rounding. The CPU twin of the CUDA kernels: the fp32 ones in
   backend_cuda.cu and the 16-bit tensor-core ones in flash16.cu.

   16-bit contract (precision MGT_PREC_BF16 or MGT_PREC_FP16 in the ctx, head dims
   cpu_flash16_hd, no kfirst; any other precision, head dim, documents kept apart or a NULL
   ctx is fp32, unchanged). round() is mgt_round_bf16 or mgt_round_fp16, i.e. the GPU's
   __float2bfloat16_rn / __float2half_rn.
   Exactly the operands a tensor core multiplies are rounded; every product accumulates in
   fp32, and lse, m, l, alpha, D and the outputs are fp32:
   forward, per row i and per tile of BC = 64 keys [j0, j0 + 64) that holds keys the row sees:
     S_ij  = scale * sum_e round(Q_ie) round(K_je)           scale = 1/sqrtf(hd), in fp32
     m     = max(m_prev, max_j S_ij); alpha = exp(m_prev - m); p_ij = exp(S_ij - m)
     l     = l * alpha + sum_j p_ij                          (p before dropout and rounding)
     Pt_ij = round(keep_ij ? p_ij * dscale : 0)              (round(p_ij) without dropout)
     O_i   = O_i * alpha + sum_j Pt_ij round(V_j)
   and at the end O_i /= l, lse_i = m + log(l). m is the running maximum after each tile of
   64 keys, so the tile width of the keys is part of the contract (the rounded Pt depends on
   it); the tile of query rows is not.
   backward, with L = lse and O = out as given:
     D_i   = sum_e dO_ie O_ie                                (fp32, unrounded)
     p_ij  = exp(S_ij - L_i), S_ij as in the forward
     dP_ij = sum_e round(dO_ie) round(V_je)
     Pd_ij = round(keep_ij ? p_ij * dscale : 0)              (round(p_ij) without dropout)
     dS_ij = round(p_ij * (dP_ij * kd_ij - D_i) * scale)     kd = keep ? dscale : 0 (1 without)
     dV_j += sum_i Pd_ij round(dO_i); dQ_i += sum_j dS_ij round(K_j); dK_j += sum_i dS_ij round(Q_i)
   The CPU computes exp with mgt_fast_expf and the GPU with __expf, and the two accumulate in
   different orders: they agree to fp32 rounding before each 16-bit rounding, which now and
   then lands one 16-bit unit apart. */
#include "cblas_any.h"
#include <float.h>
#include <math.h>
#include <omp.h>

#include "cpu.h"
#include "mgt/rng.h"
#include "philox.h"
#ifdef MGT_HAVE_ONEDNN
#include "native.h"
#endif

enum { BR = 64, BC = 64 }; /* query rows and keys per tile */

#define keys_of cpu_key_limit
#define tile_mask cpu_attn_mask

enum { HD16 = 128 }; /* the largest head dim cpu_flash16_hd admits: the rounded tiles' width */

typedef struct head_view {
  const float *q, *k, *v; /* rows of ld floats */
  int ld, T, hd;
} head_view;

typedef float (*rounder)(float);

/* How one thread multiplies its tiles: in fp32 (rnd NULL), or with the operands rounded as
   above, either held in floats and multiplied by sgemm (the emulation) or, under native bf16
   GEMMs, held as bf16 and multiplied on the CPU's bf16 units by this thread's own oneDNN
   primitives (a native.c cache serves one thread). The two differ only in the order of the
   fp32 sums. */
typedef struct tiles {
  rounder rnd;
  struct cpu_native *nat;
  int failed;
} tiles;

/* The 16-bit rounding of the contract above, or NULL for fp32: also with documents kept apart
   (kfirst), which the GPU's tensor-core tiles do not do and its fp32 tiles do. */
static rounder rounding_of(const void *ctx, int hd, const int32_t *kfirst) {
  const cpu_ctx *c = ctx;
  if (!c || c->precision == MGT_PREC_FP32 || !cpu_flash16_hd(hd) || kfirst) return NULL;
  return c->precision == MGT_PREC_BF16 ? mgt_round_bf16 : mgt_round_fp16;
}

/* Whether the tiles run native (then c->tnat holds every thread's oneDNN state). */
static mgt_status native_tiles(void *ctx, rounder rnd, int *on) {
  *on = 0;
#ifdef MGT_HAVE_ONEDNN
  if (cpu_native_on(ctx) && rnd) {
    MGT_CHECK(cpu_native_threads(ctx));
    *on = 1;
  }
#endif
  return MGT_OK;
}

static tiles tiles_of(const void *ctx, rounder rnd, int native) {
  tiles t = {rnd, NULL, 0};
  const cpu_ctx *c = ctx;
  const int tid = omp_get_thread_num();
  if (native && tid < c->tnat_n) t.nat = c->tnat[tid];
  return t;
}

/* n rows of hd floats (stride ld) as a tensor core reads them: x itself in fp32 (so that the
   fp32 GEMMs are the very calls they were), else rounded (n, hd; stride hd) into f as floats
   or, native, into h as bf16 bits. */
typedef struct tile_buf {
  float *f;
  uint16_t *h;
} tile_buf;

static const void *operand(const tiles *t, tile_buf buf, const float *x, int ld, int n, int hd,
                           int *ld_out) {
  if (!t->rnd) {
    *ld_out = ld;
    return x;
  }
  *ld_out = hd;
  if (t->nat) {
    uint16_t *h = buf.h;
    for (int r = 0; r < n; r++)
      for (int e = 0; e < hd; e++)
        h[(size_t)r * hd + e] = cpu_bf16_bits(x[(size_t)r * ld + e]);
    return h;
  }
  float *f = buf.f;
  for (int r = 0; r < n; r++)
    for (int e = 0; e < hd; e++)
      f[(size_t)r * hd + e] = t->rnd(x[(size_t)r * ld + e]);
  return f;
}

/* nr rows of a tile (stride BC) as an operand: the floats as they are (rounded already when
   emulated), or their bf16 bits in buf (native; the conversion rounds as rnd). */
static const void *tile_operand(const tiles *t, uint16_t *buf, const float *x, int nr, int nc) {
  if (!t->nat) return x;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++)
      buf[r * BC + c] = cpu_bf16_bits(x[r * BC + c]);
  return buf;
}

/* C = alpha op(A) op(B) + beta C of two operands from operand or tile_operand. */
static void tile_gemm(tiles *t, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                      int lda, const void *B, int ldb, float beta, float *C, int ldc) {
#ifdef MGT_HAVE_ONEDNN
  if (t->nat) {
    if (cpu_native_gemm(t->nat, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != MGT_OK)
      t->failed = 1;
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* s (nr, nc; stride BC) = scale * q k^T of nr query rows q and nc key rows k */
static void scores(tiles *t, float *s, const void *q, int lq, int nr, const void *k, int lk, int nc,
                   int hd, float scale) {
  tile_gemm(t, 0, 1, nr, nc, hd, scale, q, lq, k, lk, 0.0f, s, BC);
}

/* The last key any of rows [i0, i0 + nr) sees, plus one. */
static int tile_keys(const int32_t *keylen, int b, int T, int i0, int nr) {
  return keylen ? keys_of(keylen, b, T, i0) : i0 + nr;
}

/* The first tile of keys any of rows [i0, i0 + nr) sees: tiles before their documents are
   skipped whole (tiles stay at multiples of BC, as the 16-bit contract has them). */
static int tile_first(const int32_t *kfirst, int b, int T, int i0, int nr) {
  int lo = T;
  for (int r = 0; r < nr; r++) {
    const int f = cpu_key_first(kfirst, b, T, i0 + r);
    lo = f < lo ? f : lo;
  }
  return lo / BC * BC;
}

mgt_status cpu_flash_attention_forward(void *ctx, float *out, float *lse, const float *qkv, int B,
                                       int T, int Hl, int hd, int head_offset,
                                       const int32_t *keylen, const int32_t *kfirst,
                                       const mgt_dropout *d) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const rounder rnd = rounding_of(ctx, hd, kfirst);
  int native, failed = 0;
  MGT_CHECK(native_tiles(ctx, rnd, &native));
#pragma omp parallel for collapse(2) schedule(static) reduction(| : failed)
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < Hl; hh++) {
      tiles t = tiles_of(ctx, rnd, native);
      const float *q = qkv + (size_t)b * T * A.ld + (size_t)hh * hd;
      const head_view h = {q, q + A.Cl, q + 2 * A.Cl, A.ld, T, hd};
      float *o = out + (size_t)b * T * A.Cl + (size_t)hh * hd;
      float *L = lse + ((size_t)b * Hl + hh) * T;
      float s[BR * BC], m[BR], l[BR];
      const int nf = rnd && !native ? BR * HD16 : 1, nh = native ? BR * HD16 : 1;
      float qf[nf], kf[nf], vf[nf];
      uint16_t qh[nh], kh[nh], vh[nh], p16[native ? BR * BC : 1];
      const tile_buf qb = {qf, qh}, kb = {kf, kh}, vb = {vf, vh};
      uint8_t keep[BC];
      for (int i0 = 0; i0 < T; i0 += BR) {
        const int nr = T - i0 < BR ? T - i0 : BR, jend = tile_keys(keylen, b, T, i0, nr);
        int lq, lk, lv;
        const void *qt = operand(&t, qb, h.q + (size_t)i0 * A.ld, A.ld, nr, hd, &lq);
        for (int r = 0; r < nr; r++) {
          m[r] = -FLT_MAX, l[r] = 0.0f;
          for (int e = 0; e < hd; e++)
            o[(size_t)(i0 + r) * A.Cl + e] = 0.0f;
        }
        for (int j0 = tile_first(kfirst, b, T, i0, nr); j0 < jend; j0 += BC) {
          const int nc = jend - j0 < BC ? jend - j0 : BC;
          const void *kt = operand(&t, kb, h.k + (size_t)j0 * A.ld, A.ld, nc, hd, &lk);
          scores(&t, s, qt, lq, nr, kt, lk, nc, hd, A.scale);
          for (int r = 0; r < nr; r++) {
            float *sr = s + (size_t)r * BC, *orow = o + (size_t)(i0 + r) * A.Cl;
            int valid = keys_of(keylen, b, T, i0 + r) - j0,
                c0 = cpu_key_first(kfirst, b, T, i0 + r) - j0; /* keys [c0, valid) of the tile */
            valid = valid < 0 ? 0 : (valid > nc ? nc : valid);
            c0 = c0 < 0 ? 0 : (c0 > valid ? valid : c0);
            float mx = m[r];
            for (int c = c0; c < valid; c++)
              mx = sr[c] > mx ? sr[c] : mx;
            const float alpha = valid > c0 ? mgt_fast_expf(m[r] - mx) : 1.0f;
            float sum = 0.0f;
            for (int c = c0; c < valid; c++)
              sum += (sr[c] = mgt_fast_expf(sr[c] - mx));
            for (int c = 0; c < c0; c++)
              sr[c] = 0.0f;
            for (int c = valid; c < nc; c++)
              sr[c] = 0.0f;
            if (valid <= c0) continue;
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            for (int e = 0; e < hd; e++)
              orow[e] *= alpha;
            if (A.drop) {
              tile_mask(keep, d, b, head_offset + hh, T, i0 + r, j0, valid, A.thr);
              for (int c = c0; c < valid; c++)
                sr[c] = keep[c] ? sr[c] * A.dscale : 0.0f;
            }
            if (rnd && !t.nat) /* P as the tensor core's operand, after l took the exact sum */
              for (int c = c0; c < valid; c++)
                sr[c] = rnd(sr[c]);
          }
          const void *vt = operand(&t, vb, h.v + (size_t)j0 * A.ld, A.ld, nc, hd, &lv);
          tile_gemm(&t, 0, 0, nr, hd, nc, 1.0f, tile_operand(&t, p16, s, nr, nc), BC, vt, lv, 1.0f,
                    o + (size_t)i0 * A.Cl, A.Cl);
        }
        for (int r = 0; r < nr; r++) {
          const float inv = 1.0f / l[r];
          for (int e = 0; e < hd; e++)
            o[(size_t)(i0 + r) * A.Cl + e] *= inv;
          L[i0 + r] = m[r] + logf(l[r]);
        }
      }
      failed |= t.failed;
    }
  if (failed) MGT_FAIL(MGT_ERR_BACKEND, "oneDNN: a bf16 flash-attention tile failed");
  return MGT_OK;
}

mgt_status cpu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, int B, int T, int Hl,
                                        int hd, int head_offset, const int32_t *keylen,
                                        const int32_t *kfirst, const mgt_dropout *d) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
  const rounder rnd = rounding_of(ctx, hd, kfirst);
  int native, failed = 0;
  MGT_CHECK(native_tiles(ctx, rnd, &native));
#pragma omp parallel for collapse(2) schedule(static) reduction(| : failed)
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < Hl; hh++) {
      tiles t = tiles_of(ctx, rnd, native);
      const float *q = qkv + (size_t)b * T * A.ld + (size_t)hh * hd;
      const head_view h = {q, q + A.Cl, q + 2 * A.Cl, A.ld, T, hd};
      const float *o = out + (size_t)b * T * A.Cl + (size_t)hh * hd;
      const float *dO = dout + (size_t)b * T * A.Cl + (size_t)hh * hd;
      const float *L = lse + ((size_t)b * Hl + hh) * T;
      float *dq = dqkv + (size_t)b * T * A.ld + (size_t)hh * hd, *dk = dq + A.Cl,
            *dv = dq + 2 * A.Cl;
      float s[BR * BC], pd[BR * BC], dp[BR * BC], D[BR];
      const int nf = rnd && !native ? BR * HD16 : 1, nh = native ? BR * HD16 : 1;
      float qf[nf], of[nf], kf[nf], vf[nf];
      uint16_t qh[nh], oh[nh], kh[nh], vh[nh], p16[native ? BR * BC : 1], s16[native ? BR * BC : 1];
      const tile_buf qb = {qf, qh}, ob = {of, oh}, kb = {kf, kh}, vb = {vf, vh};
      uint8_t keep[BC];
      for (int i = 0; i < T; i++)
        for (int e = 0; e < hd; e++)
          dq[(size_t)i * A.ld + e] = dk[(size_t)i * A.ld + e] = dv[(size_t)i * A.ld + e] = 0.0f;
      for (int i0 = 0; i0 < T; i0 += BR) {
        const int nr = T - i0 < BR ? T - i0 : BR, jend = tile_keys(keylen, b, T, i0, nr);
        /* D_i = dO_i . O_i: the softmax backward's row term (dropout included) */
        for (int r = 0; r < nr; r++) {
          float acc = 0.0f;
          for (int e = 0; e < hd; e++)
            acc += dO[(size_t)(i0 + r) * A.Cl + e] * o[(size_t)(i0 + r) * A.Cl + e];
          D[r] = acc;
        }
        int lq, lo, lk, lv;
        const void *qt = operand(&t, qb, h.q + (size_t)i0 * A.ld, A.ld, nr, hd, &lq);
        const void *ot = operand(&t, ob, dO + (size_t)i0 * A.Cl, A.Cl, nr, hd, &lo);
        for (int j0 = tile_first(kfirst, b, T, i0, nr); j0 < jend; j0 += BC) {
          const int nc = jend - j0 < BC ? jend - j0 : BC;
          const void *kt = operand(&t, kb, h.k + (size_t)j0 * A.ld, A.ld, nc, hd, &lk);
          const void *vt = operand(&t, vb, h.v + (size_t)j0 * A.ld, A.ld, nc, hd, &lv);
          scores(&t, s, qt, lq, nr, kt, lk, nc, hd, A.scale);
          tile_gemm(&t, 0, 1, nr, nc, hd, 1.0f, ot, lo, vt, lv, 0.0f, dp,
                    BC); /* dPd = dO_i V_j^T */
          for (int r = 0; r < nr; r++) {
            float *sr = s + (size_t)r * BC, *pr = pd + (size_t)r * BC, *gr = dp + (size_t)r * BC;
            int valid = keys_of(keylen, b, T, i0 + r) - j0,
                c0 = cpu_key_first(kfirst, b, T, i0 + r) - j0;
            valid = valid < 0 ? 0 : (valid > nc ? nc : valid);
            c0 = c0 < 0 ? 0 : (c0 > valid ? valid : c0);
            if (A.drop && valid)
              tile_mask(keep, d, b, head_offset + hh, T, i0 + r, j0, valid, A.thr);
            for (int c = 0; c < c0; c++)
              pr[c] = sr[c] = 0.0f;
            for (int c = c0; c < valid; c++) {
              const float p = mgt_fast_expf(sr[c] - L[i0 + r]);
              const float kd = A.drop ? (keep[c] ? A.dscale : 0.0f) : 1.0f;
              pr[c] = p * kd;                            /* the dropped probability */
              sr[c] = p * (gr[c] * kd - D[r]) * A.scale; /* dS */
            }
            if (rnd && !t.nat) /* the two as tensor-core operands */
              for (int c = c0; c < valid; c++)
                pr[c] = rnd(pr[c]), sr[c] = rnd(sr[c]);
            for (int c = valid; c < nc; c++)
              pr[c] = sr[c] = 0.0f;
          }
          /* dV_j += Pd^T dO_i, dQ_i += dS K_j, dK_j += dS^T Q_i */
          const void *pt = tile_operand(&t, p16, pd, nr, nc),
                     *st = tile_operand(&t, s16, s, nr, nc);
          tile_gemm(&t, 1, 0, nc, hd, nr, 1.0f, pt, BC, ot, lo, 1.0f, dv + (size_t)j0 * A.ld, A.ld);
          tile_gemm(&t, 0, 0, nr, hd, nc, 1.0f, st, BC, kt, lk, 1.0f, dq + (size_t)i0 * A.ld, A.ld);
          tile_gemm(&t, 1, 0, nc, hd, nr, 1.0f, st, BC, qt, lq, 1.0f, dk + (size_t)j0 * A.ld, A.ld);
        }
      }
      failed |= t.failed;
    }
  if (failed) MGT_FAIL(MGT_ERR_BACKEND, "oneDNN: a bf16 flash-attention tile failed");
  return MGT_OK;
}

int mgt_flash16_head(int hd) { return cpu_flash16_hd(hd); }
