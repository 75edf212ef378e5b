/* expr_like.c -- SQL LIKE: patterns compiled at bind into equality,
 * prefix, suffix or substring tests when their shape allows, otherwise a
 * general matcher ('%' any run, '_' one UTF-8 character, '\' escapes). */
#include "exec/exec_internal.h"

/* Bytes of the UTF-8 character starting with byte c (1 for stray bytes). */
static inline int64_t utf8_len(unsigned char c) {
  return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
}

static inline int64_t next_char(const char *s, int64_t j, int64_t sn) {
  int64_t l = utf8_len((unsigned char)s[j]);
  return j + l <= sn ? j + l : sn;
}

bool expr_like_match(const char *p, int64_t pn, const char *s, int64_t sn) {
  int64_t i = 0, j = 0, star_p = -1, star_s = 0;
  while (j < sn) {
    if (i < pn && p[i] == '%') {
      star_p = ++i;
      star_s = j;
      continue;
    }
    if (i < pn && p[i] == '_') {
      i++;
      j = next_char(s, j, sn);
      continue;
    }
    if (i < pn) {
      int64_t step = p[i] == '\\' && i + 1 < pn ? 2 : 1;
      if (s[j] == p[i + step - 1]) {
        i += step;
        j++;
        continue;
      }
    }
    if (star_p < 0) return false;
    /* Let the last % take one more character and retry after it. */
    i = star_p;
    j = star_s = next_char(s, star_s, sn);
  }
  while (i < pn && p[i] == '%') i++;
  return i == pn;
}

int expr_like_compile(fsh_expr *e, fsh_error *err) {
  const fsh_expr *pat = e->args[1];
  fsh_free(e->like_lit);
  e->like_lit = NULL;
  e->like_len = 0;
  e->like = LIKE_GENERAL;
  if (pat->lit_null) return 0;
  const char *p = pat->s;
  int64_t pn = pat->s_len;
  char *lit = fsh_malloc((size_t)pn + 1);
  if (!lit) return ev_oom(err);
  /* Unescape, and reduce the pattern to its shape: runs of literal bytes
   * ('L') and of % ('P'); any '_' or more than three runs: general. */
  int64_t len = 0;
  char shape[4] = "";
  int n_runs = 0;
  bool general = false;
  for (int64_t i = 0; i < pn; i++) {
    char c = p[i], kind = 'L';
    if (c == '\\') {
      if (i + 1 == pn) {
        fsh_free(lit);
        char text[256];
        return fsh_error_set(err, EINVAL, "%s: LIKE pattern ends with a lone escape '\\'",
                             fsh_expr_format(e, text, sizeof text));
      }
      c = p[++i];
    } else if (c == '%') {
      kind = 'P';
    } else if (c == '_') {
      general = true;
    }
    if (kind == 'L') lit[len++] = c;
    if (n_runs == 0 || shape[n_runs - 1] != kind) {
      if (n_runs == 3) general = true;
      else shape[n_runs++] = kind;
    }
  }
  lit[len] = '\0';
  shape[n_runs] = '\0';
  if (general) {
    fsh_free(lit);
    return 0;
  }
  if (n_runs == 0 || strcmp(shape, "L") == 0)
    e->like = LIKE_EQ;
  else if (strcmp(shape, "P") == 0 || strcmp(shape, "LP") == 0)
    e->like = LIKE_PREFIX;
  else if (strcmp(shape, "PL") == 0)
    e->like = LIKE_SUFFIX;
  else if (strcmp(shape, "PLP") == 0)
    e->like = LIKE_CONTAINS;
  else
    e->like = LIKE_GENERAL;
  if (e->like == LIKE_GENERAL) {
    fsh_free(lit);
    return 0;
  }
  e->like_lit = lit;
  e->like_len = len;
  return 0;
}

static inline bool contains(const char *s, int64_t sn, const char *t, int64_t tn) {
  if (tn == 0) return true;
  const char *end = s + sn - tn;
  for (const char *q = s; q <= end; q++) {
    q = memchr(q, t[0], (size_t)(end - q) + 1);
    if (!q) return false;
    if (memcmp(q, t, (size_t)tn) == 0) return true;
  }
  return false;
}

static inline bool like_one(const fsh_expr *e, const char *s, int64_t sn) {
  const char *t = e->like_lit;
  int64_t tn = e->like_len;
  switch (e->like) {
  case LIKE_EQ: return sn == tn && (tn == 0 || memcmp(s, t, (size_t)tn) == 0);
  case LIKE_PREFIX: return sn >= tn && (tn == 0 || memcmp(s, t, (size_t)tn) == 0);
  case LIKE_SUFFIX: return sn >= tn && (tn == 0 || memcmp(s + sn - tn, t, (size_t)tn) == 0);
  case LIKE_CONTAINS: return contains(s, sn, t, tn);
  default: return expr_like_match(e->args[1]->s, e->args[1]->s_len, s, sn);
  }
}

int ev_like(const fsh_expr *e, const ev_vec *x, ev_vec *r, fsh_error *err) {
  int64_t n = x->n;
  r->n = n;
  if (x->kind == EV_NULL || e->args[1]->lit_null) {
    r->kind = EV_NULL;
    return 0;
  }
  r->kind = EV_BOOL;
  if (x->scalar) {
    r->scalar = true;
    r->sbool = like_one(e, x->ss, x->ss_len);
    return 0;
  }
  FSH_RETURN_NOT_OK(ev_valid_and(x, NULL, r, err));
  int rc = ev_bitmap_new(n, &r->bits_buf, &r->bits, err);
  if (rc != 0) {
    ev_vec_reset(r);
    return rc;
  }
  for (int64_t k = 0; k < n; k++) {
    const char *s;
    int64_t sn;
    ev_str_at(x, k, &s, &sn);
    if (like_one(e, s, sn)) fsh_bit_set(r->bits, k, true);
  }
  return 0;
}
