// Binary search: the one the kernels use to find which request, expert tile or window page an
// index falls in.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.h"

namespace sm70ops {

// The last i < n for which holds(i) is true, holds being true up to some i and false after it;
// 0 when it holds nowhere.
template <class Holds>
SM70OPS_HOST_DEVICE inline int last_true(int n, Holds holds) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (holds(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The last index i < n with sorted[i] <= value (sorted ascending); 0 when there is none.
SM70OPS_HOST_DEVICE inline int last_at_most(const int32_t *sorted, int n, int value) {
  return last_true(n, [=](int i) { return sorted[i] <= value; });
}

}  // namespace sm70ops
