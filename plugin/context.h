/* The context: device, compute capability, shared memory limit and settings, fixed at creation. */
#ifndef SM70OPS_PLUGIN_CONTEXT_H_
#define SM70OPS_PLUGIN_CONTEXT_H_

#include "abi/sm70ops.h"
#include "kernels/common/checked.h"
#include "plugin/env.h"

struct sm70ops_context {
  int32_t device_ordinal;
  int32_t compute_capability;   /* 0: no usable device (see no_device_note) */
  int32_t capability_from_host; /* 1: given in the descriptor; execute checks it on the device */
  /* The most shared memory one block may opt into (CUDA's sharedMemPerBlockOptin): read from the
   * device, or for a capability given by the host (no CUDA call) the plugin's table for it; 0
   * without a device. The one limit make_plan holds a plan's blocks to. */
  uint32_t smem_per_block;
  sm70ops_log_level log_level;
  sm70ops_log_fn log_fn;
  void *log_user_data;
  sm70_settings settings;
  /* Checked mode's error record: host and device addresses of one mapped allocation; NULL when
   * checked mode is off. Kernels write it, execute reads and clears it (atomically). */
  sm70_checked_error *checked_host;
  void *checked_device;
  char no_device_note[160];
  /* Non-empty when this build has no SASS for the real device's compute capability (e.g. a V100
   * under the default sm_75/sm_90 build): every op declines with this note. A capability given
   * by the host only plans; its context is warned at creation instead (log_device). */
  char no_code_note[160];
};

sm70ops_status sm70_context_create(const sm70ops_context_desc *desc, sm70ops_context **out);
void sm70_context_destroy(sm70ops_context *ctx);

/* printf-style logging through the host's callback; dropped when above ctx->log_level. */
void sm70_log(const sm70ops_context *ctx, sm70ops_log_level level, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* The bad index checked mode recorded since the last call, as a status and message; SM70OPS_OK
 * when there is none (or checked mode is off). Clears the record. */
sm70ops_status sm70_context_take_checked_error(const sm70ops_context *ctx);

/* 1 when ctx's compute capability is SM70 or in the SM70OPS_ALLOW_ARCH list. */
int32_t sm70_context_arch_allowed(const sm70ops_context *ctx);

#endif /* SM70OPS_PLUGIN_CONTEXT_H_ */
