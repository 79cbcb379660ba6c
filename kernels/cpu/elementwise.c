/* Initialization, bias, dropout and residual kernels. */
#include <omp.h>

#include "cpu.h"
#include "mgt/rng.h"
#include "philox.h"

enum { CHUNK = 1024 }; /* elements per dropout chunk; a multiple of 4 */

/* The Philox words of blocks [b0, b0+nb) of a stream, 4 per block, vectorized. */
static void philox_words(uint32_t *w, uint64_t seed, uint64_t stream, uint64_t b0, size_t nb) {
  const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  const uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
#pragma omp simd
  for (size_t i = 0; i < nb; i++) {
    uint64_t b = b0 + i;
    uint32_t o[4];
    mgt_philox_block((uint32_t)b, (uint32_t)(b >> 32), s0, s1, k0, k1, o);
    w[4 * i + 0] = o[0];
    w[4 * i + 1] = o[1];
    w[4 * i + 2] = o[2];
    w[4 * i + 3] = o[3];
  }
}

void cpu_dropout_mask(uint8_t *keep, uint64_t seed, uint64_t stream, uint64_t e0, size_t n,
                      uint32_t threshold) {
  uint32_t w[CHUNK + 8];
  size_t done = 0;
  while (done < n) {
    uint64_t e = e0 + done;
    uint64_t b0 = e >> 2;
    size_t skip = (size_t)(e & 3);
    size_t take = n - done < CHUNK ? n - done : CHUNK;
    size_t nb = (skip + take + 3) / 4;
    philox_words(w, seed, stream, b0, nb);
    for (size_t i = 0; i < take; i++)
      keep[done + i] = w[skip + i] >= threshold;
    done += take;
  }
}

mgt_status cpu_init_normal(void *ctx, float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream,
                           float std) {
  int64_t s0 = sh->shape[0], s1 = sh->ndim > 1 ? sh->shape[1] : 1,
          s2 = sh->ndim > 2 ? sh->shape[2] : 1;
  int64_t f0 = sh->full[0], f1 = sh->ndim > 1 ? sh->full[1] : 1,
          f2 = sh->ndim > 2 ? sh->full[2] : 1;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < s0; i++)
    for (int64_t j = 0; j < s1; j++) {
      int64_t gi = i + (sh->split_dim == 0 ? sh->offset : sh->lead);
      int64_t gj = j + (sh->split_dim == 1 ? sh->offset : 0);
      float *row = p + (i * s1 + j) * s2;
      int64_t k0 = sh->split_dim == 2 ? sh->offset : 0;
      if (gi >= f0 || gj >= f1) {
        for (int64_t k = 0; k < s2; k++)
          row[k] = 0.0f;
        continue;
      }
      /* the row's logical indices are consecutive: draw the Box-Muller pairs once */
      uint64_t base = (uint64_t)((gi * f1 + gj) * f2 + k0);
      for (int64_t k = 0; k < s2;) {
        if (k0 + k >= f2) {
          row[k++] = 0.0f;
          continue;
        }
        uint64_t idx = base + (uint64_t)k;
        float z[2];
        mgt_rng_normal_pair(seed, stream, idx >> 1, z);
        row[k++] = std * z[idx & 1];
        if (!(idx & 1) && k < s2 && k0 + k < f2) row[k++] = std * z[1];
      }
    }
  return MGT_OK;
}

mgt_status cpu_fill(void *ctx, float *p, size_t n, float value) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    p[i] = value;
  return MGT_OK;
}

mgt_status cpu_add_bias(void *ctx, float *y, const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *r = y + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      r[c] += b[c];
  }
  return MGT_OK;
}

/* db (+)= the column sums of dy, fp32 or bf16 (widened): threads own column ranges, so the
   sum over rows has a fixed order, the same for both types on the same values. */
static void bias_sums(float *db, const float *dy, const uint16_t *dy16, int N, int C,
                      int accumulate) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int c0 = (int)((int64_t)C * t / nt), c1 = (int)((int64_t)C * (t + 1) / nt);
    if (!accumulate)
      for (int c = c0; c < c1; c++)
        db[c] = 0.0f;
    for (int n = 0; n < N; n++) {
      if (dy16) {
        const uint16_t *r = dy16 + (size_t)n * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) {
          const uint32_t u = (uint32_t)r[c] << 16;
          float v;
          memcpy(&v, &u, sizeof v);
          db[c] += v;
        }
        continue;
      }
      const float *r = dy + (size_t)n * C;
#pragma omp simd
      for (int c = c0; c < c1; c++)
        db[c] += r[c];
    }
  }
}

mgt_status cpu_bias_backward(void *ctx, float *db, const float *dy, int N, int C, int accumulate) {
  bias_sums(db, dy, NULL, N, C, accumulate);
  return MGT_OK;
}

void cpu_bias_backward16(float *db, const uint16_t *dy, int N, int C, int accumulate) {
  bias_sums(db, NULL, dy, N, C, accumulate);
}

mgt_status cpu_add(void *ctx, float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    y[i] += x[i];
  return MGT_OK;
}

mgt_status cpu_dropout_forward(void *ctx, float *out, const float *x, const float *res, size_t n,
                               size_t row, const mgt_dropout *d) {
  if (d->p <= 0.0f) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
      out[i] = (res ? res[i] : 0.0f) + x[i];
    return MGT_OK;
  }
  if (n == 0) return MGT_OK;
  const uint32_t thr = mgt_dropout_threshold(d->p);
  const float scale = 1.0f / (1.0f - d->p);
  /* chunks of a sample's stream, over the samples that [first, first + n) touches */
  const uint64_t lo = d->first, hi = d->first + n, s0 = lo / row, ns = (hi - 1) / row - s0 + 1;
  const size_t nchunk = (row + CHUNK - 1) / CHUNK;
#pragma omp parallel for collapse(2) schedule(static)
  for (uint64_t s = 0; s < ns; s++)
    for (size_t c = 0; c < nchunk; c++) {
      const uint64_t start = (s0 + s) * row, a = start + c * CHUNK,
                     b = a + CHUNK < start + row ? a + CHUNK : start + row;
      const uint64_t e0 = a > lo ? a : lo, e1 = b < hi ? b : hi;
      if (e0 >= e1) continue;
      uint64_t stream = mgt_rng_dropout_stream(d->sample_base + s0 + s, d->layer, d->site);
      uint8_t keep[CHUNK];
      cpu_dropout_mask(keep, d->seed, stream, e0 - start, (size_t)(e1 - e0), thr);
      const size_t base = (size_t)(e0 - lo);
      for (size_t i = 0; i < (size_t)(e1 - e0); i++) {
        float v = keep[i] ? x[base + i] * scale : 0.0f;
        out[base + i] = (res ? res[base + i] : 0.0f) + v;
      }
    }
  return MGT_OK;
}

/* The mask applied to the gradient is the forward without a residual. */
mgt_status cpu_dropout_backward(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                                const mgt_dropout *d) {
  if (d->p <= 0.0f && dx == dout) return MGT_OK;
  return cpu_dropout_forward(ctx, dx, dout, NULL, n, row, d);
}
