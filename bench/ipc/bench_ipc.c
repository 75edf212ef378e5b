/* bench_ipc.c -- Arrow IPC write/read throughput against baselines measured
 * in the same run: memcpy of the same bytes, and the raw LZ4 frame / ZSTD
 * codecs on the same buffers. Also shows that uncompressed decode does not
 * touch body bytes (1 MiB vs 64 MiB batches decode in the same time).
 *
 *   build/bench_ipc [--bytes N] [--runs R]
 *
 * Ends with one machine-readable `result:` line. */
#include <lz4frame.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/workloads.h>

#include "bench_util.h"


static void die(const char *what, fsh_error *err) {
  fprintf(stderr, "bench_ipc: %s: %s\n", what, err ? err->message : "");
  exit(1);
}

typedef struct table {
  fsh_schema *schema;
  int64_t n;
  fsh_batch **batches;
  double body_bytes; /* sum of buffer sizes */
} table;

static double batch_bytes(const fsh_batch *b) {
  double total = 0;
  for (int64_t c = 0; c < b->n_columns; c++)
    for (int i = 0; i < b->columns[c]->n_buffers; i++)
      if (b->columns[c]->buffers[i]) total += (double)b->columns[c]->buffers[i]->size;
  return total;
}

static table make_table(double target_bytes) {
  table t = {0};
  fsh_error err;
  t.schema = fsh_synthetic_schema();
  fsh_synthetic_options o = {.seed = 7, .with_nulls = true, .key_range = 1 << 20};
  while (t.body_bytes < target_bytes) {
    t.batches = realloc(t.batches, (size_t)(t.n + 1) * sizeof *t.batches);
    if (fsh_synthetic_batch(t.schema, &o, t.n, 65536, &t.batches[t.n], &err)) die("generate", &err);
    t.body_bytes += batch_bytes(t.batches[t.n]);
    t.n++;
  }
  return t;
}

/* Encodes the whole table as one IPC stream into memory (schema, batches,
 * end-of-stream marker); returns seconds. *out, if not NULL, is reused as
 * the destination (as a map task reuses its buffers) and receives the
 * bytes. */
static double encode(const table *t, fsh_compression c, fsh_buffer **out) {
  fsh_error err;
  fsh_ipc_write_options opts;
  fsh_ipc_write_options_init(&opts);
  opts.compression = c;
  fsh_output *o;
  fsh_ipc_encoder *enc;
  fsh_ipc_payload p;
  double t0 = bench_now();
  fsh_buffer *reuse = *out;
  *out = NULL;
  if (fsh_output_to_memory(reuse, out, &o, &err)) die("output", &err);
  if (fsh_ipc_encoder_new(t->schema, &opts, &enc, &err)) die("encoder", &err);
  if (fsh_ipc_encode_schema(enc, &p, &err) || fsh_ipc_write_payload(o, &p, &err)) die("schema", &err);
  fsh_ipc_payload_reset(&p);
  for (int64_t i = 0; i < t->n; i++) {
    fsh_ipc_payload *ps;
    int32_t n;
    if (fsh_ipc_encode_batch(enc, t->batches[i], &ps, &n, &err)) die("encode", &err);
    for (int32_t j = 0; j < n; j++) {
      if (fsh_ipc_write_payload(o, &ps[j], &err)) die("write", &err);
      fsh_ipc_payload_reset(&ps[j]);
    }
    fsh_free(ps);
  }
  static const uint32_t eos[2] = {0xFFFFFFFFu, 0};
  struct iovec iov = {(void *)eos, sizeof eos};
  if (o->writev(o, &iov, 1, &err)) die("eos", &err);
  if (o->close(o, false, &err)) die("close", &err);
  double secs = bench_now() - t0;
  fsh_ipc_encoder_free(enc);
  return secs;
}

/* Decodes every batch of an in-memory stream; returns seconds. When check
 * is given, compares each batch with the source table. */
static double decode(fsh_buffer *bytes, const table *check, bool *ok) {
  fsh_error err;
  fsh_input *in;
  fsh_ipc_stream_reader *r;
  double t0 = bench_now();
  if (fsh_input_from_buffer(bytes, &in, &err)) die("input", &err);
  if (fsh_ipc_stream_reader_open(in, &r, &err)) die("reader", &err);
  int64_t i = 0;
  for (;; i++) {
    fsh_batch *b;
    if (fsh_ipc_stream_reader_next(r, &b, &err)) die("read", &err);
    if (!b) break;
    if (check && (i >= check->n || !fsh_batch_equals(check->batches[i], b, &err))) {
      fprintf(stderr, "bench_ipc: batch %lld differs: %s\n", (long long)i, err.message);
      *ok = false;
    }
    fsh_batch_unref(b);
  }
  if (check && i != check->n) *ok = false;
  fsh_ipc_stream_reader_free(r);
  return bench_now() - t0;
}

/* memcpy of every buffer of the table into one destination. */
static double copy_all(const table *t, uint8_t *dst) {
  double t0 = bench_now();
  size_t pos = 0;
  for (int64_t i = 0; i < t->n; i++)
    for (int64_t c = 0; c < t->batches[i]->n_columns; c++)
      for (int k = 0; k < t->batches[i]->columns[c]->n_buffers; k++) {
        fsh_buffer *b = t->batches[i]->columns[c]->buffers[k];
        if (!b) continue;
        memcpy(dst + pos, b->data, (size_t)b->size);
        pos += (size_t)b->size;
      }
  return bench_now() - t0;
}

/* The raw codec over every buffer of the table, compress then decompress. */
static void raw_codec(const table *t, fsh_compression c, double *csec, double *dsec) {
  size_t cap = 0;
  uint8_t *tmp = NULL, *back = NULL;
  *csec = *dsec = 0;
  for (int64_t i = 0; i < t->n; i++)
    for (int64_t col = 0; col < t->batches[i]->n_columns; col++)
      for (int k = 0; k < t->batches[i]->columns[col]->n_buffers; k++) {
        fsh_buffer *b = t->batches[i]->columns[col]->buffers[k];
        if (!b || b->size == 0) continue;
        size_t n = (size_t)b->size;
        /* the settings our codec uses: zstd's default level, lz4 frames
         * that record the content size */
        LZ4F_preferences_t prefs;
        memset(&prefs, 0, sizeof prefs);
        prefs.frameInfo.contentSize = n;
        size_t bound = c == FSH_COMPRESSION_ZSTD ? ZSTD_compressBound(n)
                                                 : LZ4F_compressFrameBound(n, &prefs);
        if (bound > cap) {
          cap = bound;
          tmp = realloc(tmp, cap);
          back = realloc(back, cap);
        }
        double t0 = bench_now();
        size_t m = c == FSH_COMPRESSION_ZSTD
                       ? ZSTD_compress(tmp, cap, b->data, n, ZSTD_CLEVEL_DEFAULT)
                       : LZ4F_compressFrame(tmp, cap, b->data, n, &prefs);
        double t1 = bench_now();
        if (c == FSH_COMPRESSION_ZSTD) {
          ZSTD_decompress(back, n, tmp, m);
        } else {
          LZ4F_dctx *d;
          LZ4F_createDecompressionContext(&d, LZ4F_VERSION);
          size_t dst_n = n, src_n = m;
          LZ4F_decompress(d, back, &dst_n, tmp, &src_n, NULL);
          LZ4F_freeDecompressionContext(d);
        }
        double t2 = bench_now();
        *csec += t1 - t0;
        *dsec += t2 - t1;
      }
  free(tmp);
  free(back);
}

static table one_column_table(int64_t bytes) {
  table t = {0};
  t.schema = fsh_schema_new(1);
  if (!t.schema || fsh_field_init(&t.schema->fields[0], "x", FSH_TYPE_INT64, false)) die("oom", NULL);
  t.n = 1;
  t.batches = malloc(sizeof *t.batches);
  t.batches[0] = fsh_batch_new(t.schema, bytes / 8);
  fsh_array *a = t.batches[0]->columns[0] = fsh_array_new(2, 0);
  a->length = bytes / 8;
  a->buffers[1] = fsh_buffer_new(bytes, true);
  t.body_bytes = (double)bytes;
  return t;
}

static void free_table(table *t) {
  for (int64_t i = 0; i < t->n; i++) fsh_batch_unref(t->batches[i]);
  free(t->batches);
  fsh_schema_unref(t->schema);
}

/* Median seconds to decode a stream holding one batch of `bytes`. */
static double decode_one_batch_seconds(int64_t bytes, int reps) {
  table t = one_column_table(bytes);
  fsh_buffer *enc = NULL;
  encode(&t, FSH_COMPRESSION_NONE, &enc);
  double secs[64];
  bool ok = true;
  for (int i = 0; i < reps; i++) secs[i] = decode(enc, NULL, &ok);
  qsort(secs, (size_t)reps, sizeof *secs, bench_cmp_double);
  fsh_buffer_unref(enc);
  free_table(&t);
  return secs[reps / 2];
}

int main(int argc, char **argv) {
  double target = 1024.0 * 1024 * 1024;
  int runs = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) target = atof(argv[++i]);
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_ipc [--bytes N] [--runs R]\n");
      return 2;
    }
  }
  if (runs < 1 || runs > 64) runs = 5;
  table t = make_table(target);
  printf("bench_ipc: %lld batches of 65536 rows (int64, float64, utf8), %.0f MiB of buffers, "
         "%d runs\n", (long long)t.n, t.body_bytes / 1048576, runs);
  printf("  %-32s %7s %7s %7s\n", "", "min", "median", "max");

  uint8_t *dst = malloc((size_t)t.body_bytes + 64);
  double secs[64];
  copy_all(&t, dst); /* warm-up: faults in the destination, as encode does */
  for (int r = 0; r < runs; r++) secs[r] = copy_all(&t, dst);
  bench_stats mc = bench_summarize(secs, runs, t.body_bytes);
  free(dst);
  bench_print("memcpy", mc, mc.med, "baseline");

  bool verified = true;
  const fsh_compression codecs[] = {FSH_COMPRESSION_NONE, FSH_COMPRESSION_LZ4_FRAME,
                                     FSH_COMPRESSION_ZSTD};
  double ratio_enc[3] = {0}, ratio_dec[3] = {0};
  for (int c = 0; c < 3; c++) {
    double enc_s[64], dec_s[64], raw_c[64], raw_d[64];
    fsh_buffer *bytes = NULL;
    encode(&t, codecs[c], &bytes); /* warm-up: sizes and faults in the destination */
    for (int r = 0; r < runs; r++) {
      enc_s[r] = encode(&t, codecs[c], &bytes);
      dec_s[r] = decode(bytes, NULL, &verified);
      if (c != 0) raw_codec(&t, codecs[c], &raw_c[r], &raw_d[r]);
    }
    decode(bytes, &t, &verified); /* check once, untimed */
    const char *name = fsh_compression_name(codecs[c]);
    char label[64];
    bench_stats e = bench_summarize(enc_s, runs, t.body_bytes), d = bench_summarize(dec_s, runs, t.body_bytes);
    if (c == 0) {
      snprintf(label, sizeof label, "encode %s (vs memcpy)", name);
      bench_print(label, e, mc.med, "baseline");
      snprintf(label, sizeof label, "decode %s (vs memcpy)", name);
      bench_print(label, d, mc.med, "baseline");
      ratio_enc[c] = e.med / mc.med;
      ratio_dec[c] = d.med / mc.med;
    } else {
      bench_stats rc = bench_summarize(raw_c, runs, t.body_bytes), rd = bench_summarize(raw_d, runs, t.body_bytes);
      snprintf(label, sizeof label, "raw %s compress", name);
      bench_print(label, rc, rc.med, "baseline");
      snprintf(label, sizeof label, "encode %s (vs raw)", name);
      bench_print(label, e, rc.med, "baseline");
      snprintf(label, sizeof label, "raw %s decompress", name);
      bench_print(label, rd, rd.med, "baseline");
      snprintf(label, sizeof label, "decode %s (vs raw)", name);
      bench_print(label, d, rd.med, "baseline");
      ratio_enc[c] = e.med / rc.med;
      ratio_dec[c] = d.med / rd.med;
      printf("  %-32s %.3f\n", "compressed/uncompressed size", (double)bytes->size / t.body_bytes);
    }
    fsh_buffer_unref(bytes);
  }
  double small = decode_one_batch_seconds(1 << 20, 21), big = decode_one_batch_seconds(64 << 20, 21);
  printf("  decode one uncompressed batch: 1 MiB %.1f us, 64 MiB %.1f us (ratio %.2f)\n",
         small * 1e6, big * 1e6, big / small);
  free_table(&t);
  printf("result: name=bench_ipc verified=%s bytes=%.0f runs=%d encode_none_vs_memcpy=%.2f "
         "encode_lz4_vs_raw=%.2f decode_lz4_vs_raw=%.2f encode_zstd_vs_raw=%.2f "
         "decode_zstd_vs_raw=%.2f decode_64MiB_vs_1MiB=%.2f\n",
         verified ? "yes" : "no", t.body_bytes, runs, ratio_enc[0], ratio_enc[1], ratio_dec[1],
         ratio_enc[2], ratio_dec[2], big / small);
  return verified ? 0 : 1;
}
