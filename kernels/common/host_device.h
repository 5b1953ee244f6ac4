// SM70OPS_HOST_DEVICE marks the small pure helpers that both the kernels and the host call
// (the plugin core sizing what the kernels need, host tests compiled without CUDA).
#pragma once

#if defined(__CUDACC__)
#define SM70OPS_HOST_DEVICE __host__ __device__
#else
#define SM70OPS_HOST_DEVICE
#endif
