/* plan_exchange.c -- running a plan's exchanges: map tasks (one per input
 * partition, pre-shuffle merge grouping consecutive ones into one map
 * output) partition their rows and write them through the shuffle
 * backends' writers, on a thread pool when they stream; range and
 * into_partitions hold every map's rows first; exchanges nobody reads any
 * more are released as soon as possible. */
#include "exec/plan_run_internal.h"

#include <inttypes.h>
#include <stdatomic.h>

/* ---- exchanges ------------------------------------------------------------------- */

static fsh_plan_merge merge_policy(const run_ctx *c, const plan_node *x) {
  if (c->merge != FSH_PLAN_MERGE_AUTO) return c->merge;
  if (x->merge != FSH_PLAN_MERGE_AUTO) return x->merge;
  return c->p->merge;
}

static int64_t merge_group(const run_ctx *c, const plan_node *x, int64_t m, int64_t r) {
  return plan_merge_group(merge_policy(c, x), c->merge_threshold, m, r);
}

/* One map output being written: a writer for a group of map tasks; with
 * sums (a plan-fragment task), the row checksum of every partition
 * written (plan_row_checksum). */
typedef struct mapw {
  fsh_shuffle_writer *w;
  int64_t map_id;
  uint64_t *sums; /* [n_partitions] or NULL */
} mapw;

static int write_part(mapw *mw, int32_t part, fsh_batch *b, fsh_error *err) {
  if (!b || b->length == 0) return 0;
  if (mw->sums) FSH_RETURN_NOT_OK(plan_row_checksum(b, &mw->sums[part], err));
  return mw->w->write(mw->w, part, b, err);
}

/* Partitions batch b of map m (rows before it in that map: row0) and
 * writes it. Range boundaries / into-partitions slices as given. */
static int map_batch(const plan_node *x, mapw *mw, fsh_batch *b, int64_t m, int64_t row0,
                     int32_t n_out, const fsh_batch *bounds, int32_t *pids, fsh_batch **parts,
                     fsh_error *err) {
  int rc = 0;
  if (x->xkind == PX_GATHER) return write_part(mw, 0, b, err);
  if (x->xkind == PX_HASH) {
    uint64_t *h = fsh_malloc((size_t)(b->length ? b->length : 1) * sizeof *h);
    if (!h) return fsh_error_set(err, ENOMEM, "out of memory");
    rc = fsh_hash_columns(b, x->keys, x->n_keys, 0, h, err);
    if (!rc) rc = fsh_partition_hash(h, b->length, n_out, pids, err);
    fsh_free(h);
  } else if (x->xkind == PX_RANDOM) {
    uint64_t seed = x->seed ^ ((uint64_t)m * 0xD1B54A32D192ED03ull);
    rc = fsh_partition_random(b->length, n_out, seed, row0, pids, err);
  } else if (x->xkind == PX_RANGE) {
    if (!bounds) {
      memset(pids, 0, (size_t)b->length * sizeof *pids);
    } else {
      rc = fsh_partition_range(b, x->keys, x->n_keys, bounds, x->sort_order, pids, err);
    }
  }
  if (rc) return rc;
  /* rows straight into the writer (its partition builders when it has
   * them: no batch per part), their checksums in one pass over b */
  if (mw->sums) FSH_RETURN_NOT_OK(plan_row_checksum_parts(b, pids, mw->sums, err));
  return fsh_shuffle_write_rows(mw->w, b, pids, n_out, parts, err);
}

/* The batches of every map task held (range and into_partitions need
 * every map's rows, or a sample of them, before any is written). */
typedef struct held_maps {
  int64_t m;
  fsh_batch ***batches; /* [m][n] */
  int64_t *n;
  int64_t *rows;
} held_maps;

static void held_reset(held_maps *h) {
  for (int64_t i = 0; i < h->m; i++) {
    for (int64_t k = 0; h->batches && h->batches[i] && k < h->n[i]; k++)
      fsh_batch_unref(h->batches[i][k]);
    if (h->batches) fsh_free(h->batches[i]);
  }
  fsh_free(h->batches);
  fsh_free(h->n);
  fsh_free(h->rows);
  memset(h, 0, sizeof *h);
}

static int held_fill(run_ctx *c, const plan_node *x, int64_t m, held_maps *h, fsh_error *err) {
  h->m = m;
  h->batches = fsh_calloc((size_t)m, sizeof *h->batches);
  h->n = fsh_calloc((size_t)m, sizeof *h->n);
  h->rows = fsh_calloc((size_t)m, sizeof *h->rows);
  if (!h->batches || !h->n || !h->rows) return fsh_error_set(err, ENOMEM, "out of memory");
  for (int64_t i = 0; i < m; i++) {
    fsh_batch_stream in;
    FSH_RETURN_NOT_OK(plan_open_stream(c, x->inputs[0], (int32_t)i, &in, err));
    int rc = plan_drain(&in, &h->batches[i], &h->n[i], err);
    in.release(&in);
    for (int64_t k = 0; k < h->n[i]; k++) h->rows[i] += h->batches[i][k]->length;
    if (rc) return rc;
  }
  return 0;
}

/* A map's sample taken as its batches go by: up to sample_rows of its
 * `rows` rows (> 0), evenly spaced (global row j * rows / k for j < k),
 * in row order; the rows taken from each batch in place and the k rows
 * concatenated at the end -- the map's rows are never copied as a whole
 * nor need to be held (the staging stage of a distributed sort holds a
 * whole partition otherwise). */
typedef struct sampler {
  int64_t k, rows, j, base, n_takes, cap;
  int64_t *idx;
  fsh_batch **takes;
} sampler;

static void sampler_free(sampler *sp) {
  for (int64_t i = 0; i < sp->n_takes; i++) fsh_batch_unref(sp->takes[i]);
  fsh_free(sp->takes);
  fsh_free(sp->idx);
  memset(sp, 0, sizeof *sp);
}

static int sampler_init(sampler *sp, const plan_node *x, int64_t rows, fsh_error *err) {
  memset(sp, 0, sizeof *sp);
  sp->rows = rows;
  sp->k = rows < x->sample_rows ? rows : x->sample_rows;
  if (!(sp->idx = fsh_malloc((size_t)(sp->k ? sp->k : 1) * sizeof *sp->idx)))
    return fsh_error_set(err, ENOMEM, "out of memory");
  return 0;
}

/* The sampled rows of the map's next batch b. */
static int sampler_add(sampler *sp, fsh_batch *b, fsh_error *err) {
  int64_t len = b->length, cnt = 0;
  for (; sp->j < sp->k && sp->j * sp->rows / sp->k < sp->base + len; sp->j++)
    sp->idx[cnt++] = sp->j * sp->rows / sp->k - sp->base;
  sp->base += len;
  if (cnt == 0) return 0;
  if (sp->n_takes == sp->cap) {
    int64_t cap = sp->cap ? 2 * sp->cap : 16;
    fsh_batch **v = fsh_realloc(sp->takes, (size_t)cap * sizeof *v);
    if (!v) return fsh_error_set(err, ENOMEM, "out of memory");
    sp->takes = v, sp->cap = cap;
  }
  FSH_RETURN_NOT_OK(fsh_take(b, sp->idx, cnt, &sp->takes[sp->n_takes], err));
  sp->n_takes++;
  return 0;
}

/* The sample (*out) once every batch was added; EINVAL when they held
 * other than `rows` rows (an input computed twice that changed). */
static int sampler_finish(sampler *sp, fsh_error *err, fsh_batch **out) {
  *out = NULL;
  if (sp->base != sp->rows)
    return fsh_error_set(err, EINVAL, "the sampled input had %lld rows, %lld when counted",
                         (long long)sp->base, (long long)sp->rows);
  if (sp->n_takes == 0) return fsh_error_set(err, EINVAL, "no row to sample");
  return fsh_concat(sp->takes, sp->n_takes, out, err);
}

/* The sample of one map's rows (batches[0, n), rows in all, > 0). */
static int map_sample(const plan_node *x, fsh_batch **batches, int64_t n, int64_t rows,
                      fsh_batch **out, fsh_error *err) {
  *out = NULL;
  sampler sp;
  int rc = sampler_init(&sp, x, rows, err);
  for (int64_t i = 0; !rc && i < n; i++) rc = sampler_add(&sp, batches[i], err);
  if (!rc) rc = sampler_finish(&sp, err, out);
  sampler_free(&sp);
  return rc;
}

/* The range boundaries from the maps' samples (samples[0, n), in map
 * order): NULL when there are none. */
int plan_range_bounds(const plan_node *x, fsh_batch **samples, int64_t n, int32_t n_out,
                      fsh_batch **out, fsh_error *err) {
  *out = NULL;
  if (n == 0) return 0;
  fsh_batch *sample = NULL;
  FSH_RETURN_NOT_OK(fsh_concat(samples, n, &sample, err));
  int rc = sample->length == 0
               ? 0
               : fsh_range_boundaries(sample, x->keys, x->n_keys, x->sort_order, n_out, out, err);
  fsh_batch_unref(sample);
  return rc;
}

/* A sample of every map's rows (evenly spaced, sample_rows per map at
 * most), and the range boundaries from it (NULL when there are no rows). */
static int range_bounds(const plan_node *x, const held_maps *h, int32_t n_out, fsh_batch **out,
                        fsh_error *err) {
  *out = NULL;
  fsh_batch **samples = fsh_calloc((size_t)(h->m ? h->m : 1), sizeof *samples);
  if (!samples) return fsh_error_set(err, ENOMEM, "out of memory");
  int64_t n_samples = 0;
  int rc = 0;
  for (int64_t i = 0; i < h->m && !rc; i++) {
    if (!h->rows[i]) continue;
    if ((rc = map_sample(x, h->batches[i], h->n[i], h->rows[i], &samples[n_samples], err)) == 0)
      n_samples++;
  }
  if (!rc) rc = plan_range_bounds(x, samples, n_samples, n_out, out, err);
  for (int64_t i = 0; i < n_samples; i++) fsh_batch_unref(samples[i]);
  fsh_free(samples);
  return rc;
}

/* What an exchange's map tasks share (read-only while they run, but for
 * total and global_row, which only the sequential path uses). */
typedef struct xshared {
  int64_t m, group, n_groups;
  int32_t r;
  bool holds;
  held_maps h;
  fsh_batch *bounds;
  int64_t *starts;
  int64_t total, global_row;
} xshared;

/* A map task's scratch space. */
typedef struct xscratch {
  int32_t *pids;
  int64_t pid_cap;
  fsh_batch **parts; /* [r] */
} xscratch;

static void stat_add(run_ctx *c, int64_t *field, int64_t n) {
  pthread_mutex_lock(&c->mu);
  *field += n;
  pthread_mutex_unlock(&c->mu);
}

/* Where a group's map output goes: backend, shuffle, map id and attempt,
 * and the row checksums to keep (NULL: none). */
typedef struct xdest {
  fsh_shuffle_backend *backend;
  const fsh_shuffle_spec *spec;
  int64_t map_id;
  int32_t attempt;
  uint64_t *sums;
} xdest;

/* Map tasks [g * group, (g + 1) * group) into one map output (*out). */
static int run_group(run_ctx *c, const plan_node *x, const xdest *d, xshared *sh, xscratch *sc,
                     int64_t g, fsh_map_output *out, fsh_error *err) {
  int64_t m = sh->m, group = sh->group;
  int32_t r = sh->r;
  mapw mw = {.map_id = d->map_id, .sums = d->sums};
  int rc = fsh_shuffle_open_writer(d->backend, d->spec, d->map_id, d->attempt, &mw.w, err);
  if (rc) return rc;
  for (int64_t i = g * group; i < m && i < (g + 1) * group && !rc; i++) {
    if (x->limit_hint >= 0 && sh->total >= x->limit_hint) {
      stat_add(c, &c->res->maps_skipped, 1);
      continue;
    }
    stat_add(c, &c->res->map_tasks, 1);
    fsh_batch_stream st;
    bool st_open = false;
    int64_t k = 0, row0 = 0;
    if (!sh->holds) {
      if ((rc = plan_open_stream(c, x->inputs[0], (int32_t)i, &st, err)) != 0) break;
      st_open = true;
    }
    for (;;) {
      fsh_batch *b = NULL;
      if (sh->holds) { /* moved out: map i's rows are not held past their writing */
        if (k < sh->h.n[i]) b = sh->h.batches[i][k], sh->h.batches[i][k++] = NULL;
      } else if ((rc = st.get_next(&st, &b, err)) != 0) {
        break;
      }
      if (!b) break;
      if (x->limit_hint >= 0 && sh->total + b->length > x->limit_hint) {
        fsh_batch *cut = fsh_batch_slice(b, 0, x->limit_hint - sh->total);
        fsh_batch_unref(b);
        if (!(b = cut)) {
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
      }
      if (b->length > sc->pid_cap) {
        fsh_free(sc->pids);
        sc->pid_cap = b->length;
        if (!(sc->pids = fsh_malloc((size_t)sc->pid_cap * sizeof *sc->pids))) {
          sc->pid_cap = 0;
          fsh_batch_unref(b);
          rc = fsh_error_set(err, ENOMEM, "out of memory");
          break;
        }
      }
      if (x->xkind == PX_INTO_PARTITIONS) {
        /* split at output boundaries: rows [global_row, global_row + len) */
        int64_t at = 0;
        while (!rc && at < b->length) {
          int64_t gr = sh->global_row + at;
          int32_t p = 0;
          while (p + 1 < r && sh->starts[p + 1] <= gr) p++;
          int64_t take = sh->starts[p + 1] - gr;
          if (take > b->length - at) take = b->length - at;
          fsh_batch *piece = fsh_batch_slice(b, at, take);
          rc = piece ? write_part(&mw, p, piece, err) : fsh_error_set(err, ENOMEM, "oom");
          fsh_batch_unref(piece);
          at += take;
        }
        sh->global_row += b->length;
      } else {
        rc = map_batch(x, &mw, b, i, row0, r, sh->bounds, sc->pids, sc->parts, err);
      }
      row0 += b->length;
      sh->total += b->length;
      fsh_batch_unref(b);
      if (rc) break;
      if (x->limit_hint >= 0 && sh->total >= x->limit_hint) break;
    }
    if (st_open) st.release(&st);
  }
  if (rc) {
    mw.w->abort(mw.w);
    return rc;
  }
  return mw.w->close(mw.w, out, err);
}

/* Parallel map tasks: threads claim groups in turn. */
typedef struct xpool {
  run_ctx *c;
  const plan_node *x;
  xstate *xs;
  xshared *sh;
  atomic_long next;
  atomic_int failed;
  pthread_mutex_t mu;
  int rc;
  fsh_error err;
} xpool;

static void *pool_main(void *arg) {
  xpool *pl = arg;
  xscratch sc = {0};
  fsh_error err;
  int rc = 0;
  if (!(sc.parts = fsh_calloc((size_t)pl->sh->r, sizeof *sc.parts)))
    rc = fsh_error_set(&err, ENOMEM, "out of memory");
  while (!rc && !atomic_load(&pl->failed)) {
    long g = atomic_fetch_add(&pl->next, 1);
    if (g >= pl->sh->n_groups) break;
    xdest d = {.backend = plan_backend_of(pl->c, g), .spec = &pl->xs->spec, .map_id = g};
    rc = run_group(pl->c, pl->x, &d, pl->sh, &sc, g, &pl->xs->outputs[g], &err);
  }
  if (rc) {
    pthread_mutex_lock(&pl->mu);
    if (!pl->rc) pl->rc = rc, pl->err = err;
    pthread_mutex_unlock(&pl->mu);
    atomic_store(&pl->failed, 1);
  }
  fsh_free(sc.pids);
  fsh_free(sc.parts);
  return NULL;
}

/* The shuffle of exchange x on every backend. */
int plan_release_shuffle(run_ctx *c, const xstate *xs, fsh_error *err) {
  int nb = c->n_backends ? c->n_backends : 1;
  int rc = 0;
  for (int k = 0; k < nb; k++) {
    fsh_error rerr;
    if (fsh_shuffle_release(plan_backend_of(c, k), xs->spec.shuffle_id, &rerr) != 0 && !rc)
      rc = fsh_error_set(err, EIO, "releasing shuffle %" PRIu64 ": %s", xs->spec.shuffle_id,
                         rerr.message);
  }
  return rc;
}

/* Releases, as soon as an exchange has run, every exchange nobody will
 * read any more: those whose readers (the nodes fed from it up to the next
 * exchanges) end only in exchanges that have run -- their map tasks read
 * every partition they needed -- and not in the plan's output. Keeps the
 * stores (and the memory backend) from holding every exchange of a long
 * plan until the end. */
static int release_consumed(run_ctx *c, fsh_error *err) {
  const fsh_plan *p = c->p;
  int root = p->n_nodes - 1;
  bool *reach = fsh_malloc((size_t)p->n_nodes * sizeof *reach);
  if (!reach) return fsh_error_set(err, ENOMEM, "out of memory");
  int rc = 0;
  for (int x = 0; x < root && !rc; x++) {
    if (p->nodes[x]->kind != PN_EXCHANGE || !c->x[x].done || c->x[x].released) continue;
    memset(reach, 0, (size_t)p->n_nodes * sizeof *reach);
    reach[x] = true;
    bool still_read = false;
    for (int j = x + 1; j < p->n_nodes && !still_read; j++) {
      const plan_node *n = p->nodes[j];
      for (int k = 0; k < n->n_inputs; k++) {
        int in = n->inputs[k];
        if (reach[in] && (in == x || p->nodes[in]->kind != PN_EXCHANGE)) reach[j] = true;
      }
      if (!reach[j]) continue;
      if (n->kind == PN_EXCHANGE ? !c->x[j].done : j == root) still_read = true;
    }
    if (still_read) continue;
    c->x[x].released = true;
    rc = plan_release_shuffle(c, &c->x[x], err);
  }
  fsh_free(reach);
  return rc;
}

/* Runs every exchange the stage of x reads that has not run yet (so that
 * parallel map tasks only read). */
static int run_inputs(run_ctx *c, const plan_node *x, fsh_error *err) {
  bool *member = fsh_malloc((size_t)c->p->n_nodes * sizeof *member);
  if (!member) return fsh_error_set(err, ENOMEM, "out of memory");
  plan_stage_members(c->p, x->id, member);
  int rc = 0;
  for (int i = 0; i < c->p->n_nodes && !rc; i++)
    if (member[i] && i != x->id && c->p->nodes[i]->kind == PN_EXCHANGE && !c->x[i].done)
      rc = plan_run_exchange(c, c->p->nodes[i], err);
  fsh_free(member);
  return rc;
}

int plan_run_exchange(run_ctx *c, const plan_node *x, fsh_error *err) {
  xstate *xs = &c->x[x->id];
  const plan_node *in = c->p->nodes[x->inputs[0]];
  xshared sh = {.m = plan_parts_of(c, in), .r = x->n_partitions};
  sh.group = merge_group(c, x, sh.m, sh.r);
  sh.n_groups = (sh.m + sh.group - 1) / sh.group;
  sh.holds = x->xkind == PX_RANGE || x->xkind == PX_INTO_PARTITIONS;
  xs->spec.shuffle_id = c->first_shuffle_id + (uint64_t)x->id;
  xs->spec.n_partitions = sh.r;
  xs->spec.schema = x->schema;
  xs->spec.compression = FSH_COMPRESSION_NONE;
  xs->outputs = fsh_calloc((size_t)sh.n_groups, sizeof *xs->outputs);
  xscratch sc = {.parts = fsh_calloc((size_t)sh.r, sizeof *sc.parts)};
  fsh_part_slice *slices = NULL;
  int rc = 0;
  if (!xs->outputs || !sc.parts) rc = fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc && sh.holds) rc = held_fill(c, x, sh.m, &sh.h, err);
  if (!rc && x->xkind == PX_RANGE) rc = range_bounds(x, &sh.h, sh.r, &sh.bounds, err);
  if (!rc && x->xkind == PX_INTO_PARTITIONS) {
    slices = fsh_calloc((size_t)sh.r, sizeof *slices);
    sh.starts = fsh_calloc((size_t)sh.r + 1, sizeof *sh.starts);
    if (!slices || !sh.starts) rc = fsh_error_set(err, ENOMEM, "out of memory");
    if (!rc) rc = fsh_plan_partitions(sh.h.rows, sh.m, sh.r, slices, err);
    /* output p covers global rows [starts[p], starts[p + 1]) */
    for (int32_t p = 0; !rc && p < sh.r; p++) sh.starts[p + 1] = sh.starts[p] + slices[p].n_rows;
  }
  /* map tasks of streaming exchanges may run on threads; a limit's maps
   * run in order (one stops those after it) */
  int threads = c->n_threads;
  if (threads > sh.n_groups) threads = (int)sh.n_groups;
  if (!rc && threads > 1 && !sh.holds && x->limit_hint < 0) {
    if ((rc = run_inputs(c, x, err)) == 0) {
      xpool pl = {.c = c, .x = x, .xs = xs, .sh = &sh};
      pthread_mutex_init(&pl.mu, NULL);
      pthread_t tids[64];
      int started = 0;
      for (; started < threads && started < 64; started++)
        if (pthread_create(&tids[started], NULL, pool_main, &pl) != 0) break;
      if (started == 0) pool_main(&pl);
      for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
      pthread_mutex_destroy(&pl.mu);
      xs->n_outputs = sh.n_groups; /* zeroed slots reset fine */
      if (pl.rc) {
        rc = pl.rc;
        if (err) *err = pl.err;
      } else {
        stat_add(c, &c->res->map_outputs, sh.n_groups);
      }
    }
  } else {
    for (int64_t g = 0; g < sh.n_groups && !rc; g++) {
      if (x->limit_hint >= 0 && sh.total >= x->limit_hint) {
        stat_add(c, &c->res->maps_skipped, sh.m - g * sh.group);
        break;
      }
      xdest d = {.backend = plan_backend_of(c, g), .spec = &xs->spec, .map_id = g};
      if ((rc = run_group(c, x, &d, &sh, &sc, g, &xs->outputs[xs->n_outputs], err)) != 0) break;
      xs->n_outputs++;
      stat_add(c, &c->res->map_outputs, 1);
    }
  }
  held_reset(&sh.h);
  fsh_batch_unref(sh.bounds);
  fsh_free(slices);
  fsh_free(sh.starts);
  fsh_free(sc.pids);
  fsh_free(sc.parts);
  if (rc) return plan_name_fail(x, rc, err);
  xs->done = true;
  stat_add(c, &c->res->exchanges, 1);
  return release_consumed(c, err);
}

/* ---- one task of a stage (a plan-fragment task) ----------------------------------- */

int plan_exchange_task(run_ctx *c, const plan_node *x, const fsh_shuffle_spec *spec,
                       int32_t part, int64_t map_id, int32_t attempt, fsh_map_output *out,
                       uint64_t *sums, const plan_scatter *scatter, fsh_error *err) {
  bool holds = x->xkind == PX_RANGE || x->xkind == PX_INTO_PARTITIONS;
  if (holds != (scatter != NULL))
    return plan_name_fail(x, fsh_error_set(err, EINVAL, "a %s exchange %s", plan_exchange_name(
                                               x->xkind), holds ? "is written by a scatter stage "
                                               "(or staged)" : "is not scattered"), err);
  const plan_node *in = c->p->nodes[x->inputs[0]];
  /* a scatter reads the staged shuffle (one more partition than maps),
   * or computes its input again (plan_range_recomputes) */
  xshared sh = {.m = plan_parts_of(c, in) - (scatter && in->kind == PN_EXCHANGE ? 1 : 0),
                .group = 1,
                .r = spec->n_partitions};
  sh.n_groups = sh.m;
  if (part < 0 || part >= sh.m)
    return fsh_error_set(err, EINVAL, "task %d of a stage of %lld partitions", (int)part,
                         (long long)sh.m);
  xscratch sc = {.parts = fsh_calloc((size_t)sh.r, sizeof *sc.parts)};
  fsh_part_slice *slices = NULL;
  int rc = sc.parts ? 0 : fsh_error_set(err, ENOMEM, "out of memory");
  if (!rc && scatter && x->xkind == PX_RANGE) sh.bounds = fsh_batch_ref(scatter->bounds);
  if (!rc && scatter && x->xkind == PX_INTO_PARTITIONS) {
    /* as plan_run_exchange: output p covers global rows [starts[p],
     * starts[p + 1]); this map's rows start after those of the maps before */
    if (scatter->n_counts != sh.m)
      rc = fsh_error_set(err, EINVAL, "%d row counts for %lld maps", (int)scatter->n_counts,
                         (long long)sh.m);
    slices = rc ? NULL : fsh_calloc((size_t)sh.r, sizeof *slices);
    sh.starts = rc ? NULL : fsh_calloc((size_t)sh.r + 1, sizeof *sh.starts);
    if (!rc && (!slices || !sh.starts)) rc = fsh_error_set(err, ENOMEM, "out of memory");
    if (!rc) rc = fsh_plan_partitions(scatter->counts, sh.m, sh.r, slices, err);
    for (int32_t p = 0; !rc && p < sh.r; p++) sh.starts[p + 1] = sh.starts[p] + slices[p].n_rows;
    for (int32_t i = 0; !rc && i < part; i++) sh.global_row += scatter->counts[i];
  }
  xdest d = {.backend = c->backend, .spec = spec, .map_id = map_id, .attempt = attempt,
             .sums = sums};
  if (!rc) rc = run_group(c, x, &d, &sh, &sc, part, out, err);
  fsh_batch_unref(sh.bounds);
  fsh_free(slices);
  fsh_free(sh.starts);
  fsh_free(sc.pids);
  fsh_free(sc.parts);
  return rc ? plan_name_fail(x, rc, err) : 0;
}

/* The rows of x's input partition `part`, computed and dropped. */
static int count_rows(run_ctx *c, const plan_node *x, int32_t part, int64_t *rows,
                      fsh_error *err) {
  *rows = 0;
  fsh_batch_stream st;
  int rc = plan_open_stream(c, x->inputs[0], part, &st, err);
  while (!rc) {
    fsh_batch *b = NULL;
    if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
    *rows += b->length;
    fsh_batch_unref(b);
  }
  if (st.release) st.release(&st);
  return rc;
}

/* plan_staged_task of a stage its scatter computes again: only the
 * sample, from the input computed twice (its rows counted, then the
 * sampled ones taken as they go by: nothing held, the same rows as
 * map_sample of the whole partition). */
static int staged_sample_only(run_ctx *c, const plan_node *x, const fsh_shuffle_spec *spec,
                              int32_t part, int64_t map_id, int32_t attempt, fsh_map_output *out,
                              uint64_t *sums, int64_t *rows_in, fsh_error *err) {
  int32_t last = spec->n_partitions - 1;
  mapw mw = {.map_id = map_id, .sums = sums};
  int64_t rows = 0;
  int rc = count_rows(c, x, part, &rows, err);
  *rows_in = rows;
  if (rc) return plan_name_fail(x, rc, err);
  FSH_RETURN_NOT_OK(fsh_shuffle_open_writer(c->backend, spec, map_id, attempt, &mw.w, err));
  if (rows > 0) {
    sampler sp;
    fsh_batch_stream st = {0};
    fsh_batch *sample = NULL;
    if ((rc = sampler_init(&sp, x, rows, err)) == 0)
      rc = plan_open_stream(c, x->inputs[0], part, &st, err);
    while (!rc) {
      fsh_batch *b = NULL;
      if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
      rc = sampler_add(&sp, b, err);
      fsh_batch_unref(b);
    }
    if (st.release) st.release(&st);
    if (!rc) rc = sampler_finish(&sp, err, &sample);
    if (!rc) rc = write_part(&mw, last, sample, err);
    fsh_batch_unref(sample);
    sampler_free(&sp);
  }
  if (rc) {
    mw.w->abort(mw.w);
    return plan_name_fail(x, rc, err);
  }
  return mw.w->close(mw.w, out, err);
}

int plan_staged_task(run_ctx *c, const plan_node *x, const fsh_shuffle_spec *spec,
                     int32_t part, int64_t map_id, int32_t attempt, fsh_map_output *out,
                     uint64_t *sums, int64_t *rows_in, fsh_error *err) {
  int32_t last = spec->n_partitions - 1;
  if (part < 0 || part >= last)
    return fsh_error_set(err, EINVAL, "task %d of a staging stage of %d partitions", (int)part,
                         (int)last);
  /* a stage its scatter computes again writes only the sample */
  *rows_in = 0;
  if (plan_range_recomputes(c->p, x, NULL))
    return staged_sample_only(c, x, spec, part, map_id, attempt, out, sums, rows_in, err);
  mapw mw = {.map_id = map_id, .sums = sums};
  FSH_RETURN_NOT_OK(fsh_shuffle_open_writer(c->backend, spec, map_id, attempt, &mw.w, err));
  fsh_batch_stream st;
  fsh_batch **held = NULL, *sample = NULL;
  int64_t n_held = 0, rows = 0;
  int rc = plan_open_stream(c, x->inputs[0], part, &st, err);
  /* each batch written as it comes (its rows still in cache for the
   * checksum and the writer), kept for the sample */
  for (int64_t cap = 0; !rc;) {
    fsh_batch *b = NULL;
    if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
    if (b->length == 0) {
      fsh_batch_unref(b);
      continue;
    }
    if (n_held == cap) {
      fsh_batch **v = fsh_realloc(held, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
      if (!v) {
        fsh_batch_unref(b);
        rc = fsh_error_set(err, ENOMEM, "out of memory");
        break;
      }
      held = v;
    }
    held[n_held++] = b;
    rows += b->length;
    rc = write_part(&mw, part, b, err);
  }
  if (st.release) st.release(&st);
  *rows_in = rows;
  if (!rc && x->xkind == PX_RANGE && rows > 0) {
    if ((rc = map_sample(x, held, n_held, rows, &sample, err)) == 0)
      rc = write_part(&mw, last, sample, err);
  }
  for (int64_t i = 0; i < n_held; i++) fsh_batch_unref(held[i]);
  fsh_free(held);
  fsh_batch_unref(sample);
  if (rc) {
    mw.w->abort(mw.w);
    return plan_name_fail(x, rc, err);
  }
  return mw.w->close(mw.w, out, err);
}

int plan_result_task(run_ctx *c, int root, const fsh_shuffle_spec *spec, int32_t part,
                     int64_t map_id, int32_t attempt, fsh_map_output *out, uint64_t *sums,
                     fsh_error *err) {
  if (part < 0 || part >= spec->n_partitions)
    return fsh_error_set(err, EINVAL, "task %d of a result of %d partitions", (int)part,
                         (int)spec->n_partitions);
  mapw mw = {.map_id = map_id, .sums = sums};
  FSH_RETURN_NOT_OK(fsh_shuffle_open_writer(c->backend, spec, map_id, attempt, &mw.w, err));
  fsh_batch_stream st;
  int rc = plan_open_stream(c, root, part, &st, err);
  while (!rc) {
    fsh_batch *b = NULL;
    if ((rc = st.get_next(&st, &b, err)) != 0 || !b) break;
    rc = write_part(&mw, part, b, err);
    fsh_batch_unref(b);
  }
  if (st.release) st.release(&st);
  if (rc) {
    mw.w->abort(mw.w);
    return rc;
  }
  return mw.w->close(mw.w, out, err);
}
