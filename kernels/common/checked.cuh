// Device side of checked mode (see checked.h).
#pragma once

#include "kernels/common/checked.h"

namespace sm70ops {

// Records the first bad index; `error` is NULL when checked mode is off (the only cost then).
__device__ __forceinline__ void report_bad_index(sm70_checked_error *error, sm70_checked_kind kind,
                                                 int row, int64_t value, int64_t bound) {
  if (error == nullptr || atomicCAS(&error->kind, 0u, 0xffffffffu) != 0u) return;
  error->row = row;
  error->value = value;
  error->bound = bound;
  __threadfence_system();  // the details land before the kind the host polls
  atomicExch(&error->kind, static_cast<uint32_t>(kind));
}

}  // namespace sm70ops
