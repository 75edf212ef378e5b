/* test.h -- a tiny test harness for the C tests: CHECK macros that report
 * file:line and keep going, and a main() helper that runs named cases and
 * ends with the "N passed, N failed" line. */
#ifndef FSH_TEST_H
#define FSH_TEST_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fsh_test_failures_;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      fsh_test_failures_++;                                                      \
    }                                                                            \
  } while (0)

#define CHECK_MSG(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
      fsh_test_failures_++;                                                      \
    }                                                                            \
  } while (0)

/* CHECK_OK(expr): expr returns 0; otherwise prints err.message. Needs a
 * `fsh_error err` in scope. */
#define CHECK_OK(expr)                                                           \
  do {                                                                           \
    int rc_ = (expr);                                                            \
    if (rc_ != 0) {                                                              \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr,  \
              rc_, err.message);                                                 \
      fsh_test_failures_++;                                                      \
    }                                                                            \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                       \
  do {                                                                           \
    long long a_ = (long long)(a), b_ = (long long)(b);                          \
    if (a_ != b_) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, \
              __LINE__, #a, #b, a_, b_);                                         \
      fsh_test_failures_++;                                                      \
    }                                                                            \
  } while (0)

typedef struct fsh_test_case {
  const char *name;
  void (*fn)(void);
} fsh_test_case;
/* Number of entries in dir other than . and .. (-1 if it cannot be opened). */
static inline int fsh_test_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}


/* Runs the cases (all, or those named in argv) and prints one line per case
 * and the closing "N passed, N failed" line. Returns the exit status. */
static inline int fsh_test_run(const fsh_test_case *cases, int n, int argc, char **argv) {
  int passed = 0, failed = 0;
  for (int i = 0; i < n; i++) {
    if (argc > 1) {
      int wanted = 0;
      for (int j = 1; j < argc; j++) wanted |= strcmp(argv[j], cases[i].name) == 0;
      if (!wanted) continue;
    }
    int before = fsh_test_failures_;
    cases[i].fn();
    if (fsh_test_failures_ == before) {
      passed++;
      printf("ok   %s\n", cases[i].name);
    } else {
      failed++;
      printf("FAIL %s\n", cases[i].name);
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

#define FSH_TEST_MAIN(...)                                                       \
  int main(int argc, char **argv) {                                              \
    static const fsh_test_case cases_[] = {__VA_ARGS__};                         \
    return fsh_test_run(cases_, (int)(sizeof cases_ / sizeof cases_[0]), argc, argv); \
  }
#define TEST(fn) {#fn, fn}

/* Path of a file under shared/ (from FSH_SHARED, set by CTest). */
static inline const char *fsh_test_shared_path(char *out, size_t n, const char *rel) {
  const char *root = getenv("FSH_SHARED");
  if (!root) root = "../shared";
  snprintf(out, n, "%s/%s", root, rel);
  return out;
}

#endif
