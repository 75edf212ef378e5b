"""_capsule.py -- the Arrow PyCapsule interface through ctypes: reading the
struct pointer out of a consumer-side capsule, and making producer-side
capsules whose destructor releases the struct if nobody moved it out.

Producer capsules hold a struct allocated with fsh_calloc; their destructor
calls the struct's release callback when it is still set (not consumed),
then frees the struct.
"""
from __future__ import annotations

import ctypes
from ctypes import c_char_p, c_void_p

from ._lib import ArrowArray, ArrowArrayStream, ArrowSchema, RELEASE_PTR, fn

SCHEMA = b"arrow_schema"
ARRAY = b"arrow_array"
STREAM = b"arrow_array_stream"

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = c_void_p
_get_pointer.argtypes = [ctypes.py_object, c_char_p]

# The destructor receives a capsule whose refcount is already 0: it must not
# be touched as a Python object, hence this raw-pointer prototype.
_get_pointer_raw = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [c_void_p, c_char_p, c_void_p]

_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_void_p)

_STRUCTS = {SCHEMA: ArrowSchema, ARRAY: ArrowArray, STREAM: ArrowArrayStream}


def _destroy(capsule: int, name: bytes) -> None:
    ptr = _get_pointer_raw(capsule, name)
    if not ptr:
        return
    s = _STRUCTS[name].from_address(ptr)
    if s.release:
        RELEASE_PTR(s.release)(ptr)
    fn.fsh_free(ptr)


# Kept alive for the life of the module: capsules point at them.
_destroy_schema = _DESTRUCTOR(lambda c: _destroy(c, SCHEMA))
_destroy_array = _DESTRUCTOR(lambda c: _destroy(c, ARRAY))
_destroy_stream = _DESTRUCTOR(lambda c: _destroy(c, STREAM))
_DESTRUCTORS = {SCHEMA: _destroy_schema, ARRAY: _destroy_array, STREAM: _destroy_stream}


def pointer(capsule, name: bytes) -> int:
    """The struct address inside a capsule (raises ValueError if mis-named)."""
    return _get_pointer(capsule, name)


def make(name: bytes, fill) -> object:
    """A capsule around a new zeroed struct that fill(ptr) populates; fill
    raises on failure (the struct is then freed, nothing to release)."""
    size = ctypes.sizeof(_STRUCTS[name])
    ptr = fn.fsh_calloc(1, size)
    if not ptr:
        raise MemoryError("flightshuffle: out of memory allocating a C struct")
    try:
        fill(ptr)
    except BaseException:
        fn.fsh_free(ptr)
        raise
    try:
        return _new(ptr, name, ctypes.cast(_DESTRUCTORS[name], c_void_p).value)
    except BaseException:
        _destroy_now(ptr, name)
        raise


def _destroy_now(ptr: int, name: bytes) -> None:
    s = _STRUCTS[name].from_address(ptr)
    if s.release:
        RELEASE_PTR(s.release)(ptr)
    fn.fsh_free(ptr)
