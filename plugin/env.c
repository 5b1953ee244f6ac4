#include "plugin/env.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef enum { kBoolOff = 0, kBoolOn = 1, kBoolMalformed = 2 } bool_value;

static bool_value parse_bool(const char *text) {
  static const char *const kOn[] = {"1", "true", "on", "yes"};
  static const char *const kOff[] = {"0", "false", "off", "no"};
  for (size_t i = 0; i < sizeof(kOn) / sizeof(kOn[0]); ++i) {
    if (strcasecmp(text, kOn[i]) == 0) return kBoolOn;
    if (strcasecmp(text, kOff[i]) == 0) return kBoolOff;
  }
  return kBoolMalformed;
}

/* The boolean switches: variable, what it sets (a settings flag, or the ops of a mask), the
 * parsed value that sets it, and what setting it does (for the log). */
typedef struct bool_switch {
  const char *name;
  size_t field;     /* offsetof(sm70_settings, ...) of a flag; ignored when ops != 0 */
  uint32_t ops;     /* bit `op` for each op id it switches off */
  int32_t set_when; /* kBoolOn or kBoolOff */
  const char *effect;
} bool_switch;

#define OP_BIT(op) (1u << (op))

static const bool_switch kSwitches[] = {
    {"SM70OPS_DISABLE", offsetof(sm70_settings, plugin_disabled), 0, kBoolOn, "plugin off"},
    {"SM70OPS_DISABLE_QSA_INDEX", 0, OP_BIT(SM70OPS_OP_QSA_INDEX), kBoolOn, "qsa_index off"},
    {"SM70OPS_DISABLE_QSA_ATTN", 0, OP_BIT(SM70OPS_OP_QSA_ATTN), kBoolOn, "qsa_attn off"},
    {"SM70OPS_DISABLE_NVFP4_MOE", 0,
     OP_BIT(SM70OPS_OP_NVFP4_MOE) | OP_BIT(SM70OPS_OP_NVFP4_MOE_PREPARE), kBoolOn,
     "nvfp4_moe and nvfp4_moe_prepare off"},
    /* The seed engine's switch keeps its meaning: 0 turns the indexer fast path off. */
    {"VLLM_SM70_QSA_INDEXER_CUBLAS", 0, OP_BIT(SM70OPS_OP_QSA_INDEX), kBoolOff, "qsa_index off"},
    {"SM70OPS_CHECKED", offsetof(sm70_settings, checked), 0, kBoolOn,
     "checked mode on: kernels validate page ids, selections, lengths, query_start_loc and "
     "expert ids"},
    {"SM70OPS_ALLOW_PTX", offsetof(sm70_settings, allow_ptx), 0, kBoolOn,
     "an allowed GPU this build has no SASS for runs its PTX through the driver's JIT "
     "(validation only)"},
};

static const char kAllowArch[] = "SM70OPS_ALLOW_ARCH";

static void turn_plugin_off(sm70_settings *s, sm70_note_fn note, void *user, const char *why) {
  if (!s->plugin_disabled)
    snprintf(s->plugin_disabled_note, sizeof(s->plugin_disabled_note), "%s", why);
  s->plugin_disabled = 1;
  if (note) note(user, SM70OPS_LOG_ERROR, why);
}

static void read_switch(const bool_switch *sw, const char *text, sm70_note_fn note, void *user,
                        sm70_settings *s) {
  char line[SM70_ENV_NOTE_BYTES];
  bool_value v = parse_bool(text);
  if (v == kBoolMalformed) {
    snprintf(line, sizeof(line),
             "%s='%.40s' is not one of 0/1/true/false/on/off/yes/no: plugin off", sw->name, text);
    turn_plugin_off(s, note, user, line);
    return;
  }
  int32_t set = (int32_t)v == sw->set_when;
  if (set && sw->ops != 0) s->disabled_ops |= sw->ops;
  if (set && sw->ops == 0) *(int32_t *)((char *)s + sw->field) = 1;
  snprintf(line, sizeof(line), "%s=%s: %s", sw->name, text, set ? sw->effect : "no effect");
  if (note) note(user, SM70OPS_LOG_INFO, line);
  if (set && sw->ops == 0 && sw->field == offsetof(sm70_settings, plugin_disabled)) {
    snprintf(s->plugin_disabled_note, sizeof(s->plugin_disabled_note), "%s", line);
  }
}

static int32_t is_digit(char c) { return c >= '0' && c <= '9'; }

/* "90", "sm_90" or "9.0": exactly that, nothing around it (no sign, space or empty part). */
static int32_t parse_arch(const char *item, size_t len, int32_t *cc) {
  size_t i = len >= 3 && strncasecmp(item, "sm_", 3) == 0 ? 3 : 0;
  const size_t first_digit = i;
  int32_t value = 0;
  for (; i < len && is_digit(item[i]) && i - first_digit < 3; ++i)
    value = value * 10 + item[i] - '0';
  if (i == first_digit) return 0;
  if (i + 2 == len && item[i] == '.' && is_digit(item[i + 1])) {
    value = value * 10 + item[i + 1] - '0';
    i += 2;
  }
  if (i != len || value < 10 || value > 999) return 0;
  *cc = value;
  return 1;
}

/* A comma-separated list of them; an empty item (as in "90,") makes it malformed. */
static void read_allow_arch(const char *text, sm70_note_fn note, void *user, sm70_settings *s) {
  char line[SM70_ENV_NOTE_BYTES];
  for (const char *item = text;; item += strcspn(item, ",") + 1) {
    const size_t len = strcspn(item, ",");
    int32_t cc = 0;
    if (!parse_arch(item, len, &cc) || s->allowed_arch_count == SM70_MAX_ALLOWED_ARCHS) {
      snprintf(line, sizeof(line),
               "%s='%.40s' is not a list of up to %d compute capabilities "
               "like 90,sm_80,8.6: plugin off",
               kAllowArch, text, SM70_MAX_ALLOWED_ARCHS);
      s->allowed_arch_count = 0;
      turn_plugin_off(s, note, user, line);
      return;
    }
    s->allowed_archs[s->allowed_arch_count++] = cc;
    if (item[len] == '\0') break;
  }
  snprintf(line, sizeof(line), "%s=%s: validation on these non-SM70 GPUs allowed", kAllowArch,
           text);
  if (note) note(user, SM70OPS_LOG_WARN, line);
}

void sm70_settings_read(sm70_getenv_fn get, sm70_note_fn note, void *user, sm70_settings *out) {
  memset(out, 0, sizeof(*out));
  for (size_t i = 0; i < sizeof(kSwitches) / sizeof(kSwitches[0]); ++i) {
    const char *text = get(kSwitches[i].name);
    if (text != NULL && text[0] != '\0') read_switch(&kSwitches[i], text, note, user, out);
  }
  const char *archs = get(kAllowArch);
  if (archs != NULL && archs[0] != '\0') read_allow_arch(archs, note, user, out);
}

int32_t sm70_settings_op_disabled(const sm70_settings *s, sm70ops_op op) {
  return op >= 0 && op < 32 && (s->disabled_ops & OP_BIT(op)) != 0;
}

void sm70_env_op_switches(sm70ops_op op, char *out, size_t bytes) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < sizeof(kSwitches) / sizeof(kSwitches[0]) && used < bytes; ++i) {
    const bool_switch *sw = &kSwitches[i];
    if (op < 0 || op >= 32 || (sw->ops & OP_BIT(op)) == 0) continue;
    int n = snprintf(out + used, bytes - used, "%s%s=%d", used ? " or " : "", sw->name,
                     sw->set_when == kBoolOn);
    if (n > 0) used += (size_t)n;
  }
}
