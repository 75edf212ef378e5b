"""test_flight_keepalive.py -- OUR Flight client's keepalive against a
pyarrow.flight server (a gRPC C++ server with default settings: it allows
one ping per 5 minutes while it sends nothing, counts earlier ones as
strikes and after 3 strikes ends the connection with GOAWAY
"too_many_pings").

One client (one channel, through ctypes on FSH_LIB) with a 200 ms
keepalive: two DoGets on the channel with 2 s of idleness between them
both succeed, and a DoGet whose server pauses 5 s mid-stream (about 5
keepalive pings' worth of silence; before the client capped its pings
without data this failed with UNAVAILABLE "Too many pings") succeeds and
returns every batch."""
import ctypes
import os
import threading
import time
from ctypes import POINTER, Structure, byref, c_char, c_char_p, c_int64, c_void_p

import pyarrow as pa
import pyarrow.flight as flight
import pytest

LIB = os.environ.get("FSH_LIB")
pytestmark = pytest.mark.skipif(not LIB or not os.path.exists(LIB), reason="no FSH_LIB")


class Err(Structure):
    _fields_ = [("message", c_char * 1024)]


class ClientOptions(Structure):
    """fsh_flight_client_options (include/flightshuffle/flight.h)."""
    _fields_ = [("uri", c_char_p), ("auth_token", c_char_p), ("tls_ca_path", c_char_p),
                ("tls_cert_path", c_char_p), ("tls_key_path", c_char_p),
                ("tls_override_hostname", c_char_p), ("timeout_ms", c_int64),
                ("keepalive_ms", c_int64), ("stall_timeout_ms", c_int64)]


class Bytes(Structure):
    _fields_ = [("data", c_char_p), ("size", c_int64)]


class BatchHead(Structure):
    """The leading members of fsh_batch."""
    _fields_ = [("refcount", ctypes.c_long), ("schema", c_void_p), ("length", c_int64)]


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(LIB)
    lib.fsh_flight_client_open.argtypes = [POINTER(ClientOptions), POINTER(c_void_p), POINTER(Err)]
    lib.fsh_flight_client_close.argtypes = [c_void_p]
    lib.fsh_flight_do_get.argtypes = [c_void_p, POINTER(Bytes), POINTER(c_void_p), POINTER(Err)]
    lib.fsh_flight_reader_next.argtypes = [c_void_p, POINTER(c_void_p), POINTER(Err)]
    lib.fsh_flight_reader_free.argtypes = [c_void_p]
    lib.fsh_batch_unref.argtypes = [c_void_p]
    return lib


def table(i):
    return pa.table({"x": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64())})


class PausingServer(flight.FlightServerBase):
    """Ticket b"n:s": n batches of table(i), s seconds of silence after the first."""

    def do_get(self, context, ticket):
        n, pause = ticket.ticket.decode().split(":")

        def gen():
            for i in range(int(n)):
                yield table(i).to_batches()[0]
                if i == 0:
                    time.sleep(float(pause))

        return flight.GeneratorStream(table(0).schema, gen())


@pytest.fixture
def server():
    s = PausingServer("grpc://127.0.0.1:0")
    t = threading.Thread(target=s.serve, daemon=True)
    t.start()
    yield f"grpc://127.0.0.1:{s.port}"
    s.shutdown()
    t.join(10)


def do_get(lib, client, ticket):
    """(rc, message, lengths of the batches received)."""
    err = Err()
    reader = c_void_p()
    t = Bytes(ticket, len(ticket))
    rc = lib.fsh_flight_do_get(client, byref(t), byref(reader), byref(err))
    lengths = []
    while rc == 0:
        b = c_void_p()
        rc = lib.fsh_flight_reader_next(reader, byref(b), byref(err))
        if rc or not b:
            break
        lengths.append(ctypes.cast(b, POINTER(BatchHead)).contents.length)
        lib.fsh_batch_unref(b)
    lib.fsh_flight_reader_free(reader)
    return rc, err.message.decode(errors="replace"), lengths


def test_keepalive_against_pyarrow(lib, server):
    opts = ClientOptions(uri=server.encode(), keepalive_ms=200)
    client = c_void_p()
    err = Err()
    assert lib.fsh_flight_client_open(byref(opts), byref(client), byref(err)) == 0, err.message
    try:
        assert do_get(lib, client, b"2:0") == (0, "", [1000, 1000])
        time.sleep(2)  # idle: no call on the channel
        assert do_get(lib, client, b"3:0") == (0, "", [1000, 1000, 1000])
        # a pause mid-stream: the client pings, the server must not hang up
        t0 = time.monotonic()
        rc, msg, lengths = do_get(lib, client, b"3:5")
        assert (rc, msg) == (0, ""), f"{msg} (after {time.monotonic() - t0:.1f} s)"
        assert lengths == [1000, 1000, 1000]
        assert time.monotonic() - t0 >= 5
        assert do_get(lib, client, b"1:0") == (0, "", [1000])
    finally:
        lib.fsh_flight_client_close(client)
