#include "tests/ref/compare.h"

#include <algorithm>
#include <cmath>

namespace sm70ops::ref {

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& want) {
  ErrorStats e;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.non_finite;
      continue;
    }
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
    e.max_abs = std::max(e.max_abs, std::abs(got[i] - want[i]));
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return e;
}

}  // namespace sm70ops::ref
