/* The generic check / workspace_size / execute entry points of the function table. */
#ifndef SM70OPS_PLUGIN_DISPATCH_H_
#define SM70OPS_PLUGIN_DISPATCH_H_

#include "abi/sm70ops.h"

sm70ops_status sm70_check(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                          sm70ops_decision *out);
sm70ops_status sm70_workspace_size(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                                   uint64_t *bytes);
sm70ops_status sm70_execute(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                            void *stream, void *workspace, uint64_t workspace_bytes);

#endif /* SM70OPS_PLUGIN_DISPATCH_H_ */
