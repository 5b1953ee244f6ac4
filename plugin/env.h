/* Environment rollback switches, read once when a context is created. The table in env.c is the
 * single list of variables; README.md "Environment" documents the same list. */
#ifndef SM70OPS_PLUGIN_ENV_H_
#define SM70OPS_PLUGIN_ENV_H_

#include <stddef.h>
#include <stdint.h>

#include "abi/sm70ops.h"

#define SM70_MAX_ALLOWED_ARCHS 8
#define SM70_ENV_NOTE_BYTES 200

typedef struct sm70_settings {
  int32_t plugin_disabled; /* SM70OPS_DISABLE, or any malformed variable */
  uint32_t disabled_ops;   /* bit `op`: a per-op switch turned op id `op` off */
  int32_t checked;         /* SM70OPS_CHECKED: kernels validate device-side indices */
  int32_t allow_ptx;       /* SM70OPS_ALLOW_PTX: JIT the build's PTX on an allowed GPU */
  int32_t allowed_arch_count;
  int32_t allowed_archs[SM70_MAX_ALLOWED_ARCHS]; /* extra compute capabilities, besides 70 */
  /* Why the plugin is off, naming the variable: "SM70OPS_DISABLE=1" or the malformed value. */
  char plugin_disabled_note[SM70_ENV_NOTE_BYTES];
} sm70_settings;

/* Reads the variables through `get` (getenv in production, a table in tests) and reports each one
 * that is set through `note(user, level, text)`. An empty value counts as unset. Never fails: a
 * malformed value turns the whole plugin off, because guessing what an operator meant could turn on
 * what they meant to turn off. */
typedef char *(*sm70_getenv_fn)(const char *name);
typedef void (*sm70_note_fn)(void *user, sm70ops_log_level level, const char *text);
void sm70_settings_read(sm70_getenv_fn get, sm70_note_fn note, void *user, sm70_settings *out);

/* Whether the environment switched op id `op` off. */
int32_t sm70_settings_op_disabled(const sm70_settings *s, sm70ops_op op);

/* The variables that switch op id `op` off, for a decline message: "SM70OPS_DISABLE_QSA_INDEX=1
 * or VLLM_SM70_QSA_INDEXER_CUBLAS=0". Writes a NUL-terminated sentence of at most `bytes`. */
void sm70_env_op_switches(sm70ops_op op, char *out, size_t bytes);

#endif /* SM70OPS_PLUGIN_ENV_H_ */
