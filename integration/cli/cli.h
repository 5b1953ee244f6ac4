/* What the sm70ops subcommands share: exit codes, global options, opening the plugin. */
#ifndef SM70OPS_INTEGRATION_CLI_CLI_H_
#define SM70OPS_INTEGRATION_CLI_CLI_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "integration/host/sm70ops_host.h"

/* Documented in the usage text (main.c). */
enum {
  kExitOk = 0,
  kExitError = 1,  /* the plugin could not be loaded or queried, or the embedded models.txt is
                      broken (the tool printed why) */
  kExitUsage = 64, /* bad command line (sysexits.h EX_USAGE) */
};

typedef struct cli_globals {
  const char *library;         /* --library, or NULL: see cli_open */
  sm70ops_log_level log_level; /* of the loader and plugin messages on stderr */
} cli_globals;

/* A subcommand: argv[0] is its name, options follow. Returns an exit code. */
typedef int (*cli_command_fn)(const cli_globals *globals, int argc, char **argv);

int cli_info(const cli_globals *globals, int argc, char **argv);
int cli_check(const cli_globals *globals, int argc, char **argv);

/* Prints the usage text to stderr and returns kExitUsage. */
int cli_usage_error(void);

/* Opens the plugin (see the usage text for where it is looked for) with a context on `device`,
 * compute_capability 0 meaning "ask CUDA". On failure prints why to stderr and returns NULL. */
sm70ops_host *cli_open(const cli_globals *globals, int32_t device, int32_t compute_capability);

/* Parses a decimal integer in [min, max]; 0 if `text` is not one. */
int cli_parse_int(const char *text, int32_t min, int32_t max, int32_t *out);

/* "0 B", "640 B", "12.0 MiB", "31.7 GiB". */
void cli_format_bytes(uint64_t bytes, char *out, size_t out_bytes);

#endif /* SM70OPS_INTEGRATION_CLI_CLI_H_ */
