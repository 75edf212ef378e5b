/* fs.c -- the shared-directory shuffle backend: one map-output file per map
 * task attempt, dir/"s<shuffle>-m<map>-a<attempt>.arrows", written through
 * a temp file, fsync and rename (map_file.c), read back by any process that
 * sees the directory (NFS, a distributed file system, a local disk).
 *
 * Locations are the file names, never paths: a reader refuses a location
 * that is not exactly the name this backend gives that (shuffle, map,
 * attempt), so no location can reach outside the directory. A reader opens
 * one file at a time (once for its whole run of partitions) and holds one
 * block in memory; a partition that the map output's metadata says is
 * empty is not opened at all, nor a file whose partitions of the run all
 * are. */
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

/* A reader of the partitions [first, first + count) of its sources: each
 * source's file opened once for the run, its partitions read in increasing
 * order through one cursor at a time. open_reader is the run of one. */

typedef struct fs_source {
  int64_t map_id;
  int32_t attempt;
  bool has_meta; /* the reader's rows/bytes/checksums of it come from the map output */
} fs_source;

typedef struct fs_reader {
  char *dir;
  uint64_t shuffle_id;
  int32_t n_partitions, first, count;
  char what[48];      /* "partition 3", "partitions [3, 5)": for messages */
  fsh_schema *schema; /* the spec's (the stream holds its own reference) */
  fs_source *sources;
  int64_t n_sources, next;
  int64_t *rows, *bytes; /* [n_sources * count]: source i, partition first + k at i * count + k */
  uint64_t *checksums;
  fsh_map_file *file;
  const fs_source *cur_src; /* of file */
  int32_t q;                /* the next partition of file to open a cursor on */
  fsh_map_file_cursor *cur;
  int32_t cur_q; /* cur's partition */
  char cur_name[NAME_MAX_LEN];
  int failed;
} fs_reader;

static void close_current(fs_reader *r) {
  fsh_map_file_cursor_free(r->cur);
  fsh_map_file_close(r->file);
  r->cur = NULL;
  r->file = NULL;
}

/* Whether source i's metadata says partition q holds nothing. */
static bool empty_here(const fs_reader *r, int64_t i, int32_t q) {
  size_t at = (size_t)i * (size_t)r->count + (size_t)(q - r->first);
  return r->sources[i].has_meta && r->rows[at] == 0 && r->bytes[at] == 0;
}

/* Opens source src's file, checking that it is the map output the driver
 * recorded. */
static int open_source(fs_reader *r, const fs_source *src, fsh_error *err) {
  map_file_name(r->cur_name, r->shuffle_id, src->map_id, src->attempt);
  char *path = fsh_path_join(r->dir, r->cur_name);
  if (!path) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = fsh_map_file_open_path(path, &r->file, err);
  fsh_free(path);
  if (rc == ENOENT)
    return fsh_error_set(err, ENOENT, "fs shuffle %" PRIu64 " %s: map %" PRId64
                         " attempt %d: map output %s not found in %s (released, or lost)",
                         r->shuffle_id, r->what, src->map_id, src->attempt, r->cur_name,
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
  if (rc != 0) close_current(r);
  r->cur_src = src;
  r->q = r->first;
  return rc;
}

/* Opens the open file's cursor on partition q, checking the partition's
 * index entry against the map output's record of it. */
static int open_cursor(fs_reader *r, int32_t q, fsh_error *err) {
  const fs_source *src = r->cur_src;
  int rc = fsh_map_file_cursor_open(r->file, q, &r->cur, err);
  size_t at = (size_t)(src - r->sources) * (size_t)r->count + (size_t)(q - r->first);
  if (rc == 0 && src->has_meta) {
    const fsh_map_file_partition *p = fsh_map_file_cursor_partition(r->cur);
    if (p->rows != r->rows[at] || p->bytes != r->bytes[at] || p->checksum != r->checksums[at])
      rc = fsh_error_set(err, EIO, "fs shuffle %" PRIu64 " map %" PRId64 " attempt %d partition "
                         "%d: %s holds %" PRId64 " rows, %" PRId64 " bytes, checksum %016" PRIx64
                         " but the map output recorded %" PRId64 ", %" PRId64 ", %016" PRIx64
                         ": the file was replaced or is corrupt", r->shuffle_id, src->map_id,
                         src->attempt, q, r->cur_name, p->rows, p->bytes, p->checksum,
                         r->rows[at], r->bytes[at], r->checksums[at]);
  }
  r->cur_q = q;
  return rc;
}

static int fs_range_next(fs_reader *r, int32_t *partition, fsh_batch **out, fsh_error *err) {
  *out = NULL;
  *partition = -1;
  if (r->failed)
    return fsh_error_set(err, r->failed, "fs shuffle %" PRIu64 " %s: the reader failed earlier",
                         r->shuffle_id, r->what);
  int rc = 0;
  for (;;) {
    if (r->cur) {
      rc = fsh_map_file_cursor_next(r->cur, out, err);
      if (rc != 0) break;
      if (*out) {
        *partition = r->cur_q;
        break;
      }
      fsh_map_file_cursor_free(r->cur);
      r->cur = NULL;
    }
    if (r->file) {
      int64_t i = r->cur_src - r->sources;
      while (r->q < r->first + r->count && empty_here(r, i, r->q)) r->q++;
      if (r->q < r->first + r->count) {
        rc = open_cursor(r, r->q++, err);
        if (rc != 0) break;
        continue;
      }
      close_current(r);
    }
    if (r->next == r->n_sources) break;
    int64_t i = r->next++;
    int32_t q = r->first;
    while (q < r->first + r->count && empty_here(r, i, q)) q++;
    if (q == r->first + r->count) continue; /* nothing of the run here */
    rc = open_source(r, &r->sources[i], err);
    if (rc != 0) break;
  }
  if (rc != 0) {
    close_current(r);
    r->failed = rc;
  }
  return rc;
}

static int fs_get_next(fsh_batch_stream *s, fsh_batch **out, fsh_error *err) {
  int32_t q;
  return fs_range_next(s->private_data, &q, out, err);
}

static int fs_range_get_next(fsh_range_stream *s, int32_t *partition, fsh_batch **out,
                             fsh_error *err) {
  return fs_range_next(s->private_data, partition, out, err);
}

static void fs_reader_free(fs_reader *r) {
  close_current(r);
  fsh_free(r->sources);
  fsh_free(r->rows);
  fsh_free(r->bytes);
  fsh_free(r->checksums);
  fsh_free(r->dir);
  fsh_free(r);
}

static void fs_release_stream(fsh_batch_stream *s) {
  if (s->private_data) fs_reader_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

static void fs_release_range(fsh_range_stream *s) {
  if (s->private_data) fs_reader_free(s->private_data);
  fsh_schema_unref(s->schema);
  memset(s, 0, sizeof *s);
}

/* The reader of [first, first + count) (arguments checked by the
 * dispatcher; locations checked here). */
static int fs_reader_new(fs_state *st, const fsh_shuffle_spec *spec, int32_t first, int32_t count,
                         const fsh_map_output *sources, int64_t n_sources, fs_reader **out,
                         fsh_error *err) {
  char what[48];
  if (count == 1)
    snprintf(what, sizeof what, "partition %d", first);
  else
    snprintf(what, sizeof what, "partitions [%d, %d)", first, first + count);
  char expect[NAME_MAX_LEN];
  for (int64_t i = 0; i < n_sources; i++) {
    map_file_name(expect, spec->shuffle_id, sources[i].map_id, sources[i].attempt);
    if (strcmp(sources[i].location, expect) != 0)
      return fsh_error_set(err, EINVAL, "fs shuffle %" PRIu64 " %s: source %" PRId64
                           " location '%s' is not this backend's name for map %" PRId64
                           " attempt %d ('%s'); refused", spec->shuffle_id, what, i,
                           sources[i].location, sources[i].map_id, sources[i].attempt, expect);
  }
  size_t n = n_sources > 0 ? (size_t)n_sources : 1, nm = n * (size_t)count;
  fs_reader *r = fsh_calloc(1, sizeof *r);
  if (r) {
    r->dir = fsh_strdup(st->dir);
    r->sources = fsh_calloc(n, sizeof *r->sources);
    r->rows = fsh_calloc(nm, sizeof *r->rows);
    r->bytes = fsh_calloc(nm, sizeof *r->bytes);
    r->checksums = fsh_calloc(nm, sizeof *r->checksums);
  }
  if (!r || !r->dir || !r->sources || !r->rows || !r->bytes || !r->checksums) {
    if (r) fs_reader_free(r);
    return fsh_error_set(err, ENOMEM, "fs shuffle %" PRIu64 " %s: out of memory",
                         spec->shuffle_id, what);
  }
  memcpy(r->what, what, sizeof what);
  r->shuffle_id = spec->shuffle_id;
  r->n_partitions = spec->n_partitions;
  r->first = first;
  r->count = count;
  r->schema = spec->schema;
  r->n_sources = n_sources;
  for (int64_t i = 0; i < n_sources; i++) {
    const fsh_map_output *m = &sources[i];
    fs_source *d = &r->sources[i];
    d->map_id = m->map_id;
    d->attempt = m->attempt;
    d->has_meta = m->rows && m->bytes && m->checksums;
    if (d->has_meta) {
      size_t at = (size_t)i * (size_t)count;
      memcpy(r->rows + at, m->rows + first, (size_t)count * sizeof *r->rows);
      memcpy(r->bytes + at, m->bytes + first, (size_t)count * sizeof *r->bytes);
      memcpy(r->checksums + at, m->checksums + first, (size_t)count * sizeof *r->checksums);
    }
  }
  *out = r;
  return 0;
}

static int fs_open_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec, int32_t partition,
                          const fsh_map_output *sources, int64_t n_sources, fsh_batch_stream *out,
                          fsh_error *err) {
  fs_reader *r = NULL;
  FSH_RETURN_NOT_OK(fs_reader_new(b->state, spec, partition, 1, sources, n_sources, &r, err));
  *out = (fsh_batch_stream){.get_next = fs_get_next, .release = fs_release_stream,
                            .schema = fsh_schema_ref(spec->schema), .private_data = r};
  return 0;
}

static int fs_open_range_reader(fsh_shuffle_backend *b, const fsh_shuffle_spec *spec,
                                int32_t first, int32_t count, const fsh_map_output *sources,
                                int64_t n_sources, fsh_range_stream *out, fsh_error *err) {
  fs_reader *r = NULL;
  FSH_RETURN_NOT_OK(fs_reader_new(b->state, spec, first, count, sources, n_sources, &r, err));
  *out = (fsh_range_stream){.get_next = fs_range_get_next, .release = fs_release_range,
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
    .open_range_reader = fs_open_range_reader,
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
