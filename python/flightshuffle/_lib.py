"""_lib.py -- loads libflightshuffle with ctypes and declares the C structs
and functions the package calls (the ABI of include/flightshuffle/*.h).

The library comes from $FSH_LIB, or else <repo>/build/libflightshuffle.so.
"""
from __future__ import annotations

import ctypes
import errno as _errno
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_int,
                    c_int32, c_int64, c_long, c_size_t, c_void_p)
from pathlib import Path

# ---- the C structs ----------------------------------------------------------


class FshError(Structure):
    _fields_ = [("message", c_char * 1024)]


class ArrowSchema(Structure):
    _fields_ = [("format", c_char_p), ("name", c_char_p), ("metadata", c_void_p),
                ("flags", c_int64), ("n_children", c_int64), ("children", c_void_p),
                ("dictionary", c_void_p), ("release", c_void_p), ("private_data", c_void_p)]


class ArrowArray(Structure):
    _fields_ = [("length", c_int64), ("null_count", c_int64), ("offset", c_int64),
                ("n_buffers", c_int64), ("n_children", c_int64), ("buffers", c_void_p),
                ("children", c_void_p), ("dictionary", c_void_p), ("release", c_void_p),
                ("private_data", c_void_p)]


class ArrowArrayStream(Structure):
    _fields_ = [("get_schema", c_void_p), ("get_next", c_void_p), ("get_last_error", c_void_p),
                ("release", c_void_p), ("private_data", c_void_p)]


class BatchStream(Structure):
    """fsh_batch_stream: a pull interface over fsh_batch pointers."""
    _fields_ = [("get_next", c_void_p), ("release", c_void_p), ("schema", c_void_p),
                ("private_data", c_void_p)]


class SchemaHead(Structure):
    """The leading members of fsh_schema."""
    _fields_ = [("refcount", c_long), ("n_fields", c_int64), ("fields", c_void_p)]


class BatchHead(Structure):
    """The leading members of fsh_batch."""
    _fields_ = [("refcount", c_long), ("schema", c_void_p), ("length", c_int64),
                ("n_columns", c_int64), ("columns", c_void_p)]


class WriteOptions(Structure):
    """fsh_ipc_write_options, with spare room at the end: fsh_ipc_write_options_init
    fills the real struct, which may grow members this file does not know."""
    _fields_ = [("compression", c_int), ("compression_level", c_int32),
                ("emit_dictionary_deltas", c_bool), ("_spare", c_char * 256)]


# Function pointer types of callbacks stored in the structs.
BATCH_STREAM_GET_NEXT = CFUNCTYPE(c_int, POINTER(BatchStream), POINTER(c_void_p), POINTER(FshError))
BATCH_STREAM_RELEASE = CFUNCTYPE(None, POINTER(BatchStream))
RELEASE_PTR = CFUNCTYPE(None, c_void_p)  # any of the C Data Interface release callbacks

# ---- errors -----------------------------------------------------------------


class FlightShuffleError(Exception):
    """An error reported by the C library: `code` is the errno-style code."""

    def __init__(self, code: int, message: str):
        name = _errno.errorcode.get(code, str(code))
        super().__init__(f"{message} [{name}]")
        self.code = code
        self.message = message


def check(rc: int, err: FshError, what: str = "") -> None:
    if rc != 0:
        msg = err.message.decode("utf-8", "replace") or os.strerror(rc)
        raise FlightShuffleError(rc, f"{what}: {msg}" if what else msg)


# ---- loading ----------------------------------------------------------------


def _library_path() -> str:
    env = os.environ.get("FSH_LIB")
    if env:
        return env
    repo = Path(__file__).resolve().parents[2]
    return str(repo / "build" / "libflightshuffle.so")


def _load() -> ctypes.CDLL:
    path = _library_path()
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"flightshuffle: cannot load the C library {path} ({e}); build it with `make` "
            "or point FSH_LIB at libflightshuffle.so") from e


lib = _load()
PATH = _library_path()

_P = c_void_p
_E = POINTER(FshError)

# name: (restype, argtypes). Declared lazily so that a library built without
# some layer still loads; a missing symbol fails at its first use.
_PROTOS = {
    "fsh_malloc": (c_void_p, [c_size_t]),
    "fsh_calloc": (c_void_p, [c_size_t, c_size_t]),
    "fsh_free": (None, [c_void_p]),
    "fsh_schema_ref": (c_void_p, [_P]),
    "fsh_schema_unref": (None, [_P]),
    "fsh_batch_ref": (c_void_p, [_P]),
    "fsh_batch_unref": (None, [_P]),
    "fsh_schema_export": (c_int, [_P, _P, _E]),
    "fsh_schema_import": (c_int, [_P, POINTER(c_void_p), _E]),
    "fsh_batch_export": (c_int, [_P, _P, _E]),
    "fsh_batch_import": (c_int, [_P, _P, POINTER(c_void_p), _E]),
    "fsh_batch_validate": (c_int, [_P, c_bool, _E]),
    "fsh_batch_equals": (c_bool, [_P, _P, _E]),
    "fsh_schema_equals": (c_bool, [_P, _P, c_bool, _E]),
    "fsh_batch_slice": (c_void_p, [_P, c_int64, c_int64]),
    "fsh_stream_export": (c_int, [POINTER(BatchStream), _P, _E]),
    "fsh_stream_import": (c_int, [_P, POINTER(BatchStream), _E]),
    "fsh_batch_stream_from_batches": (c_int, [_P, POINTER(c_void_p), c_int64,
                                              POINTER(BatchStream), _E]),
    "fsh_buffer_copy": (c_void_p, [c_void_p, c_int64]),
    "fsh_buffer_unref": (None, [_P]),
    "fsh_ipc_open_path": (c_int, [c_char_p, POINTER(BatchStream), _E]),
    "fsh_ipc_open_buffer": (c_int, [_P, c_char_p, POINTER(BatchStream), _E]),
    "fsh_output_open_path": (c_int, [c_char_p, POINTER(c_void_p), _E]),
    "fsh_output_from_fd": (c_int, [c_int, c_bool, c_char_p, POINTER(c_void_p), _E]),
    "fsh_ipc_write_options_init": (None, [POINTER(WriteOptions)]),
    "fsh_compression_parse": (c_int, [c_char_p, POINTER(c_int), _E]),
    "fsh_ipc_write_batch_stream": (c_int, [POINTER(BatchStream), _P, c_bool,
                                           POINTER(WriteOptions), _E]),
}


class _Functions:
    """Attribute access to the C functions, declared on first use."""

    def __getattr__(self, name: str):
        try:
            restype, argtypes = _PROTOS[name]
        except KeyError:
            raise AttributeError(name) from None
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise FlightShuffleError(
                _errno.ENOSYS, f"{name} is not in {PATH} (is that layer built?)") from None
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(self, name, fn)
        return fn


fn = _Functions()
