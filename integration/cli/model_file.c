#include "integration/cli/model_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What a key holds: text, a decimal integer, 0 or 1, or a list of positive integers. */
typedef enum value_kind { kText, kInt, kFlag, kList } value_kind;

/* A key of a section, and where its value goes in the struct the section fills. */
typedef struct key_spec {
  const char *key;
  value_kind kind;
  size_t offset;
} key_spec;

#define PLAN_KEY(field, kind) \
  { #field, kind, offsetof(model_table, field) }
#define SHAPE_KEY(field, kind) \
  { #field, kind, offsetof(model_shape, field) }
#define COUNT(array) ((int32_t)(sizeof(array) / sizeof((array)[0])))

static const key_spec kPlanKeys[] = {PLAN_KEY(tp_sizes, kList), PLAN_KEY(page_sizes, kList),
                                     PLAN_KEY(prefill_lengths, kList), PLAN_KEY(chunk_rows, kInt)};

/* In the order of the Python dataclass's fields, so both parsers name the same missing key. */
static const key_spec kShapeKeys[] = {
    SHAPE_KEY(name, kText),           SHAPE_KEY(hidden, kInt),
    SHAPE_KEY(q_heads, kInt),         SHAPE_KEY(kv_heads, kInt),
    SHAPE_KEY(head_dim, kInt),        SHAPE_KEY(attention_gate, kFlag),
    SHAPE_KEY(index_heads, kInt),     SHAPE_KEY(index_dim, kInt),
    SHAPE_KEY(index_weighted, kFlag), SHAPE_KEY(compress_ratio, kInt),
    SHAPE_KEY(index_topk, kInt),      SHAPE_KEY(experts, kInt),
    SHAPE_KEY(expert_topk, kInt),     SHAPE_KEY(expert_inter, kInt),
    SHAPE_KEY(shared_inter, kInt),    SHAPE_KEY(max_context, kInt),
};

/* A section read so far: its keys, the struct they fill, which of them were given. */
typedef struct section {
  char header[sizeof("shapes ") + kModelIdBytes]; /* "plan", "shapes model" */
  int32_t line;
  const key_spec *keys;
  int32_t key_count;
  char *base;
  uint32_t given; /* bit k: keys[k] */
} section;

typedef struct parser {
  const char *path;
  int32_t line; /* the one being read, from 1 */
  model_table *out;
  section sections[1 + kModelMaxShapes];
  int32_t section_count;
  char *error;
  size_t error_bytes;
} parser;

/* "PATH:LINE: message" (line 0: the whole file) into the error buffer; returns 0. */
__attribute__((format(printf, 3, 4))) static int fail(parser *p, int32_t line, const char *format,
                                                      ...) {
  const int n = line > 0 ? snprintf(p->error, p->error_bytes, "%s:%d: ", p->path, line)
                         : snprintf(p->error, p->error_bytes, "%s: ", p->path);
  if (n < 0 || (size_t)n >= p->error_bytes) return 0;
  va_list args;
  va_start(args, format);
  vsnprintf(p->error + n, p->error_bytes - (size_t)n, format, args);
  va_end(args);
  return 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* text[0, n) without the blanks around it into out (kModelMaxLine bytes); 0 if too long. */
static int strip(const char *text, size_t n, char *out) {
  while (n > 0 && is_blank(text[0])) ++text, --n;
  while (n > 0 && is_blank(text[n - 1])) --n;
  if (n >= kModelMaxLine) return 0;
  memcpy(out, text, n);
  out[n] = '\0';
  return 1;
}

/* All decimal digits, at least one; *value saturates past INT32_MAX. */
static int digits(const char *text, size_t n, int64_t *value) {
  *value = 0;
  for (size_t i = 0; i < n; ++i) {
    if (text[i] < '0' || text[i] > '9') return 0;
    *value = *value * 10 + (text[i] - '0');
    if (*value > INT32_MAX) *value = (int64_t)INT32_MAX + 1;
  }
  return n > 0;
}

static int parse_int(parser *p, const char *text, value_kind kind, int32_t *out) {
  int64_t value;
  if (!digits(text, strlen(text), &value) || value > INT32_MAX) {
    return fail(p, p->line, "'%s' is not a decimal integer below 2^31", text);
  }
  if (kind == kFlag && value > 1) return fail(p, p->line, "'%s' is not 0 or 1", text);
  *out = (int32_t)value;
  return 1;
}

/* The list's next value: its start and length, past the blanks before it. */
static size_t next_value(const char **at) {
  while (**at == ' ' || **at == '\t') ++*at;
  return strcspn(*at, " \t");
}

/* Positive values first (else the whole list is refused), then each below 2^31, as in Python. */
static int parse_list(parser *p, const char *text, model_list *out) {
  int64_t value;
  const char *at = text;
  do {
    const size_t n = next_value(&at);
    if (!digits(at, n, &value) || value == 0) {
      return fail(p, p->line, "'%s' is not a list of positive integers", text);
    }
    at += n;
  } while (*at != '\0');
  *out = (model_list){0};
  for (at = text; *at != '\0'; at += strcspn(at, " \t")) {
    const size_t n = next_value(&at);
    digits(at, n, &value);
    if (value > INT32_MAX) {
      return fail(p, p->line, "'%.*s' is not a decimal integer below 2^31", (int)n, at);
    }
    if (out->count == kModelMaxList) return fail(p, p->line, "more than %d values", kModelMaxList);
    out->values[out->count++] = (int32_t)value;
  }
  return 1;
}

static int parse_text(parser *p, const char *text, char *out) {
  if (text[0] == '\0') return fail(p, p->line, "empty name");
  if (strlen(text) >= kModelNameBytes) {
    return fail(p, p->line, "name longer than %d characters", kModelNameBytes - 1);
  }
  strcpy(out, text);
  return 1;
}

static int parse_value(parser *p, const key_spec *k, const char *text, char *base) {
  char *field = base + k->offset;
  switch (k->kind) {
    case kText:
      return parse_text(p, text, field);
    case kList:
      return parse_list(p, text, (model_list *)(void *)field);
    default:
      return parse_int(p, text, k->kind, (int32_t *)(void *)field);
  }
}

static int add_key(parser *p, section *s, const char *line) {
  const char *equals = strchr(line, '=');
  char key[kModelMaxLine] = "", value[kModelMaxLine] = "";
  if (equals != NULL) {
    strip(line, (size_t)(equals - line), key);
    strip(equals + 1, strlen(equals + 1), value);
  }
  if (key[0] == '\0') return fail(p, p->line, "'%s' is not key = value", line);
  for (int32_t k = 0; k < s->key_count; ++k) {
    if (strcmp(s->keys[k].key, key) != 0) continue;
    if (s->given & (1u << k)) {
      return fail(p, p->line, "key '%s' given twice in [%s]", key, s->header);
    }
    s->given |= 1u << k;
    return parse_value(p, &s->keys[k], value, s->base);
  }
  return fail(p, p->line, "unknown key '%s' in [%s]", key, s->header);
}

/* "[plan]" or "[shapes ID]", ID of a-z, 0-9 and _: its inside into `header`. */
static int parse_header(const char *line, char *header) {
  const size_t n = strlen(line);
  if (n < 2 || line[n - 1] != ']') return 0;
  memcpy(header, line + 1, n - 2);
  header[n - 2] = '\0';
  if (strcmp(header, "plan") == 0) return 1;
  const char *id = header + strlen("shapes ");
  if (strncmp(header, "shapes ", strlen("shapes ")) != 0 || *id == '\0') return 0;
  for (; *id != '\0'; ++id) {
    if (!((*id >= 'a' && *id <= 'z') || (*id >= '0' && *id <= '9') || *id == '_')) return 0;
  }
  return 1;
}

static void add_section(parser *p, const char *header, const key_spec *keys, int32_t key_count,
                        void *base) {
  section *s = &p->sections[p->section_count++];
  *s = (section){.line = p->line, .keys = keys, .key_count = key_count, .base = base};
  strcpy(s->header, header);
}

static int open_section(parser *p, const char *line) {
  char header[kModelMaxLine];
  if (!parse_header(line, header)) {
    return fail(p, p->line, "'%s' is not a section header ([plan] or [shapes ID])", line);
  }
  for (int32_t i = 0; i < p->section_count; ++i) {
    if (strcmp(p->sections[i].header, header) == 0) {
      return fail(p, p->line, "section [%s] given twice", header);
    }
  }
  model_table *t = p->out;
  if (strcmp(header, "plan") == 0) {
    add_section(p, header, kPlanKeys, COUNT(kPlanKeys), t);
    return 1;
  }
  const char *id = header + strlen("shapes ");
  if (t->shape_count == kModelMaxShapes) {
    return fail(p, p->line, "more than %d [shapes] sections", kModelMaxShapes);
  }
  if (strlen(id) >= kModelIdBytes) {
    return fail(p, p->line, "id '%s' longer than %d characters", id, kModelIdBytes - 1);
  }
  strcpy(t->ids[t->shape_count], id);
  add_section(p, header, kShapeKeys, COUNT(kShapeKeys), &t->shapes[t->shape_count++]);
  return 1;
}

static int parse_line(parser *p, const char *text, size_t n) {
  char line[kModelMaxLine];
  if (!strip(text, n, line)) {
    return fail(p, p->line, "line longer than %d characters", kModelMaxLine - 1);
  }
  if (line[0] == '\0' || line[0] == '#') return 1;
  if (line[0] == '[') return open_section(p, line);
  if (p->section_count == 0) return fail(p, p->line, "key = value before any section");
  return add_key(p, &p->sections[p->section_count - 1], line);
}

static const section *find_section(const parser *p, const char *header) {
  for (int32_t i = 0; i < p->section_count; ++i) {
    if (strcmp(p->sections[i].header, header) == 0) return &p->sections[i];
  }
  return NULL;
}

/* The required sections, then every key of each section in the file's order. */
static int check_complete(parser *p) {
  static const char *const kRequired[] = {"plan", "shapes model"};
  for (int32_t i = 0; i < COUNT(kRequired); ++i) {
    if (find_section(p, kRequired[i]) == NULL) {
      return fail(p, 0, "no [%s] section", kRequired[i]);
    }
  }
  for (int32_t i = 0; i < p->section_count; ++i) {
    const section *s = &p->sections[i];
    for (int32_t k = 0; k < s->key_count; ++k) {
      if (!(s->given & (1u << k))) {
        return fail(p, s->line, "[%s] lacks '%s'", s->header, s->keys[k].key);
      }
    }
  }
  return 1;
}

/* The whole models: TP 1, the plan's largest page and its chunks. */
static void complete_shapes(model_table *t) {
  int32_t largest_page = 0;
  for (int32_t i = 0; i < t->page_sizes.count; ++i) {
    if (t->page_sizes.values[i] > largest_page) largest_page = t->page_sizes.values[i];
  }
  for (int32_t i = 0; i < t->shape_count; ++i) {
    t->shapes[i].tp = 1;
    t->shapes[i].page_size = largest_page;
    t->shapes[i].chunk_rows = t->chunk_rows;
  }
}

/* The text ends at its NUL terminator, not at a NUL byte inside it. */
static int check_no_nul(parser *p, const char *text, size_t text_bytes) {
  const size_t n = strlen(text);
  if (n == text_bytes) return 1;
  int32_t line = 1;
  for (size_t i = 0; i < n; ++i) line += text[i] == '\n';
  return fail(p, line, "line holds a NUL byte");
}

/* Every size positive (shared_inter may be 0), as check divides by and plans with them. */
static int check_positive(parser *p, const section *s) {
  for (int32_t k = 0; k < s->key_count; ++k) {
    const key_spec *key = &s->keys[k];
    if (key->kind != kInt || strcmp(key->key, "shared_inter") == 0) continue;
    if (*(const int32_t *)(const void *)(s->base + key->offset) <= 0) {
      return fail(p, s->line, "[%s] %s must be positive", s->header, key->key);
    }
  }
  return 1;
}

/* c divides every page (index keys per page) and B (whole groups). */
static int check_compress_ratio(parser *p, const section *s) {
  const model_list *pages = &p->out->page_sizes;
  const model_shape *m = (const model_shape *)(const void *)s->base;
  for (int32_t i = 0; i < pages->count; ++i) {
    if (pages->values[i] % m->compress_ratio != 0) {
      return fail(p, s->line, "[%s] compress_ratio %d does not divide page size %d", s->header,
                  m->compress_ratio, pages->values[i]);
    }
  }
  if (m->index_topk % m->compress_ratio != 0) {
    return fail(p, s->line, "[%s] compress_ratio %d does not divide index_topk %d", s->header,
                m->compress_ratio, m->index_topk);
  }
  return 1;
}

/* The values check plans with: sizes of each section in the file's order, then each model's c,
 * then the prompts against the served model's context. */
static int check_values(parser *p) {
  for (int32_t i = 0; i < p->section_count; ++i) {
    if (!check_positive(p, &p->sections[i])) return 0;
  }
  for (int32_t i = 0; i < p->section_count; ++i) {
    const section *s = &p->sections[i];
    if (s->keys == kShapeKeys && !check_compress_ratio(p, s)) return 0;
  }
  const section *plan = find_section(p, "plan");
  const model_list *prompts = &p->out->prefill_lengths;
  const section *served = find_section(p, "shapes model");
  const int32_t max_context = ((const model_shape *)(const void *)served->base)->max_context;
  for (int32_t i = 0; i < prompts->count; ++i) {
    if (prompts->values[i] > max_context) {
      return fail(p, plan->line, "[plan] prefill length %d exceeds [shapes model] max_context %d",
                  prompts->values[i], max_context);
    }
  }
  return 1;
}

int model_file_parse(const char *text, size_t text_bytes, const char *path, model_table *out,
                     char *error, size_t error_bytes) {
  parser p = {.path = path, .out = out, .error = error, .error_bytes = error_bytes};
  *out = (model_table){0};
  if (!check_no_nul(&p, text, text_bytes)) return 0;
  for (const char *at = text;;) {
    const char *end = strchr(at, '\n');
    ++p.line;
    if (!parse_line(&p, at, end != NULL ? (size_t)(end - at) : strlen(at))) return 0;
    if (end == NULL) break;
    at = end + 1;
  }
  if (!check_complete(&p) || !check_values(&p)) return 0;
  complete_shapes(out);
  return 1;
}
