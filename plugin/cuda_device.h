/* The CUDA runtime calls the C plugin core needs, behind a C interface so that plugin/ includes no
 * CUDA header. Each returns 0 on success, or a CUDA error code with its message in `err`. */
#ifndef SM70OPS_PLUGIN_CUDA_DEVICE_H_
#define SM70OPS_PLUGIN_CUDA_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sm70_cuda_error {
  int32_t code; /* cudaError_t; 0 = success */
  char message[160];
} sm70_cuda_error;

/* CUDA runtime version this library was compiled with (CUDART_VERSION). No CUDA call. */
int32_t sm70_cuda_build_version(void);

/* Number of devices; a machine without a driver or device gives 0 and success. */
int32_t sm70_cuda_device_count(int32_t *count, sm70_cuda_error *err);

typedef struct sm70_cuda_props {
  int32_t compute_capability; /* major*10+minor */
  int32_t multiprocessors;
  uint64_t global_memory_bytes;
  char name[96];
} sm70_cuda_props;

int32_t sm70_cuda_device_props(int32_t ordinal, sm70_cuda_props *props, sm70_cuda_error *err);

/* Compute capability (major*10+minor) from device attributes: cheap enough for every execute. */
int32_t sm70_cuda_compute_capability(int32_t ordinal, int32_t *cc, sm70_cuda_error *err);

/* The most shared memory one block may opt into, in bytes (cudaDevAttrMaxSharedMemoryPerBlockOptin,
 * CUDA's sharedMemPerBlockOptin), from a device attribute like the compute capability. */
int32_t sm70_cuda_smem_per_block(int32_t ordinal, uint32_t *bytes, sm70_cuda_error *err);

/* Makes `ordinal` current and remembers the caller's device in *previous, for sm70_cuda_leave. */
int32_t sm70_cuda_enter(int32_t ordinal, int32_t *previous, sm70_cuda_error *err);
int32_t sm70_cuda_leave(int32_t previous, sm70_cuda_error *err);

/* Fills `err` with the runtime's name and text for a cudaError_t value. */
void sm70_cuda_describe(int32_t code, sm70_cuda_error *err);

/* Host memory mapped into the device (checked mode's error record): *host and *device address
 * the same zeroed bytes. */
int32_t sm70_cuda_alloc_mapped(uint64_t bytes, void **host, void **device, sm70_cuda_error *err);
void sm70_cuda_free_mapped(void *host);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_PLUGIN_CUDA_DEVICE_H_ */
