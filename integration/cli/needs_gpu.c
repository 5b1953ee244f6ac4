/* sm70ops bench: times the ops on a CUDA GPU the plugin accepts (nvfp4_moe's runner also times
 * its one-time prepare). Checking the ops against their CPU references is the GPU tests' job:
 * tools/gpu_tests.sh run. */
#include <string.h>

#include "integration/cli/bench.h"
#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"

typedef int (*bench_fn)(const sm70ops_host *h, const bench_ceiling *device);

typedef struct bench_entry {
  sm70ops_op op;
  bench_fn run;
} bench_entry;

static const bench_entry kBenches[] = {
    {SM70OPS_OP_QSA_INDEX, bench_qsa_index},
    {SM70OPS_OP_QSA_ATTN, bench_qsa_attn},
    {SM70OPS_OP_NVFP4_MOE, bench_nvfp4_moe},
};
enum { kBenchCount = sizeof(kBenches) / sizeof(kBenches[0]) };

/* The device they run on, and the shapes they would run first: TP4 at the shortest prompt. */
enum { kDevice = 0, kTp = 4 };

static int decide_and_print(const sm70ops_host *h, sm70ops_op op) {
  model_call call;
  model_call_build(&call, model_shape_for_tp(kTp), op, kModelPrefillLengths[0], kDevice);
  sm70ops_decision d;
  sm70ops_host_decide(h, op, &call.args, &d);
  if (d.accepted) {
    printf("  %-18s accepted (route %s)\n", sm70ops_host_op_name(op),
           sm70ops_host_route_name(d.route));
  } else {
    printf("  %-18s declined: %s: %s\n", sm70ops_host_op_name(op),
           sm70ops_host_api(h)->reason_name(d.reason), d.message);
  }
  return d.accepted;
}

/* Prints the device and each op's decision at the model shape, and runs the accepted ops'
 * benches. Returns how many ran. */
static int32_t report_and_run(const sm70ops_host *h, const bench_entry *benches, int32_t count) {
  const sm70ops_api *api = sm70ops_host_api(h);
  sm70ops_device_info info = {.struct_size = sizeof(info)};
  char device[160] = "";
  if (api->device_info(kDevice, &info) == SM70OPS_OK) {
    snprintf(device, sizeof(device), " (%s, compute capability %d.%d)", info.name,
             info.compute_capability / 10, info.compute_capability % 10);
  }
  printf("bench: device %d%s, TP%d shapes at %dK:\n", kDevice, device, kTp,
         kModelPrefillLengths[0] / 1024);
  const bench_ceiling *ceiling = bench_ceiling_for(info.compute_capability);
  int32_t ran = 0;
  for (int32_t i = 0; i < count; ++i) {
    if (decide_and_print(h, benches[i].op) && benches[i].run(h, ceiling)) ++ran;
  }
  if (ceiling != NULL) {
    printf("floors: %s %.0f TFLOP/s, %.2f TB/s (%s); V100 column: %.0f TFLOP/s, %.2f TB/s\n",
           ceiling->device, ceiling->tflops, ceiling->tbytes_s, ceiling->source,
           bench_v100()->tflops, bench_v100()->tbytes_s);
  }
  return ran;
}

/* "Cannot run here" (exit 2) unless at least one op ran: no GPU, or every op declined. */
static int run_on_gpu(const cli_globals *globals, const bench_entry *benches, int32_t count) {
  sm70ops_host *h = cli_open(globals, kDevice, 0);
  if (h == NULL) return kExitError;
  const sm70ops_api *api = sm70ops_host_api(h);
  int32_t devices = 0;
  sm70ops_status status = api->device_count(&devices);
  int exit_code = kExitCannotRun;
  if (status != SM70OPS_OK) {
    fprintf(stderr, "bench: device_count: %s: %s\n", api->status_name(status), api->last_error());
    exit_code = kExitError;
  } else if (devices == 0) {
    printf("bench: needs a CUDA GPU (none found)\n");
  } else if (report_and_run(h, benches, count) > 0) {
    exit_code = kExitOk;
  }
  sm70ops_host_close(h);
  return exit_code;
}

int cli_bench(const cli_globals *globals, int argc, char **argv) {
  if (argc == 1) return run_on_gpu(globals, kBenches, kBenchCount);
  for (int32_t i = 0; argc == 2 && i < kBenchCount; ++i) {
    if (strcmp(argv[1], sm70ops_host_op_name(kBenches[i].op)) == 0) {
      return run_on_gpu(globals, &kBenches[i], 1);
    }
  }
  fprintf(stderr, "sm70ops bench: '%s' is not one of the benched ops\n", argv[1]);
  return cli_usage_error();
}
