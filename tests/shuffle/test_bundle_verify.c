/* test_bundle_verify.c -- the flight reader's checks of bundled blocks
 * (FSH_TICKET_BUNDLE) and partition checksums, through a tampering Flight server: a test server
 * whose DoGet serves a real worker's store (fsh_worker_do_get, in
 * process) and alters the bundles on their way. The reader reads from it
 * with the real map outputs' metadata (locations pointed at the test
 * server). Cases:
 *  - untouched: the rows arrive exactly as written (the proxy is sound);
 *  - a byte of a block flipped (damage in transit): a block checksum
 *    error;
 *  - a byte flipped and the block's FSHB checksum recomputed to match (a
 *    worker whose partition checksum disagrees with its blocks), in a
 *    partition of several blocks and in a partition of one block: only
 *    the partition checksum can catch it, and the reader must fail with
 *    EIO naming it -- never hand out the rows;
 *  - a worker whose partition checksum (block headers and map output
 *    metadata alike) is not its blocks', in bundled partitions of one and
 *    many blocks and in large-block partitions sent message by message:
 *    the same EIO (a single-block partition's checksum is its block's,
 *    and the reader must still compare them).
 * The flipped byte is the block's last one (body padding or a value):
 * the block still decodes, so nothing but the checksums stands between
 * the damage and the caller. */
#include <xxhash.h>

#include <flightshuffle/flight.h>

#include "shuffle/shuffle_internal.h"
#include "shuffle/shuffle_testutil.h"
#include "shuffle/worker_internal.h"

enum { T_NONE, T_FLIP, T_FLIP_REHASH, T_PART_SUM };
#define PART_XOR 0x5a5aull

typedef struct proxy {
  fsh_shuffle_store *store;
  int mode;
  int32_t partition; /* the partition whose block to damage */
  int64_t block;     /* its index */
  int tampered;      /* blocks damaged */
  int tampered_bundled; /* of them, in bundles */
  int64_t n_blocks;  /* the damaged partition's block count, as its header says */
  int bundles;       /* bundles seen */
} proxy;

typedef struct wrap {
  fsh_flight_source base;
  fsh_flight_source *in;
  proxy *px;
} wrap;

/* Alters the block whose header is at hdr (its bytes at blk, when they
 * come with it: a bundle) if it is one the proxy is after. */
static void alter(proxy *px, uint8_t *hdr, uint8_t *blk, bool bundled) {
  fsh_block_header h;
  CHECK(fsh_block_header_decode(hdr, FSH_BLOCK_HEADER_BYTES, &h));
  if (h.partition != px->partition || h.map_id != 0) return;
  if (px->mode == T_PART_SUM) { /* every block header of the map output's partition */
    h.part_checksum ^= PART_XOR;
  } else if (h.index == px->block && blk) {
    blk[h.length - 1] ^= 0x01;
    if (px->mode == T_FLIP_REHASH) h.checksum = XXH3_64bits(blk, (size_t)h.length);
  } else {
    return;
  }
  fsh_block_header_encode(&h, hdr);
  px->tampered++;
  px->tampered_bundled += bundled;
  px->n_blocks = h.n_blocks;
}

/* Tampers with a message's app_metadata (a private copy of it): a bundle
 * or a block header. */
static int tamper(proxy *px, fsh_buffer **app) {
  fsh_buffer *b = *app;
  const uint8_t *p = b->data;
  bool bundle = b->size >= FSH_BUNDLE_HEADER_BYTES && memcmp(p, FSH_BUNDLE_MAGIC, 4) == 0;
  bool header = b->size == FSH_BLOCK_HEADER_BYTES &&
                memcmp(p, FSH_BLOCK_HEADER_MAGIC, 4) == 0;
  px->bundles += bundle;
  if (px->mode == T_NONE || !(bundle || header)) return 0;
  fsh_buffer *c = fsh_buffer_new(b->size, false);
  if (!c) return ENOMEM;
  memcpy(c->data, b->data, (size_t)b->size);
  uint8_t *q = c->data;
  if (header) {
    alter(px, q, NULL, false);
  } else {
    int64_t at = FSH_BUNDLE_HEADER_BYTES, n = fsh_le_get32(q + 8);
    for (int64_t i = 0; i < n; i++) {
      fsh_block_header h;
      CHECK(fsh_block_header_decode(q + at, FSH_BLOCK_HEADER_BYTES, &h));
      alter(px, q + at, q + at + FSH_BLOCK_HEADER_BYTES, true);
      at += FSH_BLOCK_HEADER_BYTES + h.length;
    }
  }
  fsh_buffer_unref(b);
  *app = c;
  return 0;
}

static int wrap_next(fsh_flight_source *s, fsh_ipc_payload *out, fsh_buffer **app, bool *done,
                     fsh_error *err) {
  wrap *w = s->ctx;
  int rc = w->in->next(w->in, out, app, done, err);
  if (rc != 0 || *done || !*app) return rc;
  rc = tamper(w->px, app);
  if (rc != 0) return fsh_error_set(err, rc, "tampering proxy: out of memory");
  return 0;
}

static void wrap_release(fsh_flight_source *s) {
  wrap *w = s->ctx;
  w->in->release(w->in);
  free(w);
}

static int proxy_do_get(void *ctx, fsh_flight_call *call, const fsh_bytes *ticket,
                        fsh_flight_source **out, fsh_error *err) {
  (void)call;
  proxy *px = ctx;
  fsh_flight_source *in = NULL;
  int rc = fsh_worker_do_get(px->store, ticket->data, ticket->size, &in, err);
  if (rc != 0) return rc;
  wrap *w = STU_OK(calloc(1, sizeof *w));
  w->in = in;
  w->px = px;
  w->base.next = wrap_next;
  w->base.release = wrap_release;
  w->base.ctx = w;
  *out = &w->base;
  return 0;
}

/* Two map outputs over 4 partitions, per map: partition 0 many small
 * blocks, 1 one small block (both bundled), 2 one large block, 3 three
 * large ones (both sent message by message: over FSH_BUNDLE_MAX_BLOCK). */
static void make_plan(stu_plan *p) {
  fsh_batch *probe = stu_synthetic(0, 1);
  stu_plan_init(p, 71, 4, probe->schema, 2);
  p->spec.target_block_bytes = 8 << 10;
  p->spec.compression = FSH_COMPRESSION_NONE;
  for (int m = 0; m < 2; m++) {
    for (int k = 0; k <= 12; k++) {
      fsh_batch *b = stu_synthetic(900 + m * 16 + k, k < 12 ? 200 : 20);
      stu_add(&p->maps[m], k < 12 ? 0 : 1, b);
      fsh_batch_unref(b);
    }
    for (int k = 0; k < 4; k++) {
      fsh_batch *b = stu_synthetic(950 + m * 16 + k, 6000);
      stu_add(&p->maps[m], k == 0 ? 2 : 3, b);
      fsh_batch_unref(b);
    }
  }
  fsh_batch_unref(probe);
}

static void bundles_verified(void) {
  char *dir = stu_mkdtemp("bver");
  const char *d = dir;
  fsh_error err = {{0}};
  fsh_shuffle_worker *w = NULL;
  fsh_shuffle_worker_options wo = {.listen = "127.0.0.1:0", .spill_dirs = &d, .n_spill_dirs = 1,
                                   .memory_limit = 64 << 20, .n_threads = 2};
  CHECK_OK(fsh_shuffle_worker_start(&wo, &w, &err));
  if (!w) return;
  fsh_shuffle_backend *bw = NULL;
  fsh_shuffle_flight_options bo = {.local = w, .timeout_ms = 20000};
  CHECK_OK(fsh_shuffle_flight_new(&bo, &bw, &err));
  stu_plan p;
  make_plan(&p);
  for (int m = 0; m < 2; m++) CHECK_OK(stu_run_map(bw, &p.spec, &p.maps[m], &err));

  proxy px = {.store = fsh_shuffle_worker_store(w)};
  fsh_flight_handlers hs = {.ctx = &px, .do_get = proxy_do_get};
  fsh_flight_server_options so = {.listen = "127.0.0.1:0", .n_threads = 2};
  fsh_flight_server *srv = NULL;
  CHECK_OK(fsh_flight_server_start(&so, &hs, &srv, &err));
  char uri[64];
  snprintf(uri, sizeof uri, "grpc://127.0.0.1:%d", fsh_flight_server_port(srv));
  /* the map outputs as the reader sees them: at the test server */
  char *saved[2];
  for (int m = 0; m < 2; m++) {
    saved[m] = p.maps[m].out.location;
    p.maps[m].out.location = uri;
  }
  fsh_map_output outs[2] = {p.maps[0].out, p.maps[1].out}; /* shallow */
  fsh_shuffle_backend *br = NULL;
  fsh_shuffle_flight_options ro = {.local = NULL, .timeout_ms = 20000};
  CHECK_OK(fsh_shuffle_flight_new(&ro, &br, &err));

  /* untouched: every row, exactly */
  CHECK(stu_check_partition(br, &p, 0, NULL, 0, "untouched partition 0"));
  CHECK(stu_check_partition(br, &p, 1, NULL, 0, "untouched partition 1"));
  CHECK(stu_check_partition(br, &p, 2, NULL, 0, "untouched partition 2"));
  CHECK(stu_check_partition(br, &p, 3, NULL, 0, "untouched partition 3"));
  CHECK_MSG(px.bundles >= 2, "%d bundles", px.bundles);

  struct {
    int mode;
    int32_t partition;
    int64_t block;
    const char *want;
  } cases[] = {
      {T_FLIP, 0, 1, "checksum mismatch in block 1"},
      {T_FLIP, 1, 0, "checksum mismatch in block 0"},
      {T_FLIP_REHASH, 0, 1, "partition checksum does not match its blocks"},
      {T_FLIP_REHASH, 0, 0, "partition checksum does not match its blocks"},
      {T_FLIP_REHASH, 1, 0, "partition checksum does not match its blocks"},
      /* the worker's partition checksum (in the block headers and the map
       * output's metadata alike) is not its blocks' */
      {T_PART_SUM, 0, 0, "partition checksum does not match its blocks"},
      {T_PART_SUM, 1, 0, "partition checksum does not match its blocks"},
      {T_PART_SUM, 2, 0, "partition checksum does not match its blocks"},
      {T_PART_SUM, 3, 0, "partition checksum does not match its blocks"},
  };
  uint64_t sums[4];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    px.mode = cases[i].mode;
    px.partition = cases[i].partition;
    px.block = cases[i].block;
    px.tampered = 0;
    px.tampered_bundled = 0;
    px.n_blocks = 0;
    int32_t q = cases[i].partition;
    memcpy(sums, p.maps[0].out.checksums, sizeof sums);
    if (cases[i].mode == T_PART_SUM) sums[q] ^= PART_XOR;
    outs[0].checksums = sums;
    int64_t rows = 0;
    err = (fsh_error){{0}};
    int rc = stu_read_rc(br, &p.spec, q, outs, 2, &rows, &err);
    outs[0].checksums = p.maps[0].out.checksums;
    int want = cases[i].mode == T_PART_SUM ? (int)px.n_blocks : 1;
    CHECK_MSG(px.tampered == want && px.tampered_bundled == (q < 2 ? want : 0),
              "case %zu: %d blocks tampered, %d in bundles", i, px.tampered,
              px.tampered_bundled);
    CHECK_MSG(q == 0 || q == 3 ? px.n_blocks >= 3 : px.n_blocks == 1,
              "case %zu: partition %d has %lld blocks", i, q, (long long)px.n_blocks);
    CHECK_MSG(rc == EIO && strstr(err.message, cases[i].want) &&
                  strstr(err.message, "map 0 attempt 0"),
              "case %zu: rc %d (%s), want EIO \"%s\"", i, rc, err.message, cases[i].want);
  }
  /* and clean again afterwards */
  px.mode = T_NONE;
  CHECK(stu_check_partition(br, &p, 0, NULL, 0, "untouched again"));

  fsh_shuffle_backend_destroy(br);
  fsh_flight_server_stop(srv, 1000);
  for (int m = 0; m < 2; m++) p.maps[m].out.location = saved[m];
  fsh_shuffle_backend_destroy(bw);
  stu_plan_free(&p);
  fsh_shuffle_worker_stop(w, 1000);
  stu_rmdir(dir);
}

FSH_TEST_MAIN(TEST(bundles_verified))
