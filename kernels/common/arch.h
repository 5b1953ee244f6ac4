/* What each compute capability gives a kernel's blocks: the one place these facts live. The
 * kernels size their blocks for the V100's (static_asserts against SM70_V100_SMEM_BYTES); the
 * plugin core plans a context that is given a compute capability, and has no device to ask, to
 * that capability's limit (SM70_ARCH_SMEM_PER_BLOCK). */
#ifndef SM70OPS_KERNELS_COMMON_ARCH_H_
#define SM70OPS_KERNELS_COMMON_ARCH_H_

/* A V100 SM's shared memory at the largest carveout, which is also the most one block may use. */
#define SM70_V100_SMEM_KIB 96
#define SM70_V100_SMEM_BYTES (SM70_V100_SMEM_KIB * 1024)

/* X(compute capability, the most shared memory one block may opt into in KiB), as CUDA's
 * cudaDevAttrMaxSharedMemoryPerBlockOptin reports it. Every architecture gives 48 KiB without
 * opting in, which is what one not listed is planned for. */
/* clang-format off: one architecture a line (clang-format packs the table differently each pass) */
#define SM70_ARCH_SMEM_PER_BLOCK(X) \
  X(70, SM70_V100_SMEM_KIB)         \
  X(72, 96)                         \
  X(75, 64)                         \
  X(80, 163)                        \
  X(86, 99)                         \
  X(87, 163)                        \
  X(89, 99)                         \
  X(90, 227)                        \
  X(100, 227)                       \
  X(103, 227)                       \
  X(120, 99)                        \
  X(121, 99)
/* clang-format on */
#define SM70_ARCH_DEFAULT_SMEM_PER_BLOCK_KIB 48

#endif /* SM70OPS_KERNELS_COMMON_ARCH_H_ */
