"""sort.py -- the sorting kernels from Python: stable multi-key sort
(indices or the sorted batch), top-N, the merge of sorted batches and range
boundaries from a sample,
over record batches passed through the Arrow C Data Interface (zero-copy in,
the result handed back the same way).

Sort keys follow pyarrow's spelling: a column name or index, or a
(name, "ascending" | "descending") pair; null_placement "at_end" (default)
or "at_start" applies to every key. Order: nulls by null_placement, NaN
beside the nulls whatever the direction (as pyarrow: numbers, NaN, nulls at
the end; nulls, NaN, numbers at the start), -0.0 == 0.0, strings and
binary bytewise, dictionary columns by value.
"""
from __future__ import annotations

import array
from ctypes import POINTER, Structure, byref, c_bool, c_int, c_int32, c_int64, c_void_p
from typing import Sequence, Tuple, Union

from ._lib import FshError, check, lib
from .core import RecordBatch


class _SortKey(Structure):
    _fields_ = [("descending", c_bool), ("nulls_first", c_bool)]


_E = POINTER(FshError)
_P = c_void_p
_PROTOS = {
    "fsh_sort_indices": (c_int, [_P, POINTER(c_int32), c_int, POINTER(_SortKey),
                                 POINTER(c_int64), _E]),
    "fsh_sort_batch": (c_int, [_P, POINTER(c_int32), c_int, POINTER(_SortKey),
                               POINTER(c_void_p), _E]),
    "fsh_top_n_indices": (c_int, [_P, POINTER(c_int32), c_int, POINTER(_SortKey), c_int64,
                                  POINTER(c_int64), POINTER(c_int64), _E]),
    "fsh_top_n": (c_int, [_P, POINTER(c_int32), c_int, POINTER(_SortKey), c_int64,
                          POINTER(c_void_p), _E]),
    "fsh_range_boundaries": (c_int, [_P, POINTER(c_int32), c_int, POINTER(_SortKey), c_int32,
                                     POINTER(c_void_p), _E]),
    "fsh_merge_sorted": (c_int, [POINTER(c_void_p), c_int64, POINTER(c_int32), c_int,
                                 POINTER(_SortKey), POINTER(c_void_p), _E]),
}


def _fn(name: str):
    f = getattr(lib, name)
    f.restype, f.argtypes = _PROTOS[name]
    return f


Key = Union[str, int, Tuple[Union[str, int], str]]


def _keys(batch: RecordBatch, sort_keys: Union[Key, Sequence[Key]], null_placement: str):
    if null_placement not in ("at_end", "at_start"):
        raise ValueError(f"null_placement must be 'at_end' or 'at_start', not {null_placement!r}")
    if isinstance(sort_keys, (str, int, tuple)):
        sort_keys = [sort_keys]
    names = batch.to_pyarrow().schema.names
    cols, order = [], []
    for k in sort_keys:
        col, direction = (k if isinstance(k, tuple) else (k, "ascending"))
        if direction not in ("ascending", "descending"):
            raise ValueError(f"sort order must be 'ascending' or 'descending', not {direction!r}")
        if isinstance(col, str):
            if col not in names:
                raise KeyError(f"no column {col!r} (columns: {', '.join(names)})")
            col = names.index(col)
        cols.append(col)
        order.append(_SortKey(direction == "descending", null_placement == "at_start"))
    if not cols:
        raise ValueError("no sort key")
    n = len(cols)
    return (c_int32 * n)(*cols), (_SortKey * n)(*order), n


def sort_indices(batch, sort_keys, null_placement: str = "at_end") -> array.array:
    """The rows of batch in stable sorted order, as an array('q') of row
    numbers (pyarrow.compute.sort_indices's result, as int64)."""
    b = RecordBatch.from_arrow(batch)
    cols, order, n = _keys(b, sort_keys, null_placement)
    out = array.array("q", bytes(8 * b.num_rows))
    ptr = (c_int64 * max(1, b.num_rows)).from_buffer(out) if b.num_rows else None
    err = FshError()
    check(_fn("fsh_sort_indices")(b._ptr, cols, n, order, ptr, byref(err)), err, "sort")
    return out


def sort_batch(batch, sort_keys, null_placement: str = "at_end") -> RecordBatch:
    """batch's rows in stable sorted order (a new RecordBatch)."""
    b = RecordBatch.from_arrow(batch)
    cols, order, n = _keys(b, sort_keys, null_placement)
    out, err = c_void_p(), FshError()
    check(_fn("fsh_sort_batch")(b._ptr, cols, n, order, byref(out), byref(err)), err, "sort")
    return RecordBatch(out.value)


def top_n_indices(batch, n: int, sort_keys, null_placement: str = "at_end") -> array.array:
    """The first n row numbers of sort_indices, computed without a full sort."""
    b = RecordBatch.from_arrow(batch)
    cols, order, nk = _keys(b, sort_keys, null_placement)
    m = max(0, min(n, b.num_rows))
    out = array.array("q", bytes(8 * max(1, m)))
    got, err = c_int64(), FshError()
    buf = (c_int64 * max(1, m)).from_buffer(out)
    check(_fn("fsh_top_n_indices")(b._ptr, cols, nk, order, n, buf, byref(got), byref(err)), err,
          "top-n")
    del buf
    return out[:got.value]


def top_n(batch, n: int, sort_keys, null_placement: str = "at_end") -> RecordBatch:
    """The first n rows in sort order (a new RecordBatch)."""
    b = RecordBatch.from_arrow(batch)
    cols, order, nk = _keys(b, sort_keys, null_placement)
    out, err = c_void_p(), FshError()
    check(_fn("fsh_top_n")(b._ptr, cols, nk, order, n, byref(out), byref(err)), err, "top-n")
    return RecordBatch(out.value)


def range_boundaries(sample, n_partitions: int, sort_keys,
                     null_placement: str = "at_end") -> RecordBatch:
    """At most n_partitions - 1 strictly increasing boundary rows (the key
    columns) at the quantiles of the sorted sample."""
    b = RecordBatch.from_arrow(sample)
    cols, order, nk = _keys(b, sort_keys, null_placement)
    out, err = c_void_p(), FshError()
    check(_fn("fsh_range_boundaries")(b._ptr, cols, nk, order, n_partitions, byref(out),
                                      byref(err)), err, "range boundaries")
    return RecordBatch(out.value)


def merge_sorted(batches, sort_keys, null_placement: str = "at_end") -> RecordBatch:
    """One batch of the rows of `batches` (one schema, each already sorted
    by sort_keys) in sorted order; equal keys in input order (a stable sort
    of their concatenation)."""
    bs = [RecordBatch.from_arrow(b) for b in batches]
    if not bs:
        raise ValueError("no batch to merge")
    cols, order, nk = _keys(bs[0], sort_keys, null_placement)
    ptrs = (c_void_p * len(bs))(*[b._ptr for b in bs])
    out, err = c_void_p(), FshError()
    check(_fn("fsh_merge_sorted")(ptrs, len(bs), cols, nk, order, byref(out), byref(err)), err,
          "merge")
    return RecordBatch(out.value)


__all__ = ["sort_indices", "sort_batch", "top_n_indices", "top_n", "range_boundaries",
           "merge_sorted"]
