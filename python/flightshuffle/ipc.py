"""ipc.py -- Arrow IPC files and streams read and written by the C library
(src/ipc), handed to and from pyarrow through the C Stream Interface."""
from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_int, c_void_p

from ._lib import BatchStream, FlightShuffleError, FshError, WriteOptions, check, fn
from .core import RecordBatch, RecordBatchStream, Table

_FORMATS = ("stream", "file")


def open_ipc(path) -> RecordBatchStream:
    """Opens an IPC file or stream (detected by its magic) as a stream of
    our record batches."""
    s, err = BatchStream(), FshError()
    check(fn.fsh_ipc_open_path(os.fsencode(path), byref(s), byref(err)), err,
          f"reading {os.fspath(path)}")
    return RecordBatchStream(s)


def read_ipc(path):
    """Reads an IPC file or stream with our reader into a pyarrow.Table."""
    return open_ipc(path).to_pyarrow().read_all()


def open_ipc_buffer(data) -> RecordBatchStream:
    """Like open_ipc, from bytes-like data (copied once into C memory)."""
    mv = memoryview(data).cast("B")
    n = mv.nbytes
    src = (ctypes.c_char * n).from_buffer_copy(mv) if n else None
    buf = fn.fsh_buffer_copy(ctypes.addressof(src) if src is not None else None, n)
    if not buf:
        raise MemoryError("flightshuffle: out of memory copying an IPC buffer")
    s, err = BatchStream(), FshError()
    try:
        check(fn.fsh_ipc_open_buffer(buf, b"<memory>", byref(s), byref(err)), err,
              "reading an IPC buffer")
    finally:
        fn.fsh_buffer_unref(buf)  # the stream keeps its own reference
    return RecordBatchStream(s)


def read_ipc_buffer(data):
    """Reads IPC bytes (file or stream format) into a pyarrow.Table."""
    return open_ipc_buffer(data).to_pyarrow().read_all()


def _options(compression, dictionary_deltas: bool = False) -> WriteOptions:
    opts = WriteOptions()
    fn.fsh_ipc_write_options_init(byref(opts))
    if compression is None:
        compression = "none"
    c, err = c_int(), FshError()
    check(fn.fsh_compression_parse(str(compression).encode(), byref(c), byref(err)), err,
          "compression")
    opts.compression = c.value
    opts.emit_dictionary_deltas = bool(dictionary_deltas)
    return opts


def _as_stream(data) -> RecordBatchStream:
    if isinstance(data, RecordBatchStream):
        return data
    if isinstance(data, (Table, RecordBatch)):
        return Table.from_arrow(data).to_stream()
    if hasattr(data, "__arrow_c_stream__"):
        return RecordBatchStream.from_arrow(data)
    if hasattr(data, "__arrow_c_array__"):
        return Table.from_arrow(data).to_stream()
    raise TypeError(f"cannot write {type(data).__name__}: it exposes neither "
                    "__arrow_c_stream__ nor __arrow_c_array__")


def _write(data, out: int, format: str, compression, dictionary_deltas) -> None:
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS}, not {format!r}")
    opts = _options(compression, dictionary_deltas)
    stream = _as_stream(data)
    err = FshError()
    try:
        rc = fn.fsh_ipc_write_batch_stream(byref(stream._live()), out, format == "file",
                                           byref(opts), byref(err))
    finally:
        stream.close()
    check(rc, err, "writing IPC")


def write_ipc(data, path, format: str = "stream", compression: str = "none",
              dictionary_deltas: bool = False) -> None:
    """Writes data (pyarrow.Table / RecordBatch / RecordBatchReader, our
    objects, anything with the PyCapsule interface) to path with our writer,
    in the 'stream' or 'file' format, compressed with 'none', 'lz4' or
    'zstd'. The file appears atomically (temp file + rename). With
    dictionary_deltas, a stream sends grown dictionaries as deltas."""
    opts_check = _options(compression)  # validate before creating anything
    del opts_check
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS}, not {format!r}")
    out, err = c_void_p(), FshError()
    check(fn.fsh_output_open_path(os.fsencode(path), byref(out), byref(err)), err,
          f"opening {os.fspath(path)}")
    _write(data, out.value, format, compression, dictionary_deltas)


def write_ipc_buffer(data, format: str = "stream", compression: str = "none",
                     dictionary_deltas: bool = False) -> bytes:
    """Like write_ipc, returning the bytes."""
    fd = os.memfd_create("flightshuffle-ipc")
    try:
        out, err = c_void_p(), FshError()
        check(fn.fsh_output_from_fd(fd, False, b"<memory>", byref(out), byref(err)), err,
              "opening a memory file")
        _write(data, out.value, format, compression, dictionary_deltas)
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


__all__ = ["open_ipc", "read_ipc", "open_ipc_buffer", "read_ipc_buffer", "write_ipc",
           "write_ipc_buffer", "FlightShuffleError"]
