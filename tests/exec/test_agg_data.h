/* test_agg_data.h -- random batches for the hash aggregate and hash join
 * tests, with the raw values they were built from (the naive references
 * read those, not the batches), and readers of result columns. */
#ifndef FSH_TESTS_AGG_DATA_H
#define FSH_TESTS_AGG_DATA_H

#include "kernels/kernel_helpers.h"

#include <flightshuffle/exec.h>

#include <math.h>

/* Columns of td batches. */
enum { TD_K1, TD_K2, TD_K3, TD_VI, TD_VF, TD_VS, TD_VU, TD_ID, TD_NCOLS };

static const char *const td_dict_values[4] = {"apple", "kiwi", "fig", ""};

/* One row's raw values; -1 string ids and *_null flags mark nulls. */
typedef struct td_row {
  bool k1_null;
  int64_t k1;
  int k2;  /* "s<k2>" or -1 */
  int k3;  /* td_dict_values[k3] or -1 */
  bool vi_null, vf_null;
  int32_t vi;
  double vf;
  int vs; /* "x<vs>" or -1 */
  bool vu_null;
  uint16_t vu;
  int64_t id;
} td_row;

typedef struct td_opts {
  int n_keys;     /* distinct k1 values (skewed: half the rows take 0) */
  int null_pct;   /* nulls in keys, percent */
  bool one_key;   /* every row the same keys, no nulls */
} td_opts;

/* A random batch of n rows; rows[0, n) get the raw values; ids from id0.
 * k3 is dictionary<int16, utf8> with a dictionary permuted per batch. */
static inline fsh_batch *td_batch(uint64_t *st, int64_t n, td_opts o, int64_t id0, td_row *rows) {
  char *valid[TD_NCOLS];
  for (int c = 0; c < TD_NCOLS; c++) {
    valid[c] = malloc((size_t)n + 1);
    memset(valid[c], '1', (size_t)n);
    valid[c][n] = 0;
  }
  int64_t *k1 = calloc((size_t)n + 1, 8), *id = calloc((size_t)n + 1, 8);
  int16_t *k3 = calloc((size_t)n + 1, 2);
  int32_t *vi = calloc((size_t)n + 1, 4);
  double *vf = calloc((size_t)n + 1, 8);
  uint16_t *vu = calloc((size_t)n + 1, 2);
  char(*k2s)[16] = calloc((size_t)n + 1, 16), (*vss)[16] = calloc((size_t)n + 1, 16);
  const char **k2p = calloc((size_t)n + 1, sizeof(char *)), **vsp = calloc((size_t)n + 1, sizeof(char *));
  int perm[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; i--) {
    int j = (int)(kh_rand(st) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < n; i++) {
    td_row *r = &rows[i];
    memset(r, 0, sizeof *r);
    bool nk = !o.one_key;
    r->k1_null = nk && (int)(kh_rand(st) % 100) < o.null_pct;
    r->k1 = o.one_key || kh_rand(st) % 2 ? 7 : (int64_t)(kh_rand(st) % (uint64_t)o.n_keys) * 1000003;
    r->k2 = nk && (int)(kh_rand(st) % 100) < o.null_pct ? -1 : o.one_key ? 1 : (int)(kh_rand(st) % 4);
    int slot = (int)(kh_rand(st) % 4);
    r->k3 = nk && (int)(kh_rand(st) % 100) < o.null_pct ? -1 : o.one_key ? perm[0] : perm[slot];
    if (o.one_key) slot = 0;
    r->vi_null = kh_rand(st) % 5 == 0;
    r->vi = (int32_t)(kh_rand(st) % 2001) - 1000;
    r->vf_null = kh_rand(st) % 5 == 0;
    r->vf = (double)(int64_t)(kh_rand(st) % 100000) / 64.0 - 700;
    r->vs = kh_rand(st) % 5 == 0 ? -1 : (int)(kh_rand(st) % 40);
    r->vu_null = kh_rand(st) % 7 == 0;
    r->vu = (uint16_t)kh_rand(st);
    r->id = id0 + i;
    if (r->k1_null) valid[TD_K1][i] = '0';
    if (r->k2 < 0) valid[TD_K2][i] = '0';
    if (r->k3 < 0) valid[TD_K3][i] = '0';
    if (r->vi_null) valid[TD_VI][i] = '0';
    if (r->vf_null) valid[TD_VF][i] = '0';
    if (r->vs < 0) valid[TD_VS][i] = '0';
    if (r->vu_null) valid[TD_VU][i] = '0';
    k1[i] = r->k1_null ? 0 : r->k1;
    snprintf(k2s[i], 16, "s%d", r->k2 < 0 ? 0 : r->k2);
    k2p[i] = r->k2 < 0 ? "" : k2s[i];
    k3[i] = (int16_t)(r->k3 < 0 ? 0 : slot); /* dictionary slot `slot` holds perm[slot] */
    vi[i] = r->vi;
    vf[i] = r->vf;
    snprintf(vss[i], 16, "x%d", r->vs < 0 ? 0 : r->vs);
    vsp[i] = r->vs < 0 ? "" : vss[i];
    vu[i] = r->vu;
    id[i] = r->id;
  }
  const char *dict[4];
  for (int s = 0; s < 4; s++) dict[s] = td_dict_values[perm[s]];
  sbh_cols c;
  c.n = 0;
  sbh_col(&c, "k1", FSH_TYPE_INT64, true);
  SBH_SET(&c, sbh_fixed(valid[TD_K1], n, k1, 8));
  sbh_col(&c, "k2", FSH_TYPE_STRING, true);
  SBH_SET(&c, sbh_strings(valid[TD_K2], n, k2p));
  sbh_col(&c, "k3", FSH_TYPE_STRING, true);
  sbh_dict(&c.fields[2], 1, FSH_TYPE_INT16, false);
  fsh_array *k3a = sbh_fixed(valid[TD_K3], n, k3, 2);
  k3a->dictionary = sbh_strings(NULL, 4, dict);
  SBH_SET(&c, k3a);
  sbh_col(&c, "vi", FSH_TYPE_INT32, true);
  SBH_SET(&c, sbh_fixed(valid[TD_VI], n, vi, 4));
  sbh_col(&c, "vf", FSH_TYPE_FLOAT64, true);
  SBH_SET(&c, sbh_fixed(valid[TD_VF], n, vf, 8));
  sbh_col(&c, "vs", FSH_TYPE_STRING, true);
  SBH_SET(&c, sbh_strings(valid[TD_VS], n, vsp));
  sbh_col(&c, "vu", FSH_TYPE_UINT16, true);
  SBH_SET(&c, sbh_fixed(valid[TD_VU], n, vu, 2));
  sbh_col(&c, "id", FSH_TYPE_INT64, false);
  SBH_SET(&c, sbh_fixed(NULL, n, id, 8));
  fsh_batch *b = sbh_finish(&c, n);
  for (int i = 0; i < TD_NCOLS; i++) free(valid[i]);
  free(k1); free(id); free(k3); free(vi); free(vf); free(vu);
  free(k2s); free(vss); free(k2p); free(vsp);
  return b;
}

/* ---- readers of result columns ------------------------------------------- */

static inline bool td_valid(const fsh_field *f, const fsh_array *a, int64_t i) {
  const fsh_buffer *v = a->buffers[0];
  if (v && !fsh_bit_get(v->data, a->offset + i)) return false;
  if (f->dictionary) {
    int64_t d = 0;
    const uint8_t *p = a->buffers[1]->data;
    int64_t at = a->offset + i;
    if (f->type == FSH_TYPE_INT8) { d = (int8_t)p[at]; }
    else if (f->type == FSH_TYPE_INT16) { int16_t x; memcpy(&x, p + 2 * at, 2); d = x; }
    else if (f->type == FSH_TYPE_INT32) { int32_t x; memcpy(&x, p + 4 * at, 4); d = x; }
    else { memcpy(&d, p + 8 * at, 8); }
    const fsh_array *da = a->dictionary;
    return !da->buffers[0] || fsh_bit_get(da->buffers[0]->data, da->offset + d);
  }
  return true;
}

static inline int64_t td_i64(const fsh_array *a, int64_t i) {
  int64_t v;
  memcpy(&v, a->buffers[1]->data + 8 * (a->offset + i), 8);
  return v;
}
static inline double td_f64(const fsh_array *a, int64_t i) {
  double v;
  memcpy(&v, a->buffers[1]->data + 8 * (a->offset + i), 8);
  return v;
}
static inline int32_t td_i32(const fsh_array *a, int64_t i) {
  int32_t v;
  memcpy(&v, a->buffers[1]->data + 4 * (a->offset + i), 4);
  return v;
}

/* String value of row i of a utf8 or dictionary<*, utf8> column (into buf). */
static inline const char *td_str(const fsh_field *f, const fsh_array *a, int64_t i, char *buf,
                                 size_t cap) {
  int64_t at = a->offset + i;
  if (f->dictionary) {
    const uint8_t *p = a->buffers[1]->data;
    if (f->type == FSH_TYPE_INT16) { int16_t x; memcpy(&x, p + 2 * at, 2); at = x; }
    else if (f->type == FSH_TYPE_INT32) { int32_t x; memcpy(&x, p + 4 * at, 4); at = x; }
    else memcpy(&at, p + 8 * at, 8);
    a = a->dictionary;
    at += a->offset;
  }
  int32_t s, e;
  memcpy(&s, a->buffers[1]->data + 4 * at, 4);
  memcpy(&e, a->buffers[1]->data + 4 * (at + 1), 4);
  size_t len = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
  memcpy(buf, a->buffers[2]->data + s, len);
  buf[len] = 0;
  return buf;
}

/* Index of a dictionary value string in td_dict_values, or -2. */
static inline int td_dict_index(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, td_dict_values[i]) == 0) return i;
  return -2;
}

static inline int td_num_after(const char *s, char prefix) {
  return s[0] == prefix ? atoi(s + 1) : -2;
}

static inline bool td_close(double a, double b) {
  return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-9;
}
#endif
