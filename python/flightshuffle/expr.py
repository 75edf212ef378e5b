"""expr.py -- the expression library (src/exec, include/flightshuffle/exec.h)
from Python: expressions in their JSON form (a str or a dict), evaluated,
used to filter and to project pyarrow record batches and tables.

    e = Expression({"op": ">", "args": [{"col": "key"}, {"lit": 5}]})
    filter(table, e)                      # the rows where e is true
    project(table, {"k2": {"op": "*", "args": [{"col": "key"}, {"lit": 2}]}})
    evaluate(batch, e)                    # one pyarrow array

Data crosses through the C Data Interface (no copies); errors raise
FlightShuffleError with the library's message.
"""
from __future__ import annotations

import json as _json
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_void_p
from typing import Dict, Iterable, List, Tuple, Union

from ._lib import FshError, check, lib
from .core import RecordBatch, Schema

_E = POINTER(FshError)
_DECLS = {
    "fsh_expr_from_json": (c_int, [c_char_p, c_int64, POINTER(c_void_p), _E]),
    "fsh_expr_to_json": (c_int, [c_void_p, POINTER(c_void_p), _E]),
    "fsh_expr_free": (None, [c_void_p]),
    "fsh_expr_bind": (c_int, [c_void_p, c_void_p, _E]),
    "fsh_expr_filter": (c_int, [c_void_p, c_void_p, POINTER(c_void_p), _E]),
    "fsh_project_schema": (c_int, [c_void_p, c_int64, POINTER(c_char_p), POINTER(c_void_p),
                                   POINTER(c_void_p), _E]),
    "fsh_project": (c_int, [c_void_p, c_void_p, c_int64, POINTER(c_void_p), POINTER(c_void_p),
                            _E]),
    "fsh_free": (None, [c_void_p]),
    "fsh_schema_unref": (None, [c_void_p]),
}


def _fn(name):
    f = getattr(lib, name)
    f.restype, f.argtypes = _DECLS[name]
    return f


_C = {name: _fn(name) for name in _DECLS}

Spec = Union[str, dict, "Expression"]


class Expression:
    """An expression tree in the C library (parsed from its JSON form)."""

    __slots__ = ("_ptr",)

    def __init__(self, spec: Spec):
        self._ptr = None
        text = spec if isinstance(spec, str) else _json.dumps(spec)
        data = text.encode("utf-8")
        out, err = c_void_p(), FshError()
        check(_C["fsh_expr_from_json"](data, len(data), byref(out), byref(err)), err)
        self._ptr = out.value

    @classmethod
    def of(cls, spec: Spec) -> "Expression":
        return spec if isinstance(spec, Expression) else cls(spec)

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            _C["fsh_expr_free"](ptr)

    def to_json(self) -> str:
        """The JSON form as the library prints it."""
        out, err = c_void_p(), FshError()
        check(_C["fsh_expr_to_json"](self._ptr, byref(out), byref(err)), err)
        try:
            return c_char_p(out.value).value.decode("utf-8")
        finally:
            _C["fsh_free"](out.value)

    def bind(self, schema: Schema) -> None:
        err = FshError()
        check(_C["fsh_expr_bind"](self._ptr, schema._ptr, byref(err)), err)

    def __repr__(self):
        return f"<flightshuffle.Expression {self.to_json()}>"


def _batches(data) -> Tuple[bool, List]:
    """(is_table, pyarrow record batches) of a pyarrow Table or RecordBatch."""
    import pyarrow as pa
    if isinstance(data, pa.RecordBatch):
        return False, [data]
    if isinstance(data, pa.Table):
        return True, data.to_batches()
    raise TypeError(f"expected a pyarrow Table or RecordBatch, got {type(data).__name__}")


def _filter_batch(pb, e: Expression):
    b = RecordBatch.from_arrow(pb)
    e.bind(b.schema)
    out, err = c_void_p(), FshError()
    check(_C["fsh_expr_filter"](e._ptr, b._ptr, byref(out), byref(err)), err, "filter")
    return RecordBatch(out.value).to_pyarrow()


def filter(data, predicate: Spec):
    """The rows of a pyarrow Table or RecordBatch where predicate is true
    (null counts as false); the same kind of object back."""
    import pyarrow as pa
    e = Expression.of(predicate)
    is_table, batches = _batches(data)
    got = [_filter_batch(b, e) for b in batches]
    if not is_table:
        return got[0]
    return pa.Table.from_batches(got, schema=got[0].schema if got else None) if got else \
        data.slice(0, 0)


def _project_batch(pb, names: List[str], exprs: List[Expression]):
    b = RecordBatch.from_arrow(pb)
    n = len(names)
    cnames = (c_char_p * n)(*[s.encode("utf-8") for s in names])
    cexprs = (c_void_p * n)(*[e._ptr for e in exprs])
    schema, err = c_void_p(), FshError()
    check(_C["fsh_project_schema"](b.schema._ptr, n, cnames, cexprs, byref(schema), byref(err)),
          err, "project")
    try:
        out = c_void_p()
        check(_C["fsh_project"](b._ptr, schema, n, cexprs, byref(out), byref(err)), err,
              "project")
    finally:
        _C["fsh_schema_unref"](schema)
    return RecordBatch(out.value).to_pyarrow()


def project(data, columns: Union[Dict[str, Spec], Iterable[Tuple[str, Spec]]]):
    """A new Table / RecordBatch whose columns are the given expressions
    (name -> expression) over data."""
    import pyarrow as pa
    items = list(columns.items()) if isinstance(columns, dict) else list(columns)
    names = [name for name, _ in items]
    exprs = [Expression.of(spec) for _, spec in items]
    is_table, batches = _batches(data)
    got = [_project_batch(b, names, exprs) for b in batches]
    if not is_table:
        return got[0]
    if not got:
        raise ValueError("project of a table without batches")
    return pa.Table.from_batches(got)


def evaluate(data, expr: Spec):
    """One expression over a RecordBatch (a pyarrow Array) or a Table (a
    ChunkedArray)."""
    r = project(data, {"_": expr})
    return r.column(0)


__all__ = ["Expression", "evaluate", "filter", "project"]
