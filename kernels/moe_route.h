/* Private inline routing of one token, shared by the CPU kernels (kernels/cpu/moe.c) and the CUDA
   kernels (kernels/cuda/moe.cu), so that both backends choose the same experts with the same
   arithmetic (include/mgt/backend.h: moe_route, moe_route_backward). */
#pragma once

#include <math.h>
#include <stdint.h>

#include "mgt/backend.h"

#ifdef __CUDACC__
#define MGT_HD __host__ __device__
#else
#define MGT_HD
#endif

/* The k largest of v + bias (E each; bias may be NULL), the lower index first among equal
   values, in decreasing order. */
MGT_HD static inline void mgt_moe_top_k(const float *v, const float *bias, int E, int k,
                                        int32_t *idx) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int i = 0; i < j; i++)
        taken |= idx[i] == e;
      if (!taken && (best < 0 || (bias ? v[e] + bias[e] > v[best] + bias[best] : v[e] > v[best])))
        best = e;
    }
    idx[j] = best;
  }
}

MGT_HD static inline float mgt_moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One token: logits z (E) to it, wt (k), p (E), *lse. */
MGT_HD static inline void mgt_moe_route_row(const float *z, int E, int k, int score, int pre,
                                            float scale, const float *bias, int32_t *it, float *wt,
                                            float *p, float *lse) {
  float mx = z[0];
  for (int e = 1; e < E; e++)
    mx = fmaxf(mx, z[e]);
  float s = 0.0f;
  for (int e = 0; e < E; e++)
    s += expf(z[e] - mx);
  *lse = mx + logf(s);
  if (score == MGT_MOE_SOFTMAX) {
    for (int e = 0; e < E; e++) /* the load-balancing loss's scores */
      p[e] = expf(z[e] - mx) / s;
    mgt_moe_top_k(pre ? p : z, NULL, E, k, it);
    if (pre) {
      for (int j = 0; j < k; j++)
        wt[j] = p[it[j]];
    } else { /* the softmax over the chosen logits */
      float m2 = z[it[0]], s2 = 0.0f;
      for (int j = 0; j < k; j++)
        s2 += expf(z[it[j]] - m2);
      for (int j = 0; j < k; j++)
        wt[j] = expf(z[it[j]] - m2) / s2;
    }
  } else {
    float sum = 0.0f;
    for (int e = 0; e < E; e++)
      p[e] = mgt_moe_sigmoid(z[e]), sum += p[e];
    mgt_moe_top_k(p, bias, E, k, it); /* the bias chooses, never weighs (aux-loss-free) */
    float chosen = 0.0f;
    for (int j = 0; j < k; j++)
      wt[j] = p[it[j]], chosen += wt[j];
    if (k > 1)
      for (int j = 0; j < k; j++)
        wt[j] /= chosen + 1e-20f;
    for (int e = 0; e < E; e++) /* divided by their sum for the load-balancing loss */
      p[e] /= sum + 1e-20f;
  }
  if (scale != 0.0f)
    for (int j = 0; j < k; j++)
      wt[j] *= scale;
}

/* Its backward for one token into d (E): the gradient of dwt (k, may be NULL), of aux (E, may be
   NULL) as the gradient of p, and of zc lse^2. */
MGT_HD static inline void mgt_moe_route_backward_row(float *d, const float *dwt, const float *z,
                                                     const int32_t *it, const float *wt,
                                                     const float *p, float lse, int E, int k,
                                                     int score, int pre, float scale,
                                                     const float *aux, float zc) {
  const float sc = scale != 0.0f ? scale : 1.0f;
  for (int e = 0; e < E; e++)
    d[e] = 0.0f;
  if (score == MGT_MOE_SOFTMAX) { /* d holds the gradient of softmax(z) over all first */
    float ps = 0.0f;
    if (dwt && pre)
      for (int j = 0; j < k; j++)
        d[it[j]] += sc * dwt[j];
    if (aux)
      for (int e = 0; e < E; e++)
        d[e] += aux[e];
    for (int e = 0; e < E; e++)
      ps += p[e] * d[e];
    for (int e = 0; e < E; e++)
      d[e] = p[e] * (d[e] - ps);
    if (dwt && !pre) { /* the softmax over the chosen: u = w / scale, its gradient scale dw */
      float us = 0.0f;
      for (int j = 0; j < k; j++)
        us += wt[j] / sc * (sc * dwt[j]);
      for (int j = 0; j < k; j++)
        d[it[j]] += wt[j] / sc * (sc * dwt[j] - us);
    }
  } else { /* d holds the gradient of the sigmoids first */
    float sum = 0.0f;
    for (int e = 0; e < E; e++)
      sum += mgt_moe_sigmoid(z[e]);
    if (aux) { /* p = s / (sum s + eps) */
      float gp = 0.0f;
      for (int e = 0; e < E; e++)
        gp += aux[e] * p[e];
      for (int e = 0; e < E; e++)
        d[e] += (aux[e] - gp) / (sum + 1e-20f);
    }
    if (dwt && k > 1) { /* w = scale c / (sum c + eps) */
      float cs = 0.0f, g = 0.0f;
      for (int j = 0; j < k; j++) {
        const float c = mgt_moe_sigmoid(z[it[j]]);
        cs += c, g += dwt[j] * c;
      }
      const float S = cs + 1e-20f;
      for (int j = 0; j < k; j++)
        d[it[j]] += sc * (dwt[j] / S - g / (S * S));
    } else if (dwt) {
      d[it[0]] += sc * dwt[0];
    }
    for (int e = 0; e < E; e++) {
      const float s = mgt_moe_sigmoid(z[e]);
      d[e] = d[e] * s * (1.0f - s);
    }
  }
  if (zc != 0.0f) { /* the z-loss zc lse^2, through the log-sum-exp */
    const float f = 2.0f * zc * lse;
    for (int e = 0; e < E; e++)
      d[e] += f * expf(z[e] - lse);
  }
}
