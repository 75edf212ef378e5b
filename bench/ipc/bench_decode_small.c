/* bench_decode_small.c -- decode + validate + release of small IPC messages
 * (the synthetic shuffle rows: int64 key, float64, utf8; 16 rows, the
 * block of a 1000 x 1000 shuffle), the way the flight reader's fetch side
 * takes them out of a received bundle, three ways in one run:
 *
 *   views+plain   the old path: a buffer view for the metadata and one for
 *                 the body, fsh_ipc_peek_message, fsh_ipc_decode_message
 *                 with an allocation per batch, array and buffer view
 *   views+packed  the same with the batch decoded into one pack
 *   framed        fsh_ipc_decode_framed: decoded where it lies, one pack
 *
 *   build/bench_decode_small [--rows N] [--messages M] [--runs R]
 *
 * Each run decodes M messages laid out back to back in one buffer, the
 * three ways alternating within a run (so load changes hit them alike);
 * per-message ns min/median/max over runs and the median's ratio to the
 * old path, then allocations per message (counted after the timed runs:
 * counting costs an atomic per allocation). Ends with one `result:`
 * line; verified=yes when every way decoded every message equal to the
 * batch encoded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"
#include "ipc/read_internal.h"

static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_decode_small: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

enum { VIEWS_PLAIN, VIEWS_PACKED, FRAMED, N_WAYS };
static const char *const way_name[N_WAYS] = {"views+plain (old)", "views+packed", "framed (new)"};

typedef struct setup {
  fsh_buffer *schema_msg; /* the framed schema message */
  fsh_buffer *msgs;       /* M framed record batch messages back to back */
  int64_t msg_bytes, n;
  fsh_batch *want;
} setup;

static fsh_ipc_decoder *decoder(const setup *s, bool packed) {
  fsh_error err = {{0}};
  fsh_ipc_decoder *d = NULL;
  fsh_batch *none = NULL;
  int64_t n = 0;
  if (fsh_ipc_decoder_new(&d, &err) ||
      fsh_ipc_decode_framed(d, s->schema_msg, 0, s->schema_msg->size, &n, &none, &err))
    die("schema", &err);
  fsh_ipc_decoder_set_packed(d, packed);
  return d;
}

/* Decodes, validates and releases the M messages one way; returns seconds
 * (rows decoded added to *rows; with check, each batch compared). */
static double run(const setup *s, int way, bool check, int64_t *rows, bool *ok) {
  fsh_error err = {{0}};
  fsh_ipc_decoder *d = decoder(s, way != VIEWS_PLAIN);
  fsh_buffer *b = s->msgs;
  double t0 = bench_now();
  for (int64_t at = 0; at < b->size;) {
    fsh_batch *batch = NULL;
    int64_t framed = 0;
    if (way == FRAMED) {
      if (fsh_ipc_decode_framed(d, b, at, b->size - at, &framed, &batch, &err)) die("decode", &err);
    } else {
      int64_t len = (int64_t)(uint32_t)fsh_fb_load_i32(b->data + at + 4), body = 0;
      fsh_ipc_message_type type;
      fsh_buffer *meta = fsh_buffer_slice(b, at + 8, len), *bv = NULL;
      if (!meta || fsh_ipc_peek_message(meta, &type, &body, &err)) die("peek", &err);
      if (body > 0 && !(bv = fsh_buffer_slice(b, at + 8 + len, body))) die("slice", NULL);
      if (fsh_ipc_decode_message(d, meta, bv, &batch, &err)) die("decode", &err);
      fsh_buffer_unref(meta);
      fsh_buffer_unref(bv);
      framed = 8 + len + body;
    }
    if (!batch || fsh_batch_validate(batch, false, &err)) die("validate", &err);
    *rows += batch->length;
    if (check && !fsh_batch_equals(batch, s->want, NULL)) *ok = false;
    fsh_batch_unref(batch);
    at += framed;
  }
  double t = bench_now() - t0;
  fsh_ipc_decoder_free(d);
  return t;
}

static setup make_setup(int64_t rows, int64_t n) {
  fsh_error err = {{0}};
  setup s = {.n = n};
  fsh_schema *schema = fsh_synthetic_schema();
  fsh_synthetic_options o = {.seed = 11, .with_nulls = false, .key_range = 1 << 20};
  if (fsh_synthetic_batch(schema, &o, 0, rows, &s.want, &err)) die("generate", &err);
  fsh_ipc_write_options wo;
  fsh_ipc_write_options_init(&wo);
  fsh_ipc_encoder *enc = NULL;
  fsh_ipc_payload p, *ps = NULL;
  int32_t np = 0;
  fsh_buffer *one = NULL;
  fsh_output *out = NULL;
  if (fsh_ipc_encoder_new(schema, &wo, &enc, &err) || fsh_ipc_encode_schema(enc, &p, &err) ||
      fsh_output_to_memory(NULL, &s.schema_msg, &out, &err) ||
      fsh_ipc_write_payload(out, &p, &err) || out->close(out, false, &err))
    die("schema", &err);
  fsh_ipc_payload_reset(&p);
  if (fsh_ipc_encode_batch(enc, s.want, &ps, &np, &err) || np != 1) die("encode", &err);
  if (fsh_output_to_memory(NULL, &one, &out, &err) || fsh_ipc_write_payload(out, &ps[0], &err) ||
      out->close(out, false, &err))
    die("write", &err);
  fsh_ipc_payload_reset(&ps[0]);
  fsh_free(ps);
  fsh_ipc_encoder_free(enc);
  s.msg_bytes = one->size;
  if (!(s.msgs = fsh_buffer_new(one->size * n, false))) die("alloc", NULL);
  for (int64_t i = 0; i < n; i++) memcpy(s.msgs->data + i * one->size, one->data, (size_t)one->size);
  fsh_buffer_unref(one);
  fsh_schema_unref(schema);
  return s;
}

int main(int argc, char **argv) {
  int64_t rows = 16, n = 100000;
  int runs = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--messages")) n = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_decode_small [--rows N] [--messages M] [--runs R]\n");
      return 2;
    }
  }
  if (rows < 1 || n < 1 || runs < 1 || runs > 1000) die("bad arguments", NULL);
  setup s = make_setup(rows, n);
  bool ok = true;
  int64_t rows_seen[N_WAYS] = {0};
  for (int w = 0; w < N_WAYS; w++) run(&s, w, true, &rows_seen[w], &ok); /* check, warm up */
  for (int w = 0; w < N_WAYS; w++) ok = ok && rows_seen[w] == rows * n;
  double *secs[N_WAYS];
  for (int w = 0; w < N_WAYS; w++) secs[w] = calloc((size_t)runs, sizeof(double));
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < N_WAYS; k++) {
      int w = (k + r) % N_WAYS; /* a different way first in each run */
      int64_t seen = 0;
      secs[w][r] = run(&s, w, false, &seen, &ok);
    }
  double allocs[N_WAYS];
  for (int w = 0; w < N_WAYS; w++) {
    int64_t seen = 0, before = fsh_alloc_count();
    run(&s, w, false, &seen, &ok);
    allocs[w] = (double)(fsh_alloc_count() - before) / (double)n;
  }
  printf("decode + validate + release of %lld-row messages (%lld bytes framed), %lld per run, "
         "%d runs\n", (long long)rows, (long long)s.msg_bytes, (long long)n, runs);
  printf("  %-20s %8s %8s %8s   %-9s %s\n", "way", "min ns", "med ns", "max ns", "vs old", "allocs/msg");
  double med[N_WAYS];
  for (int w = 0; w < N_WAYS; w++) {
    qsort(secs[w], (size_t)runs, sizeof(double), bench_cmp_double);
    double k = 1e9 / (double)n;
    med[w] = secs[w][runs / 2] * k;
    printf("  %-20s %8.1f %8.1f %8.1f   %6.2fx   %.2f\n", way_name[w], secs[w][0] * k, med[w],
           secs[w][runs - 1] * k, med[w] / med[VIEWS_PLAIN], allocs[w]);
  }
  printf("result: old_ns=%.1f packed_ns=%.1f framed_ns=%.1f framed_vs_old=%.3f old_allocs=%.2f "
         "framed_allocs=%.2f verified=%s\n", med[VIEWS_PLAIN], med[VIEWS_PACKED], med[FRAMED],
         med[FRAMED] / med[VIEWS_PLAIN], allocs[VIEWS_PLAIN], allocs[FRAMED], ok ? "yes" : "no");
  for (int w = 0; w < N_WAYS; w++) free(secs[w]);
  fsh_buffer_unref(s.msgs);
  fsh_buffer_unref(s.schema_msg);
  fsh_batch_unref(s.want);
  return ok ? 0 : 1;
}
