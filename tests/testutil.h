/* Helpers shared by the tests: checks that count failures, comparisons against float64
   references, and a deterministic random source independent of the library's RNG. */
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int t_failures = 0, t_checks = 0;

#define T_CHECK(cond, ...)                                                                         \
  do {                                                                                             \
    t_checks++;                                                                                    \
    if (!(cond)) {                                                                                 \
      t_failures++;                                                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

#define T_OK(call)                                                                                 \
  do {                                                                                             \
    mgt_status t_st_ = (call);                                                                     \
    if (t_st_ != MGT_OK) {                                                                         \
      fprintf(stderr, "FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, t_st_);           \
      mgt_error_print(stderr);                                                                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static inline int t_report(const char *name) {
  printf("%s: %d checks, %d failures\n", name, t_checks, t_failures);
  return t_failures ? 1 : 0;
}

/* A whole file, NUL-terminated (NULL if it cannot be read); the caller frees it. */
static inline char *t_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (n < 0 || fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
  b[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* splitmix64: test inputs that do not come from the code under test */
static uint64_t t_rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t t_next(void) {
  uint64_t z = (t_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double t_uniform(void) { return (double)(t_next() >> 11) / 9007199254740992.0; }
static inline float t_randn(void) {
  double u1 = t_uniform() + 1e-300, u2 = t_uniform();
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline void t_fill(float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++)
    x[i] = scale * t_randn();
}

/* Largest violation of |x - ref| <= atol + rtol |ref| as a ratio (<= 1 passes). */
static inline double t_worst(const float *x, const double *ref, size_t n, double atol, double rtol,
                             size_t *where) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double diff = fabs((double)x[i] - ref[i]);
    double err = diff == 0.0 ? 0.0 : diff / (atol + rtol * fabs(ref[i]));
    if (!(err <= worst)) { /* NaN counts as worst */
      worst = isnan(err) ? INFINITY : err;
      if (where) *where = i;
    }
  }
  return worst;
}

#define T_CLOSE(name, x, ref, n, atol, rtol)                                                       \
  do {                                                                                             \
    size_t t_at_ = 0;                                                                              \
    double t_w_ = t_worst((x), (ref), (n), (atol), (rtol), &t_at_);                                \
    T_CHECK(t_w_ <= 1.0, "%s: element %zu is %.9g, reference %.9g (tolerance ratio %.3g)", (name), \
            t_at_, (double)(x)[t_at_], (ref)[t_at_], t_w_);                                        \
  } while (0)
