/* libFuzzer target: the four ops through the exported table (sm70ops_get_api, then check,
 * workspace_size and execute), on contexts for compute capability 70, 90 without and with
 * SM70OPS_ALLOW_ARCH=90, another device ordinal, and one that asked the CUDA runtime (no device
 * here). Inputs become op ids (valid and not), argument structs (tests/fuzz/fuzz_args.h), decision
 * structs of every size and workspaces. Runs only where api->device_count finds no GPU. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strcasecmp */

#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_args.h"
#include "tests/fuzz/fuzz_common.h"

typedef struct fz_context {
  sm70ops_context *ctx;
  int32_t allowed; /* a valid op with a valid descriptor may be accepted */
} fz_context;

enum { kContexts = 7 };
static fz_context contexts[kContexts];

static sm70ops_context *create(int32_t ordinal, int32_t cc, const char *allow_arch) {
  if (allow_arch != NULL) setenv("SM70OPS_ALLOW_ARCH", allow_arch, 1);
  sm70ops_context_desc desc = {.struct_size = sizeof(desc),
                               .device_ordinal = ordinal,
                               .compute_capability = cc,
                               .log_level = SM70OPS_LOG_DEBUG,
                               .log_fn = fz_log};
  sm70ops_context *ctx = NULL;
  sm70ops_status s = fz_api()->context_create(&desc, &ctx);
  fz_clear_env();
  FZ_REQUIRE(s == SM70OPS_OK && ctx != NULL, "context_create(cc %d): %s", cc,
             fz_api()->last_error());
  return ctx;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_clear_env();
  fz_require_no_gpu("ops_fuzzer");
  contexts[0] = (fz_context){create(0, 70, NULL), 1};
  contexts[1] = (fz_context){create(0, 90, NULL), 0};
  contexts[2] = (fz_context){create(0, 90, "90"), 1};
  contexts[3] = (fz_context){create(1, 70, NULL), 1};
  contexts[4] = (fz_context){create(0, 0, NULL), 0}; /* asks CUDA: no device, every op declines */
  contexts[5] = (fz_context){create(0, 75, "sm_75,8.6"), 1};
  contexts[6] = (fz_context){NULL, 0};
  return 0;
}

static sm70ops_op pick_op(fz_reader *r) {
  static const sm70ops_op kInvalid[] = {0, 5, -1, 255, INT32_MAX, INT32_MIN};
  uint8_t m = fz_u8(r);
  if (m < 0xE0) return 1 + m % 4;
  if (m < 0xF8) return kInvalid[m % 6];
  return (sm70ops_op)fz_u32(r);
}

/* A decision struct as a host passes it: usually sizeof, else NULL, smaller or larger. The bytes
 * past sizeof(sm70ops_decision) of a larger one are poisoned, and must stay so. */
typedef struct decision_buf {
  sm70ops_decision *d;
  uint32_t claim;
  size_t alloc;
} decision_buf;

enum { kPoison = 0xA5 };

static decision_buf make_decision(fz_reader *r) {
  decision_buf b = {.claim = sizeof(sm70ops_decision)};
  uint8_t m = fz_u8(r);
  if (m >= 0xC0) {
    switch (m % 4) {
      case 0:
        return (decision_buf){NULL, 0, 0};
      case 1:
        b.claim = fz_u8(r) % sizeof(sm70ops_decision);
        break;
      case 2:
        b.claim = sizeof(sm70ops_decision) + 1 + fz_u8(r) % 64;
        break;
      case 3:
        b.claim = fz_u32(r);
        break;
    }
  }
  b.alloc = b.claim < 4 ? 4 : b.claim;
  if (b.alloc > sizeof(sm70ops_decision) + 64) b.alloc = sizeof(sm70ops_decision);
  b.d = fz_alloc(b.alloc);
  memset(b.d, kPoison, b.alloc);
  b.d->struct_size = b.claim;
  return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const sm70ops_api *api = fz_api();
  fz_reader r = {data, size};
  const fz_context *c = &contexts[fz_u8(&r) % kContexts];
  sm70ops_op op = pick_op(&r);
  /* Mostly the op's own struct; sometimes another op's, when its struct_size tells them apart
   * (qsa_index's args have the size of qsa_attn's at ABI 1.1: a host that mixes those up passes
   * integers where pointers belong, which no plugin can detect). */
  uint8_t confuse = fz_u8(&r);
  sm70ops_op args_op = fz_args_size(op) == 0 || confuse >= 0xF0 ? 1 + confuse % 4 : op;
  if (fz_args_size(op) != 0 && fz_args_size(args_op) == fz_args_size(op)) args_op = op;
  fz_args a = fz_build_args(&r, args_op);
  /* Another op's struct whose (mutated) struct_size claims this op's size is the same mix-up:
   * undetectable, so not an input the plugin can be held to. */
  if (args_op != op && a.args != NULL && fz_is_args_size(op, a.struct_size)) return 0;
  int32_t op_known = fz_args_size(op) != 0;
  int32_t size_ok = a.args != NULL && fz_is_args_size(op, a.struct_size);

  /* check */
  decision_buf db = make_decision(&r);
  sm70ops_status s = api->check(c->ctx, op, a.args, db.d);
  fz_check_status(s, "check");
  int32_t decided = c->ctx != NULL && db.d != NULL && db.claim >= sizeof(sm70ops_decision);
  FZ_REQUIRE(decided ? s == SM70OPS_OK : s == SM70OPS_ERR_INVALID_ARGUMENT,
             "check returned %d (ctx %p, decision %p, struct_size %u)", s, (void *)c->ctx,
             (void *)db.d, db.claim);
  for (size_t i = sizeof(sm70ops_decision); i < db.alloc; ++i) {
    FZ_REQUIRE(((const uint8_t *)db.d)[i] == kPoison, "check wrote byte %zu past the decision", i);
  }
  /* The answer to the same question with a well-formed decision: pure and deterministic, so
   * byte for byte what the fuzzed decision got when that one was well-formed. */
  sm70ops_decision d = {.struct_size = sizeof(d)};
  if (c->ctx != NULL) {
    FZ_REQUIRE(api->check(c->ctx, op, a.args, &d) == SM70OPS_OK, "check failed: %s",
               api->last_error());
    fz_check_decision(&d);
    FZ_REQUIRE(op_known || d.reason == SM70OPS_REASON_UNKNOWN_OP, "op %d: reason %d", op, d.reason);
    FZ_REQUIRE(!op_known || d.reason != SM70OPS_REASON_UNKNOWN_OP, "op %d unknown", op);
    if (!c->allowed) FZ_REQUIRE(!d.accepted, "accepted on a context that must decline");
    if (c->allowed && op_known && !size_ok) {
      FZ_REQUIRE(d.reason == (a.args == NULL ? SM70OPS_REASON_INVALID_ARGUMENT
                                             : SM70OPS_REASON_STRUCT_SIZE),
                 "args %p struct_size %u for op %d: reason %d", a.args, a.struct_size, op,
                 d.reason);
    }
    if (decided) {
      sm70ops_decision got = *db.d;
      got.struct_size = d.struct_size;
      FZ_REQUIRE(memcmp(&got, &d, sizeof(d)) == 0, "check is not deterministic");
    }
  }

  /* workspace_size */
  uint64_t bytes = 12345;
  int32_t want_bytes = fz_u8(&r) < 0xF0;
  s = api->workspace_size(c->ctx, op, a.args, want_bytes ? &bytes : NULL);
  fz_check_status(s, "workspace_size");
  if (!want_bytes) {
    FZ_REQUIRE(s == SM70OPS_ERR_INVALID_ARGUMENT, "workspace_size(NULL) returned %d", s);
  } else if (c->ctx == NULL) {
    FZ_REQUIRE(s == SM70OPS_ERR_INVALID_ARGUMENT && bytes == 0, "workspace_size(ctx NULL): %d", s);
  } else {
    FZ_REQUIRE(d.accepted ? s == SM70OPS_OK && bytes == d.workspace_bytes
                          : s == SM70OPS_ERR_UNSUPPORTED && bytes == 0,
               "workspace_size %d (%llu bytes) after check accepted=%d (%llu bytes)", s,
               (unsigned long long)bytes, d.accepted, (unsigned long long)d.workspace_bytes);
  }

  /* execute: never on a GPU (see fz_require_no_gpu); the CUDA runtime finds no driver here. */
  void *workspace = d.workspace_bytes ? (void *)0x8000 : NULL;
  uint64_t workspace_bytes = d.workspace_bytes;
  uint8_t w = fz_u8(&r);
  if (w >= 0xC0) {
    static const uintptr_t kSpaces[] = {0, 0x8000, 0x8001, 0x8080, 0x9000};
    workspace = (void *)kSpaces[w % 5];
    workspace_bytes = (w & 8) ? fz_u64(&r) : workspace_bytes - (w & 16 ? 1 : 0);
  }
  s = api->execute(c->ctx, op, a.args, NULL, workspace, workspace_bytes);
  fz_check_status(s, "execute");
  if (c->ctx == NULL) {
    FZ_REQUIRE(s == SM70OPS_ERR_INVALID_ARGUMENT, "execute(ctx NULL): %d", s);
  } else if (!d.accepted) {
    FZ_REQUIRE(s != SM70OPS_OK, "execute succeeded on a declined descriptor (reason %d)", d.reason);
  }

  fz_arena_reset();
  return 0;
}
