#include "mgt/flags.h"

#include "mgt/json.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  size_t d[64][64];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

const char *mgt_nearest(const char *word, const char *const *names, int n) {
  const size_t len = strlen(word), most = len < 4 ? 1 : (len < 8 ? 2 : 3);
  const char *best = NULL;
  size_t bd = most + 1;
  for (int i = 0; i < n; i++) {
    size_t d = edit_distance(word, names[i]);
    if (d < bd) bd = d, best = names[i];
  }
  return best;
}

static const mgt_flag *find(const mgt_flag *flags, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

static mgt_status unknown(const mgt_flag *flags, int n, const char *arg, size_t len,
                          const char *command) {
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), arg);
  const char *best = NULL;
  size_t bd = 4;
  for (int i = 0; i < n; i++) {
    size_t d = edit_distance(name, flags[i].name);
    if (d < bd) bd = d, best = flags[i].name;
  }
  for (int i = 0; !best && i < n; i++) /* a flag cut short: --tensor-model-parallel */
    if (len >= 6 && strncmp(flags[i].name, name, strlen(name)) == 0) best = flags[i].name;
  if (best) MGT_FAIL(MGT_ERR_INPUT, "unknown flag '%s' (did you mean %s?)", name, best);
  MGT_FAIL(MGT_ERR_INPUT, "unknown flag '%s' (see mgt %s --help)", name, command);
}

/* strtoll and strtod skip leading white space; a value must not have any. */
static int plain_number(const char *v) { return v[0] != '\0' && !isspace((unsigned char)v[0]); }

static mgt_status set_value(const mgt_flag *f, void *dst, const char *v) {
  char *p = (char *)dst + f->offset;
  char *end = NULL;
  errno = 0;
  switch (f->kind) {
  case MGT_FLAG_INT:
  case MGT_FLAG_INT64: {
    long long x = strtoll(v, &end, 10);
    MGT_REQUIRE(plain_number(v) && *end == '\0' && errno == 0, "%s: expected an integer, got '%s'",
                f->name, v);
    MGT_REQUIRE((double)x >= f->min && (double)x <= f->max, "%s: %lld is out of range [%.0f, %.0f]",
                f->name, x, f->min, f->max);
    if (f->kind == MGT_FLAG_INT)
      *(int *)p = (int)x;
    else
      *(int64_t *)p = (int64_t)x;
    break;
  }
  case MGT_FLAG_UINT64: {
    unsigned long long x = strtoull(v, &end, 10);
    MGT_REQUIRE(plain_number(v) && v[0] != '-' && *end == '\0' && errno == 0,
                "%s: expected a non-negative integer, got '%s'", f->name, v);
    MGT_REQUIRE((double)x >= f->min && (double)x <= f->max, "%s: %llu is out of range [%.0f, %.0f]",
                f->name, x, f->min, f->max);
    *(uint64_t *)p = (uint64_t)x;
    break;
  }
  case MGT_FLAG_DOUBLE: {
    double x = strtod(v, &end);
    MGT_REQUIRE(plain_number(v) && *end == '\0' && errno == 0 && isfinite(x),
                "%s: expected a number, got '%s'", f->name, v);
    MGT_REQUIRE(x >= f->min && x <= f->max, "%s: %g is out of range [%g, %g]", f->name, x, f->min,
                f->max);
    *(double *)p = x;
    break;
  }
  case MGT_FLAG_STR:
    MGT_REQUIRE(v[0] != '\0', "%s: empty value", f->name);
    MGT_REQUIRE(strlen(v) < f->size, "%s: value longer than %zu characters", f->name, f->size - 1);
    strcpy(p, v);
    break;
  case MGT_FLAG_LIST: {
    MGT_REQUIRE(v[0] != '\0', "%s: empty value", f->name);
    MGT_REQUIRE(!strchr(v, '\n'), "%s: a value may not contain a newline", f->name);
    size_t used = strlen(p);
    MGT_REQUIRE(used + strlen(v) + 2 <= f->size, "%s: values longer than %zu characters in all",
                f->name, f->size - 1);
    if (used) p[used++] = '\n';
    strcpy(p + used, v);
    break;
  }
  case MGT_FLAG_ENUM: {
    int found = -1;
    char list[256] = "";
    for (int i = 0; f->choices[i]; i++) {
      if (strcmp(v, f->choices[i]) == 0) found = i;
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               f->choices[i]);
    }
    if (found < 0) {
      int n = 0;
      while (f->choices[n])
        n++;
      const char *near = mgt_nearest(v, f->choices, n);
      MGT_FAIL(MGT_ERR_INPUT, "%s: expected one of %s, got '%s'%s%s%s", f->name, list, v,
               near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    }
    *(int *)p = found;
    break;
  }
  case MGT_FLAG_BOOL: *(int *)p = 1; break;
  }
  return MGT_OK;
}

/* The problems of one command line, reported together. */
typedef struct problems {
  char text[16384];
  int n;
} problems;

/* Moves the error just recorded into p. */
static void keep_problem(problems *p) {
  const size_t used = strlen(p->text);
  if (used + 8 < sizeof p->text)
    snprintf(p->text + used, sizeof p->text - used, "%s%s", p->n ? "; " : "", mgt_error_message());
  p->n++;
  mgt_error_clear();
}

/* The values of argv[*i] (a flag of `values`: 0 none, 1 one, 2 one or more, 3 any number) up to
   the next --flag; eq is its "=value" or NULL. vals[0..*nv) point into argv. */
static mgt_status take_values(int values, const char *name, const char *eq, int argc, char **argv,
                              int *i, const char **vals, int max, int *nv) {
  *nv = 0;
  if (values == 0) {
    MGT_REQUIRE(!eq, "%s takes no value", name);
    return MGT_OK;
  }
  if (eq) vals[(*nv)++] = eq + 1;
  while ((values >= 2 || *nv == 0) && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
    const char *v = argv[++*i];
    if (*nv < max) vals[(*nv)++] = v;
  }
  MGT_REQUIRE(*nv > 0 || values == 3, "%s: missing value", name);
  return MGT_OK;
}

/* Whether v is one of the '|'-separated values of `accept` (numbers compared as numbers). */
static int accepted(const char *accept, const char *v) {
  char *end = NULL;
  const double x = strtod(v, &end);
  const int number = plain_number(v) && *end == '\0';
  for (const char *a = accept; *a;) {
    const size_t len = strcspn(a, "|");
    char one[64];
    snprintf(one, sizeof one, "%.*s", (int)(len < 63 ? len : 63), a);
    const double y = strtod(one, &end);
    if (strcmp(one, v) == 0 || (number && *end == '\0' && x == y)) return 1;
    a += len + (a[len] == '|');
  }
  return 0;
}

/* Whether the flag a[0..len) is one of the ' '-separated names of list. */
static int names_have(const char *list, const char *a, size_t len) {
  for (const char *s = list; *s;) {
    const size_t n = strcspn(s, " ");
    if (n == len && strncmp(s, a, len) == 0) return 1;
    s += n + (s[n] == ' ');
  }
  return 0;
}

/* Flag `name` of foreign's row g: refused, accepted at its values, or accepted with a note. */
static mgt_status foreign_flag(const mgt_foreign_flag *g, const char *name, const char *eq,
                               int argc, char **argv, int *i, char *notes, size_t notes_size) {
  const char *vals[16];
  int nv = 0;
  MGT_CHECK(take_values(g->values, name, eq, argc, argv, i, vals, 16, &nv));
  switch (g->kind) {
  case MGT_FOREIGN_RENAMED:
    MGT_FAIL(MGT_ERR_INPUT, "%s is no longer valid (Megatron-LM renamed it): write %s", name,
             g->text);
  case MGT_FOREIGN_REFUSED: MGT_FAIL(MGT_ERR_INPUT, "%s: %s", name, g->text);
  case MGT_FOREIGN_AT:
    for (int k = 0; k < nv; k++)
      MGT_REQUIRE(accepted(g->accept, vals[k]), "%s %s: %s (accepted: %s)", name, vals[k], g->text,
                  g->accept);
    return MGT_OK;
  case MGT_FOREIGN_NOTE: break;
  }
  if (!notes) return MGT_OK;
  /* flags of one reason share its line: "--profile, --profile-step-start: why" */
  char tail[512];
  snprintf(tail, sizeof tail, ": %s\n", g->text);
  const size_t used = strlen(notes), nl = strlen(name);
  for (const char *s = strstr(notes, name); s; s = strstr(s + 1, name))
    if ((s == notes || s[-1] == ' ' || s[-1] == '\n') && (s[nl] == ':' || s[nl] == ','))
      return MGT_OK; /* given twice */
  char *at = strstr(notes, tail);
  MGT_REQUIRE(used + nl + strlen(tail) + 2 < notes_size,
              "%s: more flags answered with a note than the %zu bytes of notes hold", name,
              notes_size);
  if (at) { /* ", NAME" goes before the ": why" */
    memmove(at + nl + 2, at, used - (size_t)(at - notes) + 1);
    memcpy(at, ", ", 2);
    memcpy(at + 2, name, nl);
  } else {
    snprintf(notes + used, notes_size - used, "%s: %s\n", name, g->text);
  }
  return MGT_OK;
}

/* One flag of the table at argv[*i]. */
static mgt_status table_flag(const mgt_flag *f, void *dst, const char *eq, int argc, char **argv,
                             int *i) {
  if (f->kind == MGT_FLAG_BOOL) {
    MGT_REQUIRE(!eq, "%s takes no value", f->name);
    return set_value(f, dst, "");
  }
  if (f->kind == MGT_FLAG_LIST) {
    char *p = (char *)dst + f->offset;
    p[0] = '\0'; /* a repeated list flag replaces the earlier one */
    int got = 0;
    if (eq) {
      MGT_CHECK(set_value(f, dst, eq + 1));
      got++;
    }
    while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
      MGT_CHECK(set_value(f, dst, argv[++*i]));
      got++;
    }
    MGT_REQUIRE(got > 0, "%s: missing value", f->name);
    return MGT_OK;
  }
  const char *v = eq ? eq + 1 : NULL;
  if (!v) {
    MGT_REQUIRE(*i + 1 < argc, "%s: missing value", f->name);
    /* "--metrics-file --fp16" is a forgotten value, not a file named --fp16 */
    MGT_REQUIRE(strncmp(argv[*i + 1], "--", 2) != 0,
                "%s: missing value before %s (write %s=VALUE for a value that starts with --)",
                f->name, argv[*i + 1], f->name);
    v = argv[++*i];
  }
  return set_value(f, dst, v);
}

mgt_status mgt_flags_parse_foreign(const mgt_flag *flags, int n, const mgt_foreign_flag *foreign,
                                   int nf, void *dst, int argc, char **argv, int first,
                                   const char *command, int *help, char *notes, size_t notes_size) {
  *help = 0;
  problems p = {"", 0};
  if (notes && notes_size) notes[0] = '\0';
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      *help = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) {
      (void)MGT_ERROR(MGT_ERR_INPUT, "unexpected argument '%s' (flags start with --)", a);
      keep_problem(&p);
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const mgt_flag *f = find(flags, n, a, len);
    const mgt_foreign_flag *g = NULL;
    for (int k = 0; !f && !g && k < nf; k++)
      if (names_have(foreign[k].name, a, len)) g = &foreign[k];
    mgt_status st;
    if (f) {
      st = table_flag(f, dst, eq, argc, argv, &i);
    } else if (g) {
      char name[96];
      snprintf(name, sizeof name, "%.*s", (int)(len < 95 ? len : 95), a);
      st = foreign_flag(g, name, eq, argc, argv, &i, notes, notes_size);
    } else {
      st = unknown(flags, n, a, len, command);
      while (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
        i++; /* its values */
    }
    if (st != MGT_OK) keep_problem(&p);
  }
  if (p.n == 1) MGT_FAIL(MGT_ERR_INPUT, "%s", p.text);
  if (p.n > 1) MGT_FAIL(MGT_ERR_INPUT, "%d problems with the flags: %s", p.n, p.text);
  return MGT_OK;
}

mgt_status mgt_flags_parse(const mgt_flag *flags, int n, void *dst, int argc, char **argv,
                           int first, const char *command, int *help) {
  return mgt_flags_parse_foreign(flags, n, NULL, 0, dst, argc, argv, first, command, help, NULL, 0);
}

static void value_string(const mgt_flag *f, const void *src, char *buf, size_t n) {
  const char *p = (const char *)src + f->offset;
  switch (f->kind) {
  case MGT_FLAG_INT: snprintf(buf, n, "%d", *(const int *)p); break;
  case MGT_FLAG_INT64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
  case MGT_FLAG_UINT64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case MGT_FLAG_DOUBLE: snprintf(buf, n, "%.9g", *(const double *)p); break;
  case MGT_FLAG_STR: snprintf(buf, n, "%s", p); break;
  case MGT_FLAG_LIST: {
    snprintf(buf, n, "%s", p);
    for (char *c = buf; *c; c++)
      if (*c == '\n') *c = ' ';
    break;
  }
  case MGT_FLAG_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
  case MGT_FLAG_ENUM: {
    int k = *(const int *)p; /* negative: unset, the default comes from elsewhere */
    snprintf(buf, n, "%s", k >= 0 ? f->choices[k] : "");
    break;
  }
  }
}

/* A later flag on an earlier one's field is its alias (Megatron-LM renamed some flags): it
   parses, and is shown in the usage, but never printed or stored. */
static const mgt_flag *alias_of(const mgt_flag *flags, int i) {
  for (int j = 0; j < i; j++)
    if (flags[j].offset == flags[i].offset) return &flags[j];
  return NULL;
}

int mgt_flag_is_alias(const mgt_flag *flags, int i) { return alias_of(flags, i) != NULL; }

void mgt_flags_usage(const mgt_flag *flags, int n, const void *defaults, const char *command,
                     FILE *f) {
  fprintf(f, "usage: mgt %s [flags]\n\nflags:\n", command);
  for (int i = 0; i < n; i++) {
    char v[256];
    value_string(&flags[i], defaults, v, sizeof v);
    const char *arg =
        flags[i].kind == MGT_FLAG_BOOL ? "" : (flags[i].kind == MGT_FLAG_LIST ? " V..." : " V");
    int pad = 36 - (int)strlen(flags[i].name) - (int)strlen(arg);
    const mgt_flag *a = alias_of(flags, i);
    if (a) { /* a switch on an enumeration sets its value 1 */
      const int sw = flags[i].kind == MGT_FLAG_BOOL && a->kind == MGT_FLAG_ENUM;
      fprintf(f, "  %s%s%*s the same as %s%s%s\n", flags[i].name, arg, pad > 0 ? pad : 1, "",
              a->name, sw ? " " : "", sw ? a->choices[1] : "");
      continue;
    }
    fprintf(f, "  %s%s%*s %s", flags[i].name, arg, pad > 0 ? pad : 1, "", flags[i].help);
    if (flags[i].kind != MGT_FLAG_BOOL && v[0] && strcmp(v, "0") != 0) fprintf(f, " [%s]", v);
    fprintf(f, "\n");
  }
}

void mgt_flags_print(const mgt_flag *flags, int n, const void *src, FILE *f) {
  for (int i = 0; i < n; i++) {
    char v[8192];
    if (alias_of(flags, i)) continue;
    value_string(&flags[i], src, v, sizeof v);
    fprintf(f, "  %-32s %s\n", flags[i].name + 2, v);
  }
}

/* The length of the item at s (up to a comma or brace outside strings and arrays). */
static size_t json_item(const char *s, size_t n) {
  size_t i = 0;
  for (int depth = 0, quoted = 0; i < n; i++) {
    if (quoted) {
      if (s[i] == '\\')
        i++;
      else if (s[i] == '"')
        quoted = 0;
    } else if (s[i] == '"') {
      quoted = 1;
    } else if (s[i] == '[') {
      depth++;
    } else if (s[i] == ']') {
      depth--;
    } else if (depth == 0 && (s[i] == ',' || s[i] == '}')) {
      break;
    }
  }
  return i < n ? i : n;
}

void mgt_flags_json_difference(const char *mine, size_t mine_n, const char *root, size_t root_n,
                               char *why, size_t cap) {
  size_t a = 1, b = 1; /* past the '{' */
  for (;;) {
    const size_t la = a < mine_n ? json_item(mine + a, mine_n - a) : 0;
    const size_t lb = b < root_n ? json_item(root + b, root_n - b) : 0;
    if (la != lb || memcmp(mine + a, root + b, la) != 0 || la == 0) {
      snprintf(why, cap,
               "its configuration differs from rank 0's: %.*s here, %.*s on rank 0 (a "
               "file or environment variable that differs between nodes?)",
               (int)(la < 300 ? la : 300), mine + a, (int)(lb < 300 ? lb : 300), root + b);
      return;
    }
    a += la + 1, b += lb + 1;
  }
}

void mgt_flags_json(const mgt_flag *flags, int n, const void *src, FILE *f) {
  fputc('{', f);
  for (int i = 0, written = 0; i < n; i++) {
    char key[64], v[8192];
    if (alias_of(flags, i)) continue;
    snprintf(key, sizeof key, "%s", flags[i].name + 2);
    for (char *k = key; *k; k++)
      if (*k == '-') *k = '_';
    fprintf(f, "%s\"%s\":", written++ ? "," : "", key);
    const char *p = (const char *)src + flags[i].offset;
    if (flags[i].kind == MGT_FLAG_LIST) {
      /* a list is a JSON array of its values */
      fputc('[', f);
      const char *s = p;
      int first = 1;
      while (*s) {
        const char *e = strchr(s, '\n');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        snprintf(v, sizeof v, "%.*s", (int)l, s);
        if (!first) fputc(',', f);
        mgt_json_write_string(f, v);
        first = 0;
        s += l + (e ? 1 : 0);
      }
      fputc(']', f);
      continue;
    }
    value_string(&flags[i], src, v, sizeof v);
    if (flags[i].kind == MGT_FLAG_STR || flags[i].kind == MGT_FLAG_ENUM)
      mgt_json_write_string(f, v);
    else
      fputs(v, f);
  }
  fputc('}', f);
}

mgt_status mgt_flags_from_json(const mgt_flag *flags, int n, void *dst, const mgt_json *obj,
                               const char *what) {
  MGT_REQUIRE(obj && obj->type == MGT_JSON_OBJECT, "%s: the configuration is not a JSON object",
              what);
  for (int i = 0; i < n; i++) {
    const mgt_flag *f = &flags[i];
    if (alias_of(flags, i)) continue;
    char key[64];
    snprintf(key, sizeof key, "%s", f->name + 2);
    for (char *k = key; *k; k++)
      if (*k == '-') *k = '_';
    const mgt_json *v = mgt_json_get(obj, key);
    if (!v) continue;
    char *p = (char *)dst + f->offset;
    switch (f->kind) {
    case MGT_FLAG_INT:
    case MGT_FLAG_INT64:
    case MGT_FLAG_UINT64:
    case MGT_FLAG_DOUBLE:
      MGT_REQUIRE(v->type == MGT_JSON_NUMBER, "%s: configuration key %s is not a number", what,
                  key);
      /* the same ranges as on the command line: a stored configuration is input too */
      MGT_REQUIRE(f->kind == MGT_FLAG_DOUBLE || v->number == floor(v->number),
                  "%s: configuration key %s is %.17g, not an integer", what, key, v->number);
      MGT_REQUIRE(v->number >= f->min && v->number <= f->max,
                  "%s: configuration key %s is %.17g, out of the range [%g, %g] of %s", what, key,
                  v->number, f->min, f->max, f->name);
      if (f->kind == MGT_FLAG_INT)
        *(int *)p = (int)v->number;
      else if (f->kind == MGT_FLAG_INT64)
        *(int64_t *)p = (int64_t)v->number;
      else if (f->kind == MGT_FLAG_UINT64)
        *(uint64_t *)p = (uint64_t)v->number;
      else
        *(double *)p = v->number;
      break;
    case MGT_FLAG_BOOL:
      MGT_REQUIRE(v->type == MGT_JSON_BOOL, "%s: configuration key %s is not a boolean", what, key);
      *(int *)p = v->number != 0;
      break;
    case MGT_FLAG_STR:
      MGT_REQUIRE(v->type == MGT_JSON_STRING && v->len < f->size,
                  "%s: configuration key %s is not a string of fewer than %zu bytes", what, key,
                  f->size);
      memcpy(p, v->str, v->len + 1);
      break;
    case MGT_FLAG_ENUM: {
      int found = -1;
      /* an unset enum (see value_string), only where unset is what dst holds before (the
         defaults': --distributed-backend, --cpu-gemm), never for a key that needs a value */
      if (v->type == MGT_JSON_STRING && v->len == 0 && *(int *)p == -1) break;
      for (int c = 0; v->type == MGT_JSON_STRING && f->choices[c]; c++)
        if (mgt_json_is(v, f->choices[c])) found = c;
      MGT_REQUIRE(found >= 0, "%s: configuration key %s has an unknown value", what, key);
      *(int *)p = found;
      break;
    }
    case MGT_FLAG_LIST: {
      MGT_REQUIRE(v->type == MGT_JSON_ARRAY, "%s: configuration key %s is not a list", what, key);
      p[0] = 0;
      for (size_t k = 0; k < v->len; k++) {
        const mgt_json *e = &v->items[k];
        MGT_REQUIRE(e->type == MGT_JSON_STRING, "%s: configuration key %s holds a non-string", what,
                    key);
        MGT_CHECK(set_value(f, dst, e->str));
      }
      break;
    }
    }
  }
  return MGT_OK;
}
