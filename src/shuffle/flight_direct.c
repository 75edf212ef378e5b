/* flight_direct.c -- the flight reader's same-host side: asks a peer
 * worker where the map outputs a fetch job wants are ("locate", format in
 * shuffle_internal.h) and, when the peer runs on this host, opens them
 * directly: a spill file by its plain name inside a spill directory the
 * worker declared, or a memory image's memfd through /proc/<pid>/fd/<fd>.
 * Every open is checked to be the very file the worker answered (device,
 * inode and size; for a memfd also its identity trailer, shuffle_internal.h:
 * the map output asked for, and the image id answered, since the store
 * reuses released memfds): a file released, evicted or replaced meanwhile
 * (an fd number reused, a memfd reused for another image) is not read --
 * the caller fetches that map output with DoGet instead, which says what
 * became of it (a released one: "lost map outputs", flight_fetch.c). The blocks read are
 * verified like DoGet's (flight_fetch.c), so a damaged file is an error,
 * never wrong rows. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shuffle/flight_reader.h"

void (*fr_test_after_locate)(void *ctx);
void *fr_test_after_locate_ctx;

void fr_direct_reset(fr_direct *d) {
  fsh_locate_answer_reset(&d->a);
  fsh_flight_result_list_reset(&d->res);
  memset(d, 0, sizeof *d);
}

int fr_direct_locate(fr_reader *r, const fr_job *job, fr_direct *d, bool *ok, fsh_error *err) {
  *ok = false;
  memset(d, 0, sizeof *d);
  int same = fb_same_host(r->st, job->uri, 0);
  if (same < 0) return 0; /* known to run elsewhere */
  fsh_flight_client *client = NULL;
  FSH_RETURN_NOT_OK(fb_client(r->st, job->uri, &client, err));
  /* the job's sources (r->count slots each) and the run: one entry comes
   * back per slot */
  int64_t g = r->count, n_src = job->n_slots / g;
  fsh_shuffle_ticket t = {.shuffle_id = r->shuffle_id, .partition = r->partition,
                          .n_partitions_read = r->count, .n_sources = n_src};
  t.sources = fsh_malloc(sizeof *t.sources * (size_t)(n_src > 0 ? n_src : 1));
  if (!t.sources) return fsh_error_set(err, ENOMEM, "flight shuffle: out of memory");
  for (int64_t i = 0; i < n_src; i++)
    t.sources[i] = (fsh_ticket_source){r->slots[job->slots[i * g]].map_id,
                                       r->slots[job->slots[i * g]].attempt};
  fsh_buffer *tb = NULL;
  int rc = fsh_shuffle_ticket_encode(&t, &tb, err);
  fsh_shuffle_ticket_reset(&t);
  if (rc != 0) return rc;
  fsh_flight_action a = {.type = (char *)"locate", .body = {tb->data, tb->size}};
  fsh_error e = {{0}};
  atomic_fetch_add(&fb_stats_of(r->st)->locates, 1);
  rc = fsh_flight_do_action(client, &a, &d->res, &e);
  fsh_buffer_unref(tb);
  if (rc == ENOMEM) return fsh_error_set(err, ENOMEM, "%s", e.message);
  if (rc != 0 || d->res.n != 1 ||
      fsh_locate_answer_decode(d->res.items[0].data, d->res.items[0].size, job->n_slots, &d->a,
                               &e) != 0) {
    /* a worker without the action (or one that cannot answer): DoGet
     * it all, which reports any real trouble */
    fr_direct_reset(d);
    return 0;
  }
  const char *me = fsh_host_identity();
  bool here = d->a.host_len == (int64_t)strlen(me) &&
              memcmp(d->a.host, me, (size_t)d->a.host_len) == 0;
  fb_same_host(r->st, job->uri, here ? 1 : -1);
  if (!here) {
    fr_direct_reset(d);
    return 0;
  }
  for (int64_t i = 0; i < job->n_slots; i++) {
    fsh_locate_source *src = &d->a.sources[i];
    src->want_shuffle_id = r->shuffle_id;
    src->want_map_id = r->slots[job->slots[i]].map_id;
    src->want_attempt = r->slots[job->slots[i]].attempt;
  }
  *ok = true;
  if (fr_test_after_locate) fr_test_after_locate(fr_test_after_locate_ctx);
  return 0;
}

/* Whether the memfd open as fd (a fresh open of it: the store pools a
 * memfd only while nobody else has it open, store.c) holds the very image
 * located: its identity trailer names the map output asked for and the
 * image id answered. A reused memfd's trailer (or none, while it is
 * pooled or rewritten) is not it. */
static bool image_is(int fd, const fsh_locate_source *s) {
  uint8_t want[FSH_IMAGE_ID_BYTES], got[FSH_IMAGE_ID_BYTES];
  fsh_image_id_encode(want, s->want_shuffle_id, s->want_map_id, s->want_attempt, s->image_id,
                      s->size);
  ssize_t n;
  do n = pread(fd, got, sizeof got, s->size);
  while (n < 0 && errno == EINTR);
  return s->image_id != 0 && n == (ssize_t)sizeof got && memcmp(got, want, sizeof got) == 0;
}

int fr_direct_open(const fr_direct *d, int64_t i, char *path, size_t path_size) {
  const fsh_locate_source *s = &d->a.sources[i];
  if (s->kind == FSH_STORE_AT_FILE) {
    snprintf(path, path_size, "%s/%s", d->a.dirs[s->dir_or_fd], s->name);
  } else if (s->kind == FSH_STORE_AT_MEMFD) {
    snprintf(path, path_size, "/proc/%" PRIu32 "/fd/%" PRId32, d->a.pid, s->dir_or_fd);
  } else {
    return -1;
  }
  /* O_NONBLOCK|O_NOCTTY: an fd number reused for a pipe or a terminal
   * must not block or become ours; O_NOFOLLOW: a spill file is never a
   * symbolic link (a /proc fd link is one, by nature) */
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (s->kind == FSH_STORE_AT_FILE) flags |= O_NOFOLLOW;
  int fd = open(path, flags);
  if (fd < 0) return errno == EACCES || errno == EPERM ? -2 : -1;
  struct stat st;
  int64_t want = s->size + (s->kind == FSH_STORE_AT_MEMFD ? FSH_IMAGE_ID_BYTES : 0);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != s->dev ||
      (uint64_t)st.st_ino != s->ino || (int64_t)st.st_size != want ||
      (s->kind == FSH_STORE_AT_MEMFD && !image_is(fd, s))) {
    close(fd);
    return -1;
  }
  return fd;
}
