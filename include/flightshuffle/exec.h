/* exec.h -- query execution: the relational operators that joins and
 * group-bys need (expressions, filter, project, hash aggregate, hash join),
 * their bounded-memory forms (spill files, external sort, spilling
 * aggregate and join), and plans: operators as pull-based batch streams,
 * cut into stages at every exchange, run in process through a shuffle
 * backend (the driver's stages will run their fragments on workers).
 *
 * Operators work on record batches (arrow.h) and call the compute kernels
 * (kernels.h: hashing, take, filter, concat, sort, row comparison); no
 * operator knows which shuffle backend (shuffle.h) moves its input.
 *
 * Errors follow arrow.h: 0 or an errno-style code plus an fsh_error whose
 * message names the operator, expression or column at fault; on error
 * outputs are left NULL and nothing leaks. */
#ifndef FLIGHTSHUFFLE_EXEC_H
#define FLIGHTSHUFFLE_EXEC_H

#include <flightshuffle/kernels.h>
#include <flightshuffle/shuffle.h>
#include <flightshuffle/sched.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- expressions, filter, project --------------------------------------
 *
 * A small vectorized expression library. An expression is a tree of nodes
 * (fsh_expr): column references (by name), typed literals, and operator
 * calls. Build it (C constructors or JSON), bind it to a schema
 * (fsh_expr_bind: names resolve to column indices, types are checked, LIKE
 * patterns compiled), then evaluate it over whole batches: every operator
 * runs one tight loop per call over values and validity bitmaps; nothing is
 * allocated per row.
 *
 * Types (the value type of dictionary-encoded columns counts):
 *   numeric  int8..int64, uint8..uint64, float32, float64
 *   bool, utf8 / large_utf8 / binary / large_binary ("strings"),
 *   date32, date64, timestamp (any unit, any timezone)
 *   null     the type of an untyped null literal; it fits every operand.
 * Columns of other types may be referenced (and projected, or tested with
 * IS NULL) but not used as operator operands.
 *
 * Operators (SQL semantics; "null" propagates unless said otherwise):
 *   + - * / %    numeric operands. Integers compute in int64 (uint64 values
 *                above INT64_MAX are an overflow), a float operand makes it
 *                float64 (IEEE: x/0 is +-inf or NaN, % is fmod). Result:
 *                int64 or float64. Integer overflow, division or modulo by
 *                zero (and INT64_MIN / -1) are EOVERFLOW / EDOM errors by
 *                default that name the expression and the row; a node
 *                marked fsh_expr_null_on_error turns such rows into nulls
 *                instead. % takes the sign of the dividend (C, SQL). Values
 *                under null slots never raise errors (nor constants over a
 *                batch of no rows).
 *   = != < <= > >=   numbers with numeric promotion (integers as int64, with
 *                a float as float64; NaN is unequal to everything, IEEE),
 *                strings bytewise (memcmp, shorter prefix first), bool
 *                (false < true), date32 with date32, date64 with date64,
 *                timestamps of the same unit. Result bool.
 *   and or not   bool operands, SQL three-valued logic (false AND null =
 *                false, true OR null = true, NOT null = null).
 *   is_null, is_not_null   any operand; never null.
 *   in           args[0] IN (args[1..]): the list holds literals comparable
 *                with args[0]; true if equal to one; else null if the value
 *                or a list element is null; else false.
 *   between      args[0] BETWEEN args[1] AND args[2]: x >= lo AND x <= hi
 *                with three-valued AND.
 *   like         args[0] LIKE args[1]: a string operand and a utf8 literal
 *                pattern. '%' matches any run of characters (also none),
 *                '_' one UTF-8 character, '\' makes the next character literal
 *                ("\%", "\_", "\\"); a trailing lone '\' is EINVAL at bind.
 *                Matching is byte-exact (no case folding). Patterns of the
 *                shapes "abc", "abc%", "%abc", "%abc%" run as equality,
 *                prefix, suffix and substring searches; others through a
 *                general matcher (greedy with backtracking to the last %).
 *   cast         args[0] to a numeric or bool type (fsh_expr_cast): between
 *                numeric types and bool; float to integer truncates toward
 *                zero; a value out of the target's range (or NaN) is an
 *                EOVERFLOW error, or null when marked null_on_error (uint64
 *                targets hold 0..INT64_MAX); float32 targets round; to
 *                bool: x != 0; from bool: 0 or 1.
 *
 * JSON form (fsh_expr_from_json / fsh_expr_to_json), one object per node:
 *   {"col": NAME}
 *   {"lit": VALUE [, "type": T [, "unit": "s"|"ms"|"us"|"ns"]]}
 *       VALUE null, true/false, an integer, a real or a string; without
 *       "type" they are null, bool, int64, float64, utf8. T is one of bool,
 *       int8..int64, uint8..uint64, float32, float64, utf8, date32 (integer
 *       days or "YYYY-MM-DD"), date64 (integer ms), timestamp (integer in
 *       "unit", default "us"); a null VALUE with a type is a typed null.
 *   {"op": OP, "args": [EXPR, ...] [, "on_error": "error"|"null"]
 *              [, "type": T]}     ("type" only, and required, for cast)
 *       OP: "+", "-", "*", "/", "%", "=", "!=", "<", "<=", ">", ">=",
 *           "and", "or", "not", "is_null", "is_not_null", "in", "between",
 *           "like", "cast". and/or take 2 or more args (folded left).
 * Parse errors name the JSON path of the node and the operator:
 *   "expression JSON $.args[1].args[0]: operator '>': expected 2 args, got 3".
 * Printing writes the same grammar (a typed literal keeps its "type").
 *
 * A bound expression is only read while evaluating: threads may evaluate
 * one concurrently (binding again must not overlap them). IN lists are
 * scanned linearly per row (meant for short lists). LIKE, IN and
 * comparisons with a string literal on a dictionary-encoded column run once
 * per dictionary entry when the batch has more rows than entries.
 *
 * Errors: binding fails with EINVAL naming the expression (in an SQL-like
 * text form) and the column: "bind of (name + 1): type mismatch
 * (arithmetic needs numbers): column 'name' is utf8, 1 is int64",
 * "unknown column 'x' (the schema has 'a', 'b')". Evaluation of a bound expression fails
 * only on arithmetic/cast errors (EOVERFLOW, EDOM), ENOMEM, or a batch
 * whose schema does not match the one bound (EINVAL). */

typedef enum fsh_expr_op {
  FSH_EXPR_COLUMN = 0,
  FSH_EXPR_LITERAL,
  FSH_EXPR_ADD,
  FSH_EXPR_SUB,
  FSH_EXPR_MUL,
  FSH_EXPR_DIV,
  FSH_EXPR_MOD,
  FSH_EXPR_EQ,
  FSH_EXPR_NE,
  FSH_EXPR_LT,
  FSH_EXPR_LE,
  FSH_EXPR_GT,
  FSH_EXPR_GE,
  FSH_EXPR_AND,
  FSH_EXPR_OR,
  FSH_EXPR_NOT,
  FSH_EXPR_IS_NULL,
  FSH_EXPR_IS_NOT_NULL,
  FSH_EXPR_IN,
  FSH_EXPR_BETWEEN,
  FSH_EXPR_LIKE,
  FSH_EXPR_CAST,
  FSH_EXPR_OP_COUNT_
} fsh_expr_op;

typedef struct fsh_expr fsh_expr;

/* Constructors return a new node, or NULL on ENOMEM. Those that take
 * argument nodes take ownership of them whatever happens (a NULL argument
 * makes the result NULL and frees the others), so trees nest without
 * checks: fsh_expr_call2(FSH_EXPR_GT, fsh_expr_col("x"), fsh_expr_int(
 * FSH_TYPE_INT64, 5)) is NULL only on ENOMEM. */
fsh_expr *fsh_expr_col(const char *name);
/* An untyped null (type null), or a null of `type`. */
fsh_expr *fsh_expr_null(fsh_type_id type);
fsh_expr *fsh_expr_bool(bool v);
/* An integer literal of an integer type, date32 (days) or date64 (ms);
 * a value out of the type's range is EINVAL at bind. */
fsh_expr *fsh_expr_int(fsh_type_id type, int64_t v);
/* float32 or float64. */
fsh_expr *fsh_expr_float(fsh_type_id type, double v);
/* A utf8 literal of len bytes (len < 0: strlen). */
fsh_expr *fsh_expr_string(const char *s, int64_t len);
fsh_expr *fsh_expr_timestamp(fsh_time_unit unit, int64_t v);
/* An operator node over args[0, n) (owned, see above); the array itself
 * stays the caller's. */
fsh_expr *fsh_expr_call(fsh_expr_op op, int n, fsh_expr **args);
fsh_expr *fsh_expr_call1(fsh_expr_op op, fsh_expr *a);
fsh_expr *fsh_expr_call2(fsh_expr_op op, fsh_expr *a, fsh_expr *b);
fsh_expr *fsh_expr_call3(fsh_expr_op op, fsh_expr *a, fsh_expr *b, fsh_expr *c);
/* CAST(a AS to): `to` a numeric type or bool. */
fsh_expr *fsh_expr_cast(fsh_expr *a, fsh_type_id to);
/* Marks an arithmetic or cast node: errors become nulls. Returns e. */
fsh_expr *fsh_expr_null_on_error(fsh_expr *e);
/* Frees the tree; NULL accepted. */
void fsh_expr_free(fsh_expr *e);
/* Deep copy (unbound), or NULL on ENOMEM. */
fsh_expr *fsh_expr_clone(const fsh_expr *e);

/* Binds e (the whole tree) to schema s: resolves columns, checks types,
 * compiles LIKE patterns. May be called again for another schema. */
FSH_NODISCARD int fsh_expr_bind(fsh_expr *e, const fsh_schema *s, fsh_error *err);
/* fsh_expr_bind, and the result must be bool (or null): the check a
 * filter makes, done before any batch arrives. */
FSH_NODISCARD int fsh_expr_bind_predicate(fsh_expr *e, const fsh_schema *s, fsh_error *err);
/* The result type of a bound expression. */
fsh_type_id fsh_expr_type(const fsh_expr *e);
/* The field a bound expression's results have, named `name`: for a bare
 * column reference a copy of the column's field (dictionary encoding
 * included), otherwise a nullable field of the result type. */
FSH_NODISCARD int fsh_expr_field(const fsh_expr *e, const char *name, fsh_field *out,
                                 fsh_error *err);
/* Writes an SQL-like text form ("((a + 1) > 5)") into buf (truncated);
 * returns buf. */
const char *fsh_expr_format(const fsh_expr *e, char *buf, size_t size);

/* Evaluates a bound e over b (of the schema it was bound to) into a new
 * array of b->length rows of fsh_expr_field's type (a bare column
 * reference returns a new reference to the column). */
FSH_NODISCARD int fsh_expr_eval(const fsh_expr *e, fsh_batch *b, fsh_array **out,
                                fsh_error *err);

/* Filter: the rows of b where the bound boolean predicate is true (null
 * counts as false), through fsh_filter. */
FSH_NODISCARD int fsh_expr_filter(const fsh_expr *pred, fsh_batch *b, fsh_batch **out,
                                  fsh_error *err);
/* The selection bitmap of such a filter, in sel (fsh_bytes_for_bits(b->length)
 * bytes, caller-owned); *n_selected its count (may be NULL). */
FSH_NODISCARD int fsh_expr_select(const fsh_expr *pred, fsh_batch *b, uint8_t *sel,
                                  int64_t *n_selected, fsh_error *err);

/* Project: binds exprs[0, n) to `in` and builds the output schema, field k
 * named names[k] (fsh_expr_field). */
FSH_NODISCARD int fsh_project_schema(const fsh_schema *in, int64_t n, const char *const *names,
                                     fsh_expr *const *exprs, fsh_schema **out, fsh_error *err);
/* A new batch of schema `out_schema` (from fsh_project_schema with these
 * exprs; a reference is taken) whose column k is exprs[k] over b. */
FSH_NODISCARD int fsh_project(fsh_batch *b, fsh_schema *out_schema, int64_t n,
                              fsh_expr *const *exprs, fsh_batch **out, fsh_error *err);

/* Parses the JSON form (text of len bytes; len < 0: strlen) into a new
 * unbound tree. */
FSH_NODISCARD int fsh_expr_from_json(const char *text, int64_t len, fsh_expr **out,
                                     fsh_error *err);
/* Writes e's JSON form into a new NUL-terminated string (*out from
 * fsh_malloc). */
FSH_NODISCARD int fsh_expr_to_json(const fsh_expr *e, char **out, fsh_error *err);


/* ---- hash aggregate ------------------------------------------------------ */

/* Aggregate functions. Types and nulls (SQL semantics):
 *   COUNT_STAR      rows of the group                     -> int64, never null
 *   COUNT           non-null values                       -> int64, never null
 *   COUNT_DISTINCT  distinct non-null values (any type fsh_row_keys orders,
 *                   dictionaries compared by value)       -> int64, never null
 *   SUM             signed integers -> int64, unsigned -> uint64,
 *                   decimal128(p, s) -> decimal128(38, s) (EOVERFLOW, naming
 *                   the column, when the sum overflows); float16/32/64 ->
 *                   float64; null when the group has no non-null value
 *   AVG             integers, floats and decimal128 -> float64 (summed as
 *                   float64); null when the group has no non-null value
 *   MIN, MAX        integers, floats, decimal128/256, date/time/timestamp/
 *                   duration, (large) binary and utf8 (bytewise), and
 *                   dictionaries of those (compared by value) -> the
 *                   input's type (a dictionary's value type); NaN is
 *                   skipped unless every value is NaN (as Arrow's
 *                   min_max); null when the group has no non-null value
 * A null in a row's value column counts for COUNT_STAR only. Dictionary-
 * encoded value columns are accepted by COUNT, COUNT_DISTINCT, MIN, MAX. */
typedef enum fsh_agg_fn {
  FSH_AGG_COUNT_STAR = 0,
  FSH_AGG_COUNT,
  FSH_AGG_COUNT_DISTINCT,
  FSH_AGG_SUM,
  FSH_AGG_AVG,
  FSH_AGG_MIN,
  FSH_AGG_MAX
} fsh_agg_fn;

/* One aggregate: the function, its input column (index into the input
 * schema; ignored by COUNT_STAR) and the output column's name (NULL: "fn(col)"
 * as "sum(x)", "count(*)"). */
typedef struct fsh_agg_spec {
  fsh_agg_fn fn;
  int32_t column;
  const char *name;
} fsh_agg_spec;

/* Two-phase aggregation. SINGLE: input rows -> final values. PARTIAL: input
 * rows -> one row per group of keys + partial states. FINAL: partial-state
 * batches (from any number of PARTIAL aggregates of the same specs) -> final
 * values. PARTIAL and FINAL are created with the same arguments (the
 * original input schema, keys and specs); FINAL derives the partial schema
 * and accepts batches of it.
 *
 * The partial schema: the key columns (the input's fields, their names),
 * then per aggregate, in order:
 *   COUNT_STAR, COUNT   "<name>"          int64   (final: sum of counts)
 *   SUM                 "<name>"          the sum type, null when no value
 *   MIN, MAX            "<name>"          the input type, null when no value
 *   AVG                 "<name>#sum"      float64, "<name>#count" int64
 *   COUNT_DISTINCT      "<name>#values"   list<value type>: the group's
 *                       distinct non-null values (so the partial state holds
 *                       the distinct (keys, value) pairs of its input)
 * The output (SINGLE and FINAL): the key columns, then one column per
 * aggregate. Groups come out in the order they were first seen; rows whose
 * keys are all equal under fsh_row_keys_equal (nulls equal to nulls, NaN
 * to NaN, dictionaries by value; -0.0 and +0.0 apart, as pyarrow's
 * group_by) form one group. No key
 * columns (n_keys == 0): a global aggregate, one output row in every mode,
 * even on no input (counts 0, other values null). */
typedef enum fsh_agg_mode { FSH_AGG_SINGLE = 0, FSH_AGG_PARTIAL, FSH_AGG_FINAL } fsh_agg_mode;

typedef struct fsh_hash_agg fsh_hash_agg;

/* A hash aggregate over batches of `input` grouped by key_cols[0, n_keys)
 * (n_keys >= 0) computing aggs[0, n_aggs). memory_budget: bytes the
 * operator may hold (hash table, key copies, states; 0 = unlimited); a push
 * that leaves it holding more returns EFBIG (this operator never spills:
 * fsh_spill_agg, "bounded memory" below, is the spilling form). EINVAL
 * (column out of range, bad function) or ENOTSUP (a function on a type it
 * does not support, a key type fsh_row_keys cannot compare), naming the
 * column. */
FSH_NODISCARD int fsh_hash_agg_new(fsh_schema *input, const int32_t *key_cols, int n_keys,
                                   const fsh_agg_spec *aggs, int n_aggs, fsh_agg_mode mode,
                                   int64_t memory_budget, fsh_hash_agg **out, fsh_error *err);
void fsh_hash_agg_free(fsh_hash_agg *a); /* NULL accepted */
/* The schema pushes must have (the input's, or the partial schema in FINAL
 * mode; compared by type, names aside) and the schema of the result. */
fsh_schema *fsh_hash_agg_input_schema(const fsh_hash_agg *a);
fsh_schema *fsh_hash_agg_output_schema(const fsh_hash_agg *a);
/* Adds a batch's rows. EINVAL for a batch of another schema, EOVERFLOW for
 * an overflowing sum, EFBIG over the budget (the batch was absorbed: the
 * caller may still finish), ENOMEM. After an error other than EFBIG the
 * aggregate is unusable (further calls return EINVAL); free it. */
FSH_NODISCARD int fsh_hash_agg_push(fsh_hash_agg *a, fsh_batch *b, fsh_error *err);
/* The result: one batch holding every group (possibly 0 rows). Once. */
FSH_NODISCARD int fsh_hash_agg_finish(fsh_hash_agg *a, fsh_batch **out, fsh_error *err);
/* Bytes the aggregate holds now (capacity of its tables, arrays, key and
 * state buffers). */
int64_t fsh_hash_agg_memory(const fsh_hash_agg *a);
int64_t fsh_hash_agg_groups(const fsh_hash_agg *a);


/* ---- hash join ------------------------------------------------------------ */

/* Join types. LEFT_SEMI / LEFT_ANTI output the left columns only: left rows
 * with at least one match (once each) / with none (NOT EXISTS semantics: a
 * left row with a null key has no match, so the anti join keeps it). Right
 * semi/anti joins are the left ones with the inputs swapped. */
typedef enum fsh_join_type {
  FSH_JOIN_INNER = 0,
  FSH_JOIN_LEFT,
  FSH_JOIN_RIGHT,
  FSH_JOIN_FULL,
  FSH_JOIN_LEFT_SEMI,
  FSH_JOIN_LEFT_ANTI
} fsh_join_type;

/* The planner's default for choosing a broadcast join (64 MiB): a side
 * whose batches hold at most this many bytes of buffers is the build side
 * and is broadcast to every task of the other; otherwise both sides are
 * repartitioned on the keys and the smaller one is built. The operator
 * itself builds whichever side the caller gives. */
#define FSH_JOIN_BROADCAST_BYTES ((int64_t)64 << 20)

typedef struct fsh_hash_join fsh_hash_join;

/* A hash join of left and right on left_keys[k] = right_keys[k] for k in
 * [0, n_keys) (n_keys >= 1). Key types must be equal by value type (a
 * dictionary column joins its value type): EINVAL naming both columns
 * otherwise, ENOTSUP for a type fsh_row_keys cannot compare. Rows with a
 * null in any key never match. Float keys match under fsh_row_keys_equal
 * (NaN matches NaN, -0.0 only -0.0: as pyarrow's join). build_left:
 * the left side is the build (hash table) side, pushed with
 * fsh_hash_join_build; otherwise the right.
 * memory_budget: bytes the build side and its table may hold (0 =
 * unlimited; the table is estimated at 40 bytes a build row while the build
 * side is pushed): fsh_hash_join_build returns EFBIG when a batch takes the
 * join over it (the batch is kept; this operator never spills:
 * fsh_spill_join, "bounded memory" below, is the spilling form).
 *
 * Output schema: the left fields, then the right fields (not for semi and
 * anti joins); a right field whose name is already taken gets the suffix
 * "_right" (repeated until unique). Fields of a side that can be
 * null-filled (the right side of LEFT, the left of RIGHT, both of FULL) are
 * nullable. */
FSH_NODISCARD int fsh_hash_join_new(fsh_schema *left, fsh_schema *right, const int32_t *left_keys,
                                    const int32_t *right_keys, int n_keys, fsh_join_type type,
                                    bool build_left, int64_t memory_budget, fsh_hash_join **out,
                                    fsh_error *err);
void fsh_hash_join_free(fsh_hash_join *j); /* NULL accepted */
fsh_schema *fsh_hash_join_output_schema(const fsh_hash_join *j);
/* Adds a batch of the build side (before fsh_hash_join_probe). */
FSH_NODISCARD int fsh_hash_join_build(fsh_hash_join *j, fsh_batch *b, fsh_error *err);
/* Joins a batch of the probe side against the whole build side: *out gets
 * the joined rows of this batch (possibly 0 rows), in probe-row order, the
 * matches of one probe row in build-row order. The first probe ends the
 * build phase. */
FSH_NODISCARD int fsh_hash_join_probe(fsh_hash_join *j, fsh_batch *b, fsh_batch **out,
                                      fsh_error *err);
/* The same in bounded pieces (a skewed key can make one probe batch's
 * output arbitrarily large): probe_begin takes batch b (EINVAL while the
 * previous one is not drained), then each probe_next gives at most
 * max_rows joined rows of it (never 0 rows), *out NULL when b is drained. */
FSH_NODISCARD int fsh_hash_join_probe_begin(fsh_hash_join *j, fsh_batch *b, fsh_error *err);
FSH_NODISCARD int fsh_hash_join_probe_next(fsh_hash_join *j, int64_t max_rows, fsh_batch **out,
                                           fsh_error *err);
/* After the last probe: the rows only the build side can produce (build
 * rows never matched, null-filled on the probe side, for outer joins that
 * keep the build side; the build side's semi/anti rows when it is the
 * left), or NULL when there are none. Once. */
FSH_NODISCARD int fsh_hash_join_finish(fsh_hash_join *j, fsh_batch **out, fsh_error *err);
/* Bytes the join holds (build batches, table; the estimate before the
 * first probe). */
int64_t fsh_hash_join_memory(const fsh_hash_join *j);

/* ---- bounded memory: spilling sort, aggregate, join ---------------------
 *
 * Operators that hold bounded memory write what outgrows their budget to
 * spill files in the worker's spill directories and read it back later.
 *
 * Spill files (fsh_spill): one IPC stream each (optionally LZ4_FRAME or
 * ZSTD compressed), written straight to its final name
 *   <dir>/fshexec-<pid>-<spill>-<seq>-<tag>.arrows
 * (pid of the process, spill = a process-wide number of the fsh_spill,
 * seq = the file's number in it, tag = the owner's tag, "exec" by default),
 * created exclusively; these files hold nothing that must outlive the
 * process, so they are not fsync'd, and a worker may remove every
 * "fshexec-*" file of its directories at start. Files go round-robin over
 * the directories. A directory that runs out of space (ENOSPC or EDQUOT)
 * while a file is written does not fail the write while another directory
 * has room: what the file holds so far is copied into a new file in the
 * next directory (each tried once per file), the old one is deleted, and
 * the write goes on; only when every directory has refused it does the
 * write fail, with ENOSPC naming the directories.
 *
 * Every file is removed on every path: an aborted or failed writer deletes
 * its file; a finished file is owned by one fsh_spill_file until it is
 * freed (deleted) or opened for reading -- the reader unlinks the path as
 * soon as it has the file open, so the data vanishes when the reader is
 * released (or the process dies). */

#include <flightshuffle/ipc.h> /* fsh_compression */

typedef struct fsh_spill_options {
  const char *const *dirs; /* existing directories (at least one), round-robin */
  int n_dirs;
  fsh_compression compression; /* NONE, LZ4_FRAME or ZSTD (spill I/O vs CPU) */
  const char *tag;             /* a short word for file names and errors (NULL: "exec") */
} fsh_spill_options;

typedef struct fsh_spill fsh_spill;
typedef struct fsh_spill_writer fsh_spill_writer;
typedef struct fsh_spill_file fsh_spill_file;

/* A spill area over o->dirs (copied; n_dirs >= 1, else EINVAL): it names,
 * places and counts files. Writers refer to it and must not outlive it;
 * finished files (and the streams reading them) do not, and may. Writers
 * of one area may run on different threads. */
FSH_NODISCARD int fsh_spill_new(const fsh_spill_options *o, fsh_spill **out, fsh_error *err);
void fsh_spill_free(fsh_spill *s); /* NULL accepted */
/* Files and bytes written so far through the area (finished files only). */
int64_t fsh_spill_files_written(const fsh_spill *s);
int64_t fsh_spill_bytes_written(const fsh_spill *s);

/* A new spill file of batches of `schema` (a reference is taken). Errors
 * (ENOSPC when no directory can create it, EACCES, EIO) name the
 * directories and the tag. */
FSH_NODISCARD int fsh_spill_writer_open(fsh_spill *s, fsh_schema *schema, fsh_spill_writer **out,
                                        fsh_error *err);
/* Appends b (its schema must equal the writer's up to metadata). On error
 * the writer can only be aborted. */
FSH_NODISCARD int fsh_spill_writer_write(fsh_spill_writer *w, fsh_batch *b, fsh_error *err);
/* Ends the stream and frees w; *out owns the finished file. On error the
 * file is deleted and *out is NULL. */
FSH_NODISCARD int fsh_spill_writer_finish(fsh_spill_writer *w, fsh_spill_file **out,
                                          fsh_error *err);
void fsh_spill_writer_abort(fsh_spill_writer *w); /* deletes the file; NULL accepted */
/* Grace-style partitioned spilling (the hash operators'): hash-partitions
 * b on key_cols[0, n_keys) (fsh_hash_columns with `seed`, then
 * fsh_partition_hash into n_parts) and appends each part's rows to
 * w[part] (parts without rows write nothing). */
FSH_NODISCARD int fsh_spill_scatter(fsh_batch *b, const int32_t *key_cols, int n_keys,
                                    uint64_t seed, int32_t n_parts, fsh_spill_writer *const *w,
                                    fsh_error *err);

const char *fsh_spill_file_path(const fsh_spill_file *f);
int64_t fsh_spill_file_bytes(const fsh_spill_file *f);
int64_t fsh_spill_file_rows(const fsh_spill_file *f);
/* Opens the file as a stream of its batches; f moves into the stream
 * (freed here, also on error) and its path is unlinked once open: the
 * data is gone when the stream is released. Read errors name the path. */
FSH_NODISCARD int fsh_spill_file_open(fsh_spill_file *f, fsh_batch_stream *out, fsh_error *err);
void fsh_spill_file_free(fsh_spill_file *f); /* deletes the file; NULL accepted */

/* Bytes a batch is charged by the bounded-memory operators: the sizes of
 * the buffers it references, each buffer (by identity) counted once, whole
 * (a slice of an array counts its buffers whole; a view of a larger buffer,
 * as an IPC-decoded column in its message body, counts its own size;
 * dictionaries and children included). */
int64_t fsh_exec_batch_memory(const fsh_batch *b);

/* The memory a set of held batches costs, each buffer counted once by
 * identity however many of the batches reference it: n slices of one
 * batch cost what the batch costs, not n times it. What the operators
 * (external sort, hash join build side, the hash table's key copies)
 * charge their budgets. Zero-initialise (or fsh_mem_set_init); `bytes` is
 * the total so far. */
typedef struct fsh_mem_set {
  const fsh_buffer **slots; /* open addressing by pointer; NULL: empty */
  int64_t cap, n;
  int64_t bytes;
} fsh_mem_set;
void fsh_mem_set_init(fsh_mem_set *s);
/* Adds the buffers b references that the set does not hold yet; *added
 * (NULL: not wanted) = the bytes they add. ENOMEM leaves the set as it
 * was. */
FSH_NODISCARD int fsh_mem_set_add(fsh_mem_set *s, const fsh_batch *b, int64_t *added,
                                  fsh_error *err);
/* Forgets every buffer (bytes = 0), keeping the storage. */
void fsh_mem_set_clear(fsh_mem_set *s);
/* Releases the storage (the set is then empty and reusable). */
void fsh_mem_set_reset(fsh_mem_set *s);

/* External sort: the rows of any number of batches of one schema, sorted
 * by key_cols / order (as fsh_sort_batch: stable, order NULL = ascending,
 * nulls last) in memory_budget bytes of buffered input. While the pushed
 * batches (their buffers, each counted once: fsh_mem_set) stay within the
 * budget they are only held;
 * when a push goes over it, the held batches are sorted (fsh_sort_batch
 * of their concatenation) and written as one sorted run to a spill file
 * in batches of run_rows rows. finish() returns the whole input sorted:
 * from memory when nothing spilled, else a k-way merge
 * (fsh_merger_new_streams) of the runs and of the rows still held (sorted
 * in memory), holding one batch per run; more than max_fanin runs are
 * first merged in consecutive groups into longer runs (spilled again), so
 * the merge is stable: equal keys come out in input order. Output batches
 * have target_rows rows (the last may be short). */
typedef struct fsh_extsort_options {
  const int32_t *key_cols; /* copied */
  int n_keys;              /* >= 1 */
  const fsh_sort_key *order; /* n_keys entries (copied), or NULL */
  int64_t memory_budget;   /* bytes of held input (0: never spill) */
  int64_t target_rows;     /* rows per output batch (0: 65536) */
  int64_t run_rows;        /* rows per spilled batch (0: target_rows) */
  int32_t max_fanin;       /* runs merged at once (0: 64; >= 2) */
  fsh_spill *spill;        /* borrowed, must outlive the sorter; NULL: going
                            * over the budget is an EFBIG error */
} fsh_extsort_options;

typedef struct fsh_extsort fsh_extsort;
/* EINVAL for no key, a key column out of range (naming it), negative sizes
 * or a fan-in below 2. A key type fsh_sort_batch cannot order fails the
 * first sort (at a spill or at finish) with its error. */
FSH_NODISCARD int fsh_extsort_new(fsh_schema *schema, const fsh_extsort_options *o,
                                  fsh_extsort **out, fsh_error *err);
/* Takes a new reference to b (schema equal to the sorter's up to
 * metadata; empty batches are skipped). Spills when over the budget (see
 * above). On error the sorter can only be freed. */
FSH_NODISCARD int fsh_extsort_push(fsh_extsort *s, fsh_batch *b, fsh_error *err);
/* No more input: *out streams the sorted rows. The held rows and the runs
 * move into the stream (which deletes the runs' files when released); s
 * must still be freed, and accepts no more pushes. */
FSH_NODISCARD int fsh_extsort_finish(fsh_extsort *s, fsh_batch_stream *out, fsh_error *err);
void fsh_extsort_free(fsh_extsort *s); /* deletes any run not handed out; NULL accepted */

typedef struct fsh_extsort_stats {
  int64_t rows;          /* pushed */
  int64_t runs;          /* sorted runs spilled (merge passes included) */
  int64_t spilled_bytes; /* bytes of run files written */
  int64_t merge_passes;  /* intermediate merges (when runs > max_fanin) */
  int64_t peak_memory;   /* largest fsh_mem_set total of the held batches */
} fsh_extsort_stats;
void fsh_extsort_get_stats(const fsh_extsort *s, fsh_extsort_stats *out);

/* Spilling hash aggregate (grace-style), over fsh_hash_agg's public API.
 * Rows go into an in-memory PARTIAL fsh_hash_agg under memory_budget; when
 * a push takes it over, its groups so far (partial states) and from then
 * on every input batch are hash-partitioned on the keys (fsh_hash_columns
 * seeded with FSH_SPILL_AGG_SEED -- not the exchange's seed, so that one
 * exchange partition spreads over all spill partitions --,
 * fsh_partition_hash, fsh_scatter) into n_partitions spill files of each
 * kind. finish() then aggregates one partition at a time: its input rows
 * through a PARTIAL aggregate, merged with its spilled states through a
 * FINAL one (SINGLE mode), or the states and the partial rows as they are
 * (PARTIAL mode). Equal keys always share a partition, so every group
 * comes out exactly once (in SINGLE mode; in PARTIAL mode a group may come
 * as two partial rows, which a FINAL aggregate merges).
 *
 * Output: a stream of batches of fsh_hash_agg's output schema (SINGLE) or
 * partial schema (PARTIAL). Without a spill it is one batch, groups in the
 * order first seen; after a spill, partition by partition (the order of
 * groups is then unspecified). A partition still over the budget on its
 * own fails with EFBIG naming it (there is no recursive re-partitioning).
 * No key columns: one group, never spills. */
#define FSH_SPILL_AGG_SEED 0x5350494c4c414747ull /* "SPILLAGG" */

typedef struct fsh_spill_agg_options {
  const int32_t *key_cols; /* into the input schema */
  int n_keys;
  const fsh_agg_spec *aggs;
  int n_aggs;
  fsh_agg_mode mode;     /* FSH_AGG_SINGLE or FSH_AGG_PARTIAL */
  int64_t memory_budget; /* bytes (0: unlimited, never spills) */
  int32_t n_partitions;  /* spill partitions (0: 32) */
  fsh_spill *spill;      /* borrowed, outlives the aggregate and its stream;
                          * NULL: over the budget is EFBIG */
} fsh_spill_agg_options;

typedef struct fsh_spill_agg fsh_spill_agg;
/* Errors as fsh_hash_agg_new's; EINVAL for FINAL mode. */
FSH_NODISCARD int fsh_spill_agg_new(fsh_schema *input, const fsh_spill_agg_options *o,
                                    fsh_spill_agg **out, fsh_error *err);
/* Adds a batch's rows (spilling when over the budget). On error the
 * aggregate can only be freed. */
FSH_NODISCARD int fsh_spill_agg_push(fsh_spill_agg *a, fsh_batch *b, fsh_error *err);
/* No more input: *out streams the result (the spill files move into it
 * and are deleted as it is read or released); a must still be freed. */
FSH_NODISCARD int fsh_spill_agg_finish(fsh_spill_agg *a, fsh_batch_stream *out, fsh_error *err);
void fsh_spill_agg_free(fsh_spill_agg *a); /* deletes its spill files; NULL accepted */
/* Whether it spilled, and the bytes of spill files written. */
bool fsh_spill_agg_spilled(const fsh_spill_agg *a);
int64_t fsh_spill_agg_spilled_bytes(const fsh_spill_agg *a);

/* Spilling hash join (grace-style), over fsh_hash_join's public API. The
 * build side goes into an in-memory fsh_hash_join under memory_budget
 * while this operator keeps references to the batches it was given; when
 * a build batch takes the join over the budget, the join is dropped and
 * the build batches so far and from then on, and every probe batch, are
 * hash-partitioned on their keys (fsh_hash_columns seeded with
 * FSH_SPILL_JOIN_SEED, fsh_partition_hash, fsh_scatter) into n_partitions
 * spill files per side. finish() then joins one partition at a time (its
 * build rows in a fresh fsh_hash_join, its probe rows probed, then the
 * join's finish rows). Equal keys share a partition and null keys never
 * match, so every join type gives the in-memory join's rows.
 *
 * Order: without a spill, probe() returns the joined rows of each probe
 * batch at once and finish() streams the join's finish rows (as
 * fsh_hash_join); after a spill, probe() returns NULL and finish() streams
 * every joined row, partition by partition (row order unspecified). A
 * partition whose build side is still over the budget fails with EFBIG
 * naming it. */
#define FSH_SPILL_JOIN_SEED 0x5350494c4c4a4f49ull /* "SPILLJOI" */

typedef struct fsh_spill_join fsh_spill_join;
/* Arguments and errors as fsh_hash_join_new; n_partitions 0: 32; spill
 * borrowed, outliving the join and its stream (NULL: over the budget is
 * EFBIG). */
FSH_NODISCARD int fsh_spill_join_new(fsh_schema *left, fsh_schema *right,
                                     const int32_t *left_keys, const int32_t *right_keys,
                                     int n_keys, fsh_join_type type, bool build_left,
                                     int64_t memory_budget, int32_t n_partitions,
                                     fsh_spill *spill, fsh_spill_join **out, fsh_error *err);
void fsh_spill_join_free(fsh_spill_join *j); /* deletes its spill files; NULL accepted */
fsh_schema *fsh_spill_join_output_schema(const fsh_spill_join *j); /* borrowed */
FSH_NODISCARD int fsh_spill_join_build(fsh_spill_join *j, fsh_batch *b, fsh_error *err);
/* *out: the joined rows of b (no spill), or NULL (spilled: they come from
 * finish). */
FSH_NODISCARD int fsh_spill_join_probe(fsh_spill_join *j, fsh_batch *b, fsh_batch **out,
                                       fsh_error *err);
/* After the last probe: the remaining rows as a stream (see above); the
 * spill files move into it; j must still be freed. */
FSH_NODISCARD int fsh_spill_join_finish(fsh_spill_join *j, fsh_batch_stream *out,
                                        fsh_error *err);
bool fsh_spill_join_spilled(const fsh_spill_join *j);

/* ---- operators and plans -------------------------------------------------
 *
 * A plan is a DAG of operator nodes, built through the C calls below or
 * parsed from JSON (fsh_plan_from_json), checked as it is built: every node
 * derives its output schema from its inputs' at plan time, so an unknown
 * column, a type mismatch or an unknown operator is EINVAL before anything
 * runs, with a message naming the operator by its position in the plan
 * (0-based, and its id when it has one) and the column:
 *   "plan operator 2 (filter 'f'): bind of (nme = 'x'): unknown column
 *    'nme' (the schema has 'key', 'value', 'name')".
 *
 * Operators run as pull-based batch streams (fsh_batch_stream), one stream
 * per partition. Every node has a partition count fixed at plan time:
 * a scan's `partitions`, an exchange's output count, the input's for the
 * narrow operators. The logical operators expand into physical ones:
 *   aggregate     partial aggregate, hash repartition on the keys (gather
 *                 when there are none), final aggregate
 *   join          partitioned: both sides hash-repartitioned on their keys
 *                 into the same count; broadcast: the right (build) side
 *                 gathered to one partition that every left partition reads
 *                 (not for RIGHT/FULL joins); auto: broadcast when the right
 *                 side is a generated scan of at most FSH_JOIN_BROADCAST_BYTES
 *   sort          distributed: sample, range repartition (boundaries from
 *                 the sample), local sort, gather in partition order
 *   top_n         local top-N, gather, top-N
 *   limit         local limit, gather (its map tasks stop once n rows
 *                 exist), limit: the first n rows in partition order
 * and the shuffling operators are exchanges: repartition (hash / random /
 * range), gather, into_partitions (exactly N outputs, contiguous, order
 * kept); into_batches re-chunks each partition's stream (fsh_rechunker).
 *
 * Stages: the plan is cut at every exchange; a stage is the operators
 * between exchanges (or scans) and the exchange it writes, or the final
 * stage producing the result. fsh_plan_explain prints them.
 *
 * Running (fsh_plan_run): every exchange runs through a shuffle backend
 * (shuffle.h) as M map tasks -- one per input partition, each writing one
 * map output -- and R reduce streams opened over every map output. Map
 * tasks run one after another in this process, or those of hash, random
 * and gather exchanges on a few threads (fsh_plan_run_options.n_threads). Pre-shuffle merge: when on,
 * consecutive map tasks share one writer so that at most
 * merge_threshold^2 / R map outputs exist (every block of a partition is
 * coalesced by the backend); "auto" turns it on when sqrt(M * R) exceeds
 * merge_threshold (default 200, Daft's rule). With several backends
 * (fsh_plan_run_options.backends, e.g. one flight backend per worker),
 * map outputs and reduce partitions are placed on them round-robin. An
 * exchange is released (on every backend) as soon as every stage reading
 * it has run. The reference mode runs the same plan in one partition
 * without exchanges: what --verify compares with. With
 * fsh_plan_run_options.operator_memory, sorts, aggregates and joins hold
 * bounded memory and spill (see there). */

typedef struct fsh_plan fsh_plan;

/* Pre-shuffle merge policy. */
typedef enum fsh_plan_merge { FSH_PLAN_MERGE_AUTO = 0, FSH_PLAN_MERGE_ON, FSH_PLAN_MERGE_OFF } fsh_plan_merge;

/* An empty plan; exchanges without an explicit count produce
 * default_partitions (>= 1) partitions. */
FSH_NODISCARD int fsh_plan_new(int32_t default_partitions, fsh_plan **out, fsh_error *err);
void fsh_plan_free(fsh_plan *p); /* NULL accepted */
/* Overrides the default partition count of exchanges added from now on. */
void fsh_plan_set_default_partitions(fsh_plan *p, int32_t n);

/* The keyed table generator (workloads.h: fsh_keyed_*) or the synthetic
 * one, as a scan source. */
typedef enum fsh_plan_generator { FSH_PLAN_GEN_SYNTHETIC = 0, FSH_PLAN_GEN_KEYED } fsh_plan_generator;
typedef struct fsh_plan_gen_options {
  fsh_plan_generator generator;
  int64_t rows;        /* >= 0 */
  int32_t batch_rows;  /* >= 1 */
  uint64_t seed;
  int64_t key_range;   /* keys in [0, key_range); 0: generator default */
  bool with_nulls;     /* synthetic: ~1% nulls in value and name */
  double null_fraction; /* keyed: fraction of null keys */
  double skew;         /* keyed: fraction of rows whose key is 0 */
  int32_t groups;      /* keyed: distinct values of "grp"; 0 = 16 */
} fsh_plan_gen_options;

/* Every builder adds one plan operator (its position among the operators
 * added, 0-based, names it in messages, with `label` when not NULL) as one
 * or more physical nodes, and returns in *id the node producing its
 * output: the id later calls take as an input. On error the plan is left
 * as it was. Expressions are owned by the plan from the call on, whatever
 * happens. */
FSH_NODISCARD int fsh_plan_scan_generated(fsh_plan *p, const char *label,
                                          const fsh_plan_gen_options *o, int32_t partitions,
                                          int *id, fsh_error *err);
/* An IPC file (file or stream format) or a directory of them (its regular
 * files, by name); columns[0, n_columns) are kept (n_columns 0: all).
 * partitions 0: one per file; otherwise files are dealt in contiguous runs. */
FSH_NODISCARD int fsh_plan_scan_ipc(fsh_plan *p, const char *label, const char *path,
                                    const char *const *columns, int n_columns, int32_t partitions,
                                    int *id, fsh_error *err);
FSH_NODISCARD int fsh_plan_filter(fsh_plan *p, const char *label, int input, fsh_expr *predicate,
                                  int *id, fsh_error *err);
FSH_NODISCARD int fsh_plan_project(fsh_plan *p, const char *label, int input, int n,
                                   const char *const *names, fsh_expr *const *exprs, int *id,
                                   fsh_error *err);
/* One aggregate by column name (NULL for COUNT_STAR); name NULL: "fn(col)". */
typedef struct fsh_plan_agg {
  fsh_agg_fn fn;
  const char *column;
  const char *name;
} fsh_plan_agg;
/* local: a single-phase aggregate per partition, no exchange. */
FSH_NODISCARD int fsh_plan_aggregate(fsh_plan *p, const char *label, int input,
                                     const char *const *keys, int n_keys, const fsh_plan_agg *aggs,
                                     int n_aggs, bool local, int *id, fsh_error *err);
typedef enum fsh_plan_join_strategy {
  FSH_PLAN_JOIN_AUTO = 0,
  FSH_PLAN_JOIN_PARTITIONED,
  FSH_PLAN_JOIN_BROADCAST
} fsh_plan_join_strategy;
FSH_NODISCARD int fsh_plan_join(fsh_plan *p, const char *label, int left, int right,
                                const char *const *left_keys, const char *const *right_keys,
                                int n_keys, fsh_join_type type, fsh_plan_join_strategy strategy,
                                int *id, fsh_error *err);
typedef struct fsh_plan_sort_key {
  const char *column;
  bool descending;
  bool nulls_first;
} fsh_plan_sort_key;
/* local: sort / top-N / limit within each partition only. sample_rows: per
 * map task, for the range boundaries of a distributed sort (0 = 1000). */
FSH_NODISCARD int fsh_plan_sort(fsh_plan *p, const char *label, int input,
                                const fsh_plan_sort_key *keys, int n_keys, bool local,
                                int64_t sample_rows, int *id, fsh_error *err);
FSH_NODISCARD int fsh_plan_top_n(fsh_plan *p, const char *label, int input,
                                 const fsh_plan_sort_key *keys, int n_keys, int64_t n, bool local,
                                 int *id, fsh_error *err);
FSH_NODISCARD int fsh_plan_limit(fsh_plan *p, const char *label, int input, int64_t n, bool local,
                                 int *id, fsh_error *err);
FSH_NODISCARD int fsh_plan_into_batches(fsh_plan *p, const char *label, int input, int64_t rows,
                                        int *id, fsh_error *err);

typedef enum fsh_plan_partitioning {
  FSH_PLAN_PART_HASH = 0,
  FSH_PLAN_PART_RANDOM,
  FSH_PLAN_PART_RANGE
} fsh_plan_partitioning;
/* Repartition into n partitions (0: the plan default) by hash of the keys,
 * at random (reproducible from seed), or by range of the keys with
 * boundaries from a sample of sample_rows rows per map task (0 = 1000).
 * merge: the pre-shuffle merge policy of this exchange. */
FSH_NODISCARD int fsh_plan_repartition(fsh_plan *p, const char *label, int input,
                                       fsh_plan_partitioning by, const fsh_plan_sort_key *keys,
                                       int n_keys, int32_t n, uint64_t seed, int64_t sample_rows,
                                       fsh_plan_merge merge, int *id, fsh_error *err);
/* Every partition to one, in partition order. */
FSH_NODISCARD int fsh_plan_gather(fsh_plan *p, const char *label, int input, int *id,
                                  fsh_error *err);
/* Exactly n partitions (n >= 1), contiguous runs of the input in order,
 * sizes differing by at most one row (fsh_plan_partitions). */
FSH_NODISCARD int fsh_plan_into_partitions(fsh_plan *p, const char *label, int input, int32_t n,
                                           int *id, fsh_error *err);

/* Parses the JSON plan format (see examples/plans/README.md):
 *   {"partitions": N, "pre_shuffle_merge": "auto"|"on"|"off",
 *    "merge_threshold": T, "nodes": [NODE, ...]}
 * each NODE {"op": OP, "id": NAME, "input": NAME | "left"/"right": NAME,
 * ...}; a missing input is the previous node; the last node is the
 * output. Expressions are exec.h's JSON form. Every error names the
 * operator ("plan operator 3 (join 'j'): ..."). default_partitions > 0
 * overrides the plan's "partitions". */
FSH_NODISCARD int fsh_plan_from_json(const char *text, int64_t len, int32_t default_partitions,
                                     fsh_plan **out, fsh_error *err);

/* The output schema and partition count of the plan (its last node). */
fsh_schema *fsh_plan_schema(const fsh_plan *p);
int32_t fsh_plan_output_partitions(const fsh_plan *p);
/* The stages and exchanges as text (a new NUL-terminated string, fsh_malloc). */
FSH_NODISCARD int fsh_plan_explain(const fsh_plan *p, char **out, fsh_error *err);

/* How the plan's output is ordered, for comparing two runs: EXACT (a
 * deterministic row sequence), KEYS (sorted by the columns
 * order_columns), or NONE. rows_determined is false when a limit picked
 * rows out of an unordered input (only the count is then defined). */
typedef enum fsh_plan_order { FSH_PLAN_ORDER_NONE = 0, FSH_PLAN_ORDER_EXACT, FSH_PLAN_ORDER_KEYS } fsh_plan_order;
fsh_plan_order fsh_plan_output_order(const fsh_plan *p, int32_t *n_keys, const int32_t **key_cols,
                                     bool *rows_determined);

/* A consumer of a result as it streams (fsh_plan_run_options.sink,
 * fsh_plan_job_result_stream), so that a large result need not be held:
 * called with every non-empty batch of partition `partition`, partitions
 * in order, batches in order (b borrowed: the sink takes a reference to
 * keep it); and with b NULL when partition `partition` begins -- again
 * when its read is retried (fsh_plan_job_result_stream), after which
 * whatever the sink was given of that partition before is void. A
 * non-zero return (an errno code, err set) ends the run with it. */
typedef int (*fsh_plan_sink)(void *arg, int32_t partition, fsh_batch *b, fsh_error *err);

typedef struct fsh_plan_run_options {
  fsh_shuffle_backend *backend; /* NULL: a memory backend of the run's own */
  bool reference;               /* one partition, no exchange */
  fsh_plan_merge merge;         /* overrides every exchange unless AUTO */
  int64_t merge_threshold;      /* sqrt(M*R) above it merges; 0 = 200 */
  uint64_t first_shuffle_id;    /* shuffle ids start here (0 = 1) */
  int n_threads;                /* map tasks of hash / random / gather exchanges
                                   run on up to this many threads (<= 1: one
                                   after another; at most 64) */
  /* Tasks placed on several backends (e.g. one flight backend per
   * in-process worker): when n_backends > 0, map output g of every
   * exchange is written through backends[g % n_backends] and reduce
   * partition p is read through backends[p % n_backends] (each must reach
   * every map output's location: flight backends read their own store
   * in-process and fetch the others' by DoGet); `backend` is then ignored,
   * and release() goes through every one of them. Borrowed. */
  fsh_shuffle_backend *const *backends;
  int n_backends;
  /* Bounded memory: with operator_memory > 0 every instance (partition) of
   * a sort, of a SINGLE or PARTIAL aggregate and of a join holds at most
   * about this many bytes and runs through its spilling form (fsh_extsort,
   * fsh_spill_agg, fsh_spill_join), each instance with its own fsh_spill
   * area over spill_dirs (required then, else EINVAL; existing
   * directories; borrowed). A FINAL aggregate (after the exchange) runs
   * grace-style in plan_run.c (fsh_spill_agg has no FINAL mode): in memory
   * while the FINAL fsh_hash_agg plus the partial-state batches it was
   * given fit, else every partial-state batch is hash-partitioned on the
   * keys into 32 spill files, each aggregated on its own. Spilled output
   * comes out in another row order, which the plan's output order allows
   * (aggregates and joins are unordered; sorts stay stable). A partition
   * still over the budget on its own fails with
   * EFBIG naming the operator and the partition. Every spill file is
   * deleted before fsh_plan_run returns, on success and on error.
   * 0: every operator in memory, unbounded (as without these fields). */
  int64_t operator_memory;
  const char *const *spill_dirs;
  int n_spill_dirs;
  /* Streaming the result: when sink is set, the result's batches go to it
   * (fsh_plan_sink) instead of into out->batches, which stays empty;
   * out->rows and out->partition_batches still count them. */
  fsh_plan_sink sink;
  void *sink_arg;
} fsh_plan_run_options;

typedef struct fsh_plan_result {
  fsh_schema *schema;    /* one reference */
  int64_t n_batches;
  fsh_batch **batches;   /* the output, partition after partition */
  int64_t rows;
  int32_t n_partitions;
  int64_t *partition_batches; /* [n_partitions]: batches of each partition */
  int64_t exchanges;     /* exchanges run */
  int64_t map_outputs;   /* map outputs written */
  int64_t map_tasks;     /* map tasks run (a merged output counts its tasks) */
  int64_t maps_skipped;  /* map tasks a global limit made unnecessary */
  /* bounded memory (operator_memory > 0): spill files and bytes written,
   * operator instances that spilled, and per plan node that spilled
   * "NAME [PHASE]: instances=I files=F bytes=B" joined by "; " (PHASE:
   * sort, join, aggregate, partial aggregate, final aggregate;
   * fsh_malloc'd; NULL when nothing spilled) */
  int64_t spill_files;
  int64_t spilled_bytes;
  int64_t operators_spilled;
  char *spill_summary;
} fsh_plan_result;
void fsh_plan_result_reset(fsh_plan_result *r);

FSH_NODISCARD int fsh_plan_run(const fsh_plan *p, const fsh_plan_run_options *o,
                               fsh_plan_result *out, fsh_error *err);

/* Per-row content hashes of a result (fsh_hash_columns over every column,
 * seed 0, in output order; fsh_malloc'd, *n rows) and, with key_cols, of
 * those columns only. */
FSH_NODISCARD int fsh_plan_result_row_hashes(const fsh_plan_result *r, const int32_t *key_cols,
                                             int32_t n_keys, uint64_t **out, int64_t *n,
                                             fsh_error *err);
/* Compares two results of the same plan (a run and a reference run) under
 * the plan's output order: equal row counts; equal row multisets (unless
 * rows are not determined); equal row sequences (EXACT) or sort-key
 * sequences (KEYS). A plan ending in a limit whose rows are not determined
 * (a limit of an unordered input: a distributed one may take other rows
 * than the reference) is compared by its row count -- min(n, the limit's
 * input rows) for a global limit -- and by every row of a being a row of
 * the limit's input (a multiset: no row more often than there), that
 * input from a reference run of the plan up to it. Float values are
 * compared rounded to 12 significant digits (a sum or average computed in
 * another order differs in its last bits). A plan whose last operator's
 * rows depend on the partitioning (a local limit / top-N, a local
 * aggregate whose groups may span partitions, a local sort over several
 * partitions, into_partitions) is compared as the plan allows: per
 * partition against its input partition where the plan fixes the input's
 * partitioning, by counts, membership and order otherwise
 * (plan_compare.c). 0 if they agree -- err->message then empty for an
 * exact comparison, else saying what was compared ("compared as the plan
 * allows: ...") -- EINVAL naming the first difference, ENOTSUP when such an
 * operator is followed by others (nothing a single-process run gives can
 * be compared). */
FSH_NODISCARD int fsh_plan_result_compare(const fsh_plan *p, const fsh_plan_result *a,
                                          const fsh_plan_result *b, fsh_error *err);

/* One stage's fragment as protobuf (proto/Plan.proto, flightshuffle.plan):
 * the stage's operators, its input exchanges and the exchange it writes.
 * fsh_plan_stage_count: stages of the plan (the last one produces the
 * result). Decode checks every field and answers EINVAL naming what is
 * wrong; a decoded fragment re-encodes to the same bytes. */
int fsh_plan_stage_count(const fsh_plan *p);
FSH_NODISCARD int fsh_plan_stage_encode(const fsh_plan *p, int stage, fsh_buffer **out,
                                        fsh_error *err);
/* What a driver needs of stage `stage` to launch its tasks: how many
 * (the partitions it runs in), the exchange it writes (node id, or -1 for
 * the result stage) and that exchange's partitions (the result: n_tasks),
 * and for every exchange it reads, its node id, its partitions and the
 * stage writing it. EINVAL for a stage out of range. */
#define FSH_PLAN_STAGE_MAX_INPUTS 64
typedef struct fsh_plan_stage_info {
  int32_t n_tasks;
  int32_t output_node;
  int32_t output_partitions;
  int n_inputs;
  int32_t input_nodes[FSH_PLAN_STAGE_MAX_INPUTS];
  int32_t input_partitions[FSH_PLAN_STAGE_MAX_INPUTS];
  int input_stages[FSH_PLAN_STAGE_MAX_INPUTS];
} fsh_plan_stage_info;
FSH_NODISCARD int fsh_plan_stage_info_get(const fsh_plan *p, int stage, fsh_plan_stage_info *out,
                                          fsh_error *err);
/* 0 when every stage can run as plan-fragment tasks (fsh_plan_job_stages_get);
 * ENOTSUP naming the operator otherwise (none is left: range and
 * into_partitions exchanges run staged, then scattered). */
FSH_NODISCARD int fsh_plan_check_distributed(const fsh_plan *p, fsh_error *err);
typedef struct fsh_plan_fragment fsh_plan_fragment;
FSH_NODISCARD int fsh_plan_fragment_decode(const uint8_t *data, int64_t size,
                                           fsh_plan_fragment **out, fsh_error *err);
FSH_NODISCARD int fsh_plan_fragment_encode(const fsh_plan_fragment *f, fsh_buffer **out,
                                           fsh_error *err);
int fsh_plan_fragment_operators(const fsh_plan_fragment *f);
void fsh_plan_fragment_free(fsh_plan_fragment *f); /* NULL accepted */

/* ---- plan-fragment tasks ----------------------------------------------------
 * One task of a stage run on a worker ("plan-fragment", a worker task
 * kind, shuffle.h): the stage's fragment, this task's index among the
 * stage's n_tasks (the partitions its operators run in), for every
 * exchange the fragment reads the map outputs of the partition it reads
 * (a reduce-verify body's sources: partition `task`, or 0 of a
 * 1-partition exchange such as a broadcast build side), and its output:
 * map output (map_id, attempt) of shuffle shuffle_id -- partitioned as the
 * fragment's output exchange says, or, for the result stage, every row
 * into partition `task` of a result shuffle of n_tasks partitions.
 * Operators run as in fsh_plan_run (one partition). The answer is a map
 * task's (fsh_map_task_result): the output's metadata and per partition
 * the order-independent row checksum of the rows written (per row
 * fsh_hash_columns over every column, seed 0; summed mod 2^64), so that a
 * reader can check each partition. Range and into_partitions output
 * exchanges are ENOTSUP (they need every map's rows first).
 *
 * The body and its codec are the shuffle layer's (fsh_fragment_task,
 * shuffle.h: the driver builds it without exec). */

/* Bounded memory of the operators a worker's plan-fragment tasks run (as
 * fsh_plan_run_options.operator_memory; 0: unbounded). */
typedef struct fsh_plan_task_run_options {
  int64_t operator_memory;
  const char *const *spill_dirs;
  int n_spill_dirs;
  /* fsh_plan_task_run: when set, checked before every batch the task reads
   * or writes; the task then ends with ECANCELED ("cancelled"), its
   * output discarded. The worker task kind uses its task's flag
   * (fsh_worker_task_cancel_flag). */
  const atomic_bool *cancel;
} fsh_plan_task_run_options;

/* Checks t as a worker would before running it (fragment and inputs). */
FSH_NODISCARD int fsh_plan_task_check(const fsh_fragment_task *t, fsh_error *err);
/* Runs t through b (reader and writer); o may be NULL. On error nothing is
 * kept (the writer is aborted). With reads: *reads (fsh_malloc'd) and
 * *n_reads, what it read of each input exchange and of its side input
 * (rows, row checksum, read to the end or not) -- the worker's answer
 * carries them (fsh_fragment_answer_encode). */
FSH_NODISCARD int fsh_plan_task_run(fsh_shuffle_backend *b, const fsh_fragment_task *t,
                                    const fsh_plan_task_run_options *o,
                                    fsh_map_task_result *out, fsh_fragment_read **reads,
                                    int32_t *n_reads, fsh_error *err);
/* The "plan-fragment" worker task kind (fsh_shuffle_worker_options
 * .task_kinds); o (borrowed, may be NULL) must outlive the worker. */
fsh_worker_task_kind fsh_plan_task_kind(const fsh_plan_task_run_options *o);

/* A plan as a driver's job (sched.h): every stage a "plan-fragment" stage,
 * the last one writing the job's result shuffle. */
typedef struct fsh_plan_job_options {
  const char *name;
  fsh_task_backend backend;     /* fs or flight */
  fsh_compression compression;  /* of every shuffle */
  int32_t max_attempts;         /* 0 = 4 */
  int32_t slots_per_worker;     /* 0 = 2 */
  /* the pre-shuffle merge on the cluster (sched.h): FSH_SCHED_MERGE_OFF
   * (0) / ON for every exchange, overriding the plan; AUTO: as the
   * in-process runner, each exchange's "pre_shuffle_merge", else the
   * plan's, else on when sqrt(M x R) > the threshold */
  int32_t merge;
  int32_t merge_threshold;      /* AUTO's; 0 = the plan's, else FSH_SCHED_MERGE_THRESHOLD */
} fsh_plan_job_options;
/* The job stages of p, in order (fragments owned): a plan stage writing a
 * range or into_partitions exchange -- which needs every map's rows
 * before any is written -- is two, a staging stage (task i writes its rows
 * into partition i of a shuffle of tasks + 1 partitions and, for a range,
 * its sample into the last one) and a scatter stage (task i reads
 * partition i, the samples and every task's row count, and writes the
 * exchange as plan_run would: boundaries from the same samples, the same
 * global row offsets); every other stage is one. A range exchange whose
 * stage is only scans, filters and projects (deterministic, cheaper to
 * compute again than to store and read back) is "recomputed": its
 * staging tasks write only their samples (partition i stays empty) and
 * its scatter tasks compute their input partition again from the
 * operators (reading their empty staged partition, to say so). A stage
 * writing a global limit's gather (fsh_plan_limit, not local) is limited
 * (fsh_sched_plan_stage.limited, limit_rows n; limit_ordered when the
 * limit's input is ordered): the driver stops it once its done tasks --
 * ordered, a prefix of them in task order -- wrote n rows, skipping the
 * others (sched.h "global limits"). */
typedef struct fsh_plan_job_stages {
  int n;
  fsh_sched_plan_stage *stages;
  int *inputs;     /* the stages' input_stages arrays */
  int32_t *nodes;  /* the stages' input_nodes arrays */
  bool *recomputed; /* [n]: a staging stage writing only samples, or its scatter */
} fsh_plan_job_stages;
FSH_NODISCARD int fsh_plan_job_stages_get(const fsh_plan *p, fsh_plan_job_stages *out,
                                          fsh_error *err);
void fsh_plan_job_stages_free(fsh_plan_job_stages *js);
/* Names of p's job stages (fsh_plan_job_stages_get's order) by the operator
 * whose exchange each writes: "OP: hash", "OP: range-stage", "OP: range-scatter",
 * "OP: gather", ..., the last "OP: result" (OP the operator's name as the
 * plan spells it: "sort", "join", "aggregate", "repartition", ...), at most
 * 31 characters each, into names[0, *n_names); ENOSPC past n. */
FSH_NODISCARD int fsh_plan_job_stage_names(const fsh_plan *p, char (*names)[32], int n,
                                           int *n_names, fsh_error *err);
/* The packed JobPlan of p (its job stages). */
FSH_NODISCARD int fsh_plan_job_plan(const fsh_plan *p, const fsh_plan_job_options *o,
                                    fsh_buffer **out, fsh_error *err);
/* Reads the result of a succeeded job of p (its status s: s->result) through
 * b (a flight backend reaching the workers, or the fs backend of the
 * shared directory) into *out, like fsh_plan_run's: partition after
 * partition, each checked against the rows and row checksum its tasks
 * wrote (EIO naming the partition). The caller releases the result
 * shuffle (s->result[0].shuffle_id) afterwards. */
FSH_NODISCARD int fsh_plan_job_result(const fsh_plan *p, const fsh_sched_job_status *s,
                                      fsh_shuffle_backend *b, fsh_plan_result *out,
                                      fsh_error *err);
/* The same, each partition's batches given to sink (fsh_plan_sink; a
 * partition whose read failed part way is read again, after sink(arg,
 * part, NULL) says so) instead of held; *rows (may be NULL): the rows
 * given. Nothing is kept here. */
FSH_NODISCARD int fsh_plan_job_result_stream(const fsh_plan *p, const fsh_sched_job_status *s,
                                             fsh_shuffle_backend *b, fsh_plan_sink sink,
                                             void *sink_arg, int64_t *rows, fsh_error *err);

/* ---- checking a streamed result -------------------------------------------
 *
 * fsh_plan_batch_checksum: adds the order-independent row checksum of b's
 * rows to *sum -- per row a hash of its values (every column), summed mod
 * 2^64; what plan-fragment tasks report per partition (the definition is
 * atop plan_checksum.c). A changed, dropped or duplicated row changes it;
 * row order and batching do not. On error *sum is unchanged. */
FSH_NODISCARD int fsh_plan_batch_checksum(const fsh_batch *b, uint64_t *sum, fsh_error *err);

/* fsh_sorted_check: the properties that make a stream of batches a sort of
 * an input, checked as it streams, without holding it: its row count and
 * fsh_plan_batch_checksum (compared by the caller with the input's: equal
 * means the same multiset of rows) and that the key columns never
 * decrease (fsh_row_keys_compare under `order`) from one row to the next
 * across the whole stream -- within a batch, across batches and across
 * partitions. fsh_sorted_check_sink is an fsh_plan_sink (arg: the check):
 * a partition that begins again (b NULL for a partition already begun)
 * rolls the check back to where that partition began. */
typedef struct fsh_sorted_check fsh_sorted_check;
/* key_cols[0, n_keys) of schema (borrowed, copied), order NULL: ascending,
 * nulls last. EINVAL for a key out of range. */
FSH_NODISCARD int fsh_sorted_check_new(const fsh_schema *schema, const int32_t *key_cols,
                                       int n_keys, const fsh_sort_key *order,
                                       fsh_sorted_check **out, fsh_error *err);
void fsh_sorted_check_free(fsh_sorted_check *c); /* NULL accepted */
int fsh_sorted_check_sink(void *check, int32_t partition, fsh_batch *b, fsh_error *err);
typedef struct fsh_sorted_check_result {
  int64_t rows;
  uint64_t checksum;
  int64_t batches;
  /* the first row (0-based, in the whole stream) whose keys sort before
   * the previous row's, its partition; -1 when the stream is in order */
  int64_t disorder_row;
  int32_t disorder_partition;
} fsh_sorted_check_result;
void fsh_sorted_check_get(const fsh_sorted_check *c, fsh_sorted_check_result *out);


#ifdef __cplusplus
}
#endif
#endif
