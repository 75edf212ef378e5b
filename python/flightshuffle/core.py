"""core.py -- Python objects over the C library's schemas, record batches
and batch streams, with the Arrow PyCapsule interface both ways.

Data crosses the boundary through the Arrow C Data Interface: importing a
pyarrow (or any capsule-producing) object wraps its buffers, exporting hands
ours out; no buffer is copied either way.
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_void_p
from typing import Iterator, List, Optional

from . import _capsule
from ._lib import (BATCH_STREAM_GET_NEXT, BATCH_STREAM_RELEASE, BatchHead, BatchStream, FshError,
                   SchemaHead, check, fn)


class Schema:
    """An fsh_schema (one reference held)."""

    __slots__ = ("_ptr",)

    def __init__(self, ptr: int, *, take: bool = True):
        """Wraps a schema pointer; take=False takes a new reference."""
        if not ptr:
            raise ValueError("NULL schema")
        self._ptr = ptr if take else fn.fsh_schema_ref(ptr)

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            fn.fsh_schema_unref(ptr)

    @classmethod
    def from_arrow(cls, obj) -> "Schema":
        """From any object with __arrow_c_schema__ (pyarrow.Schema, ...)."""
        if isinstance(obj, Schema):
            return obj
        capsule = obj.__arrow_c_schema__()
        return cls._from_capsule(capsule)

    @classmethod
    def _from_capsule(cls, capsule) -> "Schema":
        ptr = _capsule.pointer(capsule, _capsule.SCHEMA)
        out, err = c_void_p(), FshError()
        check(fn.fsh_schema_import(ptr, byref(out), byref(err)), err, "importing a schema")
        return cls(out.value)

    @property
    def num_fields(self) -> int:
        return SchemaHead.from_address(self._ptr).n_fields

    def __arrow_c_schema__(self):
        def fill(ptr):
            err = FshError()
            check(fn.fsh_schema_export(self._ptr, ptr, byref(err)), err, "exporting a schema")
        return _capsule.make(_capsule.SCHEMA, fill)

    def equals(self, other: "Schema", check_metadata: bool = True) -> bool:
        other = Schema.from_arrow(other)  # a local keeps the reference alive
        return bool(fn.fsh_schema_equals(self._ptr, other._ptr, check_metadata, None))

    def to_pyarrow(self):
        import pyarrow as pa
        return pa.schema(self)

    def __repr__(self):
        return f"<flightshuffle.Schema {self.num_fields} fields>"


class RecordBatch:
    """An fsh_batch (one reference held)."""

    __slots__ = ("_ptr",)

    def __init__(self, ptr: int, *, take: bool = True):
        if not ptr:
            raise ValueError("NULL batch")
        self._ptr = ptr if take else fn.fsh_batch_ref(ptr)

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            fn.fsh_batch_unref(ptr)

    @classmethod
    def from_arrow(cls, obj) -> "RecordBatch":
        """From any object with __arrow_c_array__ returning a struct array
        (pyarrow.RecordBatch, ...): zero-copy."""
        if isinstance(obj, RecordBatch):
            return obj
        schema_capsule, array_capsule = obj.__arrow_c_array__()
        schema = Schema._from_capsule(schema_capsule)
        return cls._import(schema, _capsule.pointer(array_capsule, _capsule.ARRAY))

    @classmethod
    def _import(cls, schema: Schema, array_ptr: int) -> "RecordBatch":
        out, err = c_void_p(), FshError()
        check(fn.fsh_batch_import(array_ptr, schema._ptr, byref(out), byref(err)), err,
              "importing a record batch")
        return cls(out.value)

    @property
    def num_rows(self) -> int:
        return BatchHead.from_address(self._ptr).length

    @property
    def num_columns(self) -> int:
        return BatchHead.from_address(self._ptr).n_columns

    @property
    def schema(self) -> Schema:
        return Schema(BatchHead.from_address(self._ptr).schema, take=False)

    def __len__(self):
        return self.num_rows

    def slice(self, offset: int = 0, length: Optional[int] = None) -> "RecordBatch":
        n = self.num_rows
        if length is None:
            length = n - offset
        if offset < 0 or length < 0 or offset + length > n:
            raise IndexError(f"slice [{offset}, {offset + length}) of a batch of {n} rows")
        ptr = fn.fsh_batch_slice(self._ptr, offset, length)
        if not ptr:
            raise MemoryError("flightshuffle: out of memory slicing a batch")
        return RecordBatch(ptr)

    def validate(self, check_utf8: bool = True) -> None:
        """Full structural validation (raises FlightShuffleError)."""
        err = FshError()
        check(fn.fsh_batch_validate(self._ptr, check_utf8, byref(err)), err, "invalid batch")

    def equals(self, other) -> bool:
        other = RecordBatch.from_arrow(other)  # a local keeps the reference alive
        return bool(fn.fsh_batch_equals(self._ptr, other._ptr, None))

    def __arrow_c_schema__(self):
        return self.schema.__arrow_c_schema__()

    def __arrow_c_array__(self, requested_schema=None):
        # The requested schema is a hint a producer may ignore (spec'd so):
        # we hand out what we hold.
        def fill(ptr):
            err = FshError()
            check(fn.fsh_batch_export(self._ptr, ptr, byref(err)), err, "exporting a batch")
        return self.__arrow_c_schema__(), _capsule.make(_capsule.ARRAY, fill)

    def __arrow_c_stream__(self, requested_schema=None):
        return Table(self.schema, [self]).__arrow_c_stream__(requested_schema)

    def to_pyarrow(self):
        import pyarrow as pa
        return pa.record_batch(self)

    def __repr__(self):
        return f"<flightshuffle.RecordBatch {self.num_rows} rows x {self.num_columns} columns>"


class RecordBatchStream:
    """A single-pass fsh_batch_stream. Iterating yields RecordBatch objects;
    __arrow_c_stream__ hands the whole stream over (once)."""

    def __init__(self, stream: BatchStream):
        """Takes ownership of a filled BatchStream struct."""
        self._s = BatchStream()
        ctypes.memmove(byref(self._s), byref(stream), ctypes.sizeof(BatchStream))
        ctypes.memset(byref(stream), 0, ctypes.sizeof(BatchStream))

    def __del__(self):
        self.close()

    def close(self) -> None:
        s = getattr(self, "_s", None)
        if s is not None and s.release:
            BATCH_STREAM_RELEASE(s.release)(byref(s))
            ctypes.memset(byref(s), 0, ctypes.sizeof(BatchStream))

    def _live(self) -> BatchStream:
        if not self._s.release:
            raise ValueError("the stream was consumed or closed")
        return self._s

    @classmethod
    def from_arrow(cls, obj) -> "RecordBatchStream":
        """From any object with __arrow_c_stream__ (pyarrow.Table,
        RecordBatchReader, ...)."""
        if isinstance(obj, RecordBatchStream):
            return obj
        capsule = obj.__arrow_c_stream__()
        ptr = _capsule.pointer(capsule, _capsule.STREAM)
        s, err = BatchStream(), FshError()
        check(fn.fsh_stream_import(ptr, byref(s), byref(err)), err, "importing a stream")
        return cls(s)

    @property
    def schema(self) -> Schema:
        return Schema(self._live().schema, take=False)

    def read_next(self) -> Optional[RecordBatch]:
        s = self._live()
        out, err = c_void_p(), FshError()
        check(BATCH_STREAM_GET_NEXT(s.get_next)(byref(s), byref(out), byref(err)), err,
              "reading a stream")
        return RecordBatch(out.value) if out.value else None

    def __iter__(self) -> Iterator[RecordBatch]:
        while True:
            b = self.read_next()
            if b is None:
                return
            yield b

    def read_all(self) -> "Table":
        schema = self.schema
        batches = list(self)
        self.close()
        return Table(schema, batches)

    def __arrow_c_schema__(self):
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema=None):
        s = self._live()

        def fill(ptr):
            err = FshError()
            check(fn.fsh_stream_export(byref(s), ptr, byref(err)), err, "exporting a stream")
        return _capsule.make(_capsule.STREAM, fill)

    def to_pyarrow(self):
        """A pyarrow.RecordBatchReader over this stream (consumes it)."""
        import pyarrow as pa
        return pa.RecordBatchReader.from_stream(self)


class Table:
    """A schema and a list of record batches held by the C library."""

    def __init__(self, schema: Schema, batches: List[RecordBatch]):
        self.schema = schema
        self.batches = list(batches)

    @classmethod
    def from_arrow(cls, obj) -> "Table":
        """From an object with __arrow_c_stream__ or __arrow_c_array__
        (pyarrow.Table, RecordBatch, RecordBatchReader, ...): zero-copy."""
        if isinstance(obj, Table):
            return obj
        if isinstance(obj, RecordBatch):
            return cls(obj.schema, [obj])
        if hasattr(obj, "__arrow_c_stream__"):
            return RecordBatchStream.from_arrow(obj).read_all()
        if hasattr(obj, "__arrow_c_array__"):
            b = RecordBatch.from_arrow(obj)
            return cls(b.schema, [b])
        raise TypeError(f"{type(obj).__name__} exposes neither __arrow_c_stream__ nor "
                        "__arrow_c_array__")

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    def __len__(self):
        return self.num_rows

    def to_stream(self) -> RecordBatchStream:
        ptrs = (c_void_p * max(len(self.batches), 1))(*[b._ptr for b in self.batches])
        s, err = BatchStream(), FshError()
        check(fn.fsh_batch_stream_from_batches(self.schema._ptr, ptrs, len(self.batches),
                                               byref(s), byref(err)), err, "making a stream")
        return RecordBatchStream(s)

    def __arrow_c_schema__(self):
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema=None):
        return self.to_stream().__arrow_c_stream__(requested_schema)

    def to_pyarrow(self):
        import pyarrow as pa
        return pa.table(self)

    def __repr__(self):
        return (f"<flightshuffle.Table {self.num_rows} rows in {len(self.batches)} batches, "
                f"{self.schema.num_fields} columns>")
