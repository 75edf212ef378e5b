/* test_tmpfs.h -- a small tmpfs mounted on a test's own directory: a disk
 * that fills up on demand (root only; the caller skips otherwise). */
#ifndef FSH_TEST_TMPFS_H
#define FSH_TEST_TMPFS_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

/* Mounts a tmpfs of size_spec ("16k", "2m") on the existing directory dir;
 * false when this process may not (not root, no tmpfs). */
static inline bool fsh_test_mount_tmpfs(const char *dir, const char *size_spec) {
  if (geteuid() != 0) return false;
  char opts[64];
  snprintf(opts, sizeof opts, "size=%s", size_spec);
  if (mount("tmpfs", dir, "tmpfs", 0, opts) == 0) return true;
  fprintf(stderr, "  (mounting a tmpfs on %s: %s)\n", dir, strerror(errno));
  return false;
}

/* Unmounts it (lazily: files still open go with their last close). */
static inline void fsh_test_unmount_tmpfs(const char *dir) {
  if (umount2(dir, MNT_DETACH) != 0) fprintf(stderr, "umount %s: %s\n", dir, strerror(errno));
}

#endif
