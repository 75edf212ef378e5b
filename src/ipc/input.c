/* input.c -- byte sources for the IPC readers: a file descriptor (regular
 * file or pipe) and an in-memory buffer (reads are zero-copy slices). */
#include "ipc/read_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- memory ------------------------------------------------------------ */

typedef struct mem_input {
  fsh_buffer *buf;
  int64_t pos;
  char *name; /* owned copy, or NULL for "<memory>" */
} mem_input;

static int mem_read_at(fsh_input *in, int64_t offset, int64_t n, fsh_buffer **out,
                       fsh_error *err) {
  mem_input *m = in->ctx;
  if (offset < 0 || n < 0)
    return fsh_error_set(err, EINVAL, "%s: bad read of %lld bytes at %lld", in->name,
                         (long long)n, (long long)offset);
  if (offset > m->buf->size) offset = m->buf->size;
  if (n > m->buf->size - offset) n = m->buf->size - offset;
  if (!(*out = fsh_buffer_slice(m->buf, offset, n)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  return 0;
}

static int mem_read(fsh_input *in, int64_t n, fsh_buffer **out, fsh_error *err) {
  mem_input *m = in->ctx;
  FSH_RETURN_NOT_OK(mem_read_at(in, m->pos, n, out, err));
  m->pos += (*out)->size;
  return 0;
}

static int64_t mem_size(fsh_input *in) { return ((mem_input *)in->ctx)->buf->size; }

static void mem_close(fsh_input *in) {
  if (!in) return;
  mem_input *m = in->ctx;
  fsh_buffer_unref(m->buf);
  fsh_free(m->name);
  fsh_free(m);
  fsh_free(in);
}

int fsh_input_from_buffer_named(fsh_buffer *buf, const char *name, fsh_input **out,
                                fsh_error *err) {
  if (!buf) return fsh_error_set(err, EINVAL, "input from a NULL buffer");
  fsh_input *in = fsh_calloc(1, sizeof *in);
  mem_input *m = fsh_calloc(1, sizeof *m);
  char *copy = name ? fsh_strdup(name) : NULL;
  if (!in || !m || (name && !copy)) {
    fsh_free(in);
    fsh_free(m);
    fsh_free(copy);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  m->buf = fsh_buffer_ref(buf);
  m->name = copy;
  *in = (fsh_input){mem_read, mem_read_at, mem_size, mem_close, m, copy ? copy : "<memory>"};
  *out = in;
  return 0;
}

int fsh_input_from_buffer(fsh_buffer *buf, fsh_input **out, fsh_error *err) {
  return fsh_input_from_buffer_named(buf, NULL, out, err);
}

/* ---- file descriptors -------------------------------------------------- */

typedef struct fd_input {
  int fd;
  bool owns_fd;
  bool seekable;
  int64_t size; /* -1 for pipes */
  char *name;
} fd_input;

/* Reads up to n bytes (fewer only at end of input) into a new buffer that
 * grows as data arrives, so a huge n on a short pipe does not allocate n. */
static int fd_read_impl(fsh_input *in, int64_t offset, int64_t n, fsh_buffer **out,
                        fsh_error *err) {
  fd_input *f = in->ctx;
  if (n < 0) return fsh_error_set(err, EINVAL, "%s: negative read size", in->name);
  if (f->size >= 0) {
    int64_t avail = offset >= 0 ? f->size - offset : f->size - lseek(f->fd, 0, SEEK_CUR);
    if (avail < 0) avail = 0;
    if (n > avail) n = avail;
  }
  int64_t cap = n < (1 << 20) ? n : (1 << 20);
  fsh_buffer *buf = fsh_buffer_new(cap, false);
  if (!buf) return fsh_error_set(err, ENOMEM, "%s: out of memory reading %lld bytes", in->name,
                                 (long long)n);
  int64_t got = 0;
  while (got < n) {
    if (got == buf->size) {
      int64_t grow = buf->size * 2 < n ? buf->size * 2 : n;
      int rc = fsh_buffer_resize(buf, grow, err);
      if (rc != 0) {
        fsh_buffer_unref(buf);
        return rc;
      }
    }
    size_t want = (size_t)(buf->size - got);
    ssize_t r = offset >= 0 ? pread(f->fd, buf->data + got, want, (off_t)(offset + got))
                            : read(f->fd, buf->data + got, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      fsh_buffer_unref(buf);
      return fsh_error_set(err, EIO, "%s: read failed: %s", in->name, strerror(e));
    }
    if (r == 0) break;
    got += r;
  }
  buf->size = got;
  *out = buf;
  return 0;
}

static int fd_read(fsh_input *in, int64_t n, fsh_buffer **out, fsh_error *err) {
  return fd_read_impl(in, -1, n, out, err);
}

static int fd_read_at(fsh_input *in, int64_t offset, int64_t n, fsh_buffer **out,
                      fsh_error *err) {
  fd_input *f = in->ctx;
  if (!f->seekable) return fsh_error_set(err, ENOTSUP, "%s: not seekable", in->name);
  if (offset < 0) return fsh_error_set(err, EINVAL, "%s: negative offset", in->name);
  return fd_read_impl(in, offset, n, out, err);
}

static int64_t fd_size(fsh_input *in) { return ((fd_input *)in->ctx)->size; }

static void fd_close(fsh_input *in) {
  if (!in) return;
  fd_input *f = in->ctx;
  if (f->owns_fd) close(f->fd);
  fsh_free(f->name);
  fsh_free(f);
  fsh_free(in);
}

int fsh_input_from_fd(int fd, bool owns_fd, const char *name, fsh_input **out, fsh_error *err) {
  char fallback[32];
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return fsh_error_set(err, EINVAL, "input from a bad file descriptor %d", fd);
  if (!name) {
    snprintf(fallback, sizeof fallback, "<fd %d>", fd);
    name = fallback;
  }
  fsh_input *in = fsh_calloc(1, sizeof *in);
  fd_input *f = fsh_calloc(1, sizeof *f);
  char *copy = fsh_strdup(name);
  if (!in || !f || !copy) {
    fsh_free(in);
    fsh_free(f);
    fsh_free(copy);
    return fsh_error_set(err, ENOMEM, "out of memory");
  }
  f->fd = fd;
  f->owns_fd = owns_fd;
  f->seekable = S_ISREG(st.st_mode) || S_ISBLK(st.st_mode);
  f->size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
  f->name = copy;
  *in = (fsh_input){fd_read, fd_read_at, fd_size, fd_close, f, copy};
  *out = in;
  return 0;
}

int fsh_input_open_path(const char *path, fsh_input **out, fsh_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return fsh_error_set(err, e, "cannot open '%s': %s", path, strerror(e));
  }
  int rc = fsh_input_from_fd(fd, true, path, out, err);
  if (rc != 0) close(fd);
  return rc;
}
