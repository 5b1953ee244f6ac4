// How far a result is from its reference, the measures the numerical gates of ops.md use.
#ifndef SM70OPS_TESTS_REF_COMPARE_H_
#define SM70OPS_TESTS_REF_COMPARE_H_

#include <cstdint>
#include <vector>

namespace sm70ops::ref {

struct ErrorStats {
  double rel_l2 = 0;       // ||got - want|| / ||want|| over the finite entries of `got`
  double max_abs = 0;      // max |got - want| over the same entries
  int64_t non_finite = 0;  // NaN or Inf entries of `got` (left out of the two above)
};

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& want);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_COMPARE_H_
