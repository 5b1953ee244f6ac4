/* The function table and the one exported symbol. */
#include <stdio.h>
#include <string.h>

#include "abi/sm70ops.h"
#include "plugin/build_info.h"
#include "plugin/context.h"
#include "plugin/cuda_device.h"
#include "plugin/dispatch.h"
#include "plugin/status.h"

static sm70ops_status get_identity(sm70ops_identity *out) {
  if (out == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "get_identity: out is NULL");
  if (out->struct_size < sizeof(*out)) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "get_identity: struct_size %u < %zu",
                     out->struct_size, sizeof(*out));
  }
  sm70ops_identity id = {
      .struct_size = out->struct_size,
      .abi_major = SM70OPS_ABI_MAJOR,
      .abi_minor = SM70OPS_ABI_MINOR,
      .version_major = SM70OPS_VERSION_MAJOR,
      .version_minor = SM70OPS_VERSION_MINOR,
      .version_patch = SM70OPS_VERSION_PATCH,
      .dlpack_version = DLPACK_VERSION,
      .cuda_version = (uint32_t)sm70_cuda_build_version(),
      .name = "sm70ops",
  };
  snprintf(id.git_revision, sizeof(id.git_revision), "%s", sm70_build_git_revision);
  snprintf(id.sm_list, sizeof(id.sm_list), "%s", sm70_build_sm_list);
  memcpy(out, &id, sizeof(id));
  return sm70_ok();
}

static sm70ops_status device_count(int32_t *count) {
  if (count == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "device_count: count is NULL");
  sm70_cuda_error err;
  if (sm70_cuda_device_count(count, &err) != 0)
    return sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  return sm70_ok();
}

static sm70ops_status device_info(int32_t ordinal, sm70ops_device_info *out) {
  if (out == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "device_info: out is NULL");
  if (out->struct_size < sizeof(*out)) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "device_info: struct_size %u < %zu",
                     out->struct_size, sizeof(*out));
  }
  int32_t count = 0;
  sm70ops_status status = device_count(&count);
  if (status != SM70OPS_OK) return status;
  if (ordinal < 0 || ordinal >= count) {
    return sm70_fail(SM70OPS_ERR_NO_DEVICE, "device %d: %d CUDA devices present", ordinal, count);
  }
  sm70_cuda_props props;
  sm70_cuda_error err;
  if (sm70_cuda_device_props(ordinal, &props, &err) != 0) {
    return sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  }
  out->ordinal = ordinal;
  out->compute_capability = props.compute_capability;
  out->multiprocessors = props.multiprocessors;
  out->global_memory_bytes = props.global_memory_bytes;
  snprintf(out->name, sizeof(out->name), "%s", props.name);
  return sm70_ok();
}

static const sm70ops_api kApi = {
    .struct_size = sizeof(sm70ops_api),
    .abi_major = SM70OPS_ABI_MAJOR,
    .abi_minor = SM70OPS_ABI_MINOR,
    .status_name = sm70_status_name,
    .status_string = sm70_status_string,
    .reason_name = sm70_reason_name,
    .last_error = sm70_last_error,
    .get_identity = get_identity,
    .device_count = device_count,
    .device_info = device_info,
    .context_create = sm70_context_create,
    .context_destroy = sm70_context_destroy,
    .check = sm70_check,
    .workspace_size = sm70_workspace_size,
    .execute = sm70_execute,
};

sm70ops_status sm70ops_get_api(uint32_t host_major, uint32_t host_minor, uint32_t *negotiated_minor,
                               const sm70ops_api **api) {
  if (api == NULL || negotiated_minor == NULL) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "get_api: api or negotiated_minor is NULL");
  }
  *api = NULL;
  *negotiated_minor = 0;
  if (host_major != SM70OPS_ABI_MAJOR) {
    return sm70_fail(SM70OPS_ERR_ABI_MISMATCH, "host speaks ABI %u.%u, this plugin speaks %d.%d",
                     host_major, host_minor, SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR);
  }
  const uint32_t plugin_minor = SM70OPS_ABI_MINOR;
  *negotiated_minor = host_minor < plugin_minor ? host_minor : plugin_minor;
  *api = &kApi;
  return SM70OPS_OK; /* no sm70_ok(): the first touch of the thread-local buffer may allocate */
}
