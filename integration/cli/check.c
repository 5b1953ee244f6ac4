/* sm70ops check: the plugin's decision for every op at the model's per-rank prefill shapes. */
#include <getopt.h>

#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"
#include "integration/cli/table.h"

typedef struct check_options {
  const model_table *model;   /* the shapes and the plan (models.txt) */
  int32_t compute_capability; /* 0: the plugin asks CUDA */
  int32_t tp;                 /* 0: every TP size of the plan */
  int32_t page_size;          /* 0: every page size of the plan */
  int32_t device;
} check_options;

static const char *const kHeader[] = {"op",       "TP",    "page",      "prefill", "rows x keys",
                                      "decision", "route", "workspace", "reason",  "message"};
enum { kColumns = sizeof(kHeader) / sizeof(kHeader[0]) };
_Static_assert(kTableMaxRows >= 1 + kModelMaxCases, "the table holds a header and every case");

/* The decisions so far, for the summary line. */
typedef struct tally {
  int32_t count;
  int32_t accepted;
  int32_t declined;
  sm70ops_reason declined_reasons[kTableMaxRows];
} tally;

static int one_of(int32_t value, const model_list *list) {
  for (int32_t i = 0; i < list->count; ++i) {
    if (list->values[i] == value) return 1;
  }
  return 0;
}

static int parse_value(int option, const char *text, check_options *o) {
  switch (option) {
    case 'c':
      return cli_parse_int(text, 1, 999, &o->compute_capability);
    case 't':
      return cli_parse_int(text, 1, INT32_MAX, &o->tp) && one_of(o->tp, &o->model->tp_sizes);
    case 'p':
      return cli_parse_int(text, 1, INT32_MAX, &o->page_size) &&
             one_of(o->page_size, &o->model->page_sizes);
    case 'd':
      return cli_parse_int(text, 0, 1023, &o->device);
  }
  return 0;
}

/* For --tp and --page, the values the plan (models.txt) allows: " (the plan's: 1, 2, 4, 8)". */
static void print_plan_values(int option, const model_table *model) {
  if (option != 't' && option != 'p') return;
  const model_list *list = option == 't' ? &model->tp_sizes : &model->page_sizes;
  for (int32_t i = 0; i < list->count; ++i) {
    fprintf(stderr, "%s%d", i == 0 ? " (the plan's: " : ", ", list->values[i]);
  }
  fprintf(stderr, ")");
}

static int parse_options(int argc, char **argv, check_options *o) {
  static const struct option kOptions[] = {{"cc", required_argument, NULL, 'c'},
                                           {"tp", required_argument, NULL, 't'},
                                           {"page", required_argument, NULL, 'p'},
                                           {"device", required_argument, NULL, 'd'},
                                           {NULL, 0, NULL, 0}};
  int index = 0;
  for (int option; (option = getopt_long(argc, argv, "", kOptions, &index)) != -1;) {
    if (option == '?') return 0; /* getopt_long said why */
    if (!parse_value(option, optarg, o)) {
      fprintf(stderr, "sm70ops check: bad value '%s' for --%s", optarg, kOptions[index].name);
      print_plan_values(option, o->model);
      fprintf(stderr, "\n");
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

/* A plan cell: the value ("32K" for 32768 if `kilo`, where 1024 divides it), or "all" where it
 * does not change the op's descriptor. */
static const char *plan_cell(int32_t value, int kilo, char *out, size_t out_bytes) {
  if (value == 0) return "all";
  if (kilo && value % 1024 == 0) {
    snprintf(out, out_bytes, "%dK", value / 1024);
  } else {
    snprintf(out, out_bytes, "%d", value);
  }
  return out;
}

static void check_one(sm70ops_host *h, const check_options *o, const model_case *c,
                      cli_table *table, tally *t) {
  model_call call;
  model_case_build(&call, o->model, c, o->device);
  sm70ops_decision d;
  sm70ops_host_decide(h, c->op, &call.desc.args, &d); /* on failure d is a decline saying why */
  char tp[16], page[16], prefill[16];
  char workspace[32] = "-";
  if (d.accepted) cli_format_bytes(d.workspace_bytes, workspace, sizeof(workspace));
  const char *cells[kColumns] = {sm70ops_host_op_name(c->op),
                                 plan_cell(c->tp, 0, tp, sizeof(tp)),
                                 plan_cell(c->page_size, 0, page, sizeof(page)),
                                 plan_cell(c->prefill, 1, prefill, sizeof(prefill)),
                                 call.work,
                                 d.accepted ? "accept" : "decline",
                                 d.accepted ? sm70ops_host_route_name(d.route) : "-",
                                 workspace,
                                 sm70ops_host_api(h)->reason_name(d.reason),
                                 d.message};
  table_add_row(table, cells);
  tally_add(t, &d);
}

/* "40 of 48 accepted: 8 declined (NOT_IMPLEMENTED 4, UNSUPPORTED_SHAPE 4)". */
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

/* "1, 2, 4, 8" or one value, then `last` ("- and " joins page sizes as "16- and 64"). */
static void print_list(const model_list *list, int32_t only, const char *separator,
                       const char *last) {
  if (only != 0) {
    printf("%d", only);
    return;
  }
  for (int32_t i = 0; i < list->count; ++i) {
    printf("%s%d", i == 0 ? "" : (i + 1 == list->count ? last : separator), list->values[i]);
  }
}

static void print_setting(const sm70ops_host *h, const check_options *o) {
  printf("plugin:  %s\n", sm70ops_host_library_path(h));
  printf("shapes:  %s per rank at TP ", model_shapes_of(o->model, "model")->name);
  print_list(&o->model->tp_sizes, o->tp, ", ", ", ");
  printf("; ");
  print_list(&o->model->page_sizes, o->page_size, "-, ", "- and ");
  printf("-token pages; the last chunk of each prompt, one request, device %d\n", o->device);
  if (o->compute_capability != 0) {
    printf("arch:    compute capability %d.%d (--cc, CUDA not asked)\n\n",
           o->compute_capability / 10, o->compute_capability % 10);
  } else {
    printf("arch:    as the CUDA runtime reports it\n\n");
  }
}

int cli_check(const cli_globals *globals, int argc, char **argv) {
  check_options o = {.model = model_table_get()};
  if (o.model == NULL) return kExitError;
  if (!parse_options(argc, argv, &o)) return cli_usage_error();
  /* The plugin warns at context creation about what declines every op or what a plan cannot
   * see (no device; no code in this build for the GPU, e.g. a V100 under the default build):
   * that explains the table, so check shows it without -v. */
  cli_globals g = *globals;
  if (g.log_level < SM70OPS_LOG_WARN) g.log_level = SM70OPS_LOG_WARN;
  sm70ops_host *h = cli_open(&g, o.device, o.compute_capability);
  if (h == NULL) return kExitError;
  print_setting(h, &o);
  model_case cases[kModelMaxCases];
  /* A subset of the whole plan, which model_table_get found within kModelMaxCases: never -1. */
  const int32_t count = model_plan(o.model, o.tp, o.page_size, cases);
  static cli_table table; /* 160 KB: not on the stack */
  table_init(&table, kHeader, kColumns);
  tally t = {0};
  for (int32_t i = 0; i < count; ++i) check_one(h, &o, &cases[i], &table, &t);
  table_print(&table, stdout);
  printf("\n");
  print_summary(sm70ops_host_api(h), &t);
  sm70ops_host_close(h);
  return kExitOk;
}
