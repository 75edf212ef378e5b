"""test_flight_wire.py -- our Flight message codecs (src/flight/wire_messages.c)
against the reference implementation: pyarrow.flight serializes a message,
our decoder reads it and our encoder writes it again, and pyarrow must
deserialize what we wrote into an equal object. Where the protobuf encoding is
canonical (no schema inside) our bytes must equal pyarrow's exactly.

The C functions are internal (src/flight/wire.h) but exported by the shared
library; they are called through ctypes, with gRPC byte buffers made by the
gRPC C core the library links."""
import ctypes
import os

import pyarrow as pa
import pytest

flight = pytest.importorskip("pyarrow.flight")


class Slice(ctypes.Structure):
    # grpc_slice: a refcount pointer and a 24-byte union (refcounted
    # {length, bytes} or inlined {length, bytes[23]}).
    _fields_ = [("refcount", ctypes.c_void_p), ("data", ctypes.c_uint64 * 3)]


class Bytes(ctypes.Structure):  # fsh_bytes
    _fields_ = [("data", ctypes.POINTER(ctypes.c_uint8)), ("size", ctypes.c_int64)]


class Error(ctypes.Structure):  # fsh_error
    _fields_ = [("message", ctypes.c_char * 1024)]


# Opaque, generously sized stand-ins for the decoded C structs: the test
# never looks inside them, it only hands them back to the encoders.
STRUCT = ctypes.c_uint8 * 512


@pytest.fixture(scope="module")
def lib():
    path = os.environ.get("FSH_LIB")
    if not path or not os.path.exists(path):
        pytest.skip(f"no library at {path}")
    lib = ctypes.CDLL(path)
    try:
        lib.fsh_flight_wire_encode_info
    except AttributeError:
        pytest.skip("library built without the Flight layer")
    lib.grpc_slice_from_copied_buffer.restype = Slice
    lib.grpc_slice_from_copied_buffer.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.grpc_slice_unref.argtypes = [Slice]
    lib.grpc_raw_byte_buffer_create.restype = ctypes.c_void_p
    lib.grpc_raw_byte_buffer_create.argtypes = [ctypes.POINTER(Slice), ctypes.c_size_t]
    lib.grpc_byte_buffer_destroy.argtypes = [ctypes.c_void_p]
    lib.fsh_flight_byte_buffer_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(Bytes),
                                                 ctypes.POINTER(Error)]
    lib.fsh_bytes_reset.argtypes = [ctypes.POINTER(Bytes)]
    return lib


def to_bb(lib, data: bytes):
    s = lib.grpc_slice_from_copied_buffer(data, len(data))
    bb = lib.grpc_raw_byte_buffer_create(ctypes.byref(s), 1)
    lib.grpc_slice_unref(s)
    return bb


def from_bb(lib, bb) -> bytes:
    b, err = Bytes(), Error()
    assert lib.fsh_flight_byte_buffer_bytes(bb, ctypes.byref(b), ctypes.byref(err)) == 0
    out = ctypes.string_at(b.data, b.size) if b.size else b""
    lib.fsh_bytes_reset(ctypes.byref(b))
    lib.grpc_byte_buffer_destroy(bb)
    return out


def roundtrip(lib, kind: str, wire: bytes) -> bytes:
    """pyarrow bytes -> our decode -> our encode -> bytes."""
    dec = getattr(lib, f"fsh_flight_wire_decode_{kind}")
    enc = getattr(lib, f"fsh_flight_wire_encode_{kind}")
    reset = getattr(lib, {"descriptor": "fsh_flight_descriptor_reset",
                          "info": "fsh_flight_info_reset",
                          "action": "fsh_flight_action_reset"}[kind])
    obj, err = STRUCT(), Error()
    bb = to_bb(lib, wire)
    rc = dec(ctypes.c_void_p(bb), ctypes.byref(obj), ctypes.byref(err))
    lib.grpc_byte_buffer_destroy(ctypes.c_void_p(bb))
    assert rc == 0, err.message.decode()
    out = ctypes.c_void_p()
    rc = enc(ctypes.byref(obj), ctypes.byref(out), ctypes.byref(err))
    reset(ctypes.byref(obj))
    assert rc == 0, err.message.decode()
    return from_bb(lib, out)


def bytes_roundtrip(lib, kind: int, wire: bytes) -> bytes:
    b, err = Bytes(), Error()
    bb = to_bb(lib, wire)
    rc = lib.fsh_flight_wire_decode_bytes(kind, ctypes.c_void_p(bb), ctypes.byref(b),
                                          ctypes.byref(err))
    lib.grpc_byte_buffer_destroy(ctypes.c_void_p(bb))
    assert rc == 0, err.message.decode()
    out = ctypes.c_void_p()
    rc = lib.fsh_flight_wire_encode_bytes(kind, b.data, ctypes.c_int64(b.size),
                                          ctypes.byref(out), ctypes.byref(err))
    lib.fsh_bytes_reset(ctypes.byref(b))
    assert rc == 0, err.message.decode()
    return from_bb(lib, out)


TICKET, CRITERIA, RESULT, PUT_RESULT, SCHEMA_RESULT = range(5)


@pytest.mark.parametrize("desc", [
    flight.FlightDescriptor.for_path("shuffle", "7", "partition-3"),
    flight.FlightDescriptor.for_path(""),
    flight.FlightDescriptor.for_command(b"\x00\x01binary\xff"),
    flight.FlightDescriptor.for_command(b""),
])
def test_descriptor(lib, desc):
    wire = desc.serialize()
    ours = roundtrip(lib, "descriptor", wire)
    assert ours == wire
    assert flight.FlightDescriptor.deserialize(ours) == desc


def sample_schema():
    return pa.schema([
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("tags", pa.list_(pa.dictionary(pa.int32(), pa.utf8()))),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ], metadata={b"origin": b"pyarrow"})


def sample_info(schema):
    endpoints = [
        flight.FlightEndpoint(b"ticket-0", []),
        flight.FlightEndpoint(b"ticket-1", ["grpc://w1:7000", "grpc+tls://[::1]:7001"]),
        flight.FlightEndpoint(b"ticket-2", [flight.Location.for_grpc_tcp("w2", 7002)],
                              expiration_time=pa.scalar(1700000000123456, pa.timestamp("us", "UTC")),
                              app_metadata=b"endpoint-meta"),
    ]
    return flight.FlightInfo(schema, flight.FlightDescriptor.for_path("shuffle", "3"),
                             endpoints, total_records=12345, total_bytes=-1, ordered=True,
                             app_metadata=b"info-meta")


def test_flight_info(lib):
    info = sample_info(sample_schema())
    ours = roundtrip(lib, "info", info.serialize())
    back = flight.FlightInfo.deserialize(ours)
    assert back.schema.equals(info.schema, check_metadata=True)
    assert back.descriptor == info.descriptor
    assert back.endpoints == info.endpoints
    assert back.total_records == 12345 and back.total_bytes == -1
    assert back.ordered is True
    assert back.app_metadata == b"info-meta"
    # (FlightInfo == compares the schema *bytes*; our flatbuffer builder lays
    # the same schema out differently, so equality is checked field by field.)


def test_flight_info_zero_field_schema(lib):
    info = sample_info(pa.schema([]))
    wire = info.serialize()
    ours = roundtrip(lib, "info", wire)
    back = flight.FlightInfo.deserialize(ours)
    assert back.endpoints == info.endpoints
    assert back.descriptor == info.descriptor


def test_ticket_and_results(lib):
    for t in [flight.Ticket(b"shuffle/1/2"), flight.Ticket(b"")]:
        wire = t.serialize()
        ours = bytes_roundtrip(lib, TICKET, wire)
        assert ours == wire
        assert flight.Ticket.deserialize(ours) == t
    r = flight.Result(b"\x00result\xff")
    assert bytes_roundtrip(lib, RESULT, r.serialize()) == r.serialize()
    assert flight.Result.deserialize(bytes_roundtrip(lib, RESULT, r.serialize())).body.to_pybytes() \
        == b"\x00result\xff"


def test_schema_result(lib):
    schema = sample_schema()
    wire = flight.SchemaResult(schema).serialize()
    ours = bytes_roundtrip(lib, SCHEMA_RESULT, wire)
    assert ours == wire  # the schema bytes are carried as they are
    # ... and our own schema bytes (encoded by us) are read by pyarrow.
    info = sample_info(schema)
    ours = roundtrip(lib, "info", info.serialize())
    assert flight.FlightInfo.deserialize(ours).schema.equals(schema, check_metadata=True)


def test_action(lib):
    for a in [flight.Action("heartbeat", b'{"worker": 3}'), flight.Action("list", b"")]:
        wire = a.serialize()
        ours = roundtrip(lib, "action", wire)
        assert ours == wire
        back = flight.Action.deserialize(ours)
        assert back.type == a.type and back.body.to_pybytes() == a.body.to_pybytes()


def test_basic_auth(lib):
    auth = flight.BasicAuth("alice", "s3cret")
    wire = auth.serialize()
    user, password, err = ctypes.c_char_p(), ctypes.c_char_p(), Error()
    buf = ctypes.create_string_buffer(wire, len(wire))
    inb = Bytes(ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8)), len(wire))
    assert lib.fsh_flight_wire_decode_basic_auth(ctypes.byref(inb), ctypes.byref(user),
                                                 ctypes.byref(password), ctypes.byref(err)) == 0
    assert (user.value, password.value) == (b"alice", b"s3cret")
    lib.fsh_free(user)
    lib.fsh_free(password)
    out = Bytes()
    assert lib.fsh_flight_wire_encode_basic_auth(b"alice", b"s3cret", ctypes.byref(out),
                                                 ctypes.byref(err)) == 0
    ours = ctypes.string_at(out.data, out.size)
    lib.fsh_bytes_reset(ctypes.byref(out))
    assert ours == wire
    back = flight.BasicAuth.deserialize(ours)
    assert (back.username, back.password) == (b"alice", b"s3cret")


def test_malformed_is_rejected(lib):
    bb = to_bb(lib, b"\x0a\x7f\x01")  # FlightInfo.schema claims 127 bytes, 1 follows
    obj, err = STRUCT(), Error()
    rc = lib.fsh_flight_wire_decode_info(ctypes.c_void_p(bb), ctypes.byref(obj), ctypes.byref(err))
    lib.fsh_flight_info_reset(ctypes.byref(obj))
    lib.grpc_byte_buffer_destroy(ctypes.c_void_p(bb))
    assert rc != 0 and b"FlightInfo" in err.message
