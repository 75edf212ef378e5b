"""cases.py -- one pyarrow array per Arrow type we support, with nulls,
for the parametrized tests: CASES maps a test id to a factory of a
pyarrow.Table with a single column (field metadata and all)."""
import ctypes
import datetime
import decimal

import pyarrow as pa

N = 23


def _valid(i):
    return i % 4 != 1


def _with_nulls(values):
    return [v if _valid(i) else None for i, v in enumerate(values)]


class ArrowSchema(ctypes.Structure):
    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("metadata", ctypes.c_void_p), ("flags", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p),
                ("private_data", ctypes.c_void_p)]


class ArrowArray(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64),
                ("offset", ctypes.c_int64), ("n_buffers", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("buffers", ctypes.c_void_p),
                ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p),
                ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


_SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
_ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))


@_SCHEMA_RELEASE
def _schema_release(s):
    s.contents.release = None


@_ARRAY_RELEASE
def _array_release(a):
    a.contents.release = None


_KEEP = []  # memory handed to pyarrow by hand-made structs lives forever (tiny)


def _fixed_batch_from_c(fmt: bytes, width: int, n=N) -> pa.RecordBatch:
    """A one-column record batch of a fixed-width type given by its C Data
    Interface format string, made by hand (for types pyarrow has no Python
    factory or array class for, like month and day-time intervals)."""
    validity = ctypes.create_string_buffer(bytes(_bitmap(n)))
    data = ctypes.create_string_buffer(bytes((i * 7 + 3) % 251 for i in range(width * n)))
    child_bufs = (ctypes.c_void_p * 2)(ctypes.addressof(validity), ctypes.addressof(data))
    top_bufs = (ctypes.c_void_p * 1)(None)
    child = ArrowArray(length=n, null_count=sum(1 for i in range(n) if not _valid(i)),
                       offset=0, n_buffers=2, n_children=0,
                       buffers=ctypes.addressof(child_bufs),
                       release=ctypes.cast(_array_release, ctypes.c_void_p))
    child_ptrs = (ctypes.POINTER(ArrowArray) * 1)(ctypes.pointer(child))
    top = ArrowArray(length=n, null_count=0, offset=0, n_buffers=1, n_children=1,
                     buffers=ctypes.addressof(top_bufs), children=ctypes.addressof(child_ptrs),
                     release=ctypes.cast(_array_release, ctypes.c_void_p))
    cs = ArrowSchema(format=fmt, name=b"col", flags=2,
                     release=ctypes.cast(_schema_release, ctypes.c_void_p))
    cs_ptrs = (ctypes.POINTER(ArrowSchema) * 1)(ctypes.pointer(cs))
    ts = ArrowSchema(format=b"+s", name=b"", flags=0, n_children=1,
                     children=ctypes.addressof(cs_ptrs),
                     release=ctypes.cast(_schema_release, ctypes.c_void_p))
    _KEEP.extend([validity, data, child_bufs, top_bufs, child, child_ptrs, top, cs, cs_ptrs, ts])
    return pa.RecordBatch._import_from_c(ctypes.addressof(top), ctypes.addressof(ts))


def _bitmap(n):
    out = bytearray((n + 7) // 8)
    for i in range(n):
        if _valid(i):
            out[i // 8] |= 1 << (i % 8)
    return pa.py_buffer(bytes(out))


def float16():
    import struct
    # 1.0 + i/1024 in binary16: 0x3c00 + i
    data = b"".join(struct.pack("<H", 0x3C00 + i) for i in range(N))
    return pa.Array.from_buffers(pa.float16(), N, [_bitmap(N), pa.py_buffer(data)])


def ints(t):
    lo = -50 if "u" not in str(t) else 0
    return pa.array(_with_nulls([lo + i * 5 for i in range(N)]), t)


def strings(t):
    return pa.array(_with_nulls([("é" * (i % 4)) + str(i) for i in range(N)]), t)


def binaries(t):
    return pa.array(_with_nulls([bytes(range(i % 6)) for i in range(N)]), t)


def dictionary(index_type, ordered=False):
    idx = pa.array(_with_nulls([i % 5 for i in range(N)]), index_type)
    return pa.DictionaryArray.from_arrays(idx, pa.array(["a", "bb", None, "dddd", "e"]),
                                          ordered=ordered)


def sparse_union():
    ids = pa.array([(5, 2, 9)[i % 3] for i in range(N)], pa.int8())
    return pa.UnionArray.from_sparse(
        ids, [pa.array(_with_nulls(list(range(N))), pa.int32()),
              pa.array(_with_nulls([str(i) for i in range(N)])),
              pa.array([None] * N, pa.null())], ["i", "s", "n"], [5, 2, 9])


def dense_union():
    ids = pa.array([(i % 3) for i in range(N)], pa.int8())
    counts = [0, 0, 0]
    offsets = []
    for i in range(N):
        offsets.append(counts[i % 3])
        counts[i % 3] += 1
    return pa.UnionArray.from_dense(
        ids, pa.array(offsets, pa.int32()),
        [pa.array(_with_nulls(list(range(counts[0]))), pa.int64()),
         pa.array(_with_nulls([str(i) for i in range(counts[1])]), pa.large_string()),
         pa.array(_with_nulls([float(i) for i in range(counts[2])]))], ["i", "s", "f"],
        [0, 1, 2])


def nested_list(t, inner):
    vals = []
    for i in range(N):
        vals.append(None if not _valid(i) else [inner(j) for j in range(i % 4)])
    return pa.array(vals, t)


def struct_():
    return pa.array(_with_nulls([{"a": i, "b": str(i), "c": [i] * (i % 3)} for i in range(N)]),
                    pa.struct([("a", pa.int32()), ("b", pa.string()),
                               ("c", pa.list_(pa.int16()))]))


def map_(sorted_keys=False):
    vals = _with_nulls([[(f"k{j}", j if j % 2 else None) for j in range(i % 4)]
                        for i in range(N)])
    return pa.array(vals, pa.map_(pa.string(), pa.int32(), keys_sorted=sorted_keys))


def nested_dictionary():
    inner = dictionary(pa.int16())
    offsets = pa.array([min(i * 2, N) for i in range(N // 2 + 1)], pa.int32())
    return pa.ListArray.from_arrays(offsets, inner)


def dict_of_lists():
    d = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64()))
    idx = pa.array(_with_nulls([i % 4 for i in range(N)]), pa.int32())
    return pa.DictionaryArray.from_arrays(idx, d)


def struct_of_dict():
    return pa.StructArray.from_arrays([dictionary(pa.uint8()), ints(pa.int64())], ["d", "x"])


def decimals(t, scale):
    return pa.array(_with_nulls([decimal.Decimal(i * 1234567 - 999).scaleb(-scale)
                                 for i in range(N)]), t)


def dates(t):
    return pa.array(_with_nulls([datetime.date(2000 + i, 1 + i % 12, 1 + i) for i in range(N)]), t)


def ts(unit, tz=None):
    return pa.array(_with_nulls([i * 1_000_003 - 5 for i in range(N)]), pa.timestamp(unit, tz))


def mdn():
    return pa.array(_with_nulls([pa.MonthDayNano([i, -i, i * 1000]) for i in range(N)]),
                    pa.month_day_nano_interval())


def ext_metadata():
    """An unregistered extension: storage plus ARROW:extension:* metadata."""
    arr = pa.array(_with_nulls([bytes([i]) * 4 for i in range(N)]), pa.binary(4))
    field = pa.field("col", arr.type, metadata={"ARROW:extension:name": "my.ext",
                                                "ARROW:extension:metadata": "v1"})
    return pa.table([arr], schema=pa.schema([field]))


def uuid():
    storage = pa.array(_with_nulls([bytes([i]) * 16 for i in range(N)]), pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def json_():
    storage = pa.array(_with_nulls([f'{{"a": {i}}}' for i in range(N)]), pa.string())
    return pa.ExtensionArray.from_storage(pa.json_(), storage)


def _arrays():
    c = {
        "null": lambda: pa.nulls(N),
        "bool": lambda: pa.array(_with_nulls([i % 3 == 0 for i in range(N)])),
        "float16": float16,
        "float32": lambda: pa.array(_with_nulls([i / 8 for i in range(N)]), pa.float32()),
        "float64": lambda: pa.array(_with_nulls([i / 3 for i in range(N)]) , pa.float64()),
        "decimal128": lambda: decimals(pa.decimal128(20, 3), 3),
        "decimal256": lambda: decimals(pa.decimal256(60, 10), 10),
        "date32": lambda: dates(pa.date32()),
        "date64": lambda: dates(pa.date64()),
        "time32_s": lambda: pa.array(_with_nulls(list(range(N))), pa.time32("s")),
        "time32_ms": lambda: pa.array(_with_nulls(list(range(N))), pa.time32("ms")),
        "time64_us": lambda: pa.array(_with_nulls(list(range(N))), pa.time64("us")),
        "time64_ns": lambda: pa.array(_with_nulls(list(range(N))), pa.time64("ns")),
        "interval_months": lambda: pa.Table.from_batches([_fixed_batch_from_c(b"tiM", 4)]),
        "interval_day_time": lambda: pa.Table.from_batches([_fixed_batch_from_c(b"tiD", 8)]),
        "interval_month_day_nano": mdn,
        "binary": lambda: binaries(pa.binary()),
        "string": lambda: strings(pa.string()),
        "large_binary": lambda: binaries(pa.large_binary()),
        "large_string": lambda: strings(pa.large_string()),
        "fixed_size_binary": lambda: pa.array(_with_nulls([b"abc" if i % 2 else b"xyz"
                                                           for i in range(N)]), pa.binary(3)),
        "list": lambda: nested_list(pa.list_(pa.int32()), lambda j: j),
        "large_list": lambda: nested_list(pa.large_list(pa.string()), str),
        "fixed_size_list": lambda: pa.array(_with_nulls([[i, None, -i] for i in range(N)]),
                                            pa.list_(pa.int64(), 3)),
        "list_of_struct": lambda: nested_list(pa.list_(pa.struct([("x", pa.int8())])),
                                              lambda j: {"x": j}),
        "struct": struct_,
        "map": map_,
        "map_keys_sorted": lambda: map_(True),
        "sparse_union": sparse_union,
        "dense_union": dense_union,
        "dict_ordered": lambda: dictionary(pa.int32(), ordered=True),
        "nested_dictionary": nested_dictionary,
        "dict_of_lists": dict_of_lists,
        "struct_of_dict": struct_of_dict,
        "ext_uuid": uuid,
        "ext_json": json_,
    }
    for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        c[t] = (lambda t=t: ints(getattr(pa, t)()))
        c[f"dict_{t}"] = (lambda t=t: dictionary(getattr(pa, t)()))
    for unit in ("s", "ms", "us", "ns"):
        c[f"timestamp_{unit}"] = (lambda u=unit: ts(u))
        c[f"duration_{unit}"] = (lambda u=unit: pa.array(_with_nulls(list(range(N))),
                                                          pa.duration(u)))
    c["timestamp_us_utc"] = lambda: ts("us", "UTC")
    c["timestamp_ns_tz"] = lambda: ts("ns", "America/New_York")
    c["timestamp_ms_offset_tz"] = lambda: ts("ms", "+07:30")
    return c


def _table(factory):
    def make():
        x = factory()
        if isinstance(x, pa.Table):
            return x
        return pa.table({"col": x})
    return make


CASES = {name: _table(f) for name, f in sorted(_arrays().items())}
CASES["ext_metadata"] = ext_metadata
CASES["schema_metadata"] = lambda: pa.table({"a": ints(pa.int32())}).replace_schema_metadata(
    {"created_by": "flightshuffle tests", "bytes\u00e9": "\u00e9"})
CASES["duplicate_names"] = lambda: pa.Table.from_arrays(
    [ints(pa.int8()), strings(pa.string()), ints(pa.int8())], names=["a", "b", "a"])
CASES["non_nullable"] = lambda: pa.table(
    [pa.array(list(range(N)), pa.int32())],
    schema=pa.schema([pa.field("x", pa.int32(), nullable=False, metadata={"k": "v"})]))
CASES["wide"] = lambda: pa.table({f"c{i}": _arrays()[n]() for i, n in enumerate(
    ["int64", "string", "list", "struct", "dict_int16", "bool", "timestamp_us_utc"])})


def c_addresses(obj):
    """Every buffer address of a pyarrow Table / RecordBatch, as the C Data
    Interface exports them: per batch, per column, depth first through
    children and dictionaries (None for absent buffers). Works for types
    pyarrow cannot box in Python, too."""
    batches = obj.to_batches() if isinstance(obj, pa.Table) else [obj]
    out = []
    for b in batches:
        schema_capsule, array_capsule = b.__arrow_c_array__()
        ptr = _capsule_pointer(array_capsule, b"arrow_array")
        _walk_c(ArrowArray.from_address(ptr), out)
    return out


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _walk_c(a, out):
    bufs = (ctypes.c_void_p * a.n_buffers).from_address(a.buffers) if a.n_buffers else []
    out.append(("node", a.length, a.offset))
    out.extend(b for b in bufs)
    kids = (ctypes.POINTER(ArrowArray) * a.n_children).from_address(a.children) \
        if a.n_children else []
    for k in kids:
        _walk_c(k.contents, out)
    if a.dictionary:
        out.append("dictionary")
        _walk_c(ArrowArray.from_address(a.dictionary), out)


def addresses(arr):
    """pa.Array.buffers() addresses of every chunk (None when absent)."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    return [b.address if b is not None else None for c in chunks for b in c.buffers()]
