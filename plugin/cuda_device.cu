#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "plugin/cuda_device.h"

namespace {

int32_t report(cudaError_t status, const char *what, sm70_cuda_error *err) {
  err->code = static_cast<int32_t>(status);
  if (status == cudaSuccess) {
    err->message[0] = '\0';
  } else {
    snprintf(err->message, sizeof(err->message), "%s: %s (%s)", what, cudaGetErrorString(status),
             cudaGetErrorName(status));
  }
  return err->code;
}

}  // namespace

extern "C" int32_t sm70_cuda_build_version(void) { return CUDART_VERSION; }

extern "C" int32_t sm70_cuda_device_count(int32_t *count, sm70_cuda_error *err) {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  // No driver or no device is an answer ("0 devices"), not a failure of the query.
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // the runtime also records it as the last error: clear it
    *count = 0;
    return report(cudaSuccess, "", err);
  }
  *count = n;
  return report(status, "cudaGetDeviceCount", err);
}

extern "C" int32_t sm70_cuda_device_props(int32_t ordinal, sm70_cuda_props *props,
                                          sm70_cuda_error *err) {
  cudaDeviceProp p;
  cudaError_t status = cudaGetDeviceProperties(&p, ordinal);
  if (status != cudaSuccess) return report(status, "cudaGetDeviceProperties", err);
  props->compute_capability = p.major * 10 + p.minor;
  props->multiprocessors = p.multiProcessorCount;
  props->global_memory_bytes = static_cast<uint64_t>(p.totalGlobalMem);
  snprintf(props->name, sizeof(props->name), "%.95s", p.name);  // name[256] in cudaDeviceProp
  return report(cudaSuccess, "", err);
}

extern "C" int32_t sm70_cuda_compute_capability(int32_t ordinal, int32_t *cc,
                                                sm70_cuda_error *err) {
  int major = 0;
  int minor = 0;
  cudaError_t status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal);
  if (status == cudaSuccess) {
    status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal);
  }
  *cc = major * 10 + minor;
  return report(status, "cudaDeviceGetAttribute", err);
}

extern "C" int32_t sm70_cuda_smem_per_block(int32_t ordinal, uint32_t *bytes,
                                            sm70_cuda_error *err) {
  int value = 0;
  cudaError_t status =
      cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal);
  *bytes = static_cast<uint32_t>(value);
  return report(status, "cudaDeviceGetAttribute", err);
}

extern "C" int32_t sm70_cuda_enter(int32_t ordinal, int32_t *previous, sm70_cuda_error *err) {
  int current = 0;
  cudaError_t status = cudaGetDevice(&current);
  if (status != cudaSuccess) return report(status, "cudaGetDevice", err);
  *previous = current;
  if (current == ordinal) return report(cudaSuccess, "", err);
  return report(cudaSetDevice(ordinal), "cudaSetDevice", err);
}

extern "C" int32_t sm70_cuda_leave(int32_t previous, sm70_cuda_error *err) {
  int32_t ours = 0;  // entering the caller's device again leaves ours
  return sm70_cuda_enter(previous, &ours, err);
}

extern "C" void sm70_cuda_describe(int32_t code, sm70_cuda_error *err) {
  report(static_cast<cudaError_t>(code), "kernel launch", err);
}

extern "C" int32_t sm70_cuda_alloc_mapped(uint64_t bytes, void **host, void **device,
                                          sm70_cuda_error *err) {
  *host = nullptr;
  *device = nullptr;
  cudaError_t status = cudaHostAlloc(host, bytes, cudaHostAllocMapped);
  if (status != cudaSuccess) return report(status, "cudaHostAlloc", err);
  memset(*host, 0, bytes);
  status = cudaHostGetDevicePointer(device, *host, 0);
  if (status != cudaSuccess) {
    cudaFreeHost(*host);
    *host = nullptr;
  }
  return report(status, "cudaHostGetDevicePointer", err);
}

extern "C" void sm70_cuda_free_mapped(void *host) {
  if (host != nullptr) cudaFreeHost(host);
}
