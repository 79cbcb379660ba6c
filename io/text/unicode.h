/* Private to io/: membership in a sorted table of code point ranges (the generated Unicode
   tables of io/text/unicode_tables.h and io/text/unicode_bert.h). */
#pragma once

#include <stddef.h>
#include <stdint.h>

static inline int mgt_in_ranges(const uint32_t (*tab)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < tab[mid][0])
      hi = mid;
    else if (cp > tab[mid][1])
      lo = mid + 1;
    else
      return 1;
  }
  return 0;
}

/* Unicode's canonical ordering (UAX #15): each run of non-starters (class > 0) of u[0..n)
   sorted by combining class, equal classes kept in order. Linear: runs of more than 16 by a
   counting sort through tmp (room for n), where the usual neighbour swaps would be quadratic
   in the run's length (a line of marks took minutes). cls gives a code point's class. */
static inline void mgt_canonical_order(uint32_t *u, size_t n, int (*cls)(uint32_t), uint32_t *tmp) {
  for (size_t a = 0; a < n;) {
    if (!cls(u[a])) {
      a++;
      continue;
    }
    size_t b = a + 1;
    while (b < n && cls(u[b]))
      b++;
    if (b - a <= 16) {
      for (size_t i = a + 1; i < b; i++) {
        const uint32_t c = u[i];
        const int k = cls(c);
        size_t j = i;
        for (; j > a && cls(u[j - 1]) > k; j--)
          u[j] = u[j - 1];
        u[j] = c;
      }
    } else {
      size_t at[257] = {0};
      for (size_t i = a; i < b; i++)
        at[cls(u[i]) + 1]++;
      for (int k = 1; k < 257; k++)
        at[k] += at[k - 1];
      for (size_t i = a; i < b; i++)
        tmp[at[cls(u[i])]++] = u[i];
      for (size_t i = a; i < b; i++)
        u[i] = tmp[i - a];
    }
    a = b;
  }
}
