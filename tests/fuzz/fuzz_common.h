/* Shared by the sm70ops fuzz targets (tests/fuzz/README in the top README, "Tests"): a reader that
 * turns fuzz bytes into choices, an arena freed after every input, the plugin's function table
 * reached through the exported entry point, and the invariants every call must keep. */
#ifndef SM70OPS_TESTS_FUZZ_FUZZ_COMMON_H_
#define SM70OPS_TESTS_FUZZ_FUZZ_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "abi/sm70ops.h"

/* Fuzz bytes as a stream of choices. Once exhausted every read gives 0, and every builder treats 0
 * as "keep the valid baseline": an empty input is a valid descriptor. */
typedef struct fz_reader {
  const uint8_t *data;
  size_t size;
} fz_reader;

uint8_t fz_u8(fz_reader *r);
uint16_t fz_u16(fz_reader *r);
uint32_t fz_u32(fz_reader *r);
uint64_t fz_u64(fz_reader *r);

/* Heap blocks of exactly the requested size (so ASan sees any read past what a struct claims),
 * all released by fz_arena_reset() at the end of an input. */
void *fz_alloc(size_t bytes);
void fz_arena_reset(void);

/* The plugin's table, from sm70ops_get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR). */
const sm70ops_api *fz_api(void);

/* Exits the process (status 0, a "SKIP" line on stderr) unless api->device_count reports no GPU:
 * the descriptors carry fake device pointers, and an accepted one reaches a kernel launch on a
 * machine with a GPU. Call before anything else. */
void fz_require_no_gpu(const char *target);

/* The variables of README "Environment" the plugin reads at context_create: the boolean switches,
 * then SM70OPS_ALLOW_ARCH (last). */
enum { FZ_ENV_VARS = 8, FZ_ENV_ALLOW_ARCH = FZ_ENV_VARS - 1 };
extern const char *const fz_env_names[FZ_ENV_VARS];
/* Unsets every SM70OPS_* and VLLM_SM70_* variable, listed above or not. */
void fz_clear_env(void);

/* Log callback: checks level and that the message is a string (ASan sees the read). */
void fz_log(void *user, sm70ops_log_level level, const char *message);

/* Aborts (a libFuzzer crash with the input saved) when `cond` is false. */
#define FZ_REQUIRE(cond, ...)                 \
  do {                                        \
    if (!(cond)) fz_fail(#cond, __VA_ARGS__); \
  } while (0)
/* Extra context fz_fail prints (the environment the env fuzzer set), or NULL. */
extern const char *fz_note;
void fz_fail(const char *cond, const char *format, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/* A status from the table: a known code, status_name/status_string non-NULL, last_error a string.
 */
void fz_check_status(sm70ops_status status, const char *call);
/* A decision check wrote: reason known, accepted == (reason == ACCEPTED), route NONE and no bytes
 * on a decline, message NUL-terminated. */
void fz_check_decision(const sm70ops_decision *d);

#endif /* SM70OPS_TESTS_FUZZ_FUZZ_COMMON_H_ */
