"""ops.py -- the hash aggregate and the hash join of the C library
(include/flightshuffle/exec.h) on Arrow tables.

Tables cross through the Arrow C Data Interface (no copies); the result is a
flightshuffle Table (pyarrow.table(result) is zero-copy too).

    group_by(table, ["k"], [("v", "sum"), ("v", "mean"), (None, "count_all")])
    join(left, right, ["k"], ["k"], "left outer")

Names follow pyarrow: an aggregate's column is "<column>_<function>"
("count_all" for count(*)); join types are pyarrow's ("inner", "left outer",
"right outer", "full outer", "left semi", "left anti"), and a right column
whose name the left already has gets the suffix "_right".
"""
from __future__ import annotations

from ctypes import POINTER, Structure, byref, c_bool, c_char_p, c_int, c_int32, c_int64, c_void_p
from typing import Iterable, List, Optional, Sequence, Tuple

from ._lib import FshError, check, lib
from .core import RecordBatch, Schema, Table


class _AggSpec(Structure):
    _fields_ = [("fn", c_int), ("column", c_int32), ("name", c_char_p)]


_E = POINTER(FshError)
_PROTOS = {
    "fsh_hash_agg_new": (c_int, [c_void_p, POINTER(c_int32), c_int, POINTER(_AggSpec), c_int, c_int,
                                 c_int64, POINTER(c_void_p), _E]),
    "fsh_hash_agg_push": (c_int, [c_void_p, c_void_p, _E]),
    "fsh_hash_agg_finish": (c_int, [c_void_p, POINTER(c_void_p), _E]),
    "fsh_hash_agg_output_schema": (c_void_p, [c_void_p]),
    "fsh_hash_agg_free": (None, [c_void_p]),
    "fsh_hash_join_new": (c_int, [c_void_p, c_void_p, POINTER(c_int32), POINTER(c_int32), c_int,
                                  c_int, c_bool, c_int64, POINTER(c_void_p), _E]),
    "fsh_hash_join_build": (c_int, [c_void_p, c_void_p, _E]),
    "fsh_hash_join_probe": (c_int, [c_void_p, c_void_p, POINTER(c_void_p), _E]),
    "fsh_hash_join_finish": (c_int, [c_void_p, POINTER(c_void_p), _E]),
    "fsh_hash_join_output_schema": (c_void_p, [c_void_p]),
    "fsh_hash_join_free": (None, [c_void_p]),
}


def _fn(name):
    f = getattr(lib, name)
    f.restype, f.argtypes = _PROTOS[name]
    return f


# fsh_agg_fn, by pyarrow's names
AGG_FUNCTIONS = {"count_all": 0, "count": 1, "count_distinct": 2, "sum": 3, "mean": 4, "min": 5,
                 "max": 6}
# fsh_join_type, by pyarrow's names
JOIN_TYPES = {"inner": 0, "left outer": 1, "right outer": 2, "full outer": 3, "left semi": 4,
              "left anti": 5}
# fsh_agg_mode
SINGLE, PARTIAL, FINAL = 0, 1, 2


def _columns(schema, names: Iterable[str], what: str) -> List[int]:
    fields = [f.name for f in schema.to_pyarrow()]
    out = []
    for n in names:
        if n not in fields:
            raise KeyError(f"{what}: no column '{n}' (columns: {', '.join(fields)})")
        out.append(fields.index(n))
    return out


def _aggregate(schema: Schema, batches, keys, aggregations, mode, memory_budget) -> Table:
    kc = _columns(schema, keys, "group_by keys")
    specs = (_AggSpec * max(len(aggregations), 1))()
    names = []
    for i, (col, func) in enumerate(aggregations):
        if func not in AGG_FUNCTIONS:
            raise ValueError(f"unknown aggregate '{func}' (known: {', '.join(AGG_FUNCTIONS)})")
        name = "count_all" if func == "count_all" else f"{col}_{func}"
        names.append(name.encode())
        column = -1 if func == "count_all" else _columns(schema, [col], "aggregate")[0]
        specs[i] = _AggSpec(AGG_FUNCTIONS[func], column, names[-1])
    keys_arr = (c_int32 * max(len(kc), 1))(*kc)
    agg, err = c_void_p(), FshError()
    check(_fn("fsh_hash_agg_new")(schema._ptr, keys_arr, len(kc), specs, len(aggregations), mode,
                                  memory_budget, byref(agg), byref(err)), err, "group_by")
    try:
        for b in batches:
            check(_fn("fsh_hash_agg_push")(agg, b._ptr, byref(err)), err, "group_by")
        out = c_void_p()
        check(_fn("fsh_hash_agg_finish")(agg, byref(out), byref(err)), err, "group_by")
        result = RecordBatch(out.value)
        return Table(result.schema, [result])
    finally:
        _fn("fsh_hash_agg_free")(agg)


def group_by(table, keys: Sequence[str], aggregations: Sequence[Tuple[Optional[str], str]],
             partial: bool = False, memory_budget: int = 0) -> Table:
    """Hash aggregate of `table` grouped by `keys` (may be empty: one row).
    aggregations: (column, function) pairs, function in AGG_FUNCTIONS
    (column None for "count_all"). Output: the keys, then the aggregates;
    with partial=True the partial states instead (exec.h), to be merged by
    merge_partials."""
    t = Table.from_arrow(table)
    return _aggregate(t.schema, t.batches, keys, aggregations, PARTIAL if partial else SINGLE,
                      memory_budget)


def merge_partials(partials: Iterable, schema, keys: Sequence[str],
                   aggregations: Sequence[Tuple[Optional[str], str]],
                   memory_budget: int = 0) -> Table:
    """The final phase: partial-state tables (group_by(..., partial=True) of
    tables of `schema`, the same keys and aggregations) -> final values."""
    batches = [b for p in partials for b in Table.from_arrow(p).batches]
    return _aggregate(Schema.from_arrow(schema), batches, keys, aggregations, FINAL,
                      memory_budget)


def join(left, right, left_keys: Sequence[str], right_keys: Optional[Sequence[str]] = None,
         join_type: str = "inner", build: str = "right", memory_budget: int = 0) -> Table:
    """Hash join of two tables on left_keys[i] == right_keys[i] (null keys
    never match). build: "right" or "left", the side kept in the hash table.
    Output: the left columns, then the right ones (none for semi/anti)."""
    if join_type not in JOIN_TYPES:
        raise ValueError(f"unknown join type '{join_type}' (known: {', '.join(JOIN_TYPES)})")
    if build not in ("left", "right"):
        raise ValueError("build must be 'left' or 'right'")
    lt, rt = Table.from_arrow(left), Table.from_arrow(right)
    right_keys = list(left_keys) if right_keys is None else list(right_keys)
    lk = _columns(lt.schema, left_keys, "join left keys")
    rk = _columns(rt.schema, right_keys, "join right keys")
    if len(lk) != len(rk) or not lk:
        raise ValueError("join needs as many left keys as right keys, at least one")
    la, ra = (c_int32 * len(lk))(*lk), (c_int32 * len(rk))(*rk)
    j, err = c_void_p(), FshError()
    check(_fn("fsh_hash_join_new")(lt.schema._ptr, rt.schema._ptr, la, ra, len(lk),
                                   JOIN_TYPES[join_type], build == "left", memory_budget,
                                   byref(j), byref(err)), err, "join")
    try:
        build_t, probe_t = (lt, rt) if build == "left" else (rt, lt)
        for b in build_t.batches:
            check(_fn("fsh_hash_join_build")(j, b._ptr, byref(err)), err, "join")
        outs = []
        for b in probe_t.batches:
            out = c_void_p()
            check(_fn("fsh_hash_join_probe")(j, b._ptr, byref(out), byref(err)), err, "join")
            outs.append(RecordBatch(out.value))
        out = c_void_p()
        check(_fn("fsh_hash_join_finish")(j, byref(out), byref(err)), err, "join")
        if out.value:
            outs.append(RecordBatch(out.value))
        schema = Schema(_fn("fsh_hash_join_output_schema")(j), take=False)
        return Table(schema, outs)
    finally:
        _fn("fsh_hash_join_free")(j)
