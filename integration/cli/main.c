/* sm70ops: inspect the plugin and plan with it. Global options, then one subcommand. */
#include <getopt.h>
#include <string.h>

#include "integration/cli/cli.h"

static const char kUsage[] =
    "usage: sm70ops [--library PATH] [-v] COMMAND [ARGS]\n"
    "\n"
    "Inspects libsm70ops.so and asks its capability check about the model's shapes.\n"
    "\n"
    "commands:\n"
    "  info        plugin path, identity, ABI, CUDA devices and whether the plugin takes each\n"
    "  check [--cc N] [--tp N] [--page P] [--device N]\n"
    "              the plugin's decision for every op on the served model's per-rank shapes at\n"
    "              each TP size, page size and prompt length of the plan (the last chunk of\n"
    "              each prompt), which integration/python/sm70ops/models.txt gives and this\n"
    "              program embeds; \"all\" marks a value that does not change the op's\n"
    "              descriptor\n"
    "                --cc N      plan for compute capability N (70: V100) without asking CUDA\n"
    "                --tp N      only this tensor parallelism, one of the plan's (default: all)\n"
    "                --page P    only this KV page size, one of the plan's (default: all)\n"
    "                --device N  CUDA device ordinal (default 0)\n"
    "\n"
    "Benchmarks and the demo are the Python package's: python3 -m sm70ops bench|demo\n"
    "(integration/python).\n"
    "\n"
    "global options:\n"
    "  --library PATH  the plugin to load. Default: $SM70OPS_LIBRARY, else libsm70ops.so in this\n"
    "                  program's directory or two above it (bazel-bin), else the dynamic\n"
    "                  loader's search path\n"
    "  -v, --verbose   log the plugin's settings and decisions to stderr\n"
    "  -h, --help      print this text\n"
    "\n"
    "exit codes:\n"
    "  0   done (check: the table printed, whatever the decisions)\n"
    "  1   the plugin could not be loaded or queried, or the embedded models.txt is broken\n"
    "  64  usage error\n";

typedef struct command {
  const char *name;
  cli_command_fn run;
} command;

static const command kCommands[] = {
    {"info", cli_info},
    {"check", cli_check},
};

int cli_usage_error(void) {
  fputs(kUsage, stderr);
  return kExitUsage;
}

static const command *find_command(const char *name) {
  for (size_t i = 0; i < sizeof(kCommands) / sizeof(kCommands[0]); ++i) {
    if (strcmp(kCommands[i].name, name) == 0) return &kCommands[i];
  }
  return NULL;
}

/* Returns -1 when the command should run, else the exit code. "+" stops at the command name. */
static int parse_globals(int argc, char **argv, cli_globals *globals) {
  static const struct option kOptions[] = {{"library", required_argument, NULL, 'l'},
                                           {"verbose", no_argument, NULL, 'v'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  for (int option; (option = getopt_long(argc, argv, "+vh", kOptions, NULL)) != -1;) {
    if (option == 'l') {
      globals->library = optarg;
    } else if (option == 'v') {
      globals->log_level = SM70OPS_LOG_DEBUG;
    } else if (option == 'h') {
      fputs(kUsage, stdout);
      return kExitOk;
    } else {
      return cli_usage_error();
    }
  }
  if (optind < argc) return -1;
  fprintf(stderr, "sm70ops: no command given\n");
  return cli_usage_error();
}

int main(int argc, char **argv) {
  cli_globals globals = {.library = NULL, .log_level = SM70OPS_LOG_ERROR};
  int exit_code = parse_globals(argc, argv, &globals);
  if (exit_code >= 0) return exit_code;
  const command *cmd = find_command(argv[optind]);
  if (cmd == NULL) {
    fprintf(stderr, "sm70ops: unknown command '%s'\n", argv[optind]);
    return cli_usage_error();
  }
  int first = optind;
  optind = 0; /* glibc: 0 makes the command's own getopt_long start afresh */
  return cmd->run(&globals, argc - first, argv + first);
}
