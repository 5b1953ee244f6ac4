/* libFuzzer target: the environment the plugin reads at context_create. Fuzz bytes set the
 * rollback switches and SM70OPS_ALLOW_ARCH (setenv, unset again after the call) to tokens,
 * variations and raw strings, and pick the context descriptor (struct_size, ordinal, compute
 * capability, log level, NULLs). Each context then answers a check of every op on a valid
 * descriptor, compared with what README "Environment" promises: a malformed value turns the whole
 * plugin off, each switch declines its op, ALLOW_ARCH adds compute capabilities, every variable
 * set is logged. Runs only where api->device_count finds no GPU. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strcasecmp */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tests/fuzz/fuzz_args.h"
#include "tests/fuzz/fuzz_common.h"

enum { kVars = FZ_ENV_VARS, kAllowArch = FZ_ENV_ALLOW_ARCH, kBools = FZ_ENV_VARS - 1, kOps = 4 };

static char log_text[16384];
static size_t log_used;

static void capture_log(void *user, sm70ops_log_level level, const char *message) {
  fz_log(user, level, message);
  size_t n = strlen(message);
  if (log_used + n + 2 < sizeof(log_text)) {
    memcpy(log_text + log_used, message, n);
    log_used += n;
    log_text[log_used++] = '\n';
    log_text[log_used] = '\0';
  }
}

static sm70ops_reason baseline_reason(const sm70ops_context *ctx, sm70ops_op op) {
  fz_reader none = {NULL, 0};
  fz_args a = fz_build_args(&none, op);
  sm70ops_decision d = {.struct_size = sizeof(d)};
  FZ_REQUIRE(fz_api()->check(ctx, op, a.args, &d) == SM70OPS_OK, "check: %s",
             fz_api()->last_error());
  fz_check_decision(&d);
  fz_arena_reset();
  return d.reason;
}

static void reference(int32_t cc, const char *allow, sm70ops_reason *out) {
  if (allow) setenv("SM70OPS_ALLOW_ARCH", allow, 1);
  sm70ops_context_desc desc = {.struct_size = sizeof(desc), .compute_capability = cc};
  sm70ops_context *ctx = NULL;
  FZ_REQUIRE(fz_api()->context_create(&desc, &ctx) == SM70OPS_OK, "context_create");
  fz_clear_env();
  for (sm70ops_op op = 1; op <= kOps; ++op) out[op] = baseline_reason(ctx, op);
  fz_api()->context_destroy(ctx);
}

/* What check() says on the valid baseline of `op` for a context of capability cc on a clean
 * environment (cc allow-listed unless 70): ACCEPTED, or what the capability itself decides (a T4
 * lacks the attention's shared memory). Computed when first needed; the environment is clean
 * between fuzzed calls. */
static sm70ops_reason baseline(int32_t cc, sm70ops_op op) {
  static struct {
    int32_t cc;
    sm70ops_reason reasons[kOps + 1];
  } cache[16];
  static int32_t cached;
  for (int32_t i = 0; i < cached; ++i) {
    if (cache[i].cc == cc) return cache[i].reasons[op];
  }
  sm70ops_reason reasons[kOps + 1];
  char allow[16];
  snprintf(allow, sizeof(allow), "%d", cc);
  reference(cc, cc == 70 ? NULL : allow, reasons);
  if (cached < (int32_t)(sizeof(cache) / sizeof(cache[0]))) {
    cache[cached].cc = cc;
    memcpy(cache[cached++].reasons, reasons, sizeof(reasons));
  }
  return reasons[op];
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_clear_env();
  fz_require_no_gpu("env_fuzzer");
  return 0;
}

/* ---- The oracle: README "Environment", independently of plugin/env.c. ---- */

typedef enum { kUnset, kOn, kOff, kMalformed } bool_value;

static bool_value parse_bool(const char *text) {
  static const char *const kOnWords[] = {"1", "true", "on", "yes"};
  static const char *const kOffWords[] = {"0", "false", "off", "no"};
  if (text == NULL || text[0] == '\0') return kUnset;
  for (size_t i = 0; i < 4; ++i) {
    if (strcasecmp(text, kOnWords[i]) == 0) return kOn;
    if (strcasecmp(text, kOffWords[i]) == 0) return kOff;
  }
  return kMalformed;
}

typedef enum { kArchUnset, kArchValid, kArchInvalid } arch_value;

/* The README's grammar: a comma list of up to 8 items "NN", "sm_NN" or "N.N": one to three
 * digits, then optionally a dot and exactly one digit, value 10..999. Anything else (a space, a
 * sign, "9.", "1.02", "0090", an empty item as in "90,") is malformed and turns the plugin off. */
static arch_value parse_arch(const char *text, int32_t *archs, int32_t *count) {
  *count = 0;
  if (text == NULL || text[0] == '\0') return kArchUnset;
  for (const char *p = text;;) {
    const char *end = strchr(p, ',');
    const size_t n = end ? (size_t)(end - p) : strlen(p);
    if (*count == 8) return kArchInvalid;
    const size_t first = (n >= 3 && strncasecmp(p, "sm_", 3) == 0) ? 3 : 0;
    size_t i = first;
    int64_t cc = 0;
    for (; i < n && i - first < 3 && isdigit((unsigned char)p[i]); ++i) cc = cc * 10 + (p[i] - '0');
    if (i == first) return kArchInvalid;
    if (i + 2 == n && p[i] == '.' && isdigit((unsigned char)p[i + 1])) {
      cc = cc * 10 + (p[i + 1] - '0');
      i += 2;
    }
    if (i != n || cc < 10 || cc > 999) return kArchInvalid;
    archs[(*count)++] = (int32_t)cc;
    if (!end) return kArchValid;
    p = end + 1;
  }
}

/* ---- Inputs ---- */

static const char *const kBoolTokens[] = {"1",  "0",    "true", "false", "on",      "off", "yes",
                                          "no", "TRUE", "Off",  "YeS",   "2",       "-1",  " 1",
                                          "1 ", "00",   "tru",  "yes\n", "disable", "none"};
static const char *const kArchTokens[] = {"90",  "sm_90", "9.0",    "70",  "75",   "SM_80", "8.6",
                                          "999", "1000",  "9",      "0.9", "9.10", " 90",   "+90",
                                          "sm_", "sm_9x", "9.-0",   "09",  "0x5a", "-90",   "10",
                                          "1.0", "99.9",  "sm_100", "9.",  ".9",   "9..0",  "sm90"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A NUL-terminated value for variable `var` from the bytes; NULL: leave it unset. */
static const char *make_value(fz_reader *r, int32_t var) {
  uint8_t m = fz_u8(r);
  const char *const *tokens = var == kAllowArch ? kArchTokens : kBoolTokens;
  size_t ntokens = var == kAllowArch ? COUNT(kArchTokens) : COUNT(kBoolTokens);
  char *out = fz_alloc(256);
  switch (m >> 5) {
    case 0:
      return NULL;
    case 1:
      return ""; /* empty counts as unset */
    case 2:
    case 3:
      return tokens[fz_u8(r) % ntokens];
    case 4: { /* raw bytes up to a NUL */
      size_t n = fz_u8(r) % 64;
      size_t i = 0;
      for (; i < n && r->size > 0; ++i) {
        char ch = (char)fz_u8(r);
        if (ch == '\0') break;
        out[i] = ch;
      }
      out[i] = '\0';
      return out;
    }
    case 5: { /* a list of tokens */
      size_t items = 1 + fz_u8(r) % 10;
      for (size_t i = 0; i < items; ++i) {
        if (i) strcat(out, (fz_u8(r) & 7) == 7 ? ",," : ",");
        strcat(out, tokens[fz_u8(r) % ntokens]);
      }
      if ((fz_u8(r) & 7) == 7) strcat(out, ",");
      return out;
    }
    case 6: { /* a token in another case, or with a byte added */
      strcpy(out, tokens[fz_u8(r) % ntokens]);
      size_t n = strlen(out);
      uint8_t k = fz_u8(r);
      if (k & 1) {
        for (size_t i = 0; i < n; ++i) out[i] = (char)toupper((unsigned char)out[i]);
      } else {
        char ch = (char)(fz_u8(r) | 1);
        memmove(out + 1, out, n + 1);
        out[(k >> 1) % 2 ? 0 : n] = ch;
        if ((k >> 1) % 2 == 0) {
          memmove(out, out + 1, n + 1);
          out[n] = ch;
          out[n + 1] = '\0';
        }
      }
      return out;
    }
    default: { /* long */
      size_t n = 200 + fz_u8(r) % 50;
      memset(out, (fz_u8(r) & 1) ? '9' : '1', n);
      out[n] = '\0';
      return out;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const sm70ops_api *api = fz_api();
  fz_reader r = {data, size};
  const char *values[kVars];
  fz_clear_env();
  for (int32_t v = 0; v < kVars; ++v) {
    values[v] = make_value(&r, v);
    if (values[v] != NULL) setenv(fz_env_names[v], values[v], 1);
  }
  static char note[4096];
  size_t used = (size_t)snprintf(note, sizeof(note), "environment:");
  for (int32_t v = 0; v < kVars && used < sizeof(note); ++v) {
    if (values[v] != NULL) {
      used += (size_t)snprintf(note + used, sizeof(note) - used, " %s='%s'", fz_env_names[v],
                               values[v]);
    }
  }
  fz_note = note;

  /* The context descriptor. */
  static const int32_t kCcs[] = {70, 90, 75, 80, 86, 0, -1, 1000, 999, 10, 9, INT32_MIN};
  static const int32_t kOrdinals[] = {0, 0, 0, 1, -1, INT32_MAX, INT32_MIN};
  uint8_t m = fz_u8(&r);
  int32_t cc = m < 0x80 ? 70 : m < 0xF0 ? kCcs[m % COUNT(kCcs)] : (int32_t)fz_u32(&r);
  int32_t ordinal = kOrdinals[fz_u8(&r) % COUNT(kOrdinals)];
  uint8_t s = fz_u8(&r);
  uint32_t claim = sizeof(sm70ops_context_desc);
  if (s >= 0xE0) claim = (s & 1) ? fz_u8(&r) % 64 : fz_u32(&r);
  int32_t level = (int32_t)(fz_u8(&r) % 6) - 1 + SM70OPS_LOG_ERROR; /* -1..4 */
  if (level < 0 || level > 3) level = (level < 0) ? -1 : 3 + (int32_t)fz_u8(&r);
  uint8_t nulls = fz_u8(&r);
  int32_t log_on = !(nulls & 1);
  int32_t desc_null = (nulls & 0xF0) == 0xF0, out_null = (nulls & 0xF0) == 0xE0;

  sm70ops_context_desc full = {.struct_size = claim,
                               .device_ordinal = ordinal,
                               .compute_capability = cc,
                               .log_level = level,
                               .log_fn = log_on ? capture_log : NULL};
  size_t alloc = claim < 4 ? 4 : claim > sizeof(full) + 64 ? sizeof(full) : claim;
  sm70ops_context_desc *desc = fz_alloc(alloc);
  memcpy(desc, &full, alloc < sizeof(full) ? alloc : sizeof(full));
  desc->struct_size = claim;
  log_used = 0;
  log_text[0] = '\0';
  sm70ops_context *ctx = (sm70ops_context *)(uintptr_t)0x1234;
  sm70ops_status st = api->context_create(desc_null ? NULL : desc, out_null ? NULL : &ctx);
  fz_clear_env(); /* read once: nothing below may depend on the variables still being set */
  fz_check_status(st, "context_create");
  int32_t valid =
      !desc_null && !out_null && claim == sizeof(full) && ordinal >= 0 && cc >= 0 && cc <= 999;
  FZ_REQUIRE(valid ? st == SM70OPS_OK : st == SM70OPS_ERR_INVALID_ARGUMENT,
             "context_create returned %d (struct_size %u, ordinal %d, cc %d)", st, claim, ordinal,
             cc);
  if (!out_null) FZ_REQUIRE((st == SM70OPS_OK) == (ctx != NULL), "ctx %p on %d", (void *)ctx, st);
  if (st != SM70OPS_OK) {
    fz_arena_reset();
    return 0;
  }

  /* Every variable set (non-empty) is logged by name when everything is logged. */
  if (log_on && level >= SM70OPS_LOG_DEBUG) {
    for (int32_t v = 0; v < kVars; ++v) {
      if (values[v] != NULL && values[v][0] != '\0') {
        FZ_REQUIRE(strstr(log_text, fz_env_names[v]) != NULL, "%s='%s' not logged:\n%s",
                   fz_env_names[v], values[v], log_text);
      }
    }
  }

  /* What each op must answer on a valid descriptor. */
  bool_value bools[kBools]; /* fz_env_names order; SM70OPS_CHECKED changes no decision */
  int32_t any_malformed = 0;
  for (int32_t v = 0; v < kBools; ++v) {
    bools[v] = parse_bool(values[v]);
    any_malformed |= bools[v] == kMalformed;
  }
  int32_t archs[8], narch = 0;
  arch_value arch = parse_arch(values[kAllowArch], archs, &narch);
  int32_t off = bools[0] == kOn || any_malformed || arch == kArchInvalid;
  int32_t allowed = cc == 70;
  for (int32_t i = 0; i < narch; ++i) allowed |= archs[i] == cc;
  const int32_t op_disabled[kOps + 1] = {0, bools[1] == kOn || bools[4] == kOff, bools[2] == kOn,
                                         bools[3] == kOn, bools[3] == kOn};
  for (sm70ops_op op = 1; op <= kOps; ++op) {
    fz_reader none = {NULL, 0};
    fz_args a = fz_build_args(&none, op);
    sm70ops_decision d = {.struct_size = sizeof(d)};
    FZ_REQUIRE(api->check(ctx, op, a.args, &d) == SM70OPS_OK, "check: %s", api->last_error());
    fz_check_decision(&d);
    sm70ops_reason want;
    if (off) {
      want = SM70OPS_REASON_PLUGIN_DISABLED;
    } else if (op_disabled[op]) {
      want = SM70OPS_REASON_OP_DISABLED;
    } else if (cc == 0) {
      want = SM70OPS_REASON_NO_DEVICE; /* no GPU here (fz_require_no_gpu) */
    } else if (!allowed) {
      want = SM70OPS_REASON_ARCH;
    } else if (ordinal != 0) {
      want = SM70OPS_REASON_INVALID_ARGUMENT; /* the tensors are on device 0 */
    } else {
      want = baseline(cc, op);
    }
    FZ_REQUIRE(d.reason == want, "op %d: reason %s, expected %s (%s)", op,
               api->reason_name(d.reason), api->reason_name(want), d.message);
  }
  api->context_destroy(ctx);
  fz_arena_reset();
  return 0;
}
