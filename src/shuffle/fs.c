/* fs.c -- the shared-directory shuffle backend: one map-output file per map
 * task attempt, dir/"s<shuffle>-m<map>-a<attempt>.arrows", written through
 * a temp file, fsync and rename (map_file.c), read back by any process that
 * sees the directory (NFS, a distributed file system, a local disk).
 *
 * Locations are the file names, never paths: a reader refuses a location
 * that is not exactly the name this backend gives that (shuffle, map,
 * attempt), so no location can reach outside the directory. A reader opens
 * one file at a time and holds one block in memory; a partition that the
 * map output's metadata says is empty is not opened at all. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shuffle/shuffle_internal.h"

typedef struct fs_state {
  char *dir;
} fs_state;

#define NAME_MAX_LEN 96

static void map_file_name(char *out, uint64_t shuffle_id, int64_t map_id, int32_t attempt) {
  snprintf(out, NAME_MAX_LEN, "s%" PRIu64 "-m%" PRId64 "-a%" PRId32 ".arrows", shuffle_id,
           map_id, attempt);
}

/* dir + "/" + name into a new string (NULL on ENOMEM). */

/* Whether `name` is a map-output file (or its temp file) of shuffle_id:
 * exactly the name map_file_name gives, optionally followed by ".tmp". */
static bool is_file_of(const char *name, uint64_t shuffle_id) {
  uint64_t s;
  int64_t m;
  int32_t a;
  if (sscanf(name, "s%" SCNu64 "-m%" SCNd64 "-a%" SCNd32, &s, &m, &a) != 3 || s != shuffle_id ||
      m < 0 || a < 0)
    return false;
  char expect[NAME_MAX_LEN];
  map_file_name(expect, s, m, a);
  size_t n = strlen(expect);
  return strncmp(name, expect, n) == 0 && (name[n] == '\0' || strcmp(name + n, ".tmp") == 0);
}

/* ---- writer ------------------------------------------------------------ */

typedef struct fs_writer {
  fsh_shuffle_writer pub;
  fsh_map_file_writer *mw;
  char *path;
  char name[NAME_MAX_LEN];
} fs_writer;

static int fs_write(fsh_shuffle_writer *w, int32_t partition, fsh_batch *batch, fsh_error *err) {
  fs_writer *f = w->state;
  return fsh_map_file_writer_write(f->mw, partition, batch, err);
}

static int fs_write_rows(fsh_shuffle_writer *w, fsh_batch *batch, const int32_t *partition_of_row,
                         fsh_error *err) {
  fs_writer *f = w->state;
  return fsh_map_file_writer_write_rows(f->mw, batch, partition_of_row, err);
}

static void fs_writer_free(fs_writer *f) {
  fsh_free(f->path);
  fsh_free(f);
}

static void fs_abort(fsh_shuffle_writer *w) {
  fs_writer *f = w->state;
  fsh_map_file_writer_abort(f->mw);
  fs_writer_free(f);
}

static int fs_close(fsh_shuffle_writer *w, fsh_map_output *out, fsh_error *err) {
  fs_writer *f = w->state;
  char *location = fsh_strdup(f->name);
  if (!location) {
    int rc = fsh_error_set(err, ENOMEM, "fs shuffle: closing %s: out of memory", f->name);
    fs_abort(w);
    return rc;
  }
  fsh_map_output m;
  int rc = fsh_map_file_writer_close(f->mw, &m, err);
  if (rc != 0) {
    /* The output removes its temp file; if the failure came after the
     * rename (syncing the directory), the file is complete but the caller
     * sees an error: remove it too, so a failed close leaves nothing. */
    unlink(f->path);
    fsh_free(location);
    fs_writer_free(f);
    return rc;
  }
  m.location = location;
  fs_writer_free(f);
  *out = m;
  return 0;
}

static int fs_open_writer(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int64_t map_id,
                          int32_t attempt, fsh_shuffle_writer **out, fsh_error *err) {
  fs_state *s = b->state;
  fs_writer *f = fsh_calloc(1, sizeof *f);
  if (f) {
    map_file_name(f->name, spec->shuffle_id, map_id, attempt);
    f->path = fsh_path_join(s->dir, f->name);
  }
  if (!f || !f->path) {
    fsh_free(f);
    return fsh_error_set(err, ENOMEM, "fs shuffle %" PRIu64 " map %" PRId64 ": out of memory",
                         spec->shuffle_id, map_id);
  }
  fsh_output *o = NULL;
  int rc = fsh_output_open_path(f->path, &o, err);
  if (rc != 0) {
    rc = fsh_error_prefix(err, rc, "fs shuffle %" PRIu64 " map %" PRId64 " attempt %d: ",
                          spec->shuffle_id, map_id, attempt);
  } else {
    fsh_map_file_options opts = {.compression = spec->compression,
                                 .target_block_bytes = spec->target_block_bytes};
    rc = fsh_map_file_writer_open(o, spec, map_id, attempt, &opts, &f->mw, err);
  }
  if (rc != 0) {
    fs_writer_free(f);
    return rc;
  }
  f->pub = (fsh_shuffle_writer){.write = fs_write, .write_rows = fs_write_rows,
                                .close = fs_close, .abort = fs_abort,
                                .state = f};
  *out = &f->pub;
  return 0;
}

/* ---- reader ------------------------------------------------------------ */

typedef struct fs_source {
  int64_t map_id;
  int32_t attempt;
  bool has_meta; /* rows/bytes/checksum below come from the map output */
  int64_t rows, bytes;
  uint64_t checksum;
} fs_source;

typedef struct fs_reader {
  char *dir;
  uint64_t shuffle_id;
  int32_t n_partitions, partition;
  fsh_schema *schema; /* the spec's (the stream holds its own reference) */
  fs_source *sources;
  int64_t n_sources, next;
  fsh_map_file *file;
  fsh_map_file_cursor *cur;
  const fs_source *cur_src;
  char cur_name[NAME_MAX_LEN];
  int failed;
} fs_reader;

static void close_current(fs_reader *r) {
  fsh_map_file_cursor_free(r->cur);
  fsh_map_file_close(r->file);
  r->cur = NULL;
  r->file = NULL;
}

/* Opens source i's file and its partition cursor, checking that the file
 * is the map output the driver recorded. */
static int open_source(fs_reader *r, const fs_source *src, fsh_error *err) {
  map_file_name(r->cur_name, r->shuffle_id, src->map_id, src->attempt);
  char *path = fsh_path_join(r->dir, r->cur_name);
  if (!path) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = fsh_map_file_open_path(path, &r->file, err);
  fsh_free(path);
  if (rc == ENOENT)
    return fsh_error_set(err, ENOENT, "fs shuffle %" PRIu64 " partition %d: map %" PRId64
                         " attempt %d: map output %s not found in %s (released, or lost)",
                         r->shuffle_id, r->partition, src->map_id, src->attempt, r->cur_name,
                         r->dir);
  if (rc != 0) return rc;
  const fsh_map_file_info *i = fsh_map_file_get_info(r->file);
  fsh_error diff = {{0}};
  if (i->shuffle_id != r->shuffle_id || i->map_id != src->map_id || i->attempt != src->attempt ||
      i->n_partitions != r->n_partitions)
    rc = fsh_error_set(err, EINVAL, "fs shuffle %" PRIu64 ": %s holds shuffle %" PRIu64
                       " map %" PRId64 " attempt %d with %d partitions, not map %" PRId64
                       " attempt %d with %d", r->shuffle_id, r->cur_name, i->shuffle_id,
                       i->map_id, i->attempt, i->n_partitions, src->map_id, src->attempt,
                       r->n_partitions);
  else if (!fsh_schema_equals(fsh_map_file_schema(r->file), r->schema, false, &diff))
    rc = fsh_error_set(err, EINVAL, "fs shuffle %" PRIu64 ": %s: schema differs from the "
                       "shuffle's: %s", r->shuffle_id, r->cur_name, diff.message);
  if (rc == 0) rc = fsh_map_file_cursor_open(r->file, r->partition, &r->cur, err);
  if (rc == 0 && src->has_meta) {
    const fsh_map_file_partition *p = fsh_map_file_cursor_partition(r->cur);
    if (p->rows != src->rows || p->bytes != src->bytes || p->checksum != src->checksum)
      rc = fsh_error_set(err, EIO, "fs shuffle %" PRIu64 " map %" PRId64 " attempt %d partition "
                         "%d: %s holds %" PRId64 " rows, %" PRId64 " bytes, checksum %016" PRIx64
                         " but the map output recorded %" PRId64 ", %" PRId64 ", %016" PRIx64
                         ": the file was replaced or is corrupt", r->shuffle_id, src->map_id,
                         src->attempt, r->partition, r->cur_name, p->rows, p->bytes, p->checksum,
                         src->rows, src->bytes, src->checksum);
  }
  if (rc != 0) close_current(r);
  return rc;
}

static int fs_get_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  fs_reader *r = s->private_data;
  *out = NULL;
  if (r->failed)
    return fsh_error_set(err, r->failed, "fs shuffle %" PRIu64 " partition %d: the reader "
                         "failed earlier", r->shuffle_id, r->partition);
  int rc = 0;
  for (;;) {
    if (r->cur) {
      rc = fsh_map_file_cursor_next(r->cur, out, err);
      if (rc != 0 || *out) break;
      close_current(r);
    }
    if (r->next == r->n_sources) break;
    const fs_source *src = &r->sources[r->next++];
    if (src->has_meta && src->rows == 0 && src->bytes == 0) continue; /* empty here */
    rc = open_source(r, src, err);
    if (rc != 0) break;
  }
  if (rc != 0) {
    close_current(r);
    r->failed = rc;
  }
  return rc;
}

static void fs_reader_free(fs_reader *r) {
  close_current(r);
  fsh_free(r->sources);
  fsh_free(r->dir);
  fsh_free(r);
}

static void fs_release_stream(fsh_batch_stream *s) {
  if (s->private_data) fs_reader_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

static int fs_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                          const fsh_map_output *sources, int64_t n_sources, fsh_batch_stream *out,
                          fsh_error *err) {
  fs_state *st = b->state;
  char expect[NAME_MAX_LEN];
  for (int64_t i = 0; i < n_sources; i++) {
    map_file_name(expect, spec->shuffle_id, sources[i].map_id, sources[i].attempt);
    if (strcmp(sources[i].location, expect) != 0)
      return fsh_error_set(err, EINVAL, "fs shuffle %" PRIu64 " partition %d: source %" PRId64
                           " location '%s' is not this backend's name for map %" PRId64
                           " attempt %d ('%s'); refused", spec->shuffle_id, partition, i,
                           sources[i].location, sources[i].map_id, sources[i].attempt, expect);
  }
  fs_reader *r = fsh_calloc(1, sizeof *r);
  if (r) {
    r->dir = fsh_strdup(st->dir);
    r->sources = fsh_calloc(n_sources > 0 ? (size_t)n_sources : 1, sizeof *r->sources);
  }
  if (!r || !r->dir || !r->sources) {
    if (r) fs_reader_free(r);
    return fsh_error_set(err, ENOMEM, "fs shuffle %" PRIu64 " partition %d: out of memory",
                         spec->shuffle_id, partition);
  }
  r->shuffle_id = spec->shuffle_id;
  r->n_partitions = spec->n_partitions;
  r->partition = partition;
  r->schema = spec->schema;
  r->n_sources = n_sources;
  for (int64_t i = 0; i < n_sources; i++) {
    const fsh_map_output *m = &sources[i];
    fs_source *d = &r->sources[i];
    d->map_id = m->map_id;
    d->attempt = m->attempt;
    d->has_meta = m->rows && m->bytes && m->checksums;
    if (d->has_meta) {
      d->rows = m->rows[partition];
      d->bytes = m->bytes[partition];
      d->checksum = m->checksums[partition];
    }
  }
  *out = (fsh_batch_stream){.get_next = fs_get_next, .release = fs_release_stream,
                            .schema = fsh_schema_ref(spec->schema), .private_data = r};
  return 0;
}

/* ---- release and lifecycle --------------------------------------------- */

static int fs_release(fsh_shuffle_backend *b, uint64_t shuffle_id, fsh_error *err) {
  fs_state *s = b->state;
  DIR *d = opendir(s->dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    return fsh_error_set(err, EIO, "fs shuffle %" PRIu64 ": release: cannot list %s: %s",
                         shuffle_id, s->dir, strerror(errno));
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_file_of(e->d_name, shuffle_id)) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT && rc == 0)
      rc = fsh_error_set(err, EIO, "fs shuffle %" PRIu64 ": release: cannot remove %s/%s: %s",
                         shuffle_id, s->dir, e->d_name, strerror(errno));
  }
  closedir(d);
  return rc;
}

static void fs_destroy(fsh_shuffle_backend *b) {
  fs_state *s = b->state;
  fsh_free(s->dir);
  fsh_free(s);
  fsh_free(b);
}

static const fsh_shuffle_backend_ops k_fs_ops = {
    .name = "fs",
    .open_writer = fs_open_writer,
    .open_reader = fs_open_reader,
    .release = fs_release,
    .destroy = fs_destroy,
};

/* mkdir -p: creates every missing component of path. */
static int make_dirs(const char *path, fsh_error *err) {
  char *p = fsh_strdup(path);
  if (!p) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = 0;
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char saved = *c;
    *c = '\0';
    struct stat st;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      rc = fsh_error_set(err, errno == ENOTDIR || errno == EACCES ? errno : EIO,
                         "fs shuffle backend: cannot create directory %s: %s", p, strerror(errno));
      break;
    }
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
      rc = fsh_error_set(err, ENOTDIR, "fs shuffle backend: %s is not a directory", p);
      break;
    }
    *c = saved;
    if (saved == '\0') break;
  }
  fsh_free(p);
  return rc;
}

int fsh_shuffle_fs_new(const char *dir, fsh_shuffle_backend **out, fsh_error *err) {
  if (!dir || !dir[0] || !out)
    return fsh_error_set(err, EINVAL, "fs shuffle backend: no directory given");
  FSH_RETURN_NOT_OK(make_dirs(dir, err));
  fsh_shuffle_backend *b = fsh_calloc(1, sizeof *b);
  fs_state *s = fsh_calloc(1, sizeof *s);
  char *d = fsh_strdup(dir);
  if (!b || !s || !d) {
    fsh_free(b);
    fsh_free(s);
    fsh_free(d);
    return fsh_error_set(err, ENOMEM, "fs shuffle backend: out of memory");
  }
  /* trailing slashes would double in joined paths */
  for (size_t n = strlen(d); n > 1 && d[n - 1] == '/'; n--) d[n - 1] = '\0';
  s->dir = d;
  b->ops = &k_fs_ops;
  b->state = s;
  *out = b;
  return 0;
}
