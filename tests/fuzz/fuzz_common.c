#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strcasecmp */

#include "tests/fuzz/fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t fz_u8(fz_reader *r) {
  if (r->size == 0) return 0;
  uint8_t v = r->data[0];
  r->data++;
  r->size--;
  return v;
}

uint16_t fz_u16(fz_reader *r) { return (uint16_t)(fz_u8(r) | (uint16_t)fz_u8(r) << 8); }
uint32_t fz_u32(fz_reader *r) { return fz_u16(r) | (uint32_t)fz_u16(r) << 16; }
uint64_t fz_u64(fz_reader *r) { return fz_u32(r) | (uint64_t)fz_u32(r) << 32; }

enum { kArenaSlots = 1024 };
static void *arena[kArenaSlots];
static size_t arena_used;

void *fz_alloc(size_t bytes) {
  FZ_REQUIRE(arena_used < kArenaSlots, "arena full (%zu blocks)", arena_used);
  /* malloc(0) is a distinct zero-byte block: ASan reports any read of it. */
  void *p = malloc(bytes);
  FZ_REQUIRE(p != NULL || bytes == 0, "out of memory");
  if (bytes > 0) memset(p, 0, bytes);
  arena[arena_used++] = p;
  return p;
}

void fz_arena_reset(void) {
  for (size_t i = 0; i < arena_used; ++i) free(arena[i]);
  arena_used = 0;
}

const char *fz_note;

void fz_fail(const char *cond, const char *format, ...) {
  fprintf(stderr, "fuzz invariant violated: %s: ", cond);
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fprintf(stderr, "\n");
  if (fz_note != NULL) fprintf(stderr, "%s\n", fz_note);
  abort();
}

const sm70ops_api *fz_api(void) {
  static const sm70ops_api *api;
  if (api == NULL) {
    uint32_t minor = 0;
    sm70ops_status s = sm70ops_get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api);
    FZ_REQUIRE(s == SM70OPS_OK && api != NULL, "sm70ops_get_api: status %d", s);
    FZ_REQUIRE(api->struct_size >= sizeof(sm70ops_api), "table of %u bytes", api->struct_size);
  }
  return api;
}

void fz_require_no_gpu(const char *target) {
  int32_t count = -1;
  sm70ops_status s = fz_api()->device_count(&count);
  if (s != SM70OPS_OK || count != 0) {
    fprintf(stderr,
            "SKIP %s: api->device_count gave status %d, %d devices: this fuzzer passes fake "
            "device pointers and runs only where no GPU can be reached\n",
            target, s, count);
    exit(0);
  }
}

const char *const fz_env_names[FZ_ENV_VARS] = {
    "SM70OPS_DISABLE",           "SM70OPS_DISABLE_QSA_INDEX",    "SM70OPS_DISABLE_QSA_ATTN",
    "SM70OPS_DISABLE_NVFP4_MOE", "VLLM_SM70_QSA_INDEXER_CUBLAS", "SM70OPS_CHECKED",
    "SM70OPS_ALLOW_PTX",         "SM70OPS_ALLOW_ARCH",
};

extern char **environ;

void fz_clear_env(void) {
  for (int32_t again = 1; again;) {
    again = 0;
    for (char **e = environ; *e != NULL; ++e) {
      if (strncmp(*e, "SM70OPS_", 8) != 0 && strncmp(*e, "VLLM_SM70_", 10) != 0) continue;
      char name[256];
      size_t n = strcspn(*e, "=");
      if (n >= sizeof(name)) continue;
      memcpy(name, *e, n);
      name[n] = '\0';
      unsetenv(name); /* environ changed: scan again */
      again = 1;
      break;
    }
  }
}

void fz_log(void *user, sm70ops_log_level level, const char *message) {
  (void)user;
  FZ_REQUIRE(level >= SM70OPS_LOG_ERROR && level <= SM70OPS_LOG_DEBUG, "log level %d", level);
  FZ_REQUIRE(message != NULL, "log message NULL");
  volatile size_t n = strlen(message);
  (void)n;
}

void fz_check_status(sm70ops_status status, const char *call) {
  const sm70ops_api *api = fz_api();
  FZ_REQUIRE(status >= 0 && status < SM70OPS_STATUS_COUNT, "%s returned status %d", call, status);
  const char *name = api->status_name(status);
  FZ_REQUIRE(name != NULL && strcmp(name, "SM70OPS_STATUS_UNKNOWN") != 0, "%s: status %d unnamed",
             call, status);
  FZ_REQUIRE(api->status_string(status) != NULL, "%s: status_string NULL", call);
  const char *last = api->last_error();
  FZ_REQUIRE(last != NULL && memchr(last, '\0', 4096) != NULL, "%s: last_error", call);
  /* A failure leaves its detail (the header: "returns SM70OPS_OK or a status with the detail in
   * last_error()"). */
  FZ_REQUIRE(status == SM70OPS_OK || last[0] != '\0', "%s: status %d without last_error", call,
             status);
}

void fz_check_decision(const sm70ops_decision *d) {
  FZ_REQUIRE(d->reason >= 0 && d->reason < SM70OPS_REASON_COUNT, "reason %d", d->reason);
  FZ_REQUIRE(d->accepted == (d->reason == SM70OPS_REASON_ACCEPTED), "accepted %d, reason %d",
             d->accepted, d->reason);
  FZ_REQUIRE(strcmp(fz_api()->reason_name(d->reason), "UNKNOWN_REASON") != 0, "reason %d unnamed",
             d->reason);
  FZ_REQUIRE(memchr(d->message, '\0', sizeof(d->message)) != NULL, "message not terminated");
  if (!d->accepted) {
    FZ_REQUIRE(d->route == SM70OPS_ROUTE_NONE && d->workspace_bytes == 0 && d->output_bytes == 0,
               "decline (reason %d) with route %d, workspace %llu, output %llu", d->reason,
               d->route, (unsigned long long)d->workspace_bytes,
               (unsigned long long)d->output_bytes);
    FZ_REQUIRE(d->message[0] != '\0', "decline (reason %d) without a message", d->reason);
  } else {
    FZ_REQUIRE(d->route != SM70OPS_ROUTE_NONE, "accepted with route NONE");
  }
}
