/* spill.c -- spill files for the bounded-memory operators (contract in
 * exec.h, "bounded memory"): an IPC stream written through a small
 * fsh_output over a file descriptor that moves the file to the next spill
 * directory when one runs out of space, and read back as a batch stream
 * whose file is unlinked as soon as it is open. */
#include <flightshuffle/exec.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum { NAME_MAX_ = 160, FULL_MAX = 400 };

struct fsh_spill {
  char **dirs;
  int n_dirs;
  fsh_compression compression;
  char tag[32];
  uint64_t id;
  atomic_uint_fast64_t next_seq;
  atomic_uint next_dir;
  atomic_int_fast64_t files, bytes;
};

/* Where a finished spill output leaves its file. */
typedef struct spill_result {
  char *path;
  int64_t bytes;
} spill_result;

/* The fsh_output the IPC stream writer writes through. */
typedef struct spill_out {
  fsh_output pub;
  fsh_spill *s;
  char name[NAME_MAX_]; /* file name, the same in every directory */
  int fd;
  char *path;           /* the current file */
  const char *dir;      /* its directory (the area's string) */
  int first_dir, n_tried;
  int64_t file_bytes;   /* bytes in the current file */
  char full[FULL_MAX];  /* directories found full, for the message */
  spill_result *result;
} spill_out;

struct fsh_spill_writer {
  fsh_spill *s;
  fsh_schema *schema;
  fsh_ipc_stream_writer *w;
  spill_result res;
  int64_t rows;
  bool failed;
};

struct fsh_spill_file {
  char *path;
  int64_t bytes, rows;
};

static atomic_uint_fast64_t g_next_spill_id;

static char *join_path(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = fsh_malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static void note_full(spill_out *o, const char *dir) {
  size_t at = strlen(o->full);
  if (at < sizeof o->full - 1)
    snprintf(o->full + at, sizeof o->full - at, "%s%s", at ? ", " : "", dir);
}

static bool is_full_errno(int e) { return e == ENOSPC || e == EDQUOT; }

/* Creates the file in the next untried directory; a directory that cannot
 * create it is skipped (remembered in o->full when full). ENOSPC naming
 * the full directories when none is left, else the last error. */
static int open_next_dir(spill_out *o, fsh_error *err) {
  fsh_spill *s = o->s;
  int last = 0;
  char last_msg[300] = "";
  while (o->n_tried < s->n_dirs) {
    const char *dir = s->dirs[(o->first_dir + o->n_tried++) % s->n_dirs];
    char *path = join_path(dir, o->name);
    if (!path) return fsh_error_set(err, ENOMEM, "spill (%s): out of memory", s->tag);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600); /* read back on a move */
    if (fd >= 0) {
      o->fd = fd;
      o->path = path;
      o->dir = dir;
      o->file_bytes = 0;
      return 0;
    }
    int e = errno;
    if (is_full_errno(e)) note_full(o, dir);
    last = is_full_errno(e) ? ENOSPC : e == EACCES || e == EROFS || e == ENOENT ? e : EIO;
    snprintf(last_msg, sizeof last_msg, "creating %s: %s", path, strerror(e));
    fsh_free(path);
  }
  if (o->full[0])
    return fsh_error_set(err, ENOSPC, "spill (%s): no space left on device (ENOSPC) in spill "
                         "director%s %s, and no other spill directory could take the file%s%s",
                         s->tag, strchr(o->full, ',') ? "ies" : "y", o->full,
                         last && last != ENOSPC ? ": " : "",
                         last && last != ENOSPC ? last_msg : "");
  return fsh_error_set(err, last ? last : EIO, "spill (%s): no spill directory could take "
                       "the file: %s", s->tag, last_msg);
}

/* Closes and deletes the current file. */
static void drop_file(spill_out *o) {
  if (o->fd >= 0) close(o->fd);
  if (o->path) unlink(o->path);
  fsh_free(o->path);
  o->fd = -1;
  o->path = NULL;
  o->dir = NULL;
}

/* Writes n bytes at the end of the current file; 0 or an errno. */
static int write_bytes(spill_out *o, const uint8_t *p, int64_t n) {
  while (n > 0) {
    ssize_t w = write(o->fd, p, (size_t)(n > (1 << 30) ? (1 << 30) : n));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= w;
    o->file_bytes += w;
  }
  return 0;
}

/* The current directory is full: copies the file's bytes into a new file
 * in the next directory with room and deletes the old one. ENOSPC naming
 * every full directory when none has room. */
static int move_to_next_dir(spill_out *o, fsh_error *err) {
  note_full(o, o->dir);
  int old_fd = o->fd;
  char *old_path = o->path;
  int64_t have = o->file_bytes;
  o->fd = -1;
  o->path = NULL;
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = fsh_malloc(CHUNK);
  int rc = buf ? 0 : fsh_error_set(err, ENOMEM, "spill (%s): out of memory", o->s->tag);
  while (rc == 0) {
    rc = open_next_dir(o, err);
    if (rc != 0) break;
    int e = 0;
    for (int64_t at = 0; e == 0 && at < have;) {
      ssize_t got = pread(old_fd, buf, (size_t)(have - at < CHUNK ? have - at : CHUNK), at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        rc = fsh_error_set(err, EIO, "spill (%s): reading back %s: %s", o->s->tag, old_path,
                           got < 0 ? strerror(errno) : "shorter than written");
        break;
      }
      e = write_bytes(o, buf, got);
      at += got;
    }
    if (rc == 0 && e == 0) break;
    const char *dir = o->dir;
    drop_file(o);
    if (rc != 0) break;
    if (!is_full_errno(e)) {
      rc = fsh_error_set(err, EIO, "spill (%s): moving a file out of the full spill directory "
                         "to %s: %s", o->s->tag, dir, strerror(e));
      break;
    }
    note_full(o, dir);
  }
  fsh_free(buf);
  close(old_fd);
  unlink(old_path);
  fsh_free(old_path);
  return rc;
}

static int spill_writev(fsh_output *out, const struct iovec *iov, int n, fsh_error *err) {
  spill_out *o = out->ctx;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)iov[i].iov_len;
  if (o->fd < 0) return fsh_error_set(err, EIO, "spill (%s): the file is gone", o->s->tag);
  /* write iov from byte `done` on, at most 64 segments per call */
  int64_t done = 0;
  while (done < total) {
    struct iovec v[64];
    int cnt = 0;
    int64_t skip = done;
    for (int i = 0; i < n && cnt < 64; i++) {
      int64_t len = (int64_t)iov[i].iov_len;
      if (skip >= len) {
        skip -= len;
        continue;
      }
      v[cnt].iov_base = (uint8_t *)iov[i].iov_base + skip;
      v[cnt].iov_len = (size_t)(len - skip);
      skip = 0;
      cnt++;
    }
    ssize_t w = writev(o->fd, v, cnt);
    if (w > 0) {
      done += w;
      o->file_bytes += w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    int e = w < 0 ? errno : EIO;
    if (is_full_errno(e)) {
      FSH_RETURN_NOT_OK(move_to_next_dir(o, err));
      continue;
    }
    return fsh_error_set(err, EIO, "spill (%s): writing %s: %s", o->s->tag, o->path,
                         strerror(e));
  }
  out->position += total;
  return 0;
}

/* abort: delete. Otherwise the finished file goes to o->result. Frees o. */
static int spill_close(fsh_output *out, bool abort, fsh_error *err) {
  spill_out *o = out->ctx;
  int rc = 0;
  if (o->fd >= 0 && close(o->fd) != 0 && !abort)
    rc = fsh_error_set(err, EIO, "spill (%s): closing %s: %s", o->s->tag, o->path,
                       strerror(errno));
  o->fd = -1;
  if (abort || rc != 0) {
    if (o->path) unlink(o->path);
    fsh_free(o->path);
  } else {
    o->result->path = o->path;
    o->result->bytes = o->file_bytes;
  }
  fsh_free(o);
  return rc;
}

/* ---- the area ------------------------------------------------------------ */

int fsh_spill_new(const fsh_spill_options *o, fsh_spill **out, fsh_error *err) {
  *out = NULL;
  if (!o || o->n_dirs < 1 || !o->dirs)
    return fsh_error_set(err, EINVAL, "spill: no spill directory given");
  const char *tag = o->tag && o->tag[0] ? o->tag : "exec";
  if (strlen(tag) >= sizeof ((fsh_spill *)0)->tag || strchr(tag, '/'))
    return fsh_error_set(err, EINVAL, "spill: tag \"%s\" is not a short word", tag);
  if (o->compression != FSH_COMPRESSION_NONE && o->compression != FSH_COMPRESSION_LZ4_FRAME &&
      o->compression != FSH_COMPRESSION_ZSTD)
    return fsh_error_set(err, EINVAL, "spill (%s): unknown compression %d", tag,
                         (int)o->compression);
  fsh_spill *s = fsh_calloc(1, sizeof *s);
  if (s) s->dirs = fsh_calloc((size_t)o->n_dirs, sizeof *s->dirs);
  bool ok = s && s->dirs;
  for (int i = 0; ok && i < o->n_dirs; i++) {
    if (!o->dirs[i] || !o->dirs[i][0]) {
      s->n_dirs = i;
      fsh_spill_free(s);
      return fsh_error_set(err, EINVAL, "spill (%s): spill directory %d is empty", tag, i);
    }
    ok = (s->dirs[i] = fsh_strdup(o->dirs[i])) != NULL;
    s->n_dirs = i + 1;
  }
  if (!ok) {
    fsh_spill_free(s);
    return fsh_error_set(err, ENOMEM, "spill (%s): out of memory", tag);
  }
  s->compression = o->compression;
  strcpy(s->tag, tag);
  s->id = atomic_fetch_add(&g_next_spill_id, 1);
  *out = s;
  return 0;
}

void fsh_spill_free(fsh_spill *s) {
  if (!s) return;
  for (int i = 0; i < s->n_dirs; i++) fsh_free(s->dirs[i]);
  fsh_free(s->dirs);
  fsh_free(s);
}

int64_t fsh_spill_files_written(const fsh_spill *s) { return atomic_load(&s->files); }
int64_t fsh_spill_bytes_written(const fsh_spill *s) { return atomic_load(&s->bytes); }

/* ---- writing --------------------------------------------------------------- */

int fsh_spill_writer_open(fsh_spill *s, fsh_schema *schema, fsh_spill_writer **out,
                          fsh_error *err) {
  *out = NULL;
  fsh_spill_writer *w = fsh_calloc(1, sizeof *w);
  spill_out *o = w ? fsh_calloc(1, sizeof *o) : NULL;
  if (!o) {
    fsh_free(w);
    return fsh_error_set(err, ENOMEM, "spill (%s): out of memory", s->tag);
  }
  uint64_t seq = atomic_fetch_add(&s->next_seq, 1);
  snprintf(o->name, sizeof o->name, "fshexec-%ld-%" PRIu64 "-%" PRIu64 "-%s.arrows",
           (long)getpid(), s->id, seq, s->tag);
  o->s = s;
  o->fd = -1;
  o->result = &w->res;
  o->first_dir = (int)(atomic_fetch_add(&s->next_dir, 1u) % (unsigned)s->n_dirs);
  o->pub.writev = spill_writev;
  o->pub.close = spill_close;
  o->pub.ctx = o;
  o->pub.name = o->name;
  int rc = open_next_dir(o, err);
  if (rc != 0) {
    fsh_free(o);
    fsh_free(w);
    return rc;
  }
  fsh_ipc_write_options opts;
  fsh_ipc_write_options_init(&opts);
  opts.compression = s->compression;
  rc = fsh_ipc_stream_writer_open(&o->pub, schema, &opts, &w->w, err); /* closes o on error */
  if (rc != 0) {
    fsh_free(w);
    return rc;
  }
  w->s = s;
  w->schema = fsh_schema_ref(schema);
  *out = w;
  return 0;
}

int fsh_spill_writer_write(fsh_spill_writer *w, fsh_batch *b, fsh_error *err) {
  if (w->failed)
    return fsh_error_set(err, EINVAL, "spill (%s): write after a failed write", w->s->tag);
  fsh_error diff = {{0}};
  if (!fsh_schema_equals(w->schema, b->schema, false, &diff)) {
    w->failed = true;
    return fsh_error_set(err, EINVAL, "spill (%s): batch schema differs from the file's: %s",
                         w->s->tag, diff.message);
  }
  int rc = fsh_ipc_stream_writer_write(w->w, b, err);
  if (rc != 0) {
    w->failed = true;
    return rc;
  }
  w->rows += b->length;
  return 0;
}

int fsh_spill_writer_finish(fsh_spill_writer *w, fsh_spill_file **out, fsh_error *err) {
  *out = NULL;
  if (w->failed) {
    const char *tag = w->s->tag;
    int rc = fsh_error_set(err, EINVAL, "spill (%s): finish after a failed write", tag);
    fsh_spill_writer_abort(w);
    return rc;
  }
  fsh_spill_file *f = fsh_calloc(1, sizeof *f);
  if (!f) {
    int rc = fsh_error_set(err, ENOMEM, "spill (%s): out of memory", w->s->tag);
    fsh_spill_writer_abort(w);
    return rc;
  }
  fsh_spill *s = w->s;
  int rc = fsh_ipc_stream_writer_close(w->w, err); /* fills w->res on success */
  if (rc == 0) {
    f->path = w->res.path;
    f->bytes = w->res.bytes;
    f->rows = w->rows;
    atomic_fetch_add(&s->files, 1);
    atomic_fetch_add(&s->bytes, f->bytes);
    *out = f;
  } else {
    fsh_free(f);
  }
  fsh_schema_unref(w->schema);
  fsh_free(w);
  return rc;
}

void fsh_spill_writer_abort(fsh_spill_writer *w) {
  if (!w) return;
  fsh_ipc_stream_writer_abort(w->w);
  fsh_schema_unref(w->schema);
  fsh_free(w);
}

/* ---- files and reading --------------------------------------------------- */

const char *fsh_spill_file_path(const fsh_spill_file *f) { return f->path; }
int64_t fsh_spill_file_bytes(const fsh_spill_file *f) { return f->bytes; }
int64_t fsh_spill_file_rows(const fsh_spill_file *f) { return f->rows; }

void fsh_spill_file_free(fsh_spill_file *f) {
  if (!f) return;
  unlink(f->path);
  fsh_free(f->path);
  fsh_free(f);
}

typedef struct spill_stream {
  fsh_ipc_stream_reader *r;
  char *path; /* for messages; already unlinked */
} spill_stream;

static int spill_stream_next(fsh_batch_stream *st, fsh_batch **out, fsh_error *err) {
  spill_stream *p = st->private_data;
  *out = NULL;
  int rc = fsh_ipc_stream_reader_next(p->r, out, err);
  return rc == 0 ? 0 : fsh_error_prefix(err, rc, "reading spill file %s: ", p->path);
}

static void spill_stream_release(fsh_batch_stream *st) {
  spill_stream *p = st->private_data;
  if (p) {
    fsh_ipc_stream_reader_free(p->r);
    fsh_free(p->path);
    fsh_free(p);
  }
  fsh_schema_unref(st->schema);
  memset(st, 0, sizeof *st);
}

int fsh_spill_file_open(fsh_spill_file *f, fsh_batch_stream *out, fsh_error *err) {
  memset(out, 0, sizeof *out);
  spill_stream *p = fsh_calloc(1, sizeof *p);
  if (!p) {
    fsh_spill_file_free(f);
    return fsh_error_set(err, ENOMEM, "opening a spill file: out of memory");
  }
  fsh_input *in = NULL;
  int rc = fsh_input_open_path(f->path, &in, err);
  unlink(f->path); /* open or not, the name goes now */
  p->path = f->path;
  fsh_free(f);
  if (rc == 0) rc = fsh_ipc_stream_reader_open(in, &p->r, err); /* takes in */
  if (rc != 0) {
    rc = fsh_error_prefix(err, rc, "opening spill file %s: ", p->path);
    fsh_free(p->path);
    fsh_free(p);
    return rc;
  }
  out->get_next = spill_stream_next;
  out->release = spill_stream_release;
  out->schema = fsh_schema_ref(fsh_ipc_stream_reader_schema(p->r));
  out->private_data = p;
  return 0;
}

/* ---- memory accounting ----------------------------------------------------- */

void fsh_mem_set_init(fsh_mem_set *s) { memset(s, 0, sizeof *s); }

void fsh_mem_set_clear(fsh_mem_set *s) {
  if (s->slots) memset(s->slots, 0, (size_t)s->cap * sizeof *s->slots);
  s->n = 0;
  s->bytes = 0;
}

void fsh_mem_set_reset(fsh_mem_set *s) {
  fsh_free(s->slots);
  fsh_mem_set_init(s);
}

static inline uint64_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 31;
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

/* Inserts buf; true when it was new. The table has room (load < 1/2). */
static bool set_insert(const fsh_buffer **slots, int64_t cap, const fsh_buffer *buf) {
  int64_t p = (int64_t)(ptr_hash(buf) & (uint64_t)(cap - 1));
  for (; slots[p]; p = (p + 1) & (cap - 1))
    if (slots[p] == buf) return false;
  slots[p] = buf;
  return true;
}

static int set_grow(fsh_mem_set *s, int64_t need) {
  if (2 * need <= s->cap) return 0;
  int64_t cap = s->cap ? s->cap : 16;
  while (cap < 2 * need) cap *= 2;
  const fsh_buffer **slots = fsh_calloc((size_t)cap, sizeof *slots);
  if (!slots) return ENOMEM;
  for (int64_t i = 0; i < s->cap; i++)
    if (s->slots[i]) set_insert(slots, cap, s->slots[i]);
  fsh_free(s->slots);
  s->slots = slots;
  s->cap = cap;
  return 0;
}

static int64_t count_buffers(const fsh_array *a) {
  if (!a) return 0;
  int64_t n = a->n_buffers;
  for (int64_t i = 0; i < a->n_children; i++) n += count_buffers(a->children[i]);
  return n + count_buffers(a->dictionary);
}

static int64_t add_array(fsh_mem_set *s, const fsh_array *a) {
  if (!a) return 0;
  int64_t added = 0;
  for (int32_t i = 0; i < a->n_buffers; i++) {
    if (!a->buffers[i]) continue;
    const fsh_buffer *r = a->buffers[i];
    if (set_insert(s->slots, s->cap, r)) {
      s->n++;
      added += r->size;
    }
  }
  for (int64_t i = 0; i < a->n_children; i++) added += add_array(s, a->children[i]);
  return added + add_array(s, a->dictionary);
}

int fsh_mem_set_add(fsh_mem_set *s, const fsh_batch *b, int64_t *added, fsh_error *err) {
  if (added) *added = 0;
  int64_t most = 0; /* buffers b may add */
  for (int64_t c = 0; c < b->n_columns; c++) most += count_buffers(b->columns[c]);
  if (set_grow(s, s->n + most) != 0)
    return fsh_error_set(err, ENOMEM, "memory accounting: out of memory");
  int64_t a = 0;
  for (int64_t c = 0; c < b->n_columns; c++) a += add_array(s, b->columns[c]);
  s->bytes += a;
  if (added) *added = a;
  return 0;
}

/* Every buffer counted, shared or not (an over-count, never under). */
static int64_t plain_bytes(const fsh_array *a) {
  if (!a) return 0;
  int64_t n = 0;
  for (int32_t i = 0; i < a->n_buffers; i++)
    if (a->buffers[i]) n += a->buffers[i]->size;
  for (int64_t i = 0; i < a->n_children; i++) n += plain_bytes(a->children[i]);
  return n + plain_bytes(a->dictionary);
}

int64_t fsh_exec_batch_memory(const fsh_batch *b) {
  enum { LOCAL = 64 }; /* a set on the stack for the common small batch */
  const fsh_buffer *local[2 * LOCAL] = {NULL};
  fsh_mem_set s = {local, 2 * LOCAL, 0, 0};
  int64_t most = 0, bytes = 0;
  for (int64_t c = 0; c < b->n_columns; c++) most += count_buffers(b->columns[c]);
  if (most <= LOCAL) {
    for (int64_t c = 0; c < b->n_columns; c++) bytes += add_array(&s, b->columns[c]);
    return bytes;
  }
  fsh_mem_set h; /* a wide batch: a set on the heap */
  fsh_mem_set_init(&h);
  if (fsh_mem_set_add(&h, b, &bytes, NULL) != 0) {
    bytes = 0;
    for (int64_t c = 0; c < b->n_columns; c++) bytes += plain_bytes(b->columns[c]);
  }
  fsh_mem_set_reset(&h);
  return bytes;
}

int fsh_spill_scatter(fsh_batch *b, const int32_t *key_cols, int n_keys, uint64_t seed,
                      int32_t n_parts, fsh_spill_writer *const *w, fsh_error *err) {
  if (b->length == 0) return 0;
  uint64_t *h = fsh_malloc((size_t)b->length * sizeof *h);
  int32_t *part = fsh_malloc((size_t)b->length * sizeof *part);
  fsh_batch **outs = fsh_calloc((size_t)n_parts, sizeof *outs);
  int rc = h && part && outs ? 0 : fsh_error_set(err, ENOMEM, "spill scatter: out of memory");
  if (rc == 0) rc = fsh_hash_columns(b, key_cols, n_keys, seed, h, err);
  if (rc == 0) rc = fsh_partition_hash(h, b->length, n_parts, part, err);
  if (rc == 0) rc = fsh_scatter(b, part, n_parts, outs, err);
  for (int32_t p = 0; rc == 0 && p < n_parts; p++)
    if (outs[p] && outs[p]->length > 0) rc = fsh_spill_writer_write(w[p], outs[p], err);
  for (int32_t p = 0; outs && p < n_parts; p++) fsh_batch_unref(outs[p]);
  fsh_free(outs);
  fsh_free(h);
  fsh_free(part);
  return rc;
}
