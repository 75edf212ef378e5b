/* output.c -- byte sinks for the IPC writers: a file written atomically
 * (path.tmp, fsync, rename, fsync of the directory; the temp file is
 * unlinked on abort or error), any file descriptor, and memory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/ipc_internal.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* ---- file descriptors ------------------------------------------------ */

typedef struct fd_sink {
  int fd;
  bool owns_fd;
  char *path;     /* final path (atomic files), NULL otherwise */
  char *tmp_path; /* path.tmp (atomic files) */
  char *name;
} fd_sink;

/* Writes all of iov[0..n) to fd, resuming after partial writes and EINTR. */
static int write_all(int fd, const struct iovec *iov_in, int n, const char *name, fsh_error *err) {
  struct iovec local[256]; /* a copy: partial writes adjust it */
  while (n > 0) {
    int batch = n < IOV_MAX ? n : IOV_MAX;
    if (batch > 256) batch = 256;
    memcpy(local, iov_in, sizeof(struct iovec) * (size_t)batch);
    struct iovec *v = local;
    int left = batch;
    while (left > 0) {
      if (v->iov_len == 0) {
        v++;
        left--;
        continue;
      }
      ssize_t w = writev(fd, v, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        return fsh_error_set(err, e == ENOSPC ? ENOSPC : EIO, "writing %s: %s", name, strerror(e));
      }
      size_t done = (size_t)w;
      while (left > 0 && done >= v->iov_len) {
        done -= v->iov_len;
        v++;
        left--;
      }
      if (left > 0 && done) {
        v->iov_base = (uint8_t *)v->iov_base + done;
        v->iov_len -= done;
      }
    }
    iov_in += batch;
    n -= batch;
  }
  return 0;
}

static int fd_writev(fsh_output *out, const struct iovec *iov, int n, fsh_error *err) {
  fd_sink *s = out->ctx;
  FSH_RETURN_NOT_OK(write_all(s->fd, iov, n, s->name, err));
  for (int i = 0; i < n; i++) out->position += (int64_t)iov[i].iov_len;
  return 0;
}

static void fd_sink_free(fsh_output *out) {
  fd_sink *s = out->ctx;
  fsh_free(s->path);
  fsh_free(s->tmp_path);
  fsh_free(s->name);
  fsh_free(s);
  fsh_free(out);
}

static int fd_close(fsh_output *out, bool abort, fsh_error *err) {
  fd_sink *s = out->ctx;
  int rc = 0;
  if (s->owns_fd && close(s->fd) != 0 && !abort)
    rc = fsh_error_set(err, EIO, "closing %s: %s", s->name, strerror(errno));
  fd_sink_free(out);
  return rc;
}

/* fsync of the directory holding path, so that a rename is durable. */
static int fsync_dir(const char *path, fsh_error *err) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int rc = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0)
    rc = fsh_error_set(err, EIO, "syncing directory %s: %s", dir, strerror(errno));
  if (fd >= 0) close(fd);
  return rc;
}

static int atomic_close(fsh_output *out, bool abort, fsh_error *err) {
  fd_sink *s = out->ctx;
  int rc = 0;
  if (abort) {
    close(s->fd);
    unlink(s->tmp_path);
    fd_sink_free(out);
    return 0;
  }
  if (fsync(s->fd) != 0)
    rc = fsh_error_set(err, EIO, "syncing %s: %s", s->tmp_path, strerror(errno));
  if (close(s->fd) != 0 && rc == 0)
    rc = fsh_error_set(err, EIO, "closing %s: %s", s->tmp_path, strerror(errno));
  if (rc == 0 && rename(s->tmp_path, s->path) != 0)
    rc = fsh_error_set(err, EIO, "renaming %s to %s: %s", s->tmp_path, s->path, strerror(errno));
  if (rc != 0) {
    unlink(s->tmp_path);
  } else if ((rc = fsync_dir(s->path, err)) != 0) {
    /* the rename may not survive a crash: an error must mean "no file",
     * so take the final name away again rather than leave it half-durable */
    unlink(s->path);
  }
  fd_sink_free(out);
  return rc;
}

static int new_fd_output(int fd, bool owns_fd, const char *name, fsh_output **out,
                         fsh_error *err) {
  fsh_output *o = fsh_calloc(1, sizeof *o);
  fd_sink *s = fsh_calloc(1, sizeof *s);
  char *nm = fsh_strdup(name ? name : "<fd>");
  if (!o || !s || !nm) {
    fsh_free(o);
    fsh_free(s);
    fsh_free(nm);
    return fsh_error_set(err, ENOMEM, "opening output %s: out of memory", name ? name : "<fd>");
  }
  s->fd = fd;
  s->owns_fd = owns_fd;
  s->name = nm;
  o->ctx = s;
  o->name = nm;
  o->writev = fd_writev;
  o->close = fd_close;
  *out = o;
  return 0;
}

int fsh_output_from_fd(int fd, bool owns_fd, const char *name, fsh_output **out, fsh_error *err) {
  if (fd < 0) return fsh_error_set(err, EINVAL, "output: invalid file descriptor %d", fd);
  return new_fd_output(fd, owns_fd, name, out, err);
}

int fsh_output_open_path(const char *path, fsh_output **out, fsh_error *err) {
  if (!path || !path[0]) return fsh_error_set(err, EINVAL, "output: empty path");
  size_t n = strlen(path);
  char *tmp = fsh_malloc(n + 5);
  char *final_path = fsh_strdup(path);
  if (!tmp || !final_path) {
    fsh_free(tmp);
    fsh_free(final_path);
    return fsh_error_set(err, ENOMEM, "opening %s: out of memory", path);
  }
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp", 5);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    fsh_free(tmp);
    fsh_free(final_path);
    return fsh_error_set(err, e == ENOENT || e == EACCES ? e : EIO, "creating %s.tmp: %s", path,
                         strerror(e));
  }
  fsh_output *o = NULL;
  int rc = new_fd_output(fd, true, path, &o, err);
  if (rc) {
    close(fd);
    unlink(tmp);
    fsh_free(tmp);
    fsh_free(final_path);
    return rc;
  }
  fd_sink *s = o->ctx;
  s->path = final_path;
  s->tmp_path = tmp;
  o->close = atomic_close;
  *out = o;
  return 0;
}

/* ---- memory ---------------------------------------------------------- */

/* The sink writes into one owned fsh_buffer, grown by doubling through
 * fsh_buffer_resize; a reused buffer keeps its capacity (and its pages
 * already faulted in), which is what makes repeated encodes cheap. */
typedef struct mem_sink {
  fsh_buffer *buf;
  fsh_buffer **result; /* set on successful close, if not NULL */
} mem_sink;

static int mem_writev(fsh_output *out, const struct iovec *iov, int n, fsh_error *err) {
  mem_sink *m = out->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  int64_t at = m->buf->size;
  if (at + total > m->buf->capacity) {
    int64_t cap = m->buf->capacity ? m->buf->capacity : 4096;
    while (cap < at + total) cap *= 2;
    FSH_RETURN_NOT_OK(fsh_buffer_resize(m->buf, cap, err));
  }
  m->buf->size = at + total;
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_len) memcpy(m->buf->data + at, iov[i].iov_base, iov[i].iov_len);
    at += (int64_t)iov[i].iov_len;
  }
  out->position += total;
  return 0;
}

static int mem_close(fsh_output *out, bool abort, fsh_error *err) {
  (void)err;
  mem_sink *m = out->ctx;
  if (!abort && m->result)
    *m->result = m->buf; /* the reference moves to the caller: no copy */
  else
    fsh_buffer_unref(m->buf);
  fsh_free(m);
  fsh_free(out);
  return 0;
}

int fsh_output_to_memory(fsh_buffer *reuse, fsh_buffer **result, fsh_output **out,
                         fsh_error *err) {
  if (reuse && (reuse->parent || reuse->release || atomic_load(&reuse->refcount) != 1)) {
    fsh_buffer_unref(reuse);
    return fsh_error_set(err, EINVAL, "memory output: the buffer to reuse must be owned and unshared");
  }
  fsh_output *o = fsh_calloc(1, sizeof *o);
  mem_sink *m = fsh_calloc(1, sizeof *m);
  fsh_buffer *buf = reuse ? reuse : fsh_buffer_new(0, false);
  if (!o || !m || !buf) {
    fsh_free(o);
    fsh_free(m);
    fsh_buffer_unref(buf);
    return fsh_error_set(err, ENOMEM, "memory output: out of memory");
  }
  buf->size = 0;
  m->buf = buf;
  m->result = result;
  o->ctx = m;
  o->name = "<memory>";
  o->writev = mem_writev;
  o->close = mem_close;
  *out = o;
  return 0;
}
