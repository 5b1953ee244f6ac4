/* sm70ops check: the plugin's decision for every op at the model's prefill shapes. */
#include <getopt.h>

#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"
#include "integration/cli/table.h"

typedef struct check_options {
  int32_t compute_capability; /* 0: the plugin asks CUDA */
  int32_t tp;
  int32_t device;
} check_options;

static const char *const kHeader[] = {"op",    "prefill",   "rows x keys", "decision",
                                      "route", "workspace", "reason",      "message"};
enum { kColumns = sizeof(kHeader) / sizeof(kHeader[0]) };

/* The decisions so far, for the summary line. */
typedef struct tally {
  int32_t count;
  int32_t accepted;
  int32_t declined;
  sm70ops_reason declined_reasons[kTableMaxRows];
} tally;

static int parse_value(int option, const char *text, check_options *o) {
  switch (option) {
    case 'c':
      return cli_parse_int(text, 1, 999, &o->compute_capability);
    case 't':
      return cli_parse_int(text, 1, 1024, &o->tp) && model_shape_for_tp(o->tp) != NULL;
    case 'd':
      return cli_parse_int(text, 0, 1023, &o->device);
  }
  return 0;
}

static int parse_options(int argc, char **argv, check_options *o) {
  static const struct option kOptions[] = {{"cc", required_argument, NULL, 'c'},
                                           {"tp", required_argument, NULL, 't'},
                                           {"device", required_argument, NULL, 'd'},
                                           {NULL, 0, NULL, 0}};
  int index = 0;
  for (int option; (option = getopt_long(argc, argv, "", kOptions, &index)) != -1;) {
    if (option == '?') return 0; /* getopt_long said why */
    if (!parse_value(option, optarg, o)) {
      fprintf(stderr, "sm70ops check: bad value '%s' for --%s\n", optarg, kOptions[index].name);
      return 0;
    }
  }
  if (optind == argc) return 1;
  fprintf(stderr, "sm70ops check: unexpected argument '%s'\n", argv[optind]);
  return 0;
}

static void tally_add(tally *t, const sm70ops_decision *d) {
  ++t->count;
  if (d->accepted) {
    ++t->accepted;
  } else if (t->declined < kTableMaxRows) {
    t->declined_reasons[t->declined++] = d->reason;
  }
}

static void check_one(sm70ops_host *h, const model_shape *m, sm70ops_op op, int32_t prefill,
                      int32_t device, cli_table *table, tally *t) {
  model_call call;
  model_call_build(&call, m, op, prefill, device);
  sm70ops_decision d;
  sm70ops_host_decide(h, op, &call.args, &d); /* on failure d is a decline saying why */
  char prefill_text[16];
  char workspace[32] = "-";
  snprintf(prefill_text, sizeof(prefill_text), "%dK", prefill / 1024);
  if (d.accepted) cli_format_bytes(d.workspace_bytes, workspace, sizeof(workspace));
  const char *cells[kColumns] = {sm70ops_host_op_name(op),
                                 prefill_text,
                                 call.work,
                                 d.accepted ? "accept" : "decline",
                                 d.accepted ? sm70ops_host_route_name(d.route) : "-",
                                 workspace,
                                 sm70ops_host_api(h)->reason_name(d.reason),
                                 d.message};
  table_add_row(table, cells);
  tally_add(t, &d);
}

/* "0 of 12 accepted: 12 declined (NOT_IMPLEMENTED 9, UNSUPPORTED_SHAPE 3)". */
static void print_summary(const sm70ops_api *api, const tally *t) {
  printf("%d of %d accepted", t->accepted, t->count);
  if (t->declined > 0) printf(": %d declined (", t->declined);
  const char *separator = "";
  for (int32_t i = 0; i < t->declined; ++i) {
    int32_t seen_before = 0, count = 0;
    for (int32_t j = 0; j < t->declined; ++j) {
      seen_before |= j < i && t->declined_reasons[j] == t->declined_reasons[i];
      count += t->declined_reasons[j] == t->declined_reasons[i];
    }
    if (seen_before) continue;
    printf("%s%s %d", separator, api->reason_name(t->declined_reasons[i]), count);
    separator = ", ";
  }
  printf("%s\n", t->declined > 0 ? ")" : "");
}

static void print_setting(const sm70ops_host *h, const check_options *o) {
  printf("plugin:  %s\n", sm70ops_host_library_path(h));
  printf("shapes:  TP%d per rank, last chunk of each prompt, one request, device %d\n", o->tp,
         o->device);
  if (o->compute_capability != 0) {
    printf("arch:    compute capability %d.%d (--cc, CUDA not asked)\n\n",
           o->compute_capability / 10, o->compute_capability % 10);
  } else {
    printf("arch:    as the CUDA runtime reports it\n\n");
  }
}

int cli_check(const cli_globals *globals, int argc, char **argv) {
  check_options o = {.tp = 4};
  if (!parse_options(argc, argv, &o)) return cli_usage_error();
  /* The plugin warns at context creation about what declines every op or what a plan cannot
   * see (no device; no code in this build for the GPU, e.g. a V100 under the default build):
   * that explains the table, so check shows it without -v. */
  cli_globals g = *globals;
  if (g.log_level < SM70OPS_LOG_WARN) g.log_level = SM70OPS_LOG_WARN;
  sm70ops_host *h = cli_open(&g, o.device, o.compute_capability);
  if (h == NULL) return kExitError;
  print_setting(h, &o);
  const model_shape *m = model_shape_for_tp(o.tp);
  cli_table table;
  table_init(&table, kHeader, kColumns);
  tally t = {0};
  for (int32_t i = 0; i < kModelOpCount; ++i) {
    for (int32_t j = 0; j < kModelPrefillCount; ++j) {
      check_one(h, m, kModelOps[i], kModelPrefillLengths[j], o.device, &table, &t);
    }
  }
  table_print(&table, stdout);
  printf("\n");
  print_summary(sm70ops_host_api(h), &t);
  sm70ops_host_close(h);
  return kExitOk;
}
