/* Helpers of the CUDA conformance tests: device buffers from host data and back, random
   inputs, and the GPU result against the CPU's on the result's scale. */
#pragma once

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "testutil.h"

static mgt_backend *cpu, *gpu;

static void *dev(const void *host, size_t bytes) {
  void *d = NULL;
  T_OK(mgt_be_alloc(gpu, bytes, "test", &d));
  if (host) T_OK(mgt_be_upload(gpu, d, host, bytes));
  return d;
}

static float *fetch(const void *d, size_t n) {
  float *h = malloc(n * sizeof(float) + 1);
  T_OK(mgt_be_download(gpu, h, d, n * sizeof(float)));
  return h;
}

static float *rnd(size_t n, float scale) {
  float *x = malloc(n * sizeof(float) + 1);
  t_fill(x, n, scale);
  return x;
}

static float *dup(const float *x, size_t n) {
  float *y = malloc(n * sizeof(float) + 1);
  memcpy(y, x, n * sizeof(float));
  return y;
}

/* The GPU result d (device, n floats) against the CPU result ref: |d - ref| <= tol * scale,
   scale the largest |ref| (at least 1e-30). */
static void same(const char *what, const void *d, const float *ref, size_t n, double tol) {
  float *g = fetch(d, n);
  double scale = 1e-30, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)g[i] - ref[i]);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = i;
  }
  T_CHECK(worst <= tol * scale, "%s: element %zu is %.9g on the GPU, %.9g on the CPU (scale %.3g)",
          what, at, n ? g[at] : 0.0, n ? ref[at] : 0.0, scale);
  free(g);
}
