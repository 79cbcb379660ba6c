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
