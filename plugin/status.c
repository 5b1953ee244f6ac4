#include "plugin/status.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct named_code {
  const char *name;
  const char *text;
} named_code;

/* Indexed by status code; the enum is dense from 0. */
static const named_code kStatuses[SM70OPS_STATUS_COUNT] = {
    {"SM70OPS_OK", "success"},
    {"SM70OPS_ERR_INVALID_ARGUMENT", "invalid argument"},
    {"SM70OPS_ERR_ABI_MISMATCH", "ABI major version not supported by this plugin"},
    {"SM70OPS_ERR_UNSUPPORTED", "declined by the capability check: use the host's path"},
    {"SM70OPS_ERR_NOT_IMPLEMENTED", "not implemented in this build"},
    {"SM70OPS_ERR_WORKSPACE_TOO_SMALL", "workspace smaller than the capability check reported"},
    {"SM70OPS_ERR_NO_DEVICE", "no usable CUDA device"},
    {"SM70OPS_ERR_CUDA", "CUDA runtime error"},
    {"SM70OPS_ERR_INDEX_OUT_OF_RANGE", "a device-side index was out of range (checked mode)"},
    {"SM70OPS_ERR_INTERNAL", "internal error in the plugin"},
};

static const char *const kReasons[SM70OPS_REASON_COUNT] = {
    "ACCEPTED",
    "PLUGIN_DISABLED",
    "OP_DISABLED",
    "NO_DEVICE",
    "ARCH",
    "UNKNOWN_OP",
    "STRUCT_SIZE",
    "INVALID_ARGUMENT",
    "UNSUPPORTED_DTYPE",
    "UNSUPPORTED_SHAPE",
    "BELOW_CROSSOVER",
    "NOT_IMPLEMENTED",
    "TOO_LARGE",
};

const char *sm70_status_name(sm70ops_status status) {
  if (status < 0 || status >= SM70OPS_STATUS_COUNT) return "SM70OPS_STATUS_UNKNOWN";
  return kStatuses[status].name;
}

const char *sm70_status_string(sm70ops_status status) {
  if (status < 0 || status >= SM70OPS_STATUS_COUNT) return "unknown status";
  return kStatuses[status].text;
}

const char *sm70_reason_name(sm70ops_reason reason) {
  if (reason < 0 || reason >= SM70OPS_REASON_COUNT) return "UNKNOWN_REASON";
  return kReasons[reason];
}

static _Thread_local char last_error[512];

const char *sm70_last_error(void) { return last_error; }

sm70ops_status sm70_fail(sm70ops_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error, sizeof(last_error), format, args);
  va_end(args);
  return status;
}

sm70ops_status sm70_ok(void) {
  last_error[0] = '\0';
  return SM70OPS_OK;
}
