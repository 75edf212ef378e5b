/* test_splice.c -- fsh_ipc_splicer: record-batch messages spliced into one
 * must be byte for byte the message the decode / fsh_concat / encode path
 * writes for the same messages (the reference), for every type the
 * splicer takes (the every-type sample batch without its unions and
 * dictionaries: primitives, temporal, intervals, decimals, (large)
 * binary and strings, fixed-size binary, (large) lists, fixed-size lists,
 * struct, map), over random slices (lengths not multiples of 8, empty
 * parts, one part, parts with and without validity bitmaps); a hand-laid
 * message whose offsets do not start at 0 (another writer's); values
 * checked against an independently built batch; the types it refuses;
 * malformed parts; allocation failures. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <flightshuffle/ipc.h>
#include <flightshuffle/kernels.h>

#include "ipc/writer_internal.h"
#include "kernels/kernel_helpers.h"
#include "test.h"

static bool field_spliceable(const fsh_field *f) {
  if (f->dictionary || f->type == FSH_TYPE_SPARSE_UNION || f->type == FSH_TYPE_DENSE_UNION)
    return false;
  for (int64_t i = 0; i < f->n_children; i++)
    if (!field_spliceable(&f->children[i])) return false;
  return true;
}

/* b's columns that the splicer takes (or, with refused, those it does not). */
static fsh_batch *columns_of(fsh_batch *b, bool refused) {
  int64_t n = 0;
  for (int64_t c = 0; c < b->n_columns; c++) n += field_spliceable(&b->schema->fields[c]) != refused;
  fsh_schema *s = SBH_OK(fsh_schema_new(n));
  fsh_batch *r = NULL;
  int64_t k = 0;
  int64_t idx[64];
  for (int64_t c = 0; c < b->n_columns; c++)
    if (field_spliceable(&b->schema->fields[c]) != refused) {
      SBH_RC(fsh_field_copy(&s->fields[k], &b->schema->fields[c]));
      idx[k++] = c;
    }
  r = SBH_OK(fsh_batch_new(s, b->length));
  for (int64_t i = 0; i < n; i++) r->columns[i] = fsh_array_ref(b->columns[idx[i]]);
  fsh_schema_unref(s);
  return r;
}

/* The framed record batch message of b (our encoder, uncompressed unless c). */
static fsh_buffer *framed_of(fsh_batch *b, fsh_compression c) {
  fsh_error err = {{0}};
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  o.compression = c;
  fsh_ipc_encoder *enc = NULL;
  SBH_RC(fsh_ipc_encoder_new(b->schema, &o, &enc, &err));
  fsh_ipc_payload *ps = NULL;
  int32_t np = 0;
  SBH_RC(fsh_ipc_encode_batch(enc, b, &ps, &np, &err));
  fsh_buffer *bytes = NULL;
  fsh_output *out = NULL;
  SBH_RC(fsh_output_to_memory(NULL, &bytes, &out, &err));
  for (int32_t i = 0; i < np; i++) {
    SBH_RC(fsh_ipc_write_payload(out, &ps[i], &err));
    fsh_ipc_payload_reset(&ps[i]);
  }
  fsh_free(ps);
  SBH_RC(out->close(out, false, &err));
  fsh_ipc_encoder_free(enc);
  return bytes;
}

/* A decoder holding schema. */
static fsh_ipc_decoder *decoder_of(fsh_schema *schema) {
  fsh_error err = {{0}};
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  fsh_ipc_encoder *enc = NULL;
  fsh_ipc_decoder *d = NULL;
  fsh_ipc_payload p = {0};
  fsh_batch *none = NULL;
  SBH_RC(fsh_ipc_encoder_new(schema, &o, &enc, &err));
  SBH_RC(fsh_ipc_encode_schema(enc, &p, &err));
  SBH_RC(fsh_ipc_decoder_new(&d, &err));
  SBH_RC(fsh_ipc_decode_message(d, p.metadata, NULL, &none, &err));
  fsh_ipc_payload_reset(&p);
  fsh_ipc_encoder_free(enc);
  return d;
}

/* The reference: parts[0..n) decoded, concatenated, encoded; *concat gets
 * the concatenated batch. */
static fsh_buffer *reference(fsh_schema *schema, fsh_buffer **parts, int n, fsh_batch **concat) {
  fsh_error err = {{0}};
  fsh_ipc_decoder *d = decoder_of(schema);
  fsh_batch *bs[64];
  for (int i = 0; i < n; i++) {
    int64_t framed = 0;
    SBH_RC(fsh_ipc_decode_framed(d, parts[i], 0, parts[i]->size, &framed, &bs[i], &err));
  }
  fsh_batch *all = NULL;
  if (fsh_concat(bs, n, &all, &err) != 0) {
    fprintf(stderr, "reference concat: %s\n", err.message);
    abort();
  }
  fsh_buffer *want = framed_of(all, FSH_COMPRESSION_NONE);
  for (int i = 0; i < n; i++) fsh_batch_unref(bs[i]);
  fsh_ipc_decoder_free(d);
  *concat = all;
  return want;
}

/* Splices parts[0..n) (laid one after another in one buffer, as in a
 * stored block, when `one_buffer`) and checks the bytes against the
 * reference, and the spliced message decoded against the concatenation. */
static void check_splice(fsh_schema *schema, fsh_buffer **parts, int n, bool one_buffer,
                         const char *what) {
  fsh_error err = {{0}};
  fsh_batch *concat = NULL;
  fsh_buffer *want = reference(schema, parts, n, &concat);
  fsh_ipc_splicer *s = NULL;
  CHECK_OK(fsh_ipc_splicer_new(schema, &s, &err));
  if (!s) return;
  int64_t rows = 0;
  if (one_buffer) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += parts[i]->size;
    fsh_buffer *blk = SBH_OK(fsh_buffer_new(total, false));
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      memcpy(blk->data + at, parts[i]->data, (size_t)parts[i]->size);
      at += parts[i]->size;
    }
    for (at = 0; at < total;) {
      int64_t framed = 0, r = 0;
      CHECK_OK(fsh_ipc_splicer_add(s, blk, at, total - at, &framed, &r, &err));
      if (framed <= 0) break;
      at += framed;
      rows += r;
    }
    fsh_buffer_unref(blk); /* the splicer holds its own reference */
  } else {
    for (int i = 0; i < n; i++) {
      int64_t framed = 0, r = 0;
      CHECK_OK(fsh_ipc_splicer_add(s, parts[i], 0, parts[i]->size, &framed, &r, &err));
      CHECK_EQ_INT(framed, parts[i]->size);
      rows += r;
    }
  }
  CHECK_EQ_INT(fsh_ipc_splicer_count(s), n);
  CHECK_EQ_INT(fsh_ipc_splicer_rows(s), concat->length);
  CHECK_EQ_INT(rows, concat->length);
  const uint8_t *out = NULL;
  int64_t len = 0, orows = 0;
  CHECK_OK(fsh_ipc_splicer_finish(s, &out, &len, &orows, &err));
  CHECK_EQ_INT(orows, concat->length);
  CHECK_EQ_INT(fsh_ipc_splicer_count(s), 0);
  CHECK_MSG(len == want->size, "%s: %d parts: spliced %lld bytes, the reference %lld", what, n,
            (long long)len, (long long)want->size);
  if (out && len == want->size) {
    int64_t i = 0;
    while (i < len && out[i] == want->data[i]) i++;
    CHECK_MSG(i == len, "%s: %d parts, %lld rows: first difference at byte %lld of %lld", what,
              n, (long long)concat->length, (long long)i, (long long)len);
  }
  if (out) { /* and it decodes to the same rows */
    fsh_buffer *copy = SBH_OK(fsh_buffer_copy(out, len));
    fsh_ipc_decoder *d = decoder_of(schema);
    fsh_batch *got = NULL;
    int64_t framed = 0;
    CHECK_OK(fsh_ipc_decode_framed(d, copy, 0, len, &framed, &got, &err));
    CHECK_EQ_INT(framed, len);
    if (got) {
      CHECK_MSG(fsh_batch_validate(got, true, &err) == 0, "%s: invalid: %s", what, err.message);
      CHECK_MSG(fsh_batch_equals(got, concat, &err), "%s: %s", what, err.message);
    }
    fsh_batch_unref(got);
    fsh_ipc_decoder_free(d);
    fsh_buffer_unref(copy);
  }
  fsh_ipc_splicer_free(s);
  fsh_buffer_unref(want);
  fsh_batch_unref(concat);
}

/* Random slices of the every-type batch (50 rows, nulls in most columns,
 * every column's pattern different), 1-12 parts of 0-50 rows. */
static void test_random_slices_every_type(void) {
  fsh_batch *big = kh_big_batch(8, 3);
  fsh_batch *b = columns_of(big, false);
  CHECK(b->n_columns >= 30);
  uint64_t rng = 42;
  static const int64_t lens[] = {0, 1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 24, 31};
  for (int trial = 0; trial < 300; trial++) {
    int n = 1 + (int)(kh_rand(&rng) % 12);
    fsh_buffer *parts[16];
    for (int i = 0; i < n; i++) {
      int64_t len = kh_rand(&rng) % 3 == 0 ? (int64_t)(kh_rand(&rng) % 51)
                                           : lens[kh_rand(&rng) % (sizeof lens / sizeof lens[0])];
      int64_t off = (int64_t)(kh_rand(&rng) % (uint64_t)(b->length - len + 1));
      fsh_batch *sl = SBH_OK(fsh_batch_slice(b, off, len));
      parts[i] = framed_of(sl, FSH_COMPRESSION_NONE);
      fsh_batch_unref(sl);
    }
    char what[64];
    snprintf(what, sizeof what, "trial %d", trial);
    check_splice(b->schema, parts, n, trial % 2 == 0, what);
    for (int i = 0; i < n; i++) fsh_buffer_unref(parts[i]);
  }
  fsh_batch_unref(b);
  fsh_batch_unref(big);
}

/* One part (any length), and only empty parts. */
static void test_one_part_and_empty_parts(void) {
  fsh_batch *big = kh_big_batch(4, 1);
  fsh_batch *b = columns_of(big, false);
  fsh_buffer *whole = framed_of(b, FSH_COMPRESSION_NONE);
  check_splice(b->schema, &whole, 1, false, "one part");
  fsh_batch *e = SBH_OK(fsh_batch_slice(b, 5, 0));
  fsh_buffer *empty[3] = {framed_of(e, FSH_COMPRESSION_NONE), NULL, NULL};
  empty[1] = fsh_buffer_ref(empty[0]);
  empty[2] = fsh_buffer_ref(empty[0]);
  check_splice(b->schema, empty, 3, false, "three empty parts");
  fsh_buffer *mixed[3] = {empty[0], whole, empty[1]};
  check_splice(b->schema, mixed, 3, true, "empty, whole, empty");
  for (int i = 0; i < 3; i++) fsh_buffer_unref(empty[i]);
  fsh_buffer_unref(whole);
  fsh_batch_unref(e);
  fsh_batch_unref(b);
  fsh_batch_unref(big);
}

/* Values against a batch built independently: an int32 and a bool column
 * whose parts are 3 rows without nulls (no bitmap), 5 with nulls, 0 rows,
 * 11 without nulls, 6 with -- the validity and boolean bits shift by 3, 8,
 * 8, 19 bits. */
static void test_validity_values(void) {
  fsh_error err = {{0}};
  static const char *valid[] = {NULL, "10110", NULL, NULL, "011101"};
  static const char *bools[] = {"101", "11001", "", "01101110101", "100110"};
  static const int64_t ns[] = {3, 5, 0, 11, 6};
  fsh_schema *schema = SBH_OK(fsh_schema_new(2));
  sbh_field(&schema->fields[0], "i", FSH_TYPE_INT32, true);
  sbh_field(&schema->fields[1], "b", FSH_TYPE_BOOL, true);
  fsh_buffer *parts[5];
  char all_valid[64] = "", all_bools[64] = "";
  int32_t all_vals[64];
  int64_t total = 0;
  for (int i = 0; i < 5; i++) {
    int32_t vals[16];
    for (int64_t k = 0; k < ns[i]; k++) vals[k] = all_vals[total + k] = (int32_t)(100 * i + k);
    fsh_batch *b = SBH_OK(fsh_batch_new(schema, ns[i]));
    b->columns[0] = sbh_fixed(valid[i], ns[i], vals, 4);
    b->columns[1] = sbh_bool(valid[i], bools[i]);
    parts[i] = framed_of(b, FSH_COMPRESSION_NONE);
    fsh_batch_unref(b);
    for (int64_t k = 0; k < ns[i]; k++) strcat(all_valid, valid[i] ? (char[2]){valid[i][k], 0} : "1");
    strcat(all_bools, bools[i]);
    total += ns[i];
  }
  fsh_batch *want = SBH_OK(fsh_batch_new(schema, total));
  want->columns[0] = sbh_fixed(all_valid, total, all_vals, 4);
  want->columns[1] = sbh_bool(all_valid, all_bools);
  fsh_ipc_splicer *s = NULL;
  CHECK_OK(fsh_ipc_splicer_new(schema, &s, &err));
  for (int i = 0; i < 5; i++) {
    int64_t framed = 0, rows = 0;
    CHECK_OK(fsh_ipc_splicer_add(s, parts[i], 0, parts[i]->size, &framed, &rows, &err));
  }
  const uint8_t *out = NULL;
  int64_t len = 0, rows = 0;
  CHECK_OK(fsh_ipc_splicer_finish(s, &out, &len, &rows, &err));
  CHECK_EQ_INT(rows, 25);
  fsh_buffer *copy = SBH_OK(fsh_buffer_copy(out, len));
  fsh_ipc_decoder *d = decoder_of(schema);
  fsh_batch *got = NULL;
  int64_t framed = 0;
  CHECK_OK(fsh_ipc_decode_framed(d, copy, 0, len, &framed, &got, &err));
  if (got) {
    CHECK_EQ_INT(fsh_array_null_count(got->columns[0]), 4);
    CHECK_MSG(fsh_batch_equals(got, want, &err), "%s", err.message);
  }
  check_splice(schema, parts, 5, true, "validity");
  check_splice(schema, parts + 1, 3, false, "validity from the second part");
  fsh_batch_unref(got);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(copy);
  fsh_ipc_splicer_free(s);
  fsh_batch_unref(want);
  for (int i = 0; i < 5; i++) fsh_buffer_unref(parts[i]);
  fsh_schema_unref(schema);
}

/* ---- a message laid out by hand (another writer's) ----------------------- */

typedef struct raw_buf {
  const void *data;
  int64_t len;
} raw_buf;

/* A framed record batch message of `length` rows over the given field
 * nodes and buffers (each padded to 8), metadata from our encoder. */
static fsh_buffer *raw_message(fsh_schema *schema, int64_t length, const fsh_ipc_node *nodes,
                               int64_t n_nodes, const raw_buf *bufs, int64_t n_bufs) {
  fsh_error err = {{0}};
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  fsh_ipc_encoder *enc = NULL;
  SBH_RC(fsh_ipc_encoder_new(schema, &o, &enc, &err));
  fsh_ipc_range ranges[32];
  int64_t body = 0;
  for (int64_t i = 0; i < n_bufs; i++) {
    ranges[i] = (fsh_ipc_range){body, bufs[i].len};
    body += fsh_round_up(bufs[i].len, 8);
  }
  const uint8_t *md = NULL;
  int64_t mlen = 0;
  SBH_RC(fsh_ipc_encoder_batch_metadata(enc, length, nodes, n_nodes, ranges, n_bufs, body, &md,
                                        &mlen, &err));
  int64_t mpad = fsh_round_up(mlen, 8) - mlen;
  fsh_buffer *m = SBH_OK(fsh_buffer_new(8 + mlen + mpad + body, true));
  memset(m->data, 0, (size_t)m->size);
  fsh_store_le32(m->data, 0xFFFFFFFFu);
  fsh_store_le32(m->data + 4, (uint32_t)(mlen + mpad));
  memcpy(m->data + 8, md, (size_t)mlen);
  for (int64_t i = 0; i < n_bufs; i++)
    if (bufs[i].len) memcpy(m->data + 8 + mlen + mpad + ranges[i].offset, bufs[i].data, (size_t)bufs[i].len);
  fsh_ipc_encoder_free(enc);
  return m;
}

/* schema {l: list<int32>, s: utf8}, 3 rows, offsets starting at 2 and 5,
 * the list's child longer than the offsets use and with nulls outside the
 * used range: spliced with our own messages, equal to the reference. */
static fsh_schema *list_str_schema(void) {
  fsh_schema *schema = SBH_OK(fsh_schema_new(2));
  sbh_field(&schema->fields[0], "l", FSH_TYPE_LIST, true);
  fsh_field *l = &schema->fields[0];
  l->children = SBH_OK(fsh_calloc(1, sizeof *l->children));
  l->n_children = 1;
  sbh_field(&l->children[0], "item", FSH_TYPE_INT32, true);
  sbh_field(&schema->fields[1], "s", FSH_TYPE_STRING, true);
  return schema;
}

static fsh_buffer *foreign_message(fsh_schema *schema, int32_t bad_last) {
  static const uint8_t lvalid[] = {0x05};             /* rows 0, 2 valid */
  static const int32_t loffs[] = {2, 4, 4, 9};         /* child slots [2, 9) of 11 */
  static const uint8_t cvalid[] = {0xDC, 0x03};       /* child: 0, 1, 5, 10 null */
  static const int32_t cvals[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  int32_t soffs[] = {5, 8, 8, 12};
  if (bad_last) soffs[3] = bad_last;
  static const char sdata[] = "xxxxxabc....defgYY";
  fsh_ipc_node nodes[] = {{3, 1}, {11, 4}, {3, 0}};
  raw_buf bufs[] = {{lvalid, 1}, {loffs, 16}, {cvalid, 2}, {cvals, 44},
                    {NULL, 0},   {soffs, 16}, {sdata, 18}};
  return raw_message(schema, 3, nodes, 3, bufs, 7);
}

static void test_foreign_offsets(void) {
  fsh_schema *schema = list_str_schema();
  fsh_buffer *foreign = foreign_message(schema, 0);
  /* our own message of the same schema, from the foreign one decoded */
  fsh_error err = {{0}};
  fsh_ipc_decoder *d = decoder_of(schema);
  fsh_batch *fb = NULL;
  int64_t framed = 0;
  CHECK_OK(fsh_ipc_decode_framed(d, foreign, 0, foreign->size, &framed, &fb, &err));
  if (!fb) return;
  CHECK_OK(fsh_batch_validate(fb, true, &err));
  fsh_buffer *ours = framed_of(fb, FSH_COMPRESSION_NONE);
  CHECK(ours->size != foreign->size || memcmp(ours->data, foreign->data, (size_t)ours->size));
  fsh_buffer *parts[4] = {foreign, ours, foreign, foreign};
  check_splice(schema, parts, 4, false, "foreign offsets");
  check_splice(schema, parts, 1, true, "one foreign part");
  fsh_batch_unref(fb);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(ours);
  fsh_buffer_unref(foreign);
  fsh_schema_unref(schema);
}

/* ---- refusals and errors -------------------------------------------------- */

static void test_refused_types(void) {
  fsh_error err = {{0}};
  fsh_batch *big = kh_big_batch(1, 0);
  fsh_batch *refused = columns_of(big, true);
  CHECK_EQ_INT(refused->n_columns, 5); /* two unions, three dictionary columns */
  for (int64_t c = 0; c < refused->n_columns; c++) {
    fsh_schema *one = SBH_OK(fsh_schema_new(1));
    SBH_RC(fsh_field_copy(&one->fields[0], &refused->schema->fields[c]));
    fsh_ipc_splicer *s = NULL;
    CHECK_EQ_INT(fsh_ipc_splicer_new(one, &s, &err), ENOTSUP);
    CHECK(s == NULL);
    CHECK_MSG(strstr(err.message, one->fields[0].name) != NULL, "%s", err.message);
    fsh_schema_unref(one);
  }
  fsh_batch_unref(refused);
  fsh_batch_unref(big);
}

static void test_bad_parts(void) {
  fsh_error err = {{0}};
  fsh_schema *schema = list_str_schema();
  fsh_ipc_splicer *s = NULL;
  CHECK_OK(fsh_ipc_splicer_new(schema, &s, &err));
  fsh_buffer *good = foreign_message(schema, 0);
  int64_t framed = 0, rows = 0;
  /* truncated: the body does not fit */
  CHECK_EQ_INT(fsh_ipc_splicer_add(s, good, 0, good->size - 8, &framed, &rows, &err), EINVAL);
  /* a schema message */
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  fsh_ipc_encoder *enc = NULL;
  fsh_ipc_payload p = {0};
  CHECK_OK(fsh_ipc_encoder_new(schema, &o, &enc, &err));
  CHECK_OK(fsh_ipc_encode_schema(enc, &p, &err));
  fsh_buffer *sm = NULL;
  fsh_output *out = NULL;
  CHECK_OK(fsh_output_to_memory(NULL, &sm, &out, &err));
  CHECK_OK(fsh_ipc_write_payload(out, &p, &err));
  CHECK_OK(out->close(out, false, &err));
  CHECK_EQ_INT(fsh_ipc_splicer_add(s, sm, 0, sm->size, &framed, &rows, &err), EINVAL);
  fsh_ipc_payload_reset(&p);
  fsh_ipc_encoder_free(enc);
  fsh_buffer_unref(sm);
  /* compressed */
  fsh_error e2 = {{0}};
  fsh_ipc_decoder *d = decoder_of(schema);
  fsh_batch *b = NULL;
  CHECK_OK(fsh_ipc_decode_framed(d, good, 0, good->size, &framed, &b, &e2));
  fsh_buffer *z = framed_of(b, FSH_COMPRESSION_ZSTD);
  CHECK_EQ_INT(fsh_ipc_splicer_add(s, z, 0, z->size, &framed, &rows, &err), ENOTSUP);
  CHECK_EQ_INT(fsh_ipc_splicer_count(s), 0);
  /* a last offset past the data: refused by finish, naming the part and
   * field; the parts are still held */
  fsh_buffer *bad = foreign_message(schema, 19);
  CHECK_OK(fsh_ipc_splicer_add(s, good, 0, good->size, &framed, &rows, &err));
  CHECK_OK(fsh_ipc_splicer_add(s, bad, 0, bad->size, &framed, &rows, &err));
  const uint8_t *o2 = NULL;
  int64_t len = 0;
  CHECK_EQ_INT(fsh_ipc_splicer_finish(s, &o2, &len, &rows, &err), EINVAL);
  CHECK(o2 == NULL);
  CHECK_MSG(strstr(err.message, "message 1 of 2, field 's'") != NULL, "%s", err.message);
  CHECK_EQ_INT(fsh_ipc_splicer_count(s), 2);
  const uint8_t *m1 = NULL;
  int64_t m1len = 0, m1rows = 0;
  fsh_ipc_splicer_message(s, 1, &m1, &m1len, &m1rows);
  CHECK(m1 == bad->data);
  CHECK_EQ_INT(m1len, bad->size);
  CHECK_EQ_INT(m1rows, 3);
  fsh_ipc_splicer_clear(s);
  CHECK_EQ_INT(fsh_ipc_splicer_count(s), 0);
  /* nothing held: EINVAL */
  CHECK_EQ_INT(fsh_ipc_splicer_finish(s, &o2, &len, &rows, &err), EINVAL);
  fsh_buffer_unref(bad);
  fsh_buffer_unref(z);
  fsh_batch_unref(b);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(good);
  fsh_ipc_splicer_free(s);
  fsh_schema_unref(schema);
}

/* Every allocation failing in turn: ENOMEM, nothing leaked (ASan), and a
 * later splice works. */
static void test_alloc_failures(void) {
  fsh_batch *big = kh_big_batch(2, 0);
  fsh_batch *b = columns_of(big, false);
  fsh_buffer *parts[3] = {framed_of(b, FSH_COMPRESSION_NONE), NULL, NULL};
  fsh_batch *sl = SBH_OK(fsh_batch_slice(b, 3, 5));
  parts[1] = framed_of(sl, FSH_COMPRESSION_NONE);
  parts[2] = fsh_buffer_ref(parts[0]);
  int ok = 0;
  for (int64_t k = 1; k < 200 && !ok; k++) {
    fsh_error err = {{0}};
    fsh_ipc_splicer *s = NULL;
    fsh_alloc_fail_after(k, true);
    int rc = fsh_ipc_splicer_new(b->schema, &s, &err);
    for (int i = 0; rc == 0 && i < 3; i++) {
      int64_t framed, rows;
      rc = fsh_ipc_splicer_add(s, parts[i], 0, parts[i]->size, &framed, &rows, &err);
    }
    const uint8_t *out = NULL;
    int64_t len = 0, rows = 0;
    if (rc == 0) rc = fsh_ipc_splicer_finish(s, &out, &len, &rows, &err);
    fsh_alloc_fail_after(0, false);
    CHECK_MSG(rc == 0 || rc == ENOMEM, "failure %lld: %d %s", (long long)k, rc, err.message);
    ok = rc == 0;
    if (ok) CHECK(out != NULL && rows == 2 * b->length + 5);
    fsh_ipc_splicer_free(s);
  }
  CHECK(ok);
  check_splice(b->schema, parts, 3, true, "after the failures");
  for (int i = 0; i < 3; i++) fsh_buffer_unref(parts[i]);
  fsh_batch_unref(sl);
  fsh_batch_unref(b);
  fsh_batch_unref(big);
}

/* ---- a stream file's batches spliced (the pyarrow test's driver) ---------- */

/* Splices every record batch of the stream at `in` into one and writes a
 * stream of that one batch to `out` (or `out`.refused, holding the reason,
 * when the splicer refuses the schema); the spliced bytes must be the
 * decode / concat / encode path's. */
static void splice_stream(const char *in, const char *out) {
  fsh_error err = {{0}};
  fsh_input *input = NULL;
  fsh_buffer *buf = NULL;
  CHECK_OK(fsh_input_open_path(in, &input, &err));
  if (!input) return;
  CHECK_OK(input->read(input, input->size(input), &buf, &err));
  input->close(input);
  if (!buf) return;
  fsh_ipc_decoder *d = NULL;
  CHECK_OK(fsh_ipc_decoder_new(&d, &err));
  fsh_ipc_splicer *s = NULL;
  fsh_buffer *parts[64];
  int n = 0;
  bool refused = false;
  for (int64_t at = 0; at + 8 <= buf->size && !refused;) {
    uint32_t mlen;
    memcpy(&mlen, buf->data + at + 4, 4);
    if (mlen == 0) break; /* end of stream */
    fsh_buffer *md = SBH_OK(fsh_buffer_slice(buf, at + 8, mlen));
    fsh_ipc_message_type type;
    int64_t body = 0;
    CHECK_OK(fsh_ipc_peek_message(md, &type, &body, &err));
    if (type == FSH_IPC_SCHEMA) {
      fsh_batch *none = NULL;
      CHECK_OK(fsh_ipc_decode_message(d, md, NULL, &none, &err));
      int rc = fsh_ipc_splicer_new(fsh_ipc_decoder_schema(d), &s, &err);
      if (rc == ENOTSUP) refused = true;
      else CHECK_OK(rc);
    } else if (s && n < 64) {
      int64_t framed = 0, rows = 0;
      CHECK_OK(fsh_ipc_splicer_add(s, buf, at, buf->size - at, &framed, &rows, &err));
      CHECK_EQ_INT(framed, 8 + mlen + body);
      parts[n++] = SBH_OK(fsh_buffer_slice(buf, at, 8 + mlen + body));
    }
    fsh_buffer_unref(md);
    at += 8 + mlen + body;
  }
  char path[4096];
  if (refused) {
    snprintf(path, sizeof path, "%s.refused", out);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fprintf(f, "%s\n", err.message), fclose(f);
  } else if (s && n > 0) {
    fsh_schema *schema = fsh_ipc_decoder_schema(d);
    check_splice(schema, parts, n, true, in); /* the bytes: the decode path's */
    const uint8_t *bytes = NULL;
    int64_t len = 0, rows = 0;
    CHECK_OK(fsh_ipc_splicer_finish(s, &bytes, &len, &rows, &err));
    fsh_ipc_write_options o;
    fsh_ipc_write_options_init(&o);
    fsh_ipc_encoder *enc = NULL;
    fsh_ipc_payload p = {0};
    fsh_output *o2 = NULL;
    CHECK_OK(fsh_ipc_encoder_new(schema, &o, &enc, &err));
    CHECK_OK(fsh_ipc_encode_schema(enc, &p, &err));
    CHECK_OK(fsh_output_open_path(out, &o2, &err));
    static const uint8_t eos[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};
    struct iovec v[2] = {{(void *)bytes, (size_t)len}, {(void *)eos, 8}};
    if (o2 && bytes) {
      CHECK_OK(fsh_ipc_write_payload(o2, &p, &err));
      CHECK_OK(o2->writev(o2, v, 2, &err));
      CHECK_OK(o2->close(o2, false, &err));
    }
    fsh_ipc_payload_reset(&p);
    fsh_ipc_encoder_free(enc);
  }
  for (int i = 0; i < n; i++) fsh_buffer_unref(parts[i]);
  fsh_ipc_splicer_free(s);
  fsh_ipc_decoder_free(d);
  fsh_buffer_unref(buf);
}

/* FSH_SPLICE_IN and FSH_SPLICE_OUT set (tests/python/test_splice_pyarrow.py):
 * that stream spliced. Else a stream of our own (slices of the every-type
 * batch), spliced and read back: one batch, the stream's rows. */
static void stream_file(void) {
  const char *in = getenv("FSH_SPLICE_IN"), *out = getenv("FSH_SPLICE_OUT");
  if (in && out) {
    splice_stream(in, out);
    return;
  }
  fsh_error err = {{0}};
  char *dir = SBH_OK(strdup("/tmp/fsh_splice_XXXXXX"));
  CHECK(mkdtemp(dir) != NULL);
  char pin[256], pout[256];
  snprintf(pin, sizeof pin, "%s/in.arrows", dir);
  snprintf(pout, sizeof pout, "%s/out.arrows", dir);
  fsh_batch *big = kh_big_batch(4, 2);
  fsh_batch *b = columns_of(big, false);
  fsh_batch *sl[3] = {SBH_OK(fsh_batch_slice(b, 1, 9)), SBH_OK(fsh_batch_slice(b, 4, 0)),
                      SBH_OK(fsh_batch_slice(b, 10, 13))};
  fsh_output *o = NULL;
  fsh_ipc_stream_writer *w = NULL;
  CHECK_OK(fsh_output_open_path(pin, &o, &err));
  CHECK_OK(fsh_ipc_stream_writer_open(o, b->schema, NULL, &w, &err));
  for (int i = 0; i < 3; i++) CHECK_OK(fsh_ipc_stream_writer_write(w, sl[i], &err));
  CHECK_OK(fsh_ipc_stream_writer_close(w, &err));
  splice_stream(pin, pout);
  fsh_batch_stream st = {0};
  CHECK_OK(fsh_ipc_open_path(pout, &st, &err));
  fsh_batch *got = NULL, *more = NULL;
  if (st.get_next) {
    CHECK_OK(st.get_next(&st, &got, &err));
    CHECK_OK(st.get_next(&st, &more, &err));
    st.release(&st);
  }
  CHECK(got != NULL && more == NULL);
  fsh_batch *want = NULL;
  CHECK_OK(fsh_concat(sl, 3, &want, &err));
  if (got && want) CHECK_MSG(fsh_batch_equals(got, want, &err), "%s", err.message);
  fsh_batch_unref(got);
  fsh_batch_unref(want);
  for (int i = 0; i < 3; i++) fsh_batch_unref(sl[i]);
  fsh_batch_unref(b);
  fsh_batch_unref(big);
  unlink(pin);
  unlink(pout);
  rmdir(dir);
  free(dir);
}

FSH_TEST_MAIN(TEST(test_random_slices_every_type), TEST(test_one_part_and_empty_parts),
              TEST(test_validity_values), TEST(test_foreign_offsets), TEST(test_refused_types),
              TEST(test_bad_parts), TEST(test_alloc_failures), TEST(stream_file))
