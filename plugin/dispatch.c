#include "plugin/dispatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plugin/context.h"
#include "plugin/cuda_device.h"
#include "plugin/env.h"
#include "plugin/op.h"
#include "plugin/status.h"

static const sm70_op *const kOps[] = {
    &sm70_op_qsa_index,
    &sm70_op_qsa_attn,
    &sm70_op_nvfp4_moe,
    &sm70_op_nvfp4_moe_prepare,
};

enum { kWorkspaceAlignBytes = 256 };

/* An op's arguments as this plugin's minor defines them: a host's struct of an earlier minor is
 * copied in and the fields it lacks read as zero, each one's documented default. */
typedef union sm70_args {
  sm70ops_qsa_index_args qsa_index;
  sm70ops_qsa_attn_args qsa_attn;
  sm70ops_nvfp4_moe_args nvfp4_moe;
  sm70ops_nvfp4_moe_prepare_args nvfp4_moe_prepare;
} sm70_args;

int32_t sm70_decline(sm70_plan *plan, sm70ops_reason reason, const char *format, ...) {
  plan->reason = reason;
  va_list args;
  va_start(args, format);
  vsnprintf(plan->message, sizeof(plan->message), format, args);
  va_end(args);
  return 0;
}

static const sm70_op *find_op(sm70ops_op id) {
  for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); ++i) {
    if (kOps[i]->id == id) return kOps[i];
  }
  return NULL;
}

/* The host's struct must have the size of one ABI minor's definition of it. */
static int32_t known_size(const sm70_op *op, uint32_t size, sm70_plan *plan) {
  char sizes[SM70OPS_MESSAGE_BYTES / 2] = "";
  size_t used = 0;
  for (int32_t minor = 0; minor <= SM70OPS_ABI_MINOR; ++minor) {
    if (size == op->args_sizes[minor]) return 1;
    if (used < sizeof(sizes)) {
      used +=
          (size_t)snprintf(sizes + used, sizeof(sizes) - used, "%s%d.%d: %u",
                           minor == 0 ? "" : ", ", SM70OPS_ABI_MAJOR, minor, op->args_sizes[minor]);
    }
  }
  const uint32_t newest = op->args_sizes[SM70OPS_ABI_MINOR];
  return sm70_decline(plan, SM70OPS_REASON_STRUCT_SIZE,
                      "%s args struct_size %u is no ABI %d.x size of it (%s)%s", op->name, size,
                      SM70OPS_ABI_MAJOR, sizes, size > newest ? ": the host is newer" : "");
}

/* The gates every op shares, in the order an operator would want them reported. */
static int32_t common_gates(const sm70ops_context *ctx, const sm70_op *op, sm70ops_op id,
                            const void *args, sm70_plan *plan) {
  const sm70_settings *s = &ctx->settings;
  if (s->plugin_disabled) {
    return sm70_decline(plan, SM70OPS_REASON_PLUGIN_DISABLED, "%s", s->plugin_disabled_note);
  }
  if (op == NULL) {
    return sm70_decline(plan, SM70OPS_REASON_UNKNOWN_OP,
                        "op id %d is not known to sm70ops %d.%d.%d", id, SM70OPS_VERSION_MAJOR,
                        SM70OPS_VERSION_MINOR, SM70OPS_VERSION_PATCH);
  }
  if (sm70_settings_op_disabled(s, op->id)) {
    char switches[SM70OPS_MESSAGE_BYTES / 2];
    sm70_env_op_switches(op->id, switches, sizeof(switches));
    return sm70_decline(plan, SM70OPS_REASON_OP_DISABLED, "%s switched off by %s", op->name,
                        switches);
  }
  if (ctx->compute_capability == 0) {
    return sm70_decline(plan, SM70OPS_REASON_NO_DEVICE, "%s", ctx->no_device_note);
  }
  if (!sm70_context_arch_allowed(ctx)) {
    return sm70_decline(plan, SM70OPS_REASON_ARCH,
                        "compute capability %d.%d is not SM70 (set SM70OPS_ALLOW_ARCH=%d to "
                        "validate on it)",
                        ctx->compute_capability / 10, ctx->compute_capability % 10,
                        ctx->compute_capability);
  }
  if (ctx->no_code_note[0] != '\0') {
    return sm70_decline(plan, SM70OPS_REASON_ARCH, "%s", ctx->no_code_note);
  }
  if (args == NULL) return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "args is NULL");
  return known_size(op, *(const uint32_t *)args, plan);
}

/* Plans the call; on a known op and struct size `normalized` holds the host's arguments at this
 * plugin's size, and plan() and launch read that copy. */
static void make_plan(const sm70ops_context *ctx, sm70ops_op id, const void *args,
                      int32_t need_data, sm70_args *normalized, sm70_plan *plan) {
  memset(plan, 0, sizeof(*plan));
  const sm70_op *op = find_op(id);
  if (!common_gates(ctx, op, id, args, plan)) return;
  memset(normalized, 0, sizeof(*normalized));
  memcpy(normalized, args, *(const uint32_t *)args);
  op->plan(ctx, normalized, need_data, plan);
  /* Sized for a V100's 96 KB: an allow-listed GPU with less (a T4) cannot launch it. */
  const uint32_t smem_limit = ctx->smem_per_block;
  if (plan->reason == SM70OPS_REASON_ACCEPTED && plan->smem_bytes > smem_limit) {
    sm70_decline(plan, SM70OPS_REASON_ARCH,
                 "%s needs %u KB of shared memory per block, compute capability %d.%d gives %u KB",
                 op->name, (plan->smem_bytes + 1023) / 1024, ctx->compute_capability / 10,
                 ctx->compute_capability % 10, smem_limit / 1024);
  }
}

sm70ops_status sm70_check(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                          sm70ops_decision *out) {
  if (ctx == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "check: ctx is NULL");
  if (out == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "check: out is NULL");
  if (out->struct_size < sizeof(sm70ops_decision)) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "check: decision struct_size %u < %zu",
                     out->struct_size, sizeof(sm70ops_decision));
  }
  sm70_plan plan;
  sm70_args normalized;
  make_plan(ctx, op, args, 0, &normalized, &plan);
  out->accepted = plan.reason == SM70OPS_REASON_ACCEPTED;
  out->reason = plan.reason;
  out->route = out->accepted ? plan.route : SM70OPS_ROUTE_NONE;
  out->workspace_bytes = out->accepted ? plan.workspace_bytes : 0;
  out->output_bytes = out->accepted ? plan.output_bytes : 0;
  memcpy(out->message, plan.message, sizeof(out->message));
  return sm70_ok();
}

sm70ops_status sm70_workspace_size(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                                   uint64_t *bytes) {
  if (bytes == NULL)
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "workspace_size: bytes is NULL");
  *bytes = 0;
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_status status = sm70_check(ctx, op, args, &d);
  if (status != SM70OPS_OK) return status;
  if (!d.accepted) return sm70_fail(SM70OPS_ERR_UNSUPPORTED, "workspace_size: %s", d.message);
  *bytes = d.workspace_bytes;
  return sm70_ok();
}

static sm70ops_status decline_status(const sm70_plan *plan) {
  switch (plan->reason) {
    case SM70OPS_REASON_INVALID_ARGUMENT:
    case SM70OPS_REASON_STRUCT_SIZE:
      return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "%s", plan->message);
    case SM70OPS_REASON_NO_DEVICE:
      return sm70_fail(SM70OPS_ERR_NO_DEVICE, "%s", plan->message);
    default:
      return sm70_fail(SM70OPS_ERR_UNSUPPORTED, "%s", plan->message);
  }
}

static sm70ops_status check_workspace(const sm70_plan *plan, const void *workspace,
                                      uint64_t workspace_bytes) {
  if (workspace_bytes < plan->workspace_bytes) {
    return sm70_fail(SM70OPS_ERR_WORKSPACE_TOO_SMALL, "workspace %llu bytes, this call needs %llu",
                     (unsigned long long)workspace_bytes,
                     (unsigned long long)plan->workspace_bytes);
  }
  if (plan->workspace_bytes > 0 && workspace == NULL) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "workspace is NULL, this call needs %llu bytes",
                     (unsigned long long)plan->workspace_bytes);
  }
  if ((uintptr_t)workspace % kWorkspaceAlignBytes != 0) {
    return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "workspace is not %d-byte aligned",
                     kWorkspaceAlignBytes);
  }
  return SM70OPS_OK;
}

/* Runs the launch on ctx's device and restores the caller's device whatever happens. */
static sm70ops_status launch_on_device(const sm70ops_context *ctx, const sm70_plan *plan,
                                       const void *args, void *stream, void *workspace) {
  sm70_cuda_error err;
  int32_t previous = 0;
  if (sm70_cuda_enter(ctx->device_ordinal, &previous, &err) != 0) {
    return sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  }
  sm70ops_status status = SM70OPS_OK;
  int32_t cc = 0;
  if (sm70_cuda_compute_capability(ctx->device_ordinal, &cc, &err) != 0) {
    status = sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  } else if (cc != ctx->compute_capability) {
    status = sm70_fail(SM70OPS_ERR_NO_DEVICE,
                       "device %d has compute capability %d, the context was created for %d",
                       ctx->device_ordinal, cc, ctx->compute_capability);
  } else {
    status = plan->launch(plan, args, stream, workspace);
  }
  if (sm70_cuda_leave(previous, &err) != 0 && status == SM70OPS_OK) {
    status = sm70_fail(SM70OPS_ERR_CUDA, "%s", err.message);
  }
  return status;
}

sm70ops_status sm70_execute(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                            void *stream, void *workspace, uint64_t workspace_bytes) {
  if (ctx == NULL) return sm70_fail(SM70OPS_ERR_INVALID_ARGUMENT, "execute: ctx is NULL");
  sm70_plan plan;
  sm70_args normalized;
  make_plan(ctx, op, args, 1, &normalized, &plan);
  if (plan.reason != SM70OPS_REASON_ACCEPTED) return decline_status(&plan);
  sm70ops_status status = check_workspace(&plan, workspace, workspace_bytes);
  if (status != SM70OPS_OK) return status;
  status = sm70_context_take_checked_error(ctx);
  if (status != SM70OPS_OK) return status;
  plan.checked = ctx->checked_device;
  plan.smem_optin = ctx->smem_per_block;
  if (plan.work_items == 0) return sm70_ok();
  status = launch_on_device(ctx, &plan, &normalized, stream, workspace);
  return status == SM70OPS_OK ? sm70_ok() : status;
}
