/* Attention without the T x T probabilities (--use-flash-attn; Dao et al. 2022, FlashAttention
   and FlashAttention-2): keys in tiles of BC with an online softmax, each row's log-sum-exp
   kept for backward, which rebuilds each tile's probabilities from it. O(T) memory per
   (batch, head); the dropout masks are the words of the materialized kernel (attention.c), so
   both give the same model up to rounding. The CPU twin of the CUDA kernel. */
#include <cblas.h>
#include <float.h>
#include <math.h>

#include "cpu.h"
#include "mgt/rng.h"
#include "philox.h"

enum { BR = 64, BC = 64 }; /* query rows and keys per tile */

#define keys_of cpu_key_limit
#define tile_mask cpu_attn_mask

typedef struct head_view {
  const float *q, *k, *v; /* rows of ld floats */
  int ld, T, hd;
} head_view;

/* s (nr, nc; stride BC) = scale * q[i0..] k[j0..]^T */
static void scores(float *s, const head_view *h, int i0, int nr, int j0, int nc, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, h->hd, scale,
              h->q + (size_t)i0 * h->ld, h->ld, h->k + (size_t)j0 * h->ld, h->ld, 0.0f, s, BC);
}

/* The last key any of rows [i0, i0 + nr) sees, plus one. */
static int tile_keys(const int32_t *keylen, int b, int T, int i0, int nr) {
  return keylen ? keys_of(keylen, b, T, i0) : i0 + nr;
}

mgt_status cpu_flash_attention_forward(void *ctx, float *out, float *lse, const float *qkv, int B,
                                       int T, int Hl, int hd, int head_offset,
                                       const int32_t *keylen, const mgt_dropout *d) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < Hl; hh++) {
      const float *q = qkv + (size_t)b * T * A.ld + (size_t)hh * hd;
      const head_view h = {q, q + A.Cl, q + 2 * A.Cl, A.ld, T, hd};
      float *o = out + (size_t)b * T * A.Cl + (size_t)hh * hd;
      float *L = lse + ((size_t)b * Hl + hh) * T;
      float s[BR * BC], m[BR], l[BR];
      uint8_t keep[BC];
      for (int i0 = 0; i0 < T; i0 += BR) {
        const int nr = T - i0 < BR ? T - i0 : BR, jend = tile_keys(keylen, b, T, i0, nr);
        for (int r = 0; r < nr; r++) {
          m[r] = -FLT_MAX, l[r] = 0.0f;
          for (int e = 0; e < hd; e++)
            o[(size_t)(i0 + r) * A.Cl + e] = 0.0f;
        }
        for (int j0 = 0; j0 < jend; j0 += BC) {
          const int nc = jend - j0 < BC ? jend - j0 : BC;
          scores(s, &h, i0, nr, j0, nc, A.scale);
          for (int r = 0; r < nr; r++) {
            float *sr = s + (size_t)r * BC, *orow = o + (size_t)(i0 + r) * A.Cl;
            int valid = keys_of(keylen, b, T, i0 + r) - j0;
            valid = valid < 0 ? 0 : (valid > nc ? nc : valid);
            float mx = m[r];
            for (int c = 0; c < valid; c++)
              mx = sr[c] > mx ? sr[c] : mx;
            const float alpha = valid ? mgt_fast_expf(m[r] - mx) : 1.0f;
            float sum = 0.0f;
            for (int c = 0; c < valid; c++)
              sum += (sr[c] = mgt_fast_expf(sr[c] - mx));
            for (int c = valid; c < nc; c++)
              sr[c] = 0.0f;
            if (!valid) continue;
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            for (int e = 0; e < hd; e++)
              orow[e] *= alpha;
            if (A.drop) {
              tile_mask(keep, d, b, head_offset + hh, T, i0 + r, j0, valid, A.thr);
              for (int c = 0; c < valid; c++)
                sr[c] = keep[c] ? sr[c] * A.dscale : 0.0f;
            }
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hd, nc, 1.0f, s, BC,
                      h.v + (size_t)j0 * A.ld, A.ld, 1.0f, o + (size_t)i0 * A.Cl, A.Cl);
        }
        for (int r = 0; r < nr; r++) {
          const float inv = 1.0f / l[r];
          for (int e = 0; e < hd; e++)
            o[(size_t)(i0 + r) * A.Cl + e] *= inv;
          L[i0 + r] = m[r] + logf(l[r]);
        }
      }
    }
  return MGT_OK;
}

mgt_status cpu_flash_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, int B, int T, int Hl,
                                        int hd, int head_offset, const int32_t *keylen,
                                        const mgt_dropout *d) {
  const cpu_att A = cpu_att_of(Hl, hd, d);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < Hl; hh++) {
      const float *q = qkv + (size_t)b * T * A.ld + (size_t)hh * hd;
      const head_view h = {q, q + A.Cl, q + 2 * A.Cl, A.ld, T, hd};
      const float *o = out + (size_t)b * T * A.Cl + (size_t)hh * hd;
      const float *dO = dout + (size_t)b * T * A.Cl + (size_t)hh * hd;
      const float *L = lse + ((size_t)b * Hl + hh) * T;
      float *dq = dqkv + (size_t)b * T * A.ld + (size_t)hh * hd, *dk = dq + A.Cl,
            *dv = dq + 2 * A.Cl;
      float s[BR * BC], pd[BR * BC], dp[BR * BC], D[BR];
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
        for (int j0 = 0; j0 < jend; j0 += BC) {
          const int nc = jend - j0 < BC ? jend - j0 : BC;
          scores(s, &h, i0, nr, j0, nc, A.scale);
          /* dPd = dO_i V_j^T */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hd, 1.0f,
                      dO + (size_t)i0 * A.Cl, A.Cl, h.v + (size_t)j0 * A.ld, A.ld, 0.0f, dp, BC);
          for (int r = 0; r < nr; r++) {
            float *sr = s + (size_t)r * BC, *pr = pd + (size_t)r * BC, *gr = dp + (size_t)r * BC;
            int valid = keys_of(keylen, b, T, i0 + r) - j0;
            valid = valid < 0 ? 0 : (valid > nc ? nc : valid);
            if (A.drop && valid)
              tile_mask(keep, d, b, head_offset + hh, T, i0 + r, j0, valid, A.thr);
            for (int c = 0; c < valid; c++) {
              const float p = mgt_fast_expf(sr[c] - L[i0 + r]);
              const float kd = A.drop ? (keep[c] ? A.dscale : 0.0f) : 1.0f;
              pr[c] = p * kd;                            /* the dropped probability */
              sr[c] = p * (gr[c] * kd - D[r]) * A.scale; /* dS */
            }
            for (int c = valid; c < nc; c++)
              pr[c] = sr[c] = 0.0f;
          }
          /* dV_j += Pd^T dO_i, dQ_i += dS K_j, dK_j += dS^T Q_i */
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hd, nr, 1.0f, pd, BC,
                      dO + (size_t)i0 * A.Cl, A.Cl, 1.0f, dv + (size_t)j0 * A.ld, A.ld);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hd, nc, 1.0f, s, BC,
                      h.k + (size_t)j0 * A.ld, A.ld, 1.0f, dq + (size_t)i0 * A.ld, A.ld);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hd, nr, 1.0f, s, BC,
                      h.q + (size_t)i0 * A.ld, A.ld, 1.0f, dk + (size_t)j0 * A.ld, A.ld);
        }
      }
    }
  return MGT_OK;
}
