/* Finding and opening the plugin, and small helpers every subcommand uses. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/cli/cli.h"

/* Where a build puts the plugin relative to this program: the same directory (an install), or
 * two up (bazel-bin/integration/cli/sm70ops next to bazel-bin/libsm70ops.so). */
static const char *const kNextToProgram[] = {"libsm70ops.so", "../../libsm70ops.so"};

/* --library, else $SM70OPS_LIBRARY (the loader reads it), else a plugin next to this program,
 * else NULL: the dynamic loader's search. */
static const char *find_library(const cli_globals *g, char *path, size_t path_bytes) {
  if (g->library != NULL) return g->library;
  const char *env = getenv(SM70OPS_HOST_LIBRARY_ENV);
  if (env != NULL && env[0] != '\0') return NULL;
  char program[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", program, sizeof(program) - 1);
  if (n <= 0) return NULL;
  program[n] = '\0';
  *strrchr(program, '/') = '\0'; /* the kernel gives an absolute path: a '/' is there */
  for (size_t i = 0; i < sizeof(kNextToProgram) / sizeof(kNextToProgram[0]); ++i) {
    int length = snprintf(path, path_bytes, "%s/%s", program, kNextToProgram[i]);
    if ((size_t)length < path_bytes && access(path, R_OK) == 0) return path;
  }
  return NULL;
}

static void log_to_stderr(void *user_data, sm70ops_log_level level, const char *message) {
  (void)user_data;
  static const char *const kLevels[] = {"error", "warn", "info", "debug"};
  const char *name =
      level >= SM70OPS_LOG_ERROR && level <= SM70OPS_LOG_DEBUG ? kLevels[level] : "log";
  fprintf(stderr, "[%s] %s\n", name, message);
}

/* Slots the loader does not need but the CLI calls. The loader checked that the table reaches
 * execute, the last ABI 1.0 slot, so these 1.0 slots lie within it; NULL means not implemented. */
static int has_cli_slots(const sm70ops_api *api) {
  if (api->get_identity != NULL && api->device_count != NULL && api->device_info != NULL) return 1;
  fprintf(stderr, "sm70ops: the plugin lacks get_identity, device_count or device_info\n");
  return 0;
}

sm70ops_host *cli_open(const cli_globals *g, int32_t device, int32_t compute_capability) {
  char path[PATH_MAX];
  const sm70ops_host_options opt = {
      .struct_size = sizeof(opt),
      .library_path = find_library(g, path, sizeof(path)),
      .device_ordinal = device,
      .compute_capability = compute_capability,
      .log_level = g->log_level,
      .log_fn = log_to_stderr,
  };
  sm70ops_host *h = NULL;
  char err[512];
  if (sm70ops_host_open(&opt, &h, err, sizeof(err)) != SM70OPS_OK) {
    fprintf(stderr, "sm70ops: %s\n", err);
    return NULL;
  }
  if (!has_cli_slots(sm70ops_host_api(h))) {
    sm70ops_host_close(h);
    return NULL;
  }
  return h;
}

int cli_parse_int(const char *text, int32_t min, int32_t max, int32_t *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) return 0;
  *out = (int32_t)value;
  return 1;
}

void cli_format_bytes(uint64_t bytes, char *out, size_t out_bytes) {
  static const char *const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(out, out_bytes, "%llu B", (unsigned long long)bytes);
    return;
  }
  double value = (double)bytes / 1024;
  size_t unit = 0;
  for (; value >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0]); ++unit) value /= 1024;
  snprintf(out, out_bytes, "%.1f %s", value, kUnits[unit]);
}
