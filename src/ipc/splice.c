/* splice.c -- joins uncompressed record-batch messages of one schema into
 * one message straight from their bodies, without decoding them into
 * arrays: each column's buffers are concatenated (fixed-width values
 * appended, offsets rebased, validity and boolean bitmaps shifted to the
 * bit they land on, a bitmap made of ones for a part that has none), and
 * nested types recurse on the ranges of their children that the parts
 * use. The result is, byte for byte, what fsh_ipc_encode_batch writes for
 * fsh_concat of the decoded messages (body layout of body_encode.c,
 * metadata from the encoder's template).
 *
 * A splice walks the schema twice over the held messages: once to check
 * every part (the checks fsh_ipc_decode_framed runs, plus the offsets a
 * rebase reads) and size the output's field nodes and buffers, once to
 * write the body into the splicer's scratch buffer. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ipc/read_internal.h"
#include "ipc/writer_internal.h"

#define SPLICE_MAX_DEPTH 64
/* Lengths (a message's rows, a field node's slots, and their sums) past
 * this are refused: every size computed from them (offsets, bitmaps)
 * then fits an int64. */
#define SPLICE_MAX_LENGTH (INT64_MAX >> 4)

typedef struct splice_msg {
  fsh_buffer *buf;      /* reference: holds every pointer below */
  const uint8_t *nodes; /* FieldNode structs {length, null_count}, 16 bytes each */
  const uint8_t *bufs;  /* Buffer structs {offset, length}, 16 bytes each */
  int64_t n_nodes, n_bufs;
  const uint8_t *body;
  int64_t body_length;
  const uint8_t *framed; /* the whole message */
  int64_t framed_length;
  int64_t length; /* rows */
} splice_msg;

/* The slots [off, off + len) of one part's array at some nesting level,
 * and that array's field node. */
typedef struct slice {
  int64_t off, len;
  int64_t node_length, node_nulls;
} slice;

struct fsh_ipc_splicer {
  fsh_schema *schema; /* reference */
  fsh_ipc_encoder *enc;
  int64_t n_nodes, n_bufs; /* per message, from the schema */
  int depth;               /* nesting levels of the schema (1: flat) */
  splice_msg *msgs;
  int32_t n, cap;
  int64_t rows, body_bytes;
  /* per message (cap each): the cursors into its nodes and buffers */
  int64_t *node_i, *buf_i;
  slice *slices; /* [depth][cap] */
  /* [cap][n_bufs]: each message's buffers as the measuring pass checked
   * them, for the writing pass */
  struct seen_buf {
    const uint8_t *p;
    int64_t size;
  } *seen;
  /* the output's layout (n_nodes, n_bufs) and where the walk is in it */
  fsh_ipc_node *out_nodes;
  fsh_ipc_range *out_ranges;
  int64_t on, ob, body;
  bool too_big; /* measuring: the body passed SPLICE_MAX_LENGTH */
  bool writing;
  uint8_t *dst; /* the body being written (writing) */
  fsh_buffer *out; /* scratch: the last spliced message */
};

/* ---- the schema: what is spliced, how many nodes and buffers ----------- */

static int schema_shape(const char *column, const fsh_field *f, int depth, int64_t *nodes,
                        int64_t *bufs, int *max_depth, fsh_error *err) {
  if (depth >= SPLICE_MAX_DEPTH)
    return fsh_error_set(err, ENOTSUP, "splice: column '%s': field '%s' nested deeper than "
                         "%d levels", column, f->name ? f->name : "", SPLICE_MAX_DEPTH);
  if (f->dictionary)
    return fsh_error_set(err, ENOTSUP, "splice: column '%s': field '%s' is dictionary-encoded",
                         column, f->name ? f->name : "");
  if (depth + 1 > *max_depth) *max_depth = depth + 1;
  (*nodes)++;
  switch (f->type) {
    case FSH_TYPE_NA:
      return 0;
    case FSH_TYPE_BOOL:
      *bufs += 2;
      return 0;
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      *bufs += 3;
      return 0;
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      *bufs += 2;
      break;
    case FSH_TYPE_FIXED_SIZE_LIST: case FSH_TYPE_STRUCT:
      *bufs += 1;
      break;
    case FSH_TYPE_SPARSE_UNION: case FSH_TYPE_DENSE_UNION:
      return fsh_error_set(err, ENOTSUP, "splice: column '%s': field '%s' is a union (%s): "
                           "not spliced", column, f->name ? f->name : "",
                           fsh_type_name(f->type));
    default:
      if (fsh_type_bit_width(f) < 0 || fsh_type_bit_width(f) % 8 != 0 ||
          (fsh_type_bit_width(f) == 0 && f->type != FSH_TYPE_FIXED_SIZE_BINARY))
        return fsh_error_set(err, ENOTSUP, "splice: column '%s': field '%s' has type %s: not "
                             "spliced", column, f->name ? f->name : "",
                             fsh_type_name(f->type));
      *bufs += 2;
      return 0;
  }
  if ((f->type != FSH_TYPE_STRUCT && f->n_children != 1) || f->n_children < 0)
    return fsh_error_set(err, EINVAL, "splice: column '%s': field '%s' (%s) has %lld children",
                         column, f->name ? f->name : "", fsh_type_name(f->type),
                         (long long)f->n_children);
  for (int64_t i = 0; i < f->n_children; i++)
    FSH_RETURN_NOT_OK(
        schema_shape(column, &f->children[i], depth + 1, nodes, bufs, max_depth, err));
  return 0;
}

int fsh_ipc_splicer_new(fsh_schema *schema, fsh_ipc_splicer **out, fsh_error *err) {
  *out = NULL;
  int64_t nodes = 0, bufs = 0;
  int depth = 1;
  for (int64_t i = 0; i < schema->n_fields; i++)
    FSH_RETURN_NOT_OK(schema_shape(schema->fields[i].name ? schema->fields[i].name : "",
                                   &schema->fields[i], 0, &nodes, &bufs, &depth, err));
  fsh_ipc_splicer *s = fsh_calloc(1, sizeof *s);
  if (!s) return fsh_error_set(err, ENOMEM, "splice: out of memory");
  s->schema = fsh_schema_ref(schema);
  s->n_nodes = nodes;
  s->n_bufs = bufs;
  s->depth = depth;
  s->out_nodes = fsh_malloc(sizeof *s->out_nodes * (size_t)(nodes ? nodes : 1));
  s->out_ranges = fsh_malloc(sizeof *s->out_ranges * (size_t)(bufs ? bufs : 1));
  fsh_ipc_write_options o;
  fsh_ipc_write_options_init(&o);
  int rc = 0;
  if (!s->out_nodes || !s->out_ranges) rc = fsh_error_set(err, ENOMEM, "splice: out of memory");
  if (rc == 0) rc = fsh_ipc_encoder_new(schema, &o, &s->enc, err);
  if (rc != 0) {
    fsh_ipc_splicer_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

void fsh_ipc_splicer_clear(fsh_ipc_splicer *s) {
  if (!s) return;
  for (int32_t i = 0; i < s->n; i++) fsh_buffer_unref(s->msgs[i].buf);
  s->n = 0;
  s->rows = 0;
  s->body_bytes = 0;
}

void fsh_ipc_splicer_free(fsh_ipc_splicer *s) {
  if (!s) return;
  fsh_ipc_splicer_clear(s);
  fsh_free(s->msgs);
  fsh_free(s->node_i);
  fsh_free(s->buf_i);
  fsh_free(s->slices);
  fsh_free(s->seen);
  fsh_free(s->out_nodes);
  fsh_free(s->out_ranges);
  fsh_buffer_unref(s->out);
  fsh_ipc_encoder_free(s->enc);
  fsh_schema_unref(s->schema);
  fsh_free(s);
}

int32_t fsh_ipc_splicer_count(const fsh_ipc_splicer *s) { return s->n; }
int64_t fsh_ipc_splicer_rows(const fsh_ipc_splicer *s) { return s->rows; }
int64_t fsh_ipc_splicer_body_bytes(const fsh_ipc_splicer *s) { return s->body_bytes; }

void fsh_ipc_splicer_message(const fsh_ipc_splicer *s, int32_t i, const uint8_t **data,
                             int64_t *length, int64_t *rows) {
  *data = s->msgs[i].framed;
  *length = s->msgs[i].framed_length;
  *rows = s->msgs[i].length;
}

/* Room for one more message in every per-message array. */
static int grow(fsh_ipc_splicer *s) {
  if (s->n < s->cap) return 0;
  int32_t cap = s->cap ? s->cap * 2 : 64;
  splice_msg *m = fsh_realloc(s->msgs, sizeof *m * (size_t)cap);
  if (!m) return ENOMEM;
  s->msgs = m;
  int64_t *a = fsh_realloc(s->node_i, sizeof *a * (size_t)cap);
  if (!a) return ENOMEM;
  s->node_i = a;
  int64_t *b = fsh_realloc(s->buf_i, sizeof *b * (size_t)cap);
  if (!b) return ENOMEM;
  s->buf_i = b;
  slice *c = fsh_realloc(s->slices, sizeof *c * (size_t)cap * (size_t)s->depth);
  if (!c) return ENOMEM;
  s->slices = c;
  size_t per = (size_t)(s->n_bufs ? s->n_bufs : 1);
  struct seen_buf *v = fsh_realloc(s->seen, sizeof *v * (size_t)cap * per);
  if (!v) return ENOMEM;
  s->seen = v;
  s->cap = cap;
  return 0;
}

int fsh_ipc_splicer_add(fsh_ipc_splicer *s, fsh_buffer *buf, int64_t off, int64_t avail,
                        int64_t *framed, int64_t *rows, fsh_error *err) {
  *framed = 0;
  *rows = 0;
  if (!buf || off < 0 || avail < 0 || off > buf->size - avail)
    return fsh_error_set(err, EINVAL, "splice: message [%lld, +%lld) is not within the buffer",
                         (long long)off, (long long)avail);
  const uint8_t *p = buf->data + off;
  int64_t mlen = avail >= 8 ? (int64_t)(uint32_t)fsh_fb_load_i32(p + 4) : -1;
  if (mlen <= 0 || (uint32_t)fsh_fb_load_i32(p) != FSH_IPC_CONTINUATION || mlen > avail - 8)
    return fsh_error_set(err, EINVAL, "splice: bad framing (%lld bytes, metadata length %lld)",
                         (long long)avail, (long long)mlen);
  fsh_ipc_msg m;
  fsh_ipc_batch_header h;
  FSH_RETURN_NOT_OK(fsh_ipc_msg_parse(p + 8, mlen, &m, err));
  if (m.type != FSH_IPC_RECORD_BATCH)
    return fsh_error_set(err, EINVAL, "splice: a message of type %d, not a record batch",
                         (int)m.type);
  if (m.body_length > avail - 8 - mlen)
    return fsh_error_set(err, EINVAL, "splice: body is %lld bytes, the header says %lld",
                         (long long)(avail - 8 - mlen), (long long)m.body_length);
  FSH_RETURN_NOT_OK(fsh_ipc_batch_header_parse(&m.header, &h, err));
  if (h.compression != FSH_COMPRESSION_NONE)
    return fsh_error_set(err, ENOTSUP, "splice: a compressed record batch (%s)",
                         fsh_compression_name(h.compression));
  if (h.nodes.n < s->n_nodes || h.buffers.n < s->n_bufs)
    return fsh_error_set(err, EINVAL, "splice: a record batch of %lld field nodes and %lld "
                         "buffers; the schema needs %lld and %lld", (long long)h.nodes.n,
                         (long long)h.buffers.n, (long long)s->n_nodes, (long long)s->n_bufs);
  if (h.length > SPLICE_MAX_LENGTH || s->rows > SPLICE_MAX_LENGTH - h.length)
    return fsh_error_set(err, EINVAL, "splice: a record batch of %lld rows (%lld held)",
                         (long long)h.length, (long long)s->rows);
  if (grow(s) != 0) return fsh_error_set(err, ENOMEM, "splice: out of memory");
  s->msgs[s->n++] = (splice_msg){
      .buf = fsh_buffer_ref(buf),
      .nodes = h.nodes.n ? fsh_fb_vector_elem(&h.nodes, 0) : NULL,
      .bufs = h.buffers.n ? fsh_fb_vector_elem(&h.buffers, 0) : NULL,
      .n_nodes = h.nodes.n, .n_bufs = h.buffers.n,
      .body = p + 8 + mlen, .body_length = m.body_length,
      .framed = p, .framed_length = 8 + mlen + m.body_length, .length = h.length};
  s->rows += h.length;
  s->body_bytes += m.body_length;
  *framed = 8 + mlen + m.body_length;
  *rows = h.length;
  return 0;
}

/* ---- bits --------------------------------------------------------------- */

/* ORs bits src[off, off + n) into dst from bit at (dst's bits from `at` on
 * are zero). */
static void or_bits(uint8_t *dst, int64_t at, const uint8_t *src, int64_t off, int64_t n) {
  if (n <= 0) return;
  if ((at & 7) == 0 && (off & 7) == 0) {
    memcpy(dst + at / 8, src + off / 8, (size_t)(n / 8));
    int64_t r = n & 7;
    if (r) dst[(at + n) / 8] |= (uint8_t)(src[(off + n) / 8] & ((1u << r) - 1));
    return;
  }
  for (; n > 0 && (at & 7); at++, off++, n--)
    if (fsh_bit_get(src, off)) dst[at >> 3] |= (uint8_t)(1u << (at & 7));
  int64_t nb = n >> 3;
  const uint8_t *p = src + (off >> 3);
  uint8_t *d = dst + (at >> 3);
  int sh = (int)(off & 7);
  if (sh == 0)
    memcpy(d, p, (size_t)nb);
  else
    for (int64_t j = 0; j < nb; j++)
      d[j] = (uint8_t)(((unsigned)p[j] >> sh) | ((unsigned)p[j + 1] << (8 - sh)));
  at += nb * 8, off += nb * 8, n &= 7;
  for (; n > 0; at++, off++, n--)
    if (fsh_bit_get(src, off)) dst[at >> 3] |= (uint8_t)(1u << (at & 7));
}

/* Sets bits [at, at + n) of dst (zero there before). */
static void set_bits(uint8_t *dst, int64_t at, int64_t n) {
  for (; n > 0 && (at & 7); at++, n--) dst[at >> 3] |= (uint8_t)(1u << (at & 7));
  memset(dst + (at >> 3), 0xFF, (size_t)(n >> 3));
  at += n & ~(int64_t)7, n &= 7;
  for (; n > 0; at++, n--) dst[at >> 3] |= (uint8_t)(1u << (at & 7));
}

/* ---- the walk ----------------------------------------------------------- */

static int64_t load_offset(const uint8_t *p, int width) {
  return width == 4 ? (int64_t)fsh_fb_load_i32(p) : fsh_fb_load_i64(p);
}

/* An error naming the part and the field. */
static int serr(int32_t part, int32_t n, const char *path, fsh_error *err, int code,
                const char *fmt, ...) FSH_PRINTF(6, 7);
static int serr(int32_t part, int32_t n, const char *path, fsh_error *err, int code,
                const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return fsh_error_set(err, code, "splice: message %d of %d, field '%s': %s", part, n, path,
                       msg);
}

/* Part i's buffer k of its field, checked (measuring) to lie in its body
 * and to hold at least `min` bytes: *p its bytes. Writing, the checked
 * buffer is taken as it is. */
static int part_buffer(fsh_ipc_splicer *s, int32_t i, int64_t k, int64_t min, const char *what,
                       const char *path, const uint8_t **p, int64_t *size, fsh_error *err) {
  const splice_msg *m = &s->msgs[i];
  int64_t idx = s->buf_i[i] + k;
  struct seen_buf *seen = &s->seen[(size_t)i * (size_t)s->n_bufs + (size_t)idx];
  if (s->writing) {
    *p = seen->p;
    *size = seen->size;
    return 0;
  }
  const uint8_t *e = m->bufs + 16 * idx;
  int64_t off = fsh_fb_load_i64(e), len = fsh_fb_load_i64(e + 8);
  if (off < 0 || len < 0 || off > m->body_length - len)
    return serr(i, s->n, path, err, EINVAL, "buffer %lld [offset %lld, length %lld] exceeds "
                "body length %lld", (long long)idx, (long long)off, (long long)len,
                (long long)m->body_length);
  if (min < 0 || len < min)
    return serr(i, s->n, path, err, EINVAL, "buffer %lld (%s) holds %lld bytes, %lld needed",
                (long long)idx, what, (long long)len, (long long)min);
  *p = seen->p = m->body + off;
  *size = seen->size = len;
  return 0;
}

/* The next output buffer: measuring, it takes `bytes` (padded to 8);
 * writing, *dst is where its bytes go (its padding zeroed here, and the
 * whole of it when zero is set). */
static uint8_t *out_buffer(fsh_ipc_splicer *s, int64_t bytes, bool zero) {
  if (!s->writing) {
    s->out_ranges[s->ob++] = (fsh_ipc_range){s->body, bytes};
    if (bytes > SPLICE_MAX_LENGTH || s->body > SPLICE_MAX_LENGTH - fsh_round_up(bytes, 8))
      s->too_big = true;
    else
      s->body += fsh_round_up(bytes, FSH_IPC_ALIGN);
    return NULL;
  }
  fsh_ipc_range r = s->out_ranges[s->ob++];
  uint8_t *d = s->dst + r.offset;
  int64_t padded = fsh_round_up(r.length, FSH_IPC_ALIGN);
  if (zero) memset(d, 0, (size_t)padded);
  else if (padded > r.length) memset(d + r.length, 0, (size_t)(padded - r.length));
  return d;
}

static int walk(fsh_ipc_splicer *s, const fsh_field *f, int level, const char *parent,
                fsh_error *err);

/* The children of f at level + 1 over the slices the caller put there. */
static int walk_children(fsh_ipc_splicer *s, const fsh_field *f, int level, const char *path,
                         fsh_error *err) {
  for (int64_t c = 0; c < f->n_children; c++) {
    if (c > 0) { /* every child starts from the same slices (struct) */
      slice *a = s->slices + (size_t)(level + 1) * (size_t)s->cap;
      slice *base = s->slices + (size_t)level * (size_t)s->cap;
      for (int32_t i = 0; i < s->n; i++) a[i] = (slice){base[i].off, base[i].len, 0, 0};
    }
    FSH_RETURN_NOT_OK(walk(s, &f->children[c], level + 1, path, err));
  }
  return 0;
}

/* Offsets of width w (bytes) of every part at this level (each part's
 * buffer 1 of the field) and the values they span: measuring, checks them
 * and sizes the output; writing, writes them rebased. data (binary): the
 * parts' data buffers (buffer 2) are spliced too; else (lists) the
 * parts' child slices are set at level + 1. */
static int walk_offsets(fsh_ipc_splicer *s, int level, int w, bool data, const char *path,
                        fsh_error *err) {
  slice *sl = s->slices + (size_t)level * (size_t)s->cap;
  slice *child = data ? NULL : s->slices + (size_t)(level + 1) * (size_t)s->cap;
  int64_t total = 0;
  for (int32_t i = 0; i < s->n; i++) total += sl[i].len;
  uint8_t *d = out_buffer(s, (total + 1) * w, false);
  int64_t pos = 0, at = 0;
  if (d) memset(d, 0, (size_t)w); /* the first offset */
  for (int32_t i = 0; i < s->n; i++) {
    int64_t off = sl[i].off, len = sl[i].len, first = 0, last = 0;
    const uint8_t *p = NULL;
    int64_t size = 0;
    /* the decoder's check: n + 1 offsets for a non-empty node */
    int64_t need = sl[i].node_length == 0 ? 0 : (sl[i].node_length + 1) * w;
    FSH_RETURN_NOT_OK(part_buffer(s, i, 1, need, "offsets", path, &p, &size, err));
    if (len > 0) {
      first = load_offset(p + off * w, w);
      last = load_offset(p + (off + len) * w, w);
      if (first < 0 || last < first)
        return serr(i, s->n, path, err, EINVAL, "offsets not increasing (%lld .. %lld)",
                    (long long)first, (long long)last);
      if (last - first > SPLICE_MAX_LENGTH - pos)
        return serr(i, s->n, path, err, EINVAL, "offsets span %lld values, %lld before",
                    (long long)(last - first), (long long)pos);
    }
    if (d) {
      int64_t delta = pos - first;
      if (w == 4) {
        for (int64_t k = 1; k <= len; k++) {
          int32_t v = (int32_t)(fsh_fb_load_i32(p + (off + k) * 4) + delta);
          memcpy(d + (at + k) * 4, &v, 4);
        }
      } else {
        for (int64_t k = 1; k <= len; k++) {
          /* unsigned: offsets between the first and last are not checked
           * (fsh_batch_validate's job), and must not overflow here */
          uint64_t v = (uint64_t)fsh_fb_load_i64(p + (off + k) * 8) + (uint64_t)delta;
          memcpy(d + (at + k) * 8, &v, 8);
        }
      }
    }
    if (child) child[i] = (slice){first, last - first, 0, 0};
    at += len;
    pos += last - first;
    if (w == 4 && pos > INT32_MAX)
      return fsh_error_set(err, EOVERFLOW, "splice: field '%s': the spliced values (%lld) do "
                           "not fit 32-bit offsets", path, (long long)pos);
  }
  if (!data) return 0;
  /* binary: the data buffer (buffer 2 of each part) */
  uint8_t *dd = out_buffer(s, pos, false);
  int64_t dat = 0;
  for (int32_t i = 0; i < s->n; i++) {
    const uint8_t *p = NULL, *q = NULL;
    int64_t size = 0, qsize = 0, first = 0, last = 0;
    if (sl[i].len == 0) {
      FSH_RETURN_NOT_OK(part_buffer(s, i, 2, 0, "data", path, &q, &qsize, err));
      continue;
    }
    FSH_RETURN_NOT_OK(part_buffer(s, i, 1, 0, "offsets", path, &p, &size, err));
    first = load_offset(p + sl[i].off * w, w);
    last = load_offset(p + (sl[i].off + sl[i].len) * w, w);
    FSH_RETURN_NOT_OK(part_buffer(s, i, 2, last, "data", path, &q, &qsize, err));
    if (dd && last > first) memcpy(dd + dat, q + first, (size_t)(last - first));
    dat += last - first;
  }
  return 0;
}

/* Field f at `level` over the parts' slices there (off, len set by the
 * caller; the node fields are filled here). */
static int walk(fsh_ipc_splicer *s, const fsh_field *f, int level, const char *parent,
                fsh_error *err) {
  char nested[256];
  const char *path = f->name ? f->name : "(null)";
  if (parent && parent[0]) {
    snprintf(nested, sizeof nested, "%s.%s", parent, path);
    path = nested;
  }
  slice *sl = s->slices + (size_t)level * (size_t)s->cap;
  int32_t n = s->n;
  int64_t total = 0, nulls = 0;
  fsh_type_id t = f->type;
  /* the field node of every part, and the nulls of its slice */
  for (int32_t i = 0; i < n; i++) {
    const uint8_t *e = s->msgs[i].nodes + 16 * s->node_i[i]++;
    int64_t nl = fsh_fb_load_i64(e), nn = fsh_fb_load_i64(e + 8);
    sl[i].node_length = nl;
    sl[i].node_nulls = nn;
    if (s->writing) {
      total += sl[i].len;
      continue;
    }
    if (nl < 0 || nn < 0 || nn > nl || nl > SPLICE_MAX_LENGTH)
      return serr(i, n, path, err, EINVAL, "field node %lld has length %lld and null count %lld",
                  (long long)(s->node_i[i] - 1), (long long)nl, (long long)nn);
    if (sl[i].len < 0 || sl[i].len > SPLICE_MAX_LENGTH - total)
      return serr(i, n, path, err, EINVAL, "%lld slots spliced, %lld more", (long long)total,
                  (long long)sl[i].len);
    total += sl[i].len;
    if (sl[i].off < 0 || sl[i].len < 0 || sl[i].off > nl - sl[i].len)
      return serr(i, n, path, err, EINVAL, "slots [%lld, %lld) needed of %lld",
                  (long long)sl[i].off, (long long)(sl[i].off + sl[i].len), (long long)nl);
    if (level == 0 && nl != s->msgs[i].length)
      return serr(i, n, path, err, EINVAL, "column length %lld, the batch %lld", (long long)nl,
                  (long long)s->msgs[i].length);
    if (t == FSH_TYPE_NA) nulls += sl[i].len;
    else if (nn == 0 || sl[i].len == 0) continue;
    else if (sl[i].off == 0 && sl[i].len == nl) nulls += nn;
    else {
      const uint8_t *v;
      int64_t size;
      FSH_RETURN_NOT_OK(part_buffer(s, i, 0, fsh_bytes_for_bits(nl), "validity", path, &v,
                                    &size, err));
      nulls += sl[i].len - fsh_bitmap_count(v, sl[i].off, sl[i].len);
    }
  }
  if (s->writing) {
    nulls = s->out_nodes[s->on].null_count;
  } else {
    s->out_nodes[s->on] = (fsh_ipc_node){total, nulls};
  }
  s->on++;
  if (t == FSH_TYPE_NA) return 0;
  /* validity: empty without nulls */
  uint8_t *d = out_buffer(s, nulls > 0 ? fsh_bytes_for_bits(total) : 0, true);
  int64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    const uint8_t *v = NULL;
    int64_t size;
    bool has = sl[i].node_nulls > 0;
    FSH_RETURN_NOT_OK(part_buffer(s, i, 0, has ? fsh_bytes_for_bits(sl[i].node_length) : 0,
                                  "validity", path, &v, &size, err));
    if (d && nulls > 0) {
      if (has) or_bits(d, at, v, sl[i].off, sl[i].len);
      else set_bits(d, at, sl[i].len);
    }
    at += sl[i].len;
  }
  int rc = 0;
  switch (t) {
    case FSH_TYPE_BOOL: {
      d = out_buffer(s, fsh_bytes_for_bits(total), true);
      at = 0;
      for (int32_t i = 0; rc == 0 && i < n; i++) {
        const uint8_t *v = NULL;
        int64_t size;
        rc = part_buffer(s, i, 1, fsh_bytes_for_bits(sl[i].node_length), "values", path, &v,
                         &size, err);
        if (rc == 0 && d) or_bits(d, at, v, sl[i].off, sl[i].len);
        at += sl[i].len;
      }
      break;
    }
    case FSH_TYPE_BINARY: case FSH_TYPE_STRING: case FSH_TYPE_LARGE_BINARY:
    case FSH_TYPE_LARGE_STRING:
      rc = walk_offsets(s, level, t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING ? 4 : 8, true,
                        path, err);
      break;
    case FSH_TYPE_LIST: case FSH_TYPE_LARGE_LIST: case FSH_TYPE_MAP:
      rc = walk_offsets(s, level, t == FSH_TYPE_LARGE_LIST ? 8 : 4, false, path, err);
      if (rc == 0) {
        for (int32_t i = 0; i < n; i++) s->buf_i[i] += 2;
        return walk(s, &f->children[0], level + 1, path, err);
      }
      break;
    case FSH_TYPE_FIXED_SIZE_LIST: {
      slice *c = s->slices + (size_t)(level + 1) * (size_t)s->cap;
      int64_t ls = f->list_size;
      for (int32_t i = 0; i < n; i++) {
        int64_t a, b;
        if (__builtin_mul_overflow(sl[i].off, ls, &a) || __builtin_mul_overflow(sl[i].len, ls, &b))
          return serr(i, n, path, err, EINVAL, "fixed-size list length overflows");
        c[i] = (slice){a, b, 0, 0};
        s->buf_i[i] += 1;
      }
      return walk(s, &f->children[0], level + 1, path, err);
    }
    case FSH_TYPE_STRUCT: {
      /* (a struct without children has no level below it) */
      slice *c = f->n_children ? s->slices + (size_t)(level + 1) * (size_t)s->cap : NULL;
      for (int32_t i = 0; i < n; i++) {
        if (c) c[i] = (slice){sl[i].off, sl[i].len, 0, 0};
        s->buf_i[i] += 1;
      }
      return walk_children(s, f, level, path, err);
    }
    default: { /* fixed width */
      int64_t w = fsh_type_bit_width(f) / 8;
      d = out_buffer(s, total * w, false);
      at = 0;
      for (int32_t i = 0; rc == 0 && i < n; i++) {
        const uint8_t *v = NULL;
        int64_t size, need;
        if (__builtin_mul_overflow(sl[i].node_length, w, &need)) need = -1;
        rc = part_buffer(s, i, 1, need, "values", path, &v, &size, err);
        if (rc == 0 && d && sl[i].len > 0)
          memcpy(d + at * w, v + sl[i].off * w, (size_t)(sl[i].len * w));
        at += sl[i].len;
      }
      break;
    }
  }
  int64_t used = t == FSH_TYPE_BINARY || t == FSH_TYPE_STRING || t == FSH_TYPE_LARGE_BINARY ||
                         t == FSH_TYPE_LARGE_STRING ? 3 : 2;
  for (int32_t i = 0; i < n; i++) s->buf_i[i] += used;
  return rc;
}

/* One pass over the held messages: measuring (sizes the output's nodes
 * and buffers, checks every part) or writing (into s->dst). */
static int pass(fsh_ipc_splicer *s, bool writing, fsh_error *err) {
  s->writing = writing;
  s->too_big = false;
  s->on = s->ob = s->body = 0;
  for (int32_t i = 0; i < s->n; i++) s->node_i[i] = s->buf_i[i] = 0;
  for (int64_t c = 0; c < s->schema->n_fields; c++) {
    for (int32_t i = 0; i < s->n; i++) s->slices[i] = (slice){0, s->msgs[i].length, 0, 0};
    FSH_RETURN_NOT_OK(walk(s, &s->schema->fields[c], 0, "", err));
  }
  return 0;
}

int fsh_ipc_splicer_finish(fsh_ipc_splicer *s, const uint8_t **out, int64_t *length,
                           int64_t *rows, fsh_error *err) {
  *out = NULL;
  *length = 0;
  *rows = 0;
  if (s->n == 0) return fsh_error_set(err, EINVAL, "splice: no message to splice");
  FSH_RETURN_NOT_OK(pass(s, false, err));
  if (s->too_big)
    return fsh_error_set(err, EINVAL, "splice: %d messages of %lld rows make a body over %lld "
                         "bytes", s->n, (long long)s->rows, (long long)SPLICE_MAX_LENGTH);
  const uint8_t *md = NULL;
  int64_t mlen = 0;
  FSH_RETURN_NOT_OK(fsh_ipc_encoder_batch_metadata(s->enc, s->rows, s->out_nodes, s->on,
                                                   s->out_ranges, s->ob, s->body, &md, &mlen,
                                                   err));
  int64_t mpad = fsh_round_up(mlen, FSH_IPC_ALIGN) - mlen;
  int64_t total = 8 + mlen + mpad + s->body;
  if (!s->out || s->out->capacity < total) {
    fsh_buffer_unref(s->out);
    s->out = fsh_buffer_new(total + total / 4, false);
    if (!s->out) return fsh_error_set(err, ENOMEM, "splice: out of memory for %lld bytes",
                                      (long long)total);
  }
  uint8_t *p = s->out->data;
  uint32_t cont = FSH_IPC_CONTINUATION, ml = (uint32_t)(mlen + mpad);
  fsh_store_le32(p, cont);
  fsh_store_le32(p + 4, ml);
  memcpy(p + 8, md, (size_t)mlen);
  memset(p + 8 + mlen, 0, (size_t)mpad);
  s->dst = p + 8 + mlen + mpad;
  int rc = pass(s, true, err);
  s->dst = NULL;
  if (rc != 0) return rc;
  *out = p;
  *length = total;
  *rows = s->rows;
  fsh_ipc_splicer_clear(s);
  return 0;
}
