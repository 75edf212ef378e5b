"""flightshuffle -- the C library from Python.

pyarrow (or any Arrow PyCapsule producer) in, pyarrow out, no copies: data
crosses through the Arrow C Data Interface. Our own objects (Table,
RecordBatch, RecordBatchStream, Schema) expose __arrow_c_stream__ /
__arrow_c_array__ / __arrow_c_schema__, so pyarrow.table(obj) and
pyarrow.record_batch(obj) accept them.

The C library is loaded from $FSH_LIB, or else <repo>/build/libflightshuffle.so.
"""
from ._lib import PATH as library_path
from ._lib import FlightShuffleError
from .core import RecordBatch, RecordBatchStream, Schema, Table
from . import expr  # Expression, filter, project, evaluate
from . import ops  # group_by and join: the hash aggregate and hash join
from .ipc import (open_ipc, open_ipc_buffer, read_ipc, read_ipc_buffer, write_ipc,
                  write_ipc_buffer)
from . import sort  # sort_indices, sort_batch, top_n, range_boundaries (flightshuffle.sort)


def from_arrow(obj):
    """Imports any Arrow PyCapsule producer: a RecordBatch for objects with
    __arrow_c_array__ only, a Table otherwise. Zero-copy."""
    if hasattr(obj, "__arrow_c_stream__") or isinstance(obj, (Table, RecordBatchStream)):
        return Table.from_arrow(obj)
    return RecordBatch.from_arrow(obj)


def roundtrip(obj):
    """pyarrow -> C -> pyarrow through the C Data Interface (a self-test:
    the result shares every buffer with the input)."""
    import pyarrow as pa
    if isinstance(obj, pa.RecordBatch):
        return RecordBatch.from_arrow(obj).to_pyarrow()
    if isinstance(obj, pa.RecordBatchReader):
        return RecordBatchStream.from_arrow(obj).to_pyarrow()
    return Table.from_arrow(obj).to_pyarrow()


__all__ = ["FlightShuffleError", "RecordBatch", "RecordBatchStream", "Schema", "Table",
           "from_arrow", "roundtrip", "open_ipc", "open_ipc_buffer", "read_ipc",
           "read_ipc_buffer", "write_ipc", "write_ipc_buffer", "library_path"]
