/* sm70ops verify and sm70ops bench: both run ops on a CUDA GPU the plugin accepts. verify is not
 * in the CLI yet (tools/gpu_tests.sh runs the GPU tests); bench times the ops that have a runner
 * and says why it cannot time the others. */
#include <string.h>

#include "integration/cli/bench.h"
#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"

typedef int (*bench_fn)(const sm70ops_host *h, const bench_ceiling *device);

static const struct {
  sm70ops_op op;
  bench_fn run;
} kBenches[] = {
    {SM70OPS_OP_QSA_INDEX, bench_qsa_index},
    {SM70OPS_OP_QSA_ATTN, bench_qsa_attn},
    {SM70OPS_OP_NVFP4_MOE, bench_nvfp4_moe},
};

static bench_fn bench_for(sm70ops_op op) {
  for (size_t i = 0; i < sizeof(kBenches) / sizeof(kBenches[0]); ++i) {
    if (kBenches[i].op == op) return kBenches[i].run;
  }
  return NULL;
}

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

/* Prints the device and each op's decision at the model shape; runs the accepted ops' benches
 * when `benches` is set. Returns how many ops ran. */
static int32_t report_and_run(const sm70ops_host *h, const char *command, const sm70ops_op *ops,
                              int32_t op_count, int32_t benches) {
  const sm70ops_api *api = sm70ops_host_api(h);
  sm70ops_device_info info = {.struct_size = sizeof(info)};
  char device[160] = "";
  if (api->device_info(kDevice, &info) == SM70OPS_OK) {
    snprintf(device, sizeof(device), " (%s, compute capability %d.%d)", info.name,
             info.compute_capability / 10, info.compute_capability % 10);
  }
  printf("%s: device %d%s, TP%d shapes at %dK:\n", command, kDevice, device, kTp,
         kModelPrefillLengths[0] / 1024);
  const bench_ceiling *ceiling = bench_ceiling_for(info.compute_capability);
  int32_t ran = 0;
  for (int32_t i = 0; i < op_count; ++i) {
    bench_fn run = benches ? bench_for(ops[i]) : NULL;
    if (!decide_and_print(h, ops[i])) continue;
    if (run == NULL) {
      printf("  %-18s no %s runner in this build\n", sm70ops_host_op_name(ops[i]), command);
    } else if (run(h, ceiling)) {
      ++ran;
    }
  }
  if (benches && ceiling != NULL) {
    printf("floors: %s %.0f TFLOP/s, %.2f TB/s (%s); V100 column: %.0f TFLOP/s, %.2f TB/s\n",
           ceiling->device, ceiling->tflops, ceiling->tbytes_s, ceiling->source,
           bench_v100()->tflops, bench_v100()->tbytes_s);
  }
  return ran;
}

/* "Cannot run here" (exit 2) unless at least one op ran: no GPU, every op declined, or no runner
 * for the accepted ones. */
static int run_on_gpu(const cli_globals *globals, const char *command, const sm70ops_op *ops,
                      int32_t op_count) {
  sm70ops_host *h = cli_open(globals, kDevice, 0);
  if (h == NULL) return kExitError;
  const sm70ops_api *api = sm70ops_host_api(h);
  int32_t devices = 0;
  sm70ops_status status = api->device_count(&devices);
  int exit_code = kExitCannotRun;
  if (status != SM70OPS_OK) {
    fprintf(stderr, "%s: device_count: %s: %s\n", command, api->status_name(status),
            api->last_error());
    exit_code = kExitError;
  } else if (devices == 0) {
    printf("%s: needs a CUDA GPU (none found)\n", command);
  } else if (report_and_run(h, command, ops, op_count, strcmp(command, "bench") == 0) > 0) {
    exit_code = kExitOk;
  }
  sm70ops_host_close(h);
  return exit_code;
}

int cli_verify(const cli_globals *globals, int argc, char **argv) {
  if (argc > 1) {
    fprintf(stderr, "sm70ops verify: unexpected argument '%s'\n", argv[1]);
    return cli_usage_error();
  }
  return run_on_gpu(globals, "verify", kModelOps, kModelOpCount);
}

int cli_bench(const cli_globals *globals, int argc, char **argv) {
  if (argc == 1) return run_on_gpu(globals, "bench", kModelOps, kModelOpCount);
  for (int32_t i = 0; argc == 2 && i < kModelOpCount; ++i) {
    if (strcmp(argv[1], sm70ops_host_op_name(kModelOps[i])) == 0) {
      return run_on_gpu(globals, "bench", &kModelOps[i], 1);
    }
  }
  fprintf(stderr, "sm70ops bench: '%s' is not one op name\n", argv[1]);
  return cli_usage_error();
}
