// Shared memory: the V100 budget every kernel's blocks are sized against, and what a launcher
// sets before it launches (function attributes, not stream operations: both are also safe while
// a graph is being captured).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common/arch.h"

namespace sm70ops {

constexpr int kV100SmemBytes = SM70_V100_SMEM_BYTES;

// Dynamic shared memory above the default 48 KB is opted into per kernel.
template <class Kernel>
void allow_dynamic_smem(Kernel *kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
}

// A kernel whose blocks on one SM need more shared memory than the driver's default carveout
// may reserve (several blocks per SM, or one large one) asks for the largest carveout, at the
// price of L1.
template <class Kernel>
void prefer_max_carveout(Kernel *kernel) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                       cudaSharedmemCarveoutMaxShared);
}

}  // namespace sm70ops
