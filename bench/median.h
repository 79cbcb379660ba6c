/* The median of a benchmark's timings (sorts v). */
#pragma once

#include <stdlib.h>

static int median_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, median_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
