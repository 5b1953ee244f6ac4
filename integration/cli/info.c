/* sm70ops info: which plugin loaded, what it is, and which CUDA devices it would serve. */
#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"

/* A context given compute capability 70 makes no CUDA call, so identity and ABI print even where
 * the CUDA runtime is broken; the devices are then asked one by one. */
enum { kPlanningCapability = 70 };

static void print_version(const char *label, uint32_t major, uint32_t minor) {
  printf("%-14s%u.%u\n", label, major, minor);
}

static int print_identity(const sm70ops_host *h) {
  const sm70ops_api *api = sm70ops_host_api(h);
  sm70ops_identity id = {.struct_size = sizeof(id)};
  sm70ops_status status = api->get_identity(&id);
  if (status != SM70OPS_OK) {
    fprintf(stderr, "sm70ops info: get_identity: %s: %s\n", api->status_name(status),
            api->last_error());
    return 0;
  }
  printf("%-14s%s\n", "plugin:", sm70ops_host_library_path(h));
  printf("%-14s%s %u.%u.%u\n", "name:", id.name, id.version_major, id.version_minor,
         id.version_patch);
  printf("%-14s%s\n", "git revision:", id.git_revision);
  printf("%-14splugin %u.%u, host %d.%d, negotiated %d.%u\n", "ABI:", id.abi_major, id.abi_minor,
         SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, SM70OPS_ABI_MAJOR, sm70ops_host_abi_minor(h));
  /* DLPACK_VERSION is 100*major + 10*minor before DLPack 1.0; CUDA's is 1000*major + 10*minor. */
  print_version("DLPack:", id.dlpack_version / 100, id.dlpack_version % 100 / 10);
  print_version("CUDA build:", id.cuda_version / 1000, id.cuda_version % 1000 / 10);
  printf("%-14s%s\n", "SASS:", id.sm_list);
  return 1;
}

/* The arch gate runs before any shape check, so any reason but these means it let the device in. */
static int print_arch_gate(const cli_globals *globals, int32_t device) {
  const model_table *t = model_table_get();
  if (t == NULL) return 0;
  sm70ops_host *h = cli_open(globals, device, 0);
  if (h == NULL) return 0;
  const model_shape *served = model_shapes_of(t, "model");
  const model_shape tp4 = model_shape_for(served, 4, served->page_size);
  model_call call;
  const sm70ops_op op = SM70OPS_OP_QSA_ATTN;
  model_call_build(&call, &tp4, op, t->prefill_lengths.values[0], device);
  sm70ops_decision d;
  sm70ops_host_decide(h, op, &call.desc.args, &d);
  const char *reason = sm70ops_host_api(h)->reason_name(d.reason);
  if (d.reason == SM70OPS_REASON_ARCH || d.reason == SM70OPS_REASON_NO_DEVICE) {
    printf("  arch gate:  declines (%s: %s)\n", reason, d.message);
  } else if (d.reason == SM70OPS_REASON_PLUGIN_DISABLED || d.reason == SM70OPS_REASON_OP_DISABLED) {
    printf("  arch gate:  not reached (%s: %s)\n", reason, d.message);
  } else {
    printf("  arch gate:  accepts (%s at %s: %s)\n", sm70ops_host_op_name(op), call.work, reason);
  }
  sm70ops_host_close(h);
  return 1;
}

static int print_device(const cli_globals *globals, const sm70ops_api *api, int32_t device) {
  sm70ops_device_info info = {.struct_size = sizeof(info)};
  sm70ops_status status = api->device_info(device, &info);
  if (status != SM70OPS_OK) {
    fprintf(stderr, "sm70ops info: device %d: %s: %s\n", device, api->status_name(status),
            api->last_error());
    return 0;
  }
  char memory[32];
  cli_format_bytes(info.global_memory_bytes, memory, sizeof(memory));
  printf("device %d:     %s, compute capability %d.%d, %d SMs, %s\n", device, info.name,
         info.compute_capability / 10, info.compute_capability % 10, info.multiprocessors, memory);
  return print_arch_gate(globals, device);
}

static int print_devices(const cli_globals *globals, const sm70ops_api *api) {
  int32_t count = 0;
  sm70ops_status status = api->device_count(&count);
  if (status != SM70OPS_OK) {
    fprintf(stderr, "sm70ops info: device_count: %s: %s\n", api->status_name(status),
            api->last_error());
    return 0;
  }
  if (count == 0) {
    printf("%-14sno CUDA device\n", "devices:");
    return 1;
  }
  printf("%-14s%d\n", "devices:", count);
  int ok = 1;
  for (int32_t device = 0; device < count; ++device) ok &= print_device(globals, api, device);
  return ok;
}

int cli_info(const cli_globals *globals, int argc, char **argv) {
  if (argc > 1) {
    fprintf(stderr, "sm70ops info: unexpected argument '%s'\n", argv[1]);
    return cli_usage_error();
  }
  sm70ops_host *h = cli_open(globals, 0, kPlanningCapability);
  if (h == NULL) return kExitError;
  int ok = print_identity(h) && print_devices(globals, sm70ops_host_api(h));
  sm70ops_host_close(h);
  return ok ? kExitOk : kExitError;
}
