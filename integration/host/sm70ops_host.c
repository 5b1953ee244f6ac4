#define _GNU_SOURCE /* dladdr, realpath: report the file the dynamic loader actually picked */
#include "integration/host/sm70ops_host.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Op ids index the last-outcome table; ids beyond it (all declined as unknown) share slot 0. */
enum { kOutcomeSlots = 8 };
/* Before an op's first call: differs from every real outcome key, so the first call logs. */
enum { kNoOutcome = -1 };

struct sm70ops_host {
  void *library;
  const sm70ops_api *api;
  uint32_t abi_minor;
  sm70ops_context *ctx;
  sm70ops_log_level log_level;
  sm70ops_log_fn log_fn;
  void *log_user_data;
  atomic_int last_outcome[kOutcomeSlots];
  char library_path[PATH_MAX];
};

/* The table slots this loader calls; a plugin lacking one cannot serve this host. */
typedef struct api_slot {
  const char *name;
  size_t offset;
} api_slot;

#define API_SLOT(field) \
  { #field, offsetof(sm70ops_api, field) }
static const api_slot kNeededSlots[] = {
    API_SLOT(status_name),    API_SLOT(reason_name),     API_SLOT(last_error), API_SLOT(check),
    API_SLOT(context_create), API_SLOT(context_destroy), API_SLOT(execute),
};
#undef API_SLOT

static const char *const kOpNames[] = {
    [SM70OPS_OP_QSA_INDEX] = "qsa_index",
    [SM70OPS_OP_QSA_ATTN] = "qsa_attn",
    [SM70OPS_OP_NVFP4_MOE] = "nvfp4_moe",
    [SM70OPS_OP_NVFP4_MOE_PREPARE] = "nvfp4_moe_prepare",
};

static const char *const kRouteNames[] = {
    [SM70OPS_ROUTE_NONE] = "none",
    [SM70OPS_ROUTE_QSA_INDEX_WMMA] = "qsa_index_wmma",
    [SM70OPS_ROUTE_QSA_ATTN_WMMA] = "qsa_attn_wmma",
    [SM70OPS_ROUTE_NVFP4_MOE_WMMA] = "nvfp4_moe_wmma",
    [SM70OPS_ROUTE_NVFP4_MOE_PREPARE] = "nvfp4_moe_prepare",
};

static const char *name_of(const char *const *names, size_t count, int32_t id) {
  return id >= 0 && (size_t)id < count && names[id] != NULL ? names[id] : "unknown";
}

const char *sm70ops_host_op_name(sm70ops_op op) {
  return name_of(kOpNames, sizeof(kOpNames) / sizeof(kOpNames[0]), op);
}

const char *sm70ops_host_route_name(sm70ops_route route) {
  return name_of(kRouteNames, sizeof(kRouteNames) / sizeof(kRouteNames[0]), route);
}

__attribute__((format(printf, 4, 5))) static sm70ops_status fail(char *err, size_t err_bytes,
                                                                 sm70ops_status status,
                                                                 const char *format, ...) {
  if (err == NULL || err_bytes == 0) return status;
  va_list args;
  va_start(args, format);
  vsnprintf(err, err_bytes, format, args);
  va_end(args);
  return status;
}

/* Copies what the caller's struct_size covers over a zeroed struct: older callers get defaults. */
static sm70ops_status read_options(const sm70ops_host_options *opt, sm70ops_host_options *o,
                                   char *err, size_t err_bytes) {
  memset(o, 0, sizeof(*o));
  if (opt == NULL) return SM70OPS_OK;
  if (opt->struct_size < sizeof(opt->struct_size) || opt->struct_size > sizeof(*o)) {
    return fail(err, err_bytes, SM70OPS_ERR_INVALID_ARGUMENT,
                "sm70ops_host_open: options struct_size %u, expected sizeof(sm70ops_host_options) "
                "= %zu",
                opt->struct_size, sizeof(*o));
  }
  memcpy(o, opt, opt->struct_size);
  if (o->library_path != NULL && o->library_path[0] == '\0') {
    return fail(err, err_bytes, SM70OPS_ERR_INVALID_ARGUMENT,
                "sm70ops_host_open: library_path is empty (NULL picks the default)");
  }
  return SM70OPS_OK;
}

static const char *library_to_open(const sm70ops_host_options *o) {
  if (o->library_path != NULL) return o->library_path;
  const char *env = getenv(SM70OPS_HOST_LIBRARY_ENV);
  return env != NULL && env[0] != '\0' ? env : SM70OPS_HOST_DEFAULT_LIBRARY;
}

/* The name of the first needed slot the table lacks (beyond its struct_size, or NULL), or NULL. */
static const char *first_missing_slot(const sm70ops_api *api) {
  for (size_t i = 0; i < sizeof(kNeededSlots) / sizeof(kNeededSlots[0]); ++i) {
    void (*fn)(void) = NULL;
    if (kNeededSlots[i].offset + sizeof(fn) <= api->struct_size) {
      memcpy(&fn, (const char *)api + kNeededSlots[i].offset, sizeof(fn));
    }
    if (fn == NULL) return kNeededSlots[i].name;
  }
  return NULL;
}

static sm70ops_status negotiate(sm70ops_host *h, sm70ops_get_api_fn get_api, char *err,
                                size_t err_bytes) {
  const sm70ops_api *api = NULL;
  uint32_t minor = 0;
  sm70ops_status status = get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api);
  if (status != SM70OPS_OK || api == NULL || api->abi_major != SM70OPS_ABI_MAJOR) {
    return fail(err, err_bytes, SM70OPS_ERR_ABI_MISMATCH,
                "%s refused this host's ABI %d.%d (status %d, plugin speaks ABI %u.x)",
                h->library_path, SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, status,
                api != NULL ? api->abi_major : 0u);
  }
  const char *missing = first_missing_slot(api);
  if (missing != NULL) {
    return fail(err, err_bytes, SM70OPS_ERR_ABI_MISMATCH,
                "%s (ABI %u.%u, function table of %u bytes) lacks %s, which this host needs",
                h->library_path, api->abi_major, api->abi_minor, api->struct_size, missing);
  }
  h->api = api;
  h->abi_minor = minor;
  return SM70OPS_OK;
}

/* A plain name is found by the loader's search: ask it which file it opened. */
static void record_loaded_path(sm70ops_host *h, const void *symbol, const char *requested) {
  Dl_info info;
  const char *loaded =
      dladdr(symbol, &info) != 0 && info.dli_fname != NULL ? info.dli_fname : requested;
  if (realpath(loaded, h->library_path) == NULL) {
    snprintf(h->library_path, sizeof(h->library_path), "%s", loaded);
  }
}

static sm70ops_status load_library(sm70ops_host *h, const char *path, char *err, size_t err_bytes) {
  h->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h->library == NULL) {
    return fail(err, err_bytes, SM70OPS_ERR_INVALID_ARGUMENT,
                "cannot load the sm70ops plugin '%s': %s", path, dlerror());
  }
  void *entry = dlsym(h->library, SM70OPS_ENTRY_POINT_NAME);
  if (entry == NULL) {
    return fail(err, err_bytes, SM70OPS_ERR_INVALID_ARGUMENT,
                "'%s' is not an sm70ops plugin: it has no symbol %s", path,
                SM70OPS_ENTRY_POINT_NAME);
  }
  record_loaded_path(h, entry, path);
  sm70ops_get_api_fn get_api;
  memcpy(&get_api, &entry, sizeof(get_api)); /* ISO C has no object-to-function pointer cast */
  return negotiate(h, get_api, err, err_bytes);
}

static sm70ops_status create_context(sm70ops_host *h, const sm70ops_host_options *o, char *err,
                                     size_t err_bytes) {
  const sm70ops_context_desc desc = {
      .struct_size = sizeof(desc),
      .device_ordinal = o->device_ordinal,
      .compute_capability = o->compute_capability,
      .log_level = o->log_level,
      .log_fn = o->log_fn,
      .log_user_data = o->log_user_data,
  };
  sm70ops_status status = h->api->context_create(&desc, &h->ctx);
  if (status != SM70OPS_OK) {
    return fail(err, err_bytes, status, "%s: context_create for device %d failed: %s: %s",
                h->library_path, o->device_ordinal, h->api->status_name(status),
                h->api->last_error());
  }
  return SM70OPS_OK;
}

sm70ops_status sm70ops_host_open(const sm70ops_host_options *opt, sm70ops_host **out, char *err,
                                 size_t err_bytes) {
  if (err != NULL && err_bytes > 0) err[0] = '\0';
  if (out == NULL) {
    return fail(err, err_bytes, SM70OPS_ERR_INVALID_ARGUMENT, "sm70ops_host_open: out is NULL");
  }
  *out = NULL;
  sm70ops_host_options o;
  sm70ops_status status = read_options(opt, &o, err, err_bytes);
  if (status != SM70OPS_OK) return status;
  sm70ops_host *h = calloc(1, sizeof(*h));
  if (h == NULL) return fail(err, err_bytes, SM70OPS_ERR_INTERNAL, "out of host memory");
  h->log_level = o.log_level;
  h->log_fn = o.log_fn;
  h->log_user_data = o.log_user_data;
  for (int i = 0; i < kOutcomeSlots; ++i) atomic_init(&h->last_outcome[i], kNoOutcome);
  status = load_library(h, library_to_open(&o), err, err_bytes);
  if (status == SM70OPS_OK) status = create_context(h, &o, err, err_bytes);
  if (status != SM70OPS_OK) {
    sm70ops_host_close(h);
    return status;
  }
  *out = h;
  return SM70OPS_OK;
}

void sm70ops_host_close(sm70ops_host *h) {
  if (h == NULL) return;
  if (h->ctx != NULL) h->api->context_destroy(h->ctx);
  if (h->library != NULL) dlclose(h->library);
  free(h);
}

const sm70ops_api *sm70ops_host_api(const sm70ops_host *h) { return h != NULL ? h->api : NULL; }

const sm70ops_context *sm70ops_host_context(const sm70ops_host *h) {
  return h != NULL ? h->ctx : NULL;
}

uint32_t sm70ops_host_abi_minor(const sm70ops_host *h) { return h != NULL ? h->abi_minor : 0; }

const char *sm70ops_host_library_path(const sm70ops_host *h) {
  return h != NULL ? h->library_path : "";
}

/* Rewrites *out as a decline, so callers always read a complete decision. */
__attribute__((format(printf, 4, 5))) static sm70ops_status decline(sm70ops_decision *out,
                                                                    sm70ops_reason reason,
                                                                    sm70ops_status status,
                                                                    const char *format, ...) {
  out->accepted = 0;
  out->reason = reason;
  out->route = SM70OPS_ROUTE_NONE;
  out->workspace_bytes = 0;
  out->output_bytes = 0;
  va_list args;
  va_start(args, format);
  vsnprintf(out->message, sizeof(out->message), format, args);
  va_end(args);
  return status;
}

sm70ops_status sm70ops_host_decide(const sm70ops_host *h, sm70ops_op op, const void *args,
                                   sm70ops_decision *out) {
  if (out == NULL) return SM70OPS_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  if (h == NULL) {
    return decline(out, SM70OPS_REASON_PLUGIN_DISABLED, SM70OPS_ERR_INVALID_ARGUMENT,
                   "the sm70ops plugin is not loaded");
  }
  sm70ops_status status = h->api->check(h->ctx, op, args, out);
  if (status != SM70OPS_OK) {
    return decline(out, SM70OPS_REASON_INVALID_ARGUMENT, status, "check failed: %s: %s",
                   h->api->status_name(status), h->api->last_error());
  }
  return SM70OPS_OK;
}

/* One int per distinct outcome, for change detection only (codes beyond 8 bits may collide,
 * which at worst merges two log lines). */
static int outcome_key(const sm70ops_decision *d, sm70ops_status status) {
  return (d->accepted != 0) | (int)((uint32_t)d->reason & 0xffu) << 1 |
         (int)((uint32_t)status & 0xffu) << 9;
}

static void describe_outcome(const sm70ops_host *h, sm70ops_op op, const sm70ops_decision *d,
                             sm70ops_status status, char *line, size_t bytes) {
  const char *name = sm70ops_host_op_name(op);
  if (!d->accepted) {
    snprintf(line, bytes, "sm70ops: %s declined (%s: %s)", name, h->api->reason_name(d->reason),
             d->message);
  } else if (status != SM70OPS_OK) {
    snprintf(line, bytes, "sm70ops: %s accepted but execute failed (%s: %s)", name,
             h->api->status_name(status), d->message);
  } else {
    snprintf(line, bytes, "sm70ops: %s accepted (route %s, workspace %llu bytes)", name,
             sm70ops_host_route_name(d->route), (unsigned long long)d->workspace_bytes);
  }
}

/* Logs at INFO/WARN when this op's outcome differs from its previous call's, else at DEBUG. */
static void note_outcome(sm70ops_host *h, sm70ops_op op, const sm70ops_decision *d,
                         sm70ops_status status) {
  int slot = op > 0 && op < kOutcomeSlots ? op : 0;
  int key = outcome_key(d, status);
  int previous = atomic_exchange_explicit(&h->last_outcome[slot], key, memory_order_relaxed);
  int failed = d->accepted && status != SM70OPS_OK;
  sm70ops_log_level level = key == previous ? SM70OPS_LOG_DEBUG
                            : failed        ? SM70OPS_LOG_WARN
                                            : SM70OPS_LOG_INFO;
  if (h->log_fn == NULL || level > h->log_level) return;
  char line[SM70OPS_MESSAGE_BYTES + 128];
  describe_outcome(h, op, d, status, line, sizeof(line));
  h->log_fn(h->log_user_data, level, line);
}

/* Runs an accepted call; on failure keeps the plugin's detail in d->message for the log. */
static sm70ops_status execute_op(const sm70ops_host *h, sm70ops_op op, const void *args,
                                 void *stream, void *workspace, uint64_t workspace_bytes,
                                 sm70ops_decision *d) {
  sm70ops_status status = h->api->execute(h->ctx, op, args, stream, workspace, workspace_bytes);
  if (status != SM70OPS_OK) snprintf(d->message, sizeof(d->message), "%s", h->api->last_error());
  return status;
}

sm70ops_host_result sm70ops_host_run(sm70ops_host *h, sm70ops_op op, const void *args, void *stream,
                                     void *workspace, uint64_t workspace_bytes,
                                     sm70ops_host_fallback_fn fallback, void *fallback_user) {
  sm70ops_decision d;
  sm70ops_status status = sm70ops_host_decide(h, op, args, &d);
  if (status == SM70OPS_OK) {
    status = d.accepted ? execute_op(h, op, args, stream, workspace, workspace_bytes, &d)
                        : SM70OPS_ERR_UNSUPPORTED;
  }
  if (h != NULL) note_outcome(h, op, &d, status);
  sm70ops_host_result result = {.path = SM70OPS_HOST_PATH_PLUGIN, .plugin_status = status};
  if (status == SM70OPS_OK) return result;
  result.path = fallback != NULL ? SM70OPS_HOST_PATH_FALLBACK : SM70OPS_HOST_PATH_NONE;
  if (fallback != NULL) result.fallback_result = fallback(fallback_user, op, args, stream);
  return result;
}
