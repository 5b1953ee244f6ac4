/*
 * sm70ops_host.h: the loader a serving engine embeds to use libsm70ops.so. It dlopens the plugin,
 * negotiates the ABI, creates one context, and routes each op call to the plugin or to the
 * engine's own implementation (the "fallback"), logging why.
 *
 *   sm70ops_host_options opt = {.struct_size = sizeof(opt), .compute_capability = 0};
 *   sm70ops_host *h = NULL;
 *   char err[256];
 *   if (sm70ops_host_open(&opt, &h, err, sizeof(err)) != SM70OPS_OK) log(err);  // h stays NULL
 *   sm70ops_host_result r = sm70ops_host_run(h, SM70OPS_OP_QSA_ATTN, &args, stream, ws, ws_bytes,
 *                                            my_attention, my_state);  // NULL h: my_attention runs
 *   sm70ops_host_close(h);
 *
 * Fail-open: every function accepts a NULL handle, so an engine whose plugin failed to load keeps
 * calling sm70ops_host_run and always gets its fallback. Nothing here aborts, exits or prints; all
 * output goes through the log callback.
 *
 * Thread safety: sm70ops_host_open and sm70ops_host_close are not concurrent with any other call
 * on the same handle. Everything else may be called from any number of threads at once.
 */
#ifndef SM70OPS_INTEGRATION_HOST_SM70OPS_HOST_H_
#define SM70OPS_INTEGRATION_HOST_SM70OPS_HOST_H_

#include <stddef.h>
#include <stdint.h>

#include "abi/sm70ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Consulted when sm70ops_host_options.library_path is NULL. */
#define SM70OPS_HOST_LIBRARY_ENV "SM70OPS_LIBRARY"
/* Last resort: the dynamic loader's search (LD_LIBRARY_PATH, RUNPATH, ld.so.cache). */
#define SM70OPS_HOST_DEFAULT_LIBRARY "libsm70ops.so"

typedef struct sm70ops_host sm70ops_host; /* opaque */

/* Set struct_size = sizeof(sm70ops_host_options); fields are only ever appended, and fields the
 * caller's struct_size does not cover take their zero value. All-zero means: the default
 * library, device 0, compute capability from CUDA, no logging. */
typedef struct sm70ops_host_options {
  uint32_t struct_size;
  /* NULL: $SM70OPS_LIBRARY if set and non-empty, else "libsm70ops.so" through the dynamic loader.
   * Borrowed: read only during sm70ops_host_open. */
  const char *library_path;
  int32_t device_ordinal;      /* CUDA device of the context */
  int32_t compute_capability;  /* major*10+minor; 0: the plugin asks CUDA (see the ABI header) */
  sm70ops_log_level log_level; /* messages above this level are not sent */
  sm70ops_log_fn log_fn;       /* NULL: no logging; also handed to the plugin's context */
  void *log_user_data;         /* passed back to log_fn, never dereferenced */
} sm70ops_host_options;

/* Loads the plugin and creates its context. On success *out owns both (free with
 * sm70ops_host_close). On failure returns a status, sets *out to NULL and writes a sentence
 * saying what failed to err (when err is non-NULL and err_bytes > 0, always NUL-terminated):
 *   SM70OPS_ERR_INVALID_ARGUMENT  out is NULL, options malformed, or the file cannot be loaded or
 *                                 lacks SM70OPS_ENTRY_POINT_NAME (not an sm70ops plugin);
 *   SM70OPS_ERR_ABI_MISMATCH      the plugin speaks another ABI major or lacks a needed function;
 *   anything context_create returns (e.g. SM70OPS_ERR_CUDA), with the plugin's last_error.
 * `opt` may be NULL (all defaults). */
sm70ops_status sm70ops_host_open(const sm70ops_host_options *opt, sm70ops_host **out, char *err,
                                 size_t err_bytes);

/* Destroys the context and dlcloses the plugin. NULL is a no-op. Pointers obtained from the
 * accessors below are invalid afterwards. */
void sm70ops_host_close(sm70ops_host *h);

/* The plugin's function table and the host's context; NULL for a NULL handle. Valid until
 * sm70ops_host_close. Use the table only up to the negotiated minor. */
const sm70ops_api *sm70ops_host_api(const sm70ops_host *h);
const sm70ops_context *sm70ops_host_context(const sm70ops_host *h);
/* ABI minor both sides speak (the major is SM70OPS_ABI_MAJOR); 0 for a NULL handle. */
uint32_t sm70ops_host_abi_minor(const sm70ops_host *h);
/* The file the dynamic loader actually opened, owned by h; "" for a NULL handle. */
const char *sm70ops_host_library_path(const sm70ops_host *h);

/* Names of the ABI's op and route ids ("qsa_attn", "qsa_attn_wmma"): static strings, never NULL,
 * "unknown" for ids this header does not define. The plugin's table has no such functions. */
const char *sm70ops_host_op_name(sm70ops_op op);
const char *sm70ops_host_route_name(sm70ops_route route);

/* Asks the plugin's capability check. Always leaves a complete decision in *out (when out is
 * non-NULL): on any failure a decline whose message says why. Returns SM70OPS_OK when the plugin
 * answered (a decline included); SM70OPS_ERR_INVALID_ARGUMENT for a NULL h or out; else check's
 * status. Logs nothing: use it for planning. `args` is borrowed for the call. */
sm70ops_status sm70ops_host_decide(const sm70ops_host *h, sm70ops_op op, const void *args,
                                   sm70ops_decision *out);

/* The host's own implementation of `op`: returns 0 on success. Runs on the calling thread. */
typedef int (*sm70ops_host_fallback_fn)(void *user, sm70ops_op op, const void *args, void *stream);

typedef int32_t sm70ops_host_path;
enum {
  SM70OPS_HOST_PATH_NONE = 0,    /* the plugin did not run and no fallback was given */
  SM70OPS_HOST_PATH_PLUGIN = 1,  /* the plugin's execute ran and returned SM70OPS_OK */
  SM70OPS_HOST_PATH_FALLBACK = 2 /* the fallback ran (see fallback_result) */
};

typedef struct sm70ops_host_result {
  sm70ops_host_path path;
  /* SM70OPS_OK when the plugin ran; otherwise why it did not: SM70OPS_ERR_UNSUPPORTED for a
   * decline, execute's error after an accept, SM70OPS_ERR_INVALID_ARGUMENT for a NULL handle. */
  sm70ops_status plugin_status;
  int fallback_result; /* the fallback's return value; 0 when it did not run */
} sm70ops_host_result;

/* Runs `op` through the plugin if its check accepts and execute succeeds, else through
 * fallback(fallback_user, op, args, stream) (when non-NULL). `args`, `stream` and `workspace`
 * are borrowed for the call; workspace must hold the decision's workspace_bytes.
 * Logs through the callback: each call at DEBUG, but at INFO (WARN for an execute failure) when
 * the op's outcome (accepted, reason, status) differs from the previous call's for that op, so a
 * steady state logs once. The per-op state is atomic: concurrent calls each log their own
 * change. */
sm70ops_host_result sm70ops_host_run(sm70ops_host *h, sm70ops_op op, const void *args, void *stream,
                                     void *workspace, uint64_t workspace_bytes,
                                     sm70ops_host_fallback_fn fallback, void *fallback_user);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SM70OPS_INTEGRATION_HOST_SM70OPS_HOST_H_ */
