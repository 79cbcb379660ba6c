/* Megatron-LM's data-args files (--data-args-path, --per-split-data-args-path) read into the
   configuration's data flags, and its --split weights. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/config.h"
#include "mgt/json.h"

/* Appends the values of a data-args list (white space between, or a JSON array's items, which
   are strings or numbers) to `list` (one per line). */
static mgt_status add_values(const char *what, const char *text, const mgt_json *array, char *list,
                             size_t size) {
  size_t used = strlen(list);
  for (size_t i = 0; array ? i < array->len : *text; i++) {
    char v[MGT_PATH_MAX];
    if (array) {
      const mgt_json *e = &array->items[i];
      MGT_REQUIRE(e->type == MGT_JSON_STRING || e->type == MGT_JSON_NUMBER,
                  "%s: item %zu is neither a string nor a number", what, i + 1);
      if (e->type == MGT_JSON_STRING)
        snprintf(v, sizeof v, "%s", e->str);
      else
        snprintf(v, sizeof v, "%.17g", e->number);
    } else {
      text += strspn(text, " \t\r\n");
      const size_t n = strcspn(text, " \t\r\n");
      if (!n) break;
      snprintf(v, sizeof v, "%.*s", (int)(n < sizeof v - 1 ? n : sizeof v - 1), text);
      text += n;
    }
    MGT_REQUIRE(used + strlen(v) + 2 <= size, "%s: values longer than %zu characters in all", what,
                size - 1);
    used += (size_t)snprintf(list + used, size - used, "%s%s", used ? "\n" : "", v);
  }
  return MGT_OK;
}

/* --data-args-path and --per-split-data-args-path: their files' lists become the flags' (the
   paths are then cleared, so finalizing again reads nothing twice). */
mgt_status mgt_config_read_data_args(mgt_config *c) {
  char *text = NULL;
  size_t len = 0;
  mgt_json_parser *jp = NULL;
  mgt_status st = MGT_OK;
  if (c->data_args_path[0]) {
    MGT_REQUIRE(!c->data_path[0], "give --data-path or --data-args-path, not both");
    MGT_CHECK(mgt_read_file("--data-args-path", c->data_args_path, &text, &len));
    st = add_values(c->data_args_path, text, NULL, c->data_path, sizeof c->data_path);
    free(text);
    text = NULL;
    MGT_CHECK(st);
    MGT_REQUIRE(c->data_path[0], "--data-args-path %s holds no dataset", c->data_args_path);
    c->data_args_path[0] = 0;
  }
  if (c->per_split_data_args_path[0]) {
    const char *p = c->per_split_data_args_path;
    MGT_REQUIRE(!c->train_data_path[0] && !c->valid_data_path[0] && !c->test_data_path[0],
                "give --per-split-data-args-path or --train-data-path and the others, not both");
    MGT_CHECK(mgt_read_file("--per-split-data-args-path", p, &text, &len));
    const mgt_json *root = NULL;
    MGT_TRY(mgt_json_parser_create(&jp));
    MGT_TRY(mgt_json_parse(jp, text, len, &root));
    MGT_GOTO_REQUIRE(root->type == MGT_JSON_OBJECT, "%s: not a JSON object", p);
    const char *const keys[3] = {"train", "valid", "test"};
    char *const lists[3] = {c->train_data_path, c->valid_data_path, c->test_data_path};
    for (int k = 0; k < 3; k++) {
      const mgt_json *a = mgt_json_get(root, keys[k]);
      if (!a || a->type == MGT_JSON_NULL) continue;
      MGT_GOTO_REQUIRE(a->type == MGT_JSON_ARRAY, "%s: \"%s\" is not a list", p, keys[k]);
      char what[MGT_PATH_MAX + 16];
      snprintf(what, sizeof what, "%s \"%s\"", p, keys[k]);
      MGT_TRY(add_values(what, NULL, a, lists[k], sizeof c->train_data_path));
    }
    MGT_GOTO_REQUIRE(c->train_data_path[0], "%s: no \"train\" list", p);
    c->per_split_data_args_path[0] = 0;
  }
done:
  mgt_json_parser_destroy(&jp);
  free(text);
  return st;
}

mgt_status mgt_split_parse(const char *s, double w[3]) {
  double sum = 0;
  int n = 0;
  /* Megatron-LM's recipes pass "--split '99,1,0'" from a bash array: the quotes arrive */
  char inner[128];
  const size_t len = strlen(s);
  if (len >= 2 && len < sizeof inner && (s[0] == '\'' || s[0] == '"') && s[len - 1] == s[0]) {
    snprintf(inner, sizeof inner, "%.*s", (int)(len - 2), s + 1);
    s = inner;
  }
  const char *p = s;
  while (*p && n < 3) {
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    MGT_REQUIRE(end != p && errno == 0 && isfinite(x) && x >= 0,
                "--split '%s': expected up to three comma-separated non-negative weights", s);
    w[n++] = x;
    sum += x;
    p = end;
    while (*p == ' ')
      p++;
    if (*p == ',') p++;
    while (*p == ' ')
      p++;
  }
  MGT_REQUIRE(*p == '\0' && n > 0,
              "--split '%s': expected up to three comma-separated "
              "non-negative weights",
              s);
  MGT_REQUIRE(sum > 0, "--split '%s': the weights sum to zero", s);
  MGT_REQUIRE(isfinite(sum), "--split '%s': the weights sum beyond a double's range", s);
  for (int i = n; i < 3; i++)
    w[i] = 0;
  for (int i = 0; i < 3; i++)
    w[i] /= sum;
  return MGT_OK;
}
