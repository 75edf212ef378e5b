/* plan_examples.h -- loading examples/plans/<name> (under $FSH_SOURCE_DIR,
 * else the working directory) into a plan, for the exec tests that run
 * the committed example plans. */
#ifndef FSH_TESTS_EXEC_PLAN_EXAMPLES_H
#define FSH_TESTS_EXEC_PLAN_EXAMPLES_H

#include <stdio.h>
#include <stdlib.h>

#include <flightshuffle/exec.h>

#include "../test.h"

/* The whole file as a NUL-terminated string (malloc), NULL if unreadable. */
static inline char *plan_example_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (t && fread(t, 1, (size_t)n, f) != (size_t)n) {
    free(t);
    t = NULL;
  }
  if (t) t[n] = 0;
  fclose(f);
  return t;
}

/* examples/plans/<name> parsed with default_partitions (0: the plan's
 * own); a failure is a CHECK failure and NULL. */
static inline fsh_plan *load_example(const char *name, int32_t default_partitions) {
  const char *src = getenv("FSH_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/examples/plans/%s", src ? src : ".", name);
  char *text = plan_example_text(path);
  CHECK_MSG(text != NULL, "cannot read %s", path);
  if (!text) return NULL;
  fsh_plan *p = NULL;
  fsh_error err;
  int rc = fsh_plan_from_json(text, -1, default_partitions, &p, &err);
  CHECK_MSG(rc == 0, "%s: %s", name, err.message);
  free(text);
  return p;
}

#endif
