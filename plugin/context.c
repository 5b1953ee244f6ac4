#include "plugin/context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/arch.h"
#include "plugin/build_info.h"
#include "plugin/cuda_device.h"
#include "plugin/status.h"

enum { kSm70 = 70 };

void sm70_log(const sm70ops_context *ctx, sm70ops_log_level level, const char *format, ...) {
  if (ctx->log_fn == NULL || level > ctx->log_level) return;
  char line[512];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  ctx->log_fn(ctx->log_user_data, level, line);
}

static void log_setting(void *user, sm70ops_log_level level, const char *text) {
  sm70_log((const sm70ops_context *)user, level, "sm70ops: %s", text);
}

static int32_t build_has_sass(int32_t cc) {
  for (int i = 0; i < sm70_build_arch_count; ++i) {
    if (sm70_build_archs[i] == cc) return 1;
  }
  return 0;
}

/* Whether this build's PTX can be compiled for `cc` by the driver (PTX runs on its own
 * architecture and every later one). */
static int32_t build_ptx_fits(int32_t cc) {
  return sm70_build_ptx_arch != 0 && sm70_build_ptx_arch <= cc;
}

/* The plugin runs where the build carries SASS: its kernels are tuned and audited as that SASS.
 * The one exception is validation of the V100 build on a newer GPU: with SM70OPS_ALLOW_PTX the
 * driver JIT-compiles its compute_70 PTX there. Writes why the build cannot run on `cc` into
 * `note`, or "" when it can. */
static void note_missing_code(int32_t cc, const sm70_settings *s, char *note, size_t bytes) {
  note[0] = '\0';
  if (build_has_sass(cc) || (s->allow_ptx && build_ptx_fits(cc))) return;
  snprintf(note, bytes, "this build carries code for %s only, none for compute capability %d.%d%s",
           sm70_build_sm_list, cc / 10, cc % 10,
           cc == 70             ? ": a V100 needs the sm70 build (--config=sm70)"
           : build_ptx_fits(cc) ? " (SM70OPS_ALLOW_PTX=1 JIT-compiles its PTX, for validation)"
                                : "");
}

/* Asks the CUDA runtime for the device's compute capability and shared-memory limit. A machine
 * with no device is not an error (every op declines, so the host keeps its own path); an ordinal
 * past the devices a machine has is the host's mistake. */
static sm70ops_status query_device(sm70ops_context *ctx) {
  sm70_cuda_error err;
  int32_t count = 0;
  if (sm70_cuda_device_count(&count, &err) != 0)
    return sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  if (count == 0) {
    snprintf(ctx->no_device_note, sizeof(ctx->no_device_note), "no CUDA device");
    return sm70_ok();
  }
  if (ctx->device_ordinal >= count) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT,
                     "context_create: device_ordinal %d, this machine has %d CUDA device%s (0..%d)",
                     ctx->device_ordinal, count, count == 1 ? "" : "s", count - 1);
  }
  /* Device attributes, not cudaGetDeviceProperties: on the H200 test machine that call grew
   * host memory by about 100 KB per context (1000 create/destroy cycles, measured). */
  if (sm70_cuda_compute_capability(ctx->device_ordinal, &ctx->compute_capability, &err) != 0 ||
      sm70_cuda_smem_per_block(ctx->device_ordinal, &ctx->smem_per_block, &err) != 0) {
    return sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  }
  note_missing_code(ctx->compute_capability, &ctx->settings, ctx->no_code_note,
                    sizeof(ctx->no_code_note));
  return sm70_ok();
}

/* The opt-in shared memory per block of compute capability `cc` (kernels/common/arch.h), for a
 * context given its capability: there is no device to ask. */
static uint32_t known_smem_per_block(int32_t cc) {
#define SM70_SMEM_CASE(capability, kib) \
  case capability:                      \
    return (kib)*1024u;
  switch (cc) {
    SM70_ARCH_SMEM_PER_BLOCK(SM70_SMEM_CASE)
    default:
      return SM70_ARCH_DEFAULT_SMEM_PER_BLOCK_KIB * 1024u;
  }
#undef SM70_SMEM_CASE
}

/* The device the context serves, at creation; a warning when its ops cannot run there. A context
 * given its capability plans without asking about code, so it is warned here instead. */
static void log_device(const sm70ops_context *ctx) {
  const int32_t cc = ctx->compute_capability;
  if (cc == 0) {
    sm70_log(ctx, SM70OPS_LOG_WARN, "sm70ops: %s: every op will decline", ctx->no_device_note);
    return;
  }
  const int32_t allowed = sm70_context_arch_allowed(ctx);
  sm70_log(ctx, SM70OPS_LOG_INFO,
           "sm70ops: device %d, compute capability %d.%d%s, %u KB of shared memory per block%s",
           ctx->device_ordinal, cc / 10, cc % 10,
           ctx->capability_from_host ? " (given by the host)" : "", ctx->smem_per_block / 1024,
           allowed ? "" : ": not SM70, every op will decline");
  char no_code[sizeof(ctx->no_code_note)]; /* the context holds it for a real device only */
  note_missing_code(cc, &ctx->settings, no_code, sizeof(no_code));
  if (allowed && no_code[0] == '\0' && !build_has_sass(cc)) {
    sm70_log(ctx, SM70OPS_LOG_WARN,
             "sm70ops: no SASS for compute capability %d.%d in this build (%s): its "
             "compute_%d PTX runs through the driver's JIT (SM70OPS_ALLOW_PTX), for validation "
             "only; each kernel compiles at its first launch",
             cc / 10, cc % 10, sm70_build_sm_list, sm70_build_ptx_arch);
  }
  if (!allowed || no_code[0] == '\0') return;
  sm70_log(ctx, SM70OPS_LOG_WARN, "sm70ops: %s%s", no_code,
           ctx->capability_from_host
               ? "; checks answer from shapes and policy alone, execute on such a device fails"
               : ": every op will decline");
}

/* The mapped error record; on a machine without a device checked mode stays off, logged. */
static void enable_checked_mode(sm70ops_context *ctx) {
  sm70_cuda_error err;
  void *host = NULL, *device = NULL;
  if (sm70_cuda_alloc_mapped(sizeof(sm70_checked_error), &host, &device, &err) != 0) {
    sm70_log(ctx, SM70OPS_LOG_WARN,
             "sm70ops: SM70OPS_CHECKED: no mapped host memory (%s): checked mode off", err.message);
    return;
  }
  ctx->checked_host = host;
  ctx->checked_device = device;
}

static sm70ops_status check_desc(const sm70ops_context_desc *desc, sm70ops_context **out) {
  if (out == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "context_create: out is NULL");
  *out = NULL;
  if (desc == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "context_create: desc is NULL");
  if (desc->struct_size != sizeof(sm70ops_context_desc)) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT,
                     "context_create: desc struct_size %u, this plugin knows %zu (ABI %d.%d)",
                     desc->struct_size, sizeof(sm70ops_context_desc), SM70OPS_ABI_MAJOR,
                     SM70OPS_ABI_MINOR);
  }
  if (desc->device_ordinal < 0) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "context_create: device_ordinal %d < 0",
                     desc->device_ordinal);
  }
  if (desc->compute_capability < 0 || desc->compute_capability > 999) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT,
                     "context_create: compute_capability %d is not major*10+minor",
                     desc->compute_capability);
  }
  return sm70_ok();
}

sm70ops_status sm70_context_create(const sm70ops_context_desc *desc, sm70ops_context **out) {
  sm70ops_status status = check_desc(desc, out);
  if (status != SM70OPS_OK) return status;
  sm70ops_context *ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL) return sm70_fail(SM70OPS_ERR_INTERNAL, "context_create: out of host memory");
  ctx->device_ordinal = desc->device_ordinal;
  ctx->log_level = desc->log_level;
  ctx->log_fn = desc->log_fn;
  ctx->log_user_data = desc->log_user_data;
  sm70_settings_read(getenv, log_setting, ctx, &ctx->settings);
  ctx->compute_capability = desc->compute_capability;
  ctx->capability_from_host = desc->compute_capability != 0;
  if (ctx->capability_from_host)
    ctx->smem_per_block = known_smem_per_block(desc->compute_capability);
  status = ctx->capability_from_host ? sm70_ok() : query_device(ctx);
  if (status != SM70OPS_OK) {
    free(ctx);
    return status;
  }
  if (ctx->settings.checked && ctx->capability_from_host) {
    /* The descriptor's promise: a given compute capability means no CUDA call at all. */
    sm70_log(ctx, SM70OPS_LOG_WARN,
             "sm70ops: SM70OPS_CHECKED ignored: a context given its compute "
             "capability touches no CUDA; create it with compute_capability 0 to check indices");
  } else if (ctx->settings.checked) {
    enable_checked_mode(ctx);
  }
  log_device(ctx);
  *out = ctx;
  return sm70_ok();
}

void sm70_context_destroy(sm70ops_context *ctx) {
  if (ctx == NULL) return;
  sm70_cuda_free_mapped(ctx->checked_host);
  free(ctx);
}

static const char *checked_what(uint32_t kind) {
  switch (kind) {
    case SM70_CHECKED_PAGE_ID:
      return "block_table page id";
    case SM70_CHECKED_SEL_PAGE:
      return "sel_blocks page";
    case SM70_CHECKED_SEL_COUNT:
      return "sel_count";
    case SM70_CHECKED_SEQ_LEN:
      return "context length (seq_lens, query_start_loc)";
    case SM70_CHECKED_EXPERT_ID:
      return "topk_ids expert id";
    case SM70_CHECKED_SEL_ORDER:
      return "sel_blocks page (not above the one before it; the list must ascend)";
    case SM70_CHECKED_QUERY_START:
      return "query_start_loc entry (it must start at 0, never decrease and end at T; row is the "
             "entry's index)";
    case SM70_CHECKED_TOKEN_ID:
      return "token_ids id";
    case SM70_CHECKED_TOKEN_COUNT:
      return "token_ids count column";
    default:
      return "index";
  }
}

sm70ops_status sm70_context_take_checked_error(const sm70ops_context *ctx) {
  sm70_checked_error *e = ctx->checked_host;
  if (e == NULL) return SM70OPS_OK;
  uint32_t kind = __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE);
  if (kind == SM70_CHECKED_OK || kind == 0xffffffffu) return SM70OPS_OK; /* none, or mid-write */
  const sm70_checked_error seen = *e;
  /* One taker per record: of two threads executing at once, only one reports it. */
  if (!__atomic_compare_exchange_n(&e->kind, &kind, (uint32_t)SM70_CHECKED_OK, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    return SM70OPS_OK;
  }
  if (kind == SM70_CHECKED_TOKEN_REPEAT) {
    return sm70_fail(SM70OPS_ERR_INDEX_OUT_OF_RANGE,
                     "checked mode: an earlier call on this context read token_ids id %lld twice "
                     "in row %d (a row's ids are a set; the repeat counted once)",
                     (long long)seen.value, seen.row);
  }
  return sm70_fail(SM70OPS_ERR_INDEX_OUT_OF_RANGE,
                   "checked mode: an earlier call on this context read %s %lld, outside [0, %lld), "
                   "at row %d; its results are wrong where that index was used",
                   checked_what(kind), (long long)seen.value, (long long)seen.bound, seen.row);
}

int32_t sm70_context_arch_allowed(const sm70ops_context *ctx) {
  if (ctx->compute_capability == kSm70) return 1;
  for (int32_t i = 0; i < ctx->settings.allowed_arch_count; ++i) {
    if (ctx->settings.allowed_archs[i] == ctx->compute_capability) return 1;
  }
  return 0;
}
