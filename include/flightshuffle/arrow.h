/* arrow.h -- the Arrow columnar core: errors, allocation, refcounted buffers,
 * fields and schemas, arrays and record batches.
 *
 * The in-memory model mirrors the Arrow C Data Interface on purpose:
 *  - a field (fsh_field) is a tree like struct ArrowSchema: name, type id with
 *    its parameters, nullability, metadata, children, and, when the field is
 *    dictionary-encoded, its type is the *index* type and `dictionary` holds
 *    the value type;
 *  - an array (fsh_array) is a tree like struct ArrowArray: length, null
 *    count, offset, buffers in the C Data Interface layout for its type,
 *    children, and a dictionary array. Arrays carry no type: a field always
 *    travels with them (a record batch holds its schema).
 * Buffers and arrays are refcounted and immutable once built, so slices and
 * decoded IPC batches share memory without copies.
 *
 * Errors: every fallible call returns 0 or an errno-style code (EINVAL for
 * bad input, ENOMEM, EIO, ENOTSUP, ...) and, when `err` is not NULL, writes
 * a message a user can act on. On error, outputs are left untouched or
 * released: never half-built. */
#ifndef FLIGHTSHUFFLE_ARROW_H
#define FLIGHTSHUFFLE_ARROW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FSH_NODISCARD __attribute__((warn_unused_result))
#define FSH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FSH_NODISCARD
#define FSH_PRINTF(a, b)
#endif

/* ---- errors ------------------------------------------------------------ */

typedef struct fsh_error {
  char message[1024];
} fsh_error;

/* Sets err->message (if err != NULL) and returns code. */
int fsh_error_set(fsh_error *err, int code, const char *fmt, ...) FSH_PRINTF(3, 4);
/* Prepends context ("message 3: ") to an existing message; returns code. */
int fsh_error_prefix(fsh_error *err, int code, const char *fmt, ...) FSH_PRINTF(3, 4);

#define FSH_RETURN_NOT_OK(expr)          \
  do {                                   \
    int fsh_rc_ = (expr);                \
    if (fsh_rc_ != 0) return fsh_rc_;    \
  } while (0)

/* ---- allocation -------------------------------------------------------- */

/* Every allocation of the library goes through these hooks. `alloc` must
 * return memory aligned to `align` (a power of two, >= sizeof(void*)).
 * `size` in free is the size given at allocation (or 0 if unknown). */
typedef struct fsh_allocator {
  void *(*alloc)(void *ctx, size_t size, size_t align);
  void *(*realloc)(void *ctx, void *ptr, size_t old_size, size_t new_size);
  void (*free)(void *ctx, void *ptr, size_t size);
  void *ctx;
} fsh_allocator;

/* Installs `a` (NULL restores the default). Not thread-safe: call at start. */
void fsh_allocator_set(const fsh_allocator *a);
const fsh_allocator *fsh_allocator_get(void);

/* Test hook: the Nth allocation from now (1-based) fails, and every one after
 * it too if `persistent`; n == 0 disables. fsh_alloc_count: allocations
 * counted so far. Counting starts at the first call of either (the count is
 * for differences: before/after an operation); until then allocations are
 * not counted, so that a service pays nothing for the hook. */
void fsh_alloc_fail_after(int64_t n, bool persistent);
int64_t fsh_alloc_count(void);

void *fsh_malloc(size_t size);
void *fsh_calloc(size_t n, size_t size);
void *fsh_realloc(void *ptr, size_t size);
void fsh_free(void *ptr);
char *fsh_strdup(const char *s);
char *fsh_strndup(const char *s, size_t n);
/* 64-byte aligned; free with fsh_aligned_free, passing the size allocated. */
void *fsh_aligned_alloc(size_t size);
void fsh_aligned_free(void *ptr, size_t size);

/* ---- buffers ----------------------------------------------------------- */

/* A refcounted, immutable-once-shared byte range. Either it owns 64-byte
 * aligned memory, or it is a view into a parent buffer (kept alive by a
 * reference), or it wraps foreign memory released by `release`. */
typedef struct fsh_buffer {
  atomic_long refcount;
  uint8_t *data;
  int64_t size;     /* bytes in use */
  int64_t capacity; /* bytes allocated (owned buffers) */
  struct fsh_buffer *parent;
  void (*release)(void *ctx); /* foreign memory */
  void *release_ctx;
  struct fsh_pack *pack; /* non-NULL: the header lives in a pack (below) */
} fsh_buffer;

/* New owned buffer of `size` bytes (capacity rounded up to 64, padding
 * zeroed); contents uninitialised unless zeroed. NULL on ENOMEM. */
FSH_NODISCARD fsh_buffer *fsh_buffer_new(int64_t size, bool zeroed);
/* Grows (or shrinks) an owned buffer that nobody else references yet. */
FSH_NODISCARD int fsh_buffer_resize(fsh_buffer *buf, int64_t size, fsh_error *err);
/* A view of parent[offset, offset+size); takes a reference on parent. */
FSH_NODISCARD fsh_buffer *fsh_buffer_slice(fsh_buffer *parent, int64_t offset, int64_t size);
/* Wraps foreign memory; release(ctx) is called when the last ref drops. */
FSH_NODISCARD fsh_buffer *fsh_buffer_wrap(const void *data, int64_t size, void (*release)(void *ctx),
                                          void *ctx);
/* Copy of `size` bytes into a new owned buffer. */
FSH_NODISCARD fsh_buffer *fsh_buffer_copy(const void *data, int64_t size);
fsh_buffer *fsh_buffer_ref(fsh_buffer *buf);
void fsh_buffer_unref(fsh_buffer *buf); /* NULL accepted */

/* ---- types and fields -------------------------------------------------- */

typedef enum fsh_type_id {
  FSH_TYPE_NA = 0, /* the Null type */
  FSH_TYPE_BOOL,
  FSH_TYPE_INT8,
  FSH_TYPE_INT16,
  FSH_TYPE_INT32,
  FSH_TYPE_INT64,
  FSH_TYPE_UINT8,
  FSH_TYPE_UINT16,
  FSH_TYPE_UINT32,
  FSH_TYPE_UINT64,
  FSH_TYPE_FLOAT16,
  FSH_TYPE_FLOAT32,
  FSH_TYPE_FLOAT64,
  FSH_TYPE_DECIMAL128, /* precision, scale */
  FSH_TYPE_DECIMAL256, /* precision, scale */
  FSH_TYPE_DATE32,     /* days */
  FSH_TYPE_DATE64,     /* milliseconds */
  FSH_TYPE_TIME32,     /* unit: SECOND or MILLI */
  FSH_TYPE_TIME64,     /* unit: MICRO or NANO */
  FSH_TYPE_TIMESTAMP,  /* unit, timezone (NULL = naive) */
  FSH_TYPE_DURATION,   /* unit */
  FSH_TYPE_INTERVAL_MONTHS,         /* int32 months */
  FSH_TYPE_INTERVAL_DAY_TIME,       /* int32 days, int32 ms */
  FSH_TYPE_INTERVAL_MONTH_DAY_NANO, /* int32, int32, int64 */
  FSH_TYPE_BINARY,
  FSH_TYPE_STRING,
  FSH_TYPE_LARGE_BINARY,
  FSH_TYPE_LARGE_STRING,
  FSH_TYPE_FIXED_SIZE_BINARY, /* byte_width */
  FSH_TYPE_LIST,              /* one child */
  FSH_TYPE_LARGE_LIST,        /* one child */
  FSH_TYPE_FIXED_SIZE_LIST,   /* list_size, one child */
  FSH_TYPE_STRUCT,
  FSH_TYPE_MAP,          /* keys_sorted; one child: struct<key, value> */
  FSH_TYPE_SPARSE_UNION, /* type_codes[n_children] */
  FSH_TYPE_DENSE_UNION,  /* type_codes[n_children] */
  FSH_TYPE_COUNT_
} fsh_type_id;

typedef enum fsh_time_unit {
  FSH_SECOND = 0,
  FSH_MILLI = 1,
  FSH_MICRO = 2,
  FSH_NANO = 3
} fsh_time_unit;

typedef struct fsh_kv {
  char *key;
  char *value;
  int64_t value_len; /* metadata values are bytes; value is NUL-terminated too */
} fsh_kv;

typedef struct fsh_metadata {
  int64_t n;
  fsh_kv *items;
} fsh_metadata;

typedef struct fsh_dictionary fsh_dictionary;

typedef struct fsh_field {
  char *name; /* never NULL; may be "" */
  fsh_type_id type;
  bool nullable;
  /* type parameters (zero when unused) */
  int32_t byte_width;  /* FIXED_SIZE_BINARY */
  int32_t list_size;   /* FIXED_SIZE_LIST */
  int32_t precision;   /* DECIMAL* */
  int32_t scale;       /* DECIMAL* */
  fsh_time_unit unit;  /* TIME32/64, TIMESTAMP, DURATION */
  char *timezone;      /* TIMESTAMP; NULL when naive */
  bool keys_sorted;    /* MAP */
  int32_t *type_codes; /* unions: one per child */
  fsh_metadata metadata;
  int64_t n_children;
  struct fsh_field *children;
  /* Non-NULL when dictionary-encoded: `type` is then the index type. */
  fsh_dictionary *dictionary;
} fsh_field;

struct fsh_dictionary {
  int64_t id;
  bool ordered;
  fsh_field value; /* the value type; its name is unused */
};

/* A schema: top-level fields and metadata. Refcounted, immutable once
 * shared (batches of one stream share one schema). */
typedef struct fsh_schema {
  atomic_long refcount;
  int64_t n_fields;
  fsh_field *fields;
  fsh_metadata metadata;
} fsh_schema;

/* Field lifecycle: init zeroes and sets name (copied) and type. */
FSH_NODISCARD int fsh_field_init(fsh_field *f, const char *name, fsh_type_id type, bool nullable);
void fsh_field_reset(fsh_field *f);                    /* frees everything it owns */
FSH_NODISCARD int fsh_field_copy(fsh_field *dst, const fsh_field *src); /* deep copy */
/* Allocates n zeroed children (replacing none: call once). */
FSH_NODISCARD int fsh_field_alloc_children(fsh_field *f, int64_t n);
FSH_NODISCARD int fsh_field_set_timezone(fsh_field *f, const char *tz);
/* Makes the field dictionary-encoded: f->type becomes index_type and the
 * dictionary value type is set to value_type (params filled by caller). */
FSH_NODISCARD int fsh_field_set_dictionary(fsh_field *f, int64_t id, fsh_type_id index_type,
                                           bool ordered);
FSH_NODISCARD int fsh_metadata_add(fsh_metadata *m, const char *key, const char *value,
                                   int64_t value_len);
void fsh_metadata_reset(fsh_metadata *m);
FSH_NODISCARD int fsh_metadata_copy(fsh_metadata *dst, const fsh_metadata *src);
/* Returns the value for key or NULL. */
const fsh_kv *fsh_metadata_find(const fsh_metadata *m, const char *key);

FSH_NODISCARD fsh_schema *fsh_schema_new(int64_t n_fields); /* zeroed fields */
fsh_schema *fsh_schema_ref(fsh_schema *s);
void fsh_schema_unref(fsh_schema *s); /* NULL accepted */

/* Names and facts about types. */
const char *fsh_type_name(fsh_type_id t); /* "int32", "timestamp", ... */
bool fsh_type_is_integer(fsh_type_id t);
bool fsh_type_is_signed_integer(fsh_type_id t);
bool fsh_type_is_union(fsh_type_id t);
/* Fixed width in bits of one value (1 for bool, 0 for variable/nested);
 * divided by 8 it is the byte width of fixed-width types (0 for bool). */
int64_t fsh_type_bit_width(const fsh_field *f);
/* Number of buffers in the C Data Interface layout (validity included). */
int fsh_type_n_buffers(fsh_type_id t);
/* Writes a one-line description ("timestamp[ms, tz=UTC]") into out. */
void fsh_field_type_to_string(const fsh_field *f, char *out, size_t out_size);

/* ---- arrays ------------------------------------------------------------ */

#define FSH_MAX_BUFFERS 3

/* Buffers follow the C Data Interface layout for the field's type:
 *   null: none; bool & fixed width: [validity, values];
 *   (large) binary/string: [validity, offsets, data]; (large) list:
 *   [validity, offsets]; fixed-size list, struct, map's list part: [validity];
 *   sparse union: [type_ids]; dense union: [type_ids, offsets];
 *   dictionary-encoded: the index type's layout, plus `dictionary`.
 * A NULL validity buffer means no nulls (null_count must then be 0).
 * Unions have no validity buffer: their null_count is always 0 (never -1),
 * and fsh_array_is_valid does not apply to them (ask the child).
 * All values are interpreted from `offset`. */
typedef struct fsh_array {
  atomic_long refcount;
  int64_t length;
  int64_t null_count; /* -1 = not computed yet */
  int64_t offset;
  int32_t n_buffers;
  fsh_buffer *buffers[FSH_MAX_BUFFERS];
  int64_t n_children;
  struct fsh_array **children;
  struct fsh_array *dictionary;
  struct fsh_pack *pack; /* non-NULL: node and children slots live in a pack */
} fsh_array;

/* New empty array with n_buffers NULL buffers and n_children NULL children
 * slots; the caller fills them (transferring references) before sharing. */
FSH_NODISCARD fsh_array *fsh_array_new(int32_t n_buffers, int64_t n_children);
fsh_array *fsh_array_ref(fsh_array *a);
void fsh_array_unref(fsh_array *a); /* NULL accepted */
/* Zero-copy slice: shares buffers and children, adjusts offset/length. */
FSH_NODISCARD fsh_array *fsh_array_slice(fsh_array *a, int64_t offset, int64_t length);
/* Null count, computed (and cached) from the validity bitmap if -1.
 * For unions (no validity buffer) it returns 0. */
int64_t fsh_array_null_count(fsh_array *a);
/* Whether slot i (relative to a->offset) is valid per the validity bitmap. */
bool fsh_array_is_valid(const fsh_array *a, int64_t i);

/* Structural and value validation of an array against its field: buffer
 * sizes, offsets monotonic and in bounds, child lengths, union type ids and
 * offsets, dictionary indices in range, and with check_utf8 the UTF-8 of
 * string values. `path` names the field in messages ("a.b[0]"). */
FSH_NODISCARD int fsh_array_validate(const fsh_field *f, const fsh_array *a, bool check_utf8,
                                     fsh_error *err);

/* Logical equality of two arrays of one field's type (offsets, slicing and
 * buffer padding ignored; null slots' contents ignored). On difference
 * returns false and, if diff != NULL, names the first difference. */
bool fsh_array_equals(const fsh_field *f, const fsh_array *a, const fsh_array *b, fsh_error *diff);
/* Field equality: names, types, parameters, nullability, metadata and
 * dictionary encoding (ids excepted unless check_dict_ids). */
bool fsh_field_equals(const fsh_field *a, const fsh_field *b, bool check_dict_ids, fsh_error *diff);
/* Type equality only: the top-level name, nullability and metadata are
 * ignored; parameters, children (names included) and dictionary encoding
 * (ids aside) must match. */
bool fsh_field_type_equals(const fsh_field *a, const fsh_field *b, fsh_error *diff);
bool fsh_schema_equals(const fsh_schema *a, const fsh_schema *b, bool check_metadata,
                       fsh_error *diff);

/* ---- record batches ---------------------------------------------------- */

typedef struct fsh_batch {
  atomic_long refcount;
  fsh_schema *schema; /* one reference held */
  int64_t length;
  int64_t n_columns; /* == schema->n_fields */
  fsh_array **columns;
  struct fsh_pack *pack; /* non-NULL: node and column slots live in a pack */
} fsh_batch;

/* New batch referencing schema; columns NULL, to be filled by the caller. */
FSH_NODISCARD fsh_batch *fsh_batch_new(fsh_schema *schema, int64_t length);
fsh_batch *fsh_batch_ref(fsh_batch *b);
void fsh_batch_unref(fsh_batch *b); /* NULL accepted */
FSH_NODISCARD fsh_batch *fsh_batch_slice(fsh_batch *b, int64_t offset, int64_t length);
FSH_NODISCARD int fsh_batch_validate(const fsh_batch *b, bool check_utf8, fsh_error *err);
bool fsh_batch_equals(const fsh_batch *a, const fsh_batch *b, fsh_error *diff);

/* ---- packs: objects built together in one allocation ------------------- */

/* A pack is one allocation that several refcounted objects built together
 * are carved from -- a decoded batch, its arrays and their buffer headers --
 * instead of an allocation each. Nothing changes for their users: every
 * object keeps its own refcount, and references to one of them (a column,
 * a buffer) may outlive the others; the pack's memory is freed when the
 * last object carved from it (and its builder's reference) is gone.
 *
 * A pack may hold one reference on a root buffer (the message body a
 * decoded batch slices): views of it carved from the pack borrow that
 * reference instead of taking one each.
 *
 * Carving is for the builder alone, before any object of the pack is
 * shared with another thread. The *_in calls fall back to a plain
 * allocation when p is NULL or full, so a pack sized too small only costs
 * allocations. */
typedef struct fsh_pack fsh_pack;

/* New pack of `bytes` bytes of room (see fsh_pack_*_bytes), holding a
 * reference on root (NULL: none). One reference for the builder: drop it
 * with fsh_pack_unref once done carving. NULL on ENOMEM. */
FSH_NODISCARD fsh_pack *fsh_pack_new(size_t bytes, fsh_buffer *root);
void fsh_pack_unref(fsh_pack *p); /* NULL accepted */
/* Room one object takes in a pack. */
size_t fsh_pack_batch_bytes(int64_t n_columns);
size_t fsh_pack_array_bytes(int64_t n_children);
size_t fsh_pack_buffer_bytes(void);
/* fsh_batch_new, fsh_array_new and fsh_buffer_slice carving from p. */
FSH_NODISCARD fsh_batch *fsh_batch_new_in(fsh_pack *p, fsh_schema *schema, int64_t length);
FSH_NODISCARD fsh_array *fsh_array_new_in(fsh_pack *p, int32_t n_buffers, int64_t n_children);
FSH_NODISCARD fsh_buffer *fsh_buffer_slice_in(fsh_pack *p, fsh_buffer *parent, int64_t offset,
                                              int64_t size);

/* ---- the Arrow C Data Interface ---------------------------------------- */

/* The ABI structs, exactly as the Arrow specification defines them. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4
struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};
#endif
#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
  int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
  const char *(*get_last_error)(struct ArrowArrayStream *);
  void (*release)(struct ArrowArrayStream *);
  void *private_data;
};
#endif

/* Export: the C structs reference our buffers (refcounts taken) and release
 * them in their release callbacks; no data is copied. A schema exports as a
 * struct-typed ArrowSchema, a batch as a struct-typed ArrowArray. */
FSH_NODISCARD int fsh_field_export(const fsh_field *f, struct ArrowSchema *out, fsh_error *err);
FSH_NODISCARD int fsh_schema_export(const fsh_schema *s, struct ArrowSchema *out, fsh_error *err);
FSH_NODISCARD int fsh_array_export(fsh_array *a, struct ArrowArray *out, fsh_error *err);
FSH_NODISCARD int fsh_batch_export(fsh_batch *b, struct ArrowArray *out, fsh_error *err);

/* Import: takes ownership of `in` (moves it: in->release becomes NULL). The
 * imported buffers wrap the foreign memory and call the producer's release
 * once every buffer is gone; no data is copied. */
FSH_NODISCARD int fsh_field_import(struct ArrowSchema *in, fsh_field *out, fsh_error *err);
FSH_NODISCARD int fsh_schema_import(struct ArrowSchema *in, fsh_schema **out, fsh_error *err);
FSH_NODISCARD int fsh_array_import(struct ArrowArray *in, const fsh_field *f, fsh_array **out,
                                   fsh_error *err);
FSH_NODISCARD int fsh_batch_import(struct ArrowArray *in, fsh_schema *schema, fsh_batch **out,
                                   fsh_error *err);

/* A stream of batches as a pull interface. get_next sets *out to NULL at the
 * end. The stream owns its state; release frees it. */
typedef struct fsh_batch_stream {
  int (*get_next)(struct fsh_batch_stream *s, fsh_batch **out, fsh_error *err);
  void (*release)(struct fsh_batch_stream *s);
  fsh_schema *schema; /* one reference held by the stream */
  void *private_data;
} fsh_batch_stream;

/* Exports a stream (ownership moves into `out`). */
FSH_NODISCARD int fsh_stream_export(fsh_batch_stream *s, struct ArrowArrayStream *out,
                                    fsh_error *err);
/* Imports a C stream (ownership moves into `out`). */
FSH_NODISCARD int fsh_stream_import(struct ArrowArrayStream *in, fsh_batch_stream *out,
                                    fsh_error *err);
/* A stream over n batches held in memory (references taken on the schema
 * and on each batch; the batches must have the schema's columns). */
FSH_NODISCARD int fsh_batch_stream_from_batches(fsh_schema *schema, fsh_batch *const *batches,
                                                int64_t n, fsh_batch_stream *out, fsh_error *err);

/* ---- small helpers ----------------------------------------------------- */

static inline bool fsh_bit_get(const uint8_t *bits, int64_t i) {
  return (bits[i >> 3] >> (i & 7)) & 1;
}
static inline void fsh_bit_set(uint8_t *bits, int64_t i, bool v) {
  if (v)
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
  else
    bits[i >> 3] &= (uint8_t)~(1u << (i & 7));
}
static inline int64_t fsh_bytes_for_bits(int64_t bits) { return (bits + 7) / 8; }
static inline int64_t fsh_round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
/* Counts set bits in bits[offset, offset+length). */
int64_t fsh_bitmap_count(const uint8_t *bits, int64_t offset, int64_t length);

#ifdef __cplusplus
}
#endif
#endif
