/* Status codes, reason codes and the thread-local last-error message. */
#ifndef SM70OPS_PLUGIN_STATUS_H_
#define SM70OPS_PLUGIN_STATUS_H_

#include "abi/sm70ops.h"

const char *sm70_status_name(sm70ops_status status);
const char *sm70_status_string(sm70ops_status status);
const char *sm70_reason_name(sm70ops_reason reason);

/* The calling thread's last failure message; "" after a success. No allocation: a fixed
 * thread-local buffer. */
const char *sm70_last_error(void);

/* Records `status` with a printf-style message for this thread and returns `status`, so a failure
 * is one line: `return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "q is NULL");`. */
sm70ops_status sm70_fail(sm70ops_status status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the thread's message and returns SM70OPS_OK. */
sm70ops_status sm70_ok(void);

#endif /* SM70OPS_PLUGIN_STATUS_H_ */
