/* sm70ops bench: times the ops on a CUDA GPU the plugin accepts (nvfp4_moe's runner also times
 * its one-time prepare). Checking the ops against their CPU references is the GPU tests' job:
 * tools/gpu_tests.sh run. */
#include <getopt.h>
#include <string.h>

#include "integration/cli/bench.h"
#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"

typedef int (*bench_fn)(const sm70ops_host *h, const bench_ceiling *device, const bench_options *o);

/* The attention bench times its own shapes and takes no options yet. */
static int run_qsa_attn(const sm70ops_host *h, const bench_ceiling *device,
                        const bench_options *o) {
  (void)o;
  return bench_qsa_attn(h, device);
}

typedef struct bench_entry {
  sm70ops_op op;
  bench_fn run;
} bench_entry;

static const bench_entry kBenches[] = {
    {SM70OPS_OP_QSA_INDEX, bench_qsa_index},
    {SM70OPS_OP_QSA_ATTN, run_qsa_attn},
    {SM70OPS_OP_NVFP4_MOE, bench_nvfp4_moe},
};
enum { kBenchCount = sizeof(kBenches) / sizeof(kBenches[0]) };

/* The device they run on, and the shapes they would run first: TP4 at the shortest prompt. */
enum { kDevice = 0, kTp = 4, kPage = 64 };

static int decide_and_print(const sm70ops_host *h, sm70ops_op op, const bench_options *o) {
  model_call call;
  const model_shape shape = model_shape_for(o->model, kTp, kPage);
  model_call_build(&call, &shape, op, kModelPrefillLengths[0], kDevice);
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
static int32_t report_and_run(const sm70ops_host *h, const bench_entry *benches, int32_t count,
                              const bench_options *o) {
  const sm70ops_api *api = sm70ops_host_api(h);
  sm70ops_device_info info = {.struct_size = sizeof(info)};
  char device[160] = "";
  if (api->device_info(kDevice, &info) == SM70OPS_OK) {
    snprintf(device, sizeof(device), " (%s, compute capability %d.%d)", info.name,
             info.compute_capability / 10, info.compute_capability % 10);
  }
  printf("bench: device %d%s, %s TP%d shapes at %dK:\n", kDevice, device, o->model->name, kTp,
         kModelPrefillLengths[0] / 1024);
  const bench_ceiling *ceiling = bench_ceiling_for(info.compute_capability);
  int32_t ran = 0;
  for (int32_t i = 0; i < count; ++i) {
    if (decide_and_print(h, benches[i].op, o) && benches[i].run(h, ceiling, o)) ++ran;
  }
  if (ceiling != NULL) {
    printf("floors: %s %.0f TFLOP/s, %.2f TB/s (%s); V100 column: %.0f TFLOP/s, %.2f TB/s\n",
           ceiling->device, ceiling->tflops, ceiling->tbytes_s, ceiling->source,
           bench_v100()->tflops, bench_v100()->tbytes_s);
  }
  return ran;
}

/* "Cannot run here" (exit 2) unless at least one op ran: no GPU, or every op declined. */
static int run_on_gpu(const cli_globals *globals, const bench_entry *benches, int32_t count,
                      const bench_options *o) {
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
  } else if (report_and_run(h, benches, count, o) > 0) {
    exit_code = kExitOk;
  }
  sm70ops_host_close(h);
  return exit_code;
}

/* --shapes model|v1; returns 0 on a bad option (getopt_long or this says why). */
static int parse_options(int argc, char **argv, bench_options *o) {
  static const struct option kOptions[] = {{"shapes", required_argument, NULL, 's'},
                                           {NULL, 0, NULL, 0}};
  for (int option; (option = getopt_long(argc, argv, "", kOptions, NULL)) != -1;) {
    if (option != 's') return 0;
    if (strcmp(optarg, "model") == 0) {
      o->model = &kModelQwen38FlashNext;
    } else if (strcmp(optarg, "v1") == 0) {
      o->model = &kModelV1;
    } else {
      fprintf(stderr, "sm70ops bench: --shapes is model or v1, not '%s'\n", optarg);
      return 0;
    }
  }
  return 1;
}

int cli_bench(const cli_globals *globals, int argc, char **argv) {
  bench_options o = {.model = &kModelQwen38FlashNext};
  if (!parse_options(argc, argv, &o)) return cli_usage_error();
  if (optind == argc) return run_on_gpu(globals, kBenches, kBenchCount, &o);
  for (int32_t i = 0; optind + 1 == argc && i < kBenchCount; ++i) {
    if (strcmp(argv[optind], sm70ops_host_op_name(kBenches[i].op)) == 0) {
      return run_on_gpu(globals, &kBenches[i], 1, &o);
    }
  }
  fprintf(stderr, "sm70ops bench: '%s' is not one of the benched ops\n", argv[optind]);
  return cli_usage_error();
}
