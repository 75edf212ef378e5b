/* test_plan.c -- plans: JSON errors and their messages (unknown column,
 * type mismatch, unknown operator, bad inputs), explain, the protobuf
 * stage fragments (round trip, malformed input), and allocation failure
 * while parsing and running. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flightshuffle/exec.h>

#include "../test.h"

#define SCAN "{\"id\": \"t\", \"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": 1000, " \
             "\"batch_rows\": 100, \"partitions\": 3}"

/* Parses text; expects code and a message containing every needle. */
static void expect_error(const char *text, int code, const char *n1, const char *n2,
                         const char *n3) {
  fsh_error err;
  memset(&err, 0, sizeof err);
  fsh_plan *p = NULL;
  int rc = fsh_plan_from_json(text, -1, 0, &p, &err);
  CHECK_MSG(rc == code, "got %d (%s) for %s", rc, err.message, text);
  CHECK(p == NULL);
  const char *needles[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i])
      CHECK_MSG(strstr(err.message, needles[i]) != NULL, "message '%s' lacks '%s'", err.message,
                needles[i]);
  fsh_plan_free(p);
}

static void test_json_errors(void) {
  /* unknown column in a filter: names the operator (position and id) and the column */
  expect_error("{\"nodes\": [" SCAN ", {\"id\": \"f\", \"op\": \"filter\", \"predicate\": "
               "{\"op\": \">\", \"args\": [{\"col\": \"vaule\"}, {\"lit\": 1}]}}]}",
               EINVAL, "plan operator 1 (filter 'f')", "'vaule'", "'value'");
  /* type mismatch */
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"filter\", \"predicate\": "
               "{\"op\": \">\", \"args\": [{\"col\": \"name\"}, {\"lit\": 1}]}}]}",
               EINVAL, "plan operator 1 (filter)", "name", "mismatch");
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"filter\", \"predicate\": {\"col\": \"key\"}}]}",
               EINVAL, "plan operator 1 (filter)", "key", NULL);
  /* unknown operator */
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"shuffle_dance\"}]}", EINVAL, "plan operator 1",
               "unknown operator 'shuffle_dance'", NULL);
  /* unknown columns in every operator that names columns */
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"sort\", \"keys\": [\"nope\"]}]}", EINVAL,
               "plan operator 1 (sort)", "'nope'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"repartition\", \"by\": \"hash\", \"keys\": "
               "[\"k\"]}]}", EINVAL, "plan operator 1 (repartition)", "'k'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"aggregate\", \"keys\": [\"key\"], \"aggs\": "
               "[{\"fn\": \"sum\", \"column\": \"nme\"}]}]}",
               EINVAL, "plan operator 1 (aggregate)", "'nme'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"project\", \"columns\": [\"key\", \"x\"]}]}",
               EINVAL, "plan operator 1 (project)", "'x'", NULL);
  expect_error("{\"nodes\": [" SCAN ", " SCAN "]}", EINVAL, "plan operator 1", "'t'", "already");
  expect_error("{\"nodes\": [" SCAN ", {\"id\": \"j\", \"op\": \"join\", \"left\": \"t\", "
               "\"right\": \"t\", \"left_keys\": [\"key\"], \"right_keys\": [\"name\"]}]}",
               EINVAL, "plan operator 1 (join 'j')", "key", "name");
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"join\", \"left\": \"t\", \"right\": \"u\", "
               "\"keys\": [\"key\"]}]}",
               EINVAL, "plan operator 1 (join)", "'u'", NULL);
  /* sort on a type without order: the aggregate's list-typed partial state is not reachable
   * from JSON, so a key of bad type is tested through a sum over strings */
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"aggregate\", \"aggs\": "
               "[{\"fn\": \"sum\", \"column\": \"name\"}]}]}",
               ENOTSUP, "plan operator 1 (aggregate)", "name", NULL);
  /* malformed plans */
  expect_error("{\"nodes\": [", EINVAL, "plan JSON: line", NULL, NULL);
  expect_error("{\"nodes\": []}", EINVAL, "at least one operator", NULL, NULL);
  expect_error("{\"nodes\": [" SCAN "], \"extra\": 1}", EINVAL, "unknown field 'extra'", NULL, NULL);
  expect_error("{\"nodes\": [{\"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": 10, "
               "\"bogus\": 1}]}", EINVAL, "plan operator 0 (scan)", "unknown field 'bogus'", NULL);
  expect_error("{\"nodes\": [{\"op\": \"filter\", \"predicate\": {\"lit\": true}}]}", EINVAL,
               "plan operator 0 (filter)", "needs 'input'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"limit\", \"n\": -1}]}", EINVAL,
               "plan operator 1 (limit)", "'n'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"into_partitions\", \"partitions\": 0}]}", EINVAL,
               "plan operator 1 (into_partitions)", "'partitions'", NULL);
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"filter\", \"predicate\": {\"op\": \">\", "
               "\"args\": [{\"col\": \"key\"}]}}]}",
               EINVAL, "plan operator 1 (filter)", "predicate", "expected 2 args");
  expect_error("{\"nodes\": [" SCAN ", {\"op\": \"join\", \"left\": \"t\", \"right\": \"t\", "
               "\"keys\": [\"key\"], \"type\": \"full\", \"strategy\": \"broadcast\"}]}",
               EINVAL, "plan operator 1 (join)", "broadcast", NULL);
}

static void test_explain_and_schema(void) {
  const char *text =
      "{\"partitions\": 3, \"nodes\": [" SCAN ", {\"op\": \"filter\", \"predicate\": {\"op\": "
      "\">\", \"args\": [{\"col\": \"value\"}, {\"lit\": 0.5}]}}, {\"op\": \"aggregate\", \"keys\": "
      "[\"name\"], \"aggs\": [{\"fn\": \"count_star\", \"name\": \"n\"}]}, {\"op\": \"sort\", "
      "\"keys\": [\"n\"]}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  if (!p) return;
  fsh_schema *s = fsh_plan_schema(p);
  CHECK_EQ_INT(s->n_fields, 2);
  CHECK(strcmp(s->fields[0].name, "name") == 0 && strcmp(s->fields[1].name, "n") == 0);
  CHECK_EQ_INT(fsh_plan_output_partitions(p), 1);
  /* partial agg -> hash exchange -> final agg -> range exchange -> sort -> gather */
  CHECK_EQ_INT(fsh_plan_stage_count(p), 3);
  char *out = NULL;
  CHECK_OK(fsh_plan_explain(p, &out, &err));
  CHECK(out && strstr(out, "3 stage(s), 3 exchange(s)"));
  CHECK(out && strstr(out, "exchange hash on [name]"));
  CHECK(out && strstr(out, "exchange range on [n asc nulls last]"));
  CHECK(out && strstr(out, "exchange gather"));
  CHECK(out && strstr(out, "aggregate partial"));
  CHECK(out && strstr(out, "aggregate final"));
  fsh_free(out);
  fsh_plan_free(p);
}

static fsh_plan *sample_plan(void) {
  const char *text =
      "{\"partitions\": 3, \"nodes\": ["
      "{\"id\": \"a\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 500, \"partitions\": 2},"
      "{\"id\": \"b\", \"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 50, \"seed\": 4},"
      "{\"id\": \"bp\", \"op\": \"project\", \"input\": \"b\", \"columns\": [{\"name\": \"k2\", "
      "\"expr\": {\"col\": \"key\"}}, {\"name\": \"twice\", \"expr\": {\"op\": \"*\", \"args\": "
      "[{\"col\": \"amount\"}, {\"lit\": 2}]}}]},"
      "{\"id\": \"j\", \"op\": \"join\", \"left\": \"a\", \"right\": \"bp\", \"left_keys\": "
      "[\"key\"], \"right_keys\": [\"k2\"]},"
      "{\"op\": \"filter\", \"predicate\": {\"op\": \"is_not_null\", \"args\": [{\"col\": \"key\"}]}},"
      "{\"op\": \"aggregate\", \"keys\": [\"grp\"], \"aggs\": [{\"fn\": \"sum\", \"column\": "
      "\"twice\"}, {\"fn\": \"avg\", \"column\": \"amount\"}]},"
      "{\"op\": \"top_n\", \"keys\": [{\"column\": \"grp\", \"descending\": true}], \"n\": 3}]}";
  fsh_error err;
  fsh_plan *p = NULL;
  CHECK_OK(fsh_plan_from_json(text, -1, 0, &p, &err));
  return p;
}

static void test_proto_round_trip(void) {
  fsh_plan *p = sample_plan();
  if (!p) return;
  fsh_error err;
  int n = fsh_plan_stage_count(p);
  CHECK(n >= 3);
  int total_ops = 0;
  for (int s = 0; s < n; s++) {
    fsh_buffer *b = NULL, *b2 = NULL;
    CHECK_OK(fsh_plan_stage_encode(p, s, &b, &err));
    if (!b) continue;
    fsh_plan_fragment *f = NULL;
    CHECK_OK(fsh_plan_fragment_decode(b->data, b->size, &f, &err));
    if (f) {
      total_ops += fsh_plan_fragment_operators(f);
      CHECK_OK(fsh_plan_fragment_encode(f, &b2, &err));
      CHECK(b2 && b2->size == b->size && memcmp(b2->data, b->data, (size_t)b->size) == 0);
    }
    /* every truncation is rejected or decodes to a valid fragment: never a crash */
    for (int64_t cut = 0; cut < b->size; cut += 1 + b->size / 97) {
      fsh_plan_fragment *g = NULL;
      int rc = fsh_plan_fragment_decode(b->data, cut, &g, &err);
      CHECK(rc == 0 || rc == EINVAL);
      CHECK((rc == 0) == (g != NULL));
      fsh_plan_fragment_free(g);
    }
    /* flipped bytes likewise */
    uint8_t *copy = malloc((size_t)b->size);
    for (int64_t at = 0; at < b->size; at += 1 + b->size / 61) {
      memcpy(copy, b->data, (size_t)b->size);
      copy[at] ^= 0x5A;
      fsh_plan_fragment *g = NULL;
      int rc = fsh_plan_fragment_decode(copy, b->size, &g, &err);
      CHECK_MSG(rc == 0 || rc == EINVAL, "byte %lld flipped: %d %s", (long long)at, rc,
                err.message);
      fsh_plan_fragment_free(g);
    }
    free(copy);
    fsh_plan_fragment_free(f);
    fsh_buffer_unref(b);
    fsh_buffer_unref(b2);
  }
  CHECK(total_ops >= 8);
  /* empty and garbage input, out-of-range stage */
  fsh_plan_fragment *g = NULL;
  CHECK_EQ_INT(fsh_plan_fragment_decode(NULL, 0, &g, &err), EINVAL);
  CHECK(strstr(err.message, "no operators") != NULL);
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12};
  CHECK_EQ_INT(fsh_plan_fragment_decode(junk, sizeof junk, &g, &err), EINVAL);
  CHECK(strstr(err.message, "malformed") != NULL);
  fsh_buffer *b = NULL;
  CHECK_EQ_INT(fsh_plan_stage_encode(p, n, &b, &err), EINVAL);
  fsh_plan_free(p);
}

/* Hand-made fragments with one field wrong: each is EINVAL naming it. */
static void test_proto_semantic_errors(void) {
  fsh_plan *p = sample_plan();
  if (!p) return;
  fsh_error err;
  fsh_buffer *b = NULL;
  CHECK_OK(fsh_plan_stage_encode(p, 0, &b, &err));
  /* the first stage starts with the scan: field 1 (id) = 0 of operator 0.
   * Append a second output_exchange field (4) naming a node that is not
   * the last operator: proto3 takes the last value. */
  if (b) {
    uint8_t *m = malloc((size_t)b->size + 3);
    memcpy(m, b->data, (size_t)b->size);
    m[b->size] = 0x20; /* field 4, varint */
    m[b->size + 1] = 0x63; /* 99 */
    fsh_plan_fragment *f = NULL;
    CHECK_EQ_INT(fsh_plan_fragment_decode(m, b->size + 2, &f, &err), EINVAL);
    CHECK(strstr(err.message, "output exchange 99") != NULL);
    /* input_exchanges (field 3) naming the scan */
    m[b->size] = 0x18;
    m[b->size + 1] = 0x00;
    CHECK_EQ_INT(fsh_plan_fragment_decode(m, b->size + 2, &f, &err), EINVAL);
    CHECK(strstr(err.message, "input") != NULL);
    free(m);
  }
  fsh_buffer_unref(b);
  fsh_plan_free(p);
}

/* Allocation failure at every point of parsing, explaining and running a
 * small plan: an error (never a crash or a leak), then success. */
static void alloc_failure_one(const char *text) {
  fsh_error err;
  bool done = false;
  for (int64_t k = 1; k < 200000 && !done; k += 1 + k / 40) {
    fsh_alloc_fail_after(k, false);
    fsh_plan *p = NULL;
    int rc = fsh_plan_from_json(text, -1, 0, &p, &err);
    char *ex = NULL;
    fsh_buffer *frag = NULL;
    fsh_plan_result r;
    memset(&r, 0, sizeof r);
    if (!rc) rc = fsh_plan_explain(p, &ex, &err);
    if (!rc) rc = fsh_plan_stage_encode(p, 0, &frag, &err);
    if (!rc) rc = fsh_plan_run(p, NULL, &r, &err);
    fsh_alloc_fail_after(0, false);
    CHECK_MSG(rc == 0 || rc == ENOMEM || rc == EIO, "k=%lld: %d %s", (long long)k, rc, err.message);
    if (rc == 0) done = true;
    fsh_buffer_unref(frag);
    fsh_free(ex);
    fsh_plan_result_reset(&r);
    fsh_plan_free(p);
  }
  CHECK(done);
}

/* Allocation failure at every point of parsing, explaining, encoding and
 * running small plans: an error (never a crash or a leak), then success. */
static void test_alloc_failure(void) {
  alloc_failure_one(
      "{\"partitions\": 2, \"nodes\": [{\"op\": \"scan\", \"generate\": \"keyed\", \"rows\": 60, "
      "\"batch_rows\": 20, \"partitions\": 2}, {\"op\": \"repartition\", \"by\": \"range\", "
      "\"keys\": [\"key\"]}, {\"op\": \"aggregate\", \"keys\": [\"grp\"], \"aggs\": [{\"fn\": "
      "\"count\", \"column\": \"key\"}]}, {\"op\": \"limit\", \"n\": 5}]}");
  alloc_failure_one(
      "{\"partitions\": 2, \"nodes\": [{\"id\": \"a\", \"op\": \"scan\", \"generate\": \"keyed\", "
      "\"rows\": 50, \"batch_rows\": 10, \"partitions\": 2, \"null_fraction\": 0.2}, "
      "{\"id\": \"b\", \"op\": \"scan\", \"generate\": \"synthetic\", \"rows\": 40, \"batch_rows\": 8,"
      " \"key_range\": 20}, {\"op\": \"filter\", \"input\": \"b\", \"predicate\": {\"op\": \"<\", "
      "\"args\": [{\"col\": \"value\"}, {\"lit\": 0.9}]}}, {\"id\": \"j\", \"op\": \"join\", \"left\": "
      "\"a\", \"right\": \"b\", \"keys\": [\"key\"], \"type\": \"full\"}, {\"op\": \"into_partitions\", "
      "\"partitions\": 3}, {\"op\": \"repartition\", \"by\": \"random\"}, {\"op\": \"into_batches\", "
      "\"rows\": 7}, {\"op\": \"top_n\", \"keys\": [\"id\"], \"n\": 9}]}");
}

int main(int argc, char **argv) {
  static const fsh_test_case cases[] = {
      {"json_errors", test_json_errors},
      {"explain_and_schema", test_explain_and_schema},
      {"proto_round_trip", test_proto_round_trip},
      {"proto_semantic_errors", test_proto_semantic_errors},
      {"alloc_failure", test_alloc_failure},
  };
  return fsh_test_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
