/* replay_main.c -- runs a libFuzzer target without libFuzzer: feeds every
 * file of the corpus directories (or single files) named on the command line
 * to LLVMFuzzerTestOneInput, one call per file, and reports the count.
 *
 * Linked with each fuzz/fuzz_*.c into <target>_replay and registered with
 * CTest as fuzz/<target> over fuzz/corpus/<target>/, so every committed
 * corpus entry, crash reproducers included, is replayed on every test run
 * under the sanitizers of that build.
 *
 * Each input is copied into a buffer of exactly its size, so an overread by
 * one byte is caught by ASan. Files are fed in name order, so a run is
 * reproducible. When an input crashes the target, the name of the file is
 * printed on stderr after the sanitizer's report (or the signal). Exits 1
 * when a path cannot be read or holds no input. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target, as in libFuzzer. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
/* Present when a sanitizer runtime is linked in. */
__attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

/* The input being run, named when the target dies on it. */
static const char *current_input;

static void name_current_input(void) {
  if (!current_input) return;
  const char *pre = "replay: the crashing input is ";
  if (write(2, pre, strlen(pre)) < 0 || write(2, current_input, strlen(current_input)) < 0 ||
      write(2, "\n", 1) < 0)
    return;
}

static void on_fatal_signal(int sig) {
  name_current_input();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void watch_for_crashes(void) {
  if (__sanitizer_set_death_callback) {
    /* The sanitizer handles the signals and prints its report first. */
    __sanitizer_set_death_callback(name_current_input);
    return;
  }
  const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_fatal_signal);
}

/* Reads the whole file into a malloc'd buffer of exactly its size. */
static int read_file(const char *path, uint8_t **out, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return ENOMEM;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) break;
  }
  int rc = ferror(f) ? EIO : 0;
  fclose(f);
  if (rc) {
    free(buf);
    return rc;
  }
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return ENOMEM;
  }
  if (len) memcpy(exact, buf, len);
  free(buf);
  *out = exact;
  *size = len;
  return 0;
}

static int run_file(const char *path) {
  uint8_t *data = NULL;
  size_t size = 0;
  int rc = read_file(path, &data, &size);
  if (rc) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(rc));
    return -1;
  }
  current_input = path;
  LLVMFuzzerTestOneInput(data, size);
  current_input = NULL;
  free(data);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Feeds every regular file of dir (not recursing, skipping dot files).
 * Returns the count, or -1 on error. */
static long run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  long result = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) {
        result = -1;
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(e->d_name))) {
      result = -1;
      break;
    }
    n++;
  }
  closedir(d);
  if (result == 0 && n) qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 0; i < n && result >= 0; i++) {
    size_t len = strlen(dir) + strlen(names[i]) + 2;
    char *path = malloc(len);
    if (!path) {
      result = -1;
      break;
    }
    snprintf(path, len, "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(path) == 0)
        result++;
      else
        result = -1;
    }
    free(path);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (result < 0) fprintf(stderr, "replay: %s: failed\n", dir);
  return result;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  watch_for_crashes();
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s (a fuzz target needs a committed seed corpus)\n", argv[i],
              strerror(errno));
      return 1;
    }
    long n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) == 0 ? 1 : -1);
    if (n < 0) return 1;
    printf("replay: %s: %ld inputs\n", argv[i], n);
    total += n;
  }
  if (total == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  printf("replay: %ld inputs ran without a crash\n", total);
  return 0;
}
