// Binary search over an ascending int32 array in device (or shared) memory: the one the kernels
// use to find which request, expert tile or window page an index falls in.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.h"

namespace sm70ops {

// The last index i < n with sorted[i] <= value (sorted ascending); 0 when there is none.
SM70OPS_HOST_DEVICE inline int last_at_most(const int32_t *sorted, int n, int value) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (sorted[mid] <= value)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace sm70ops
