"""test_flight_server.py -- OUR Flight server (`flightshuffle flight serve`,
run as a subprocess on a free port) driven by pyarrow.flight, the reference
client: Handshake (basic credentials as pyarrow's header style and as a
BasicAuth payload), ListFlights, GetFlightInfo, PollFlightInfo, GetSchema,
DoGet of the integration golden files (many column types) compared with
pyarrow's own reading of the same file, DoPut then DoGet back, DoExchange
(the server echoes), DoAction and ListActions; over plain TCP, TLS and
mutual TLS (certificates made by openssl at test time). Error paths: an
unknown or malformed ticket, a missing or wrong token, a plain client
against a TLS server (fails, never hangs), a client killed mid-stream (the
server keeps serving), and a clean exit on SIGTERM/SIGINT.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.ipc
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")
SHARED = Path(os.environ.get("FSH_SHARED") or REPO.parent / "shared")
GOLDEN = SHARED / "arrow-testing/data/arrow-ipc-stream/integration/1.0.0-littleendian"
CASES = [
    "primitive", "primitive_zerolength", "null", "null_trivial", "datetime", "decimal",
    "decimal256", "interval", "dictionary", "dictionary_unsigned", "nested",
    "nested_dictionary", "nested_large_offsets", "map", "union", "custom_metadata",
    "duplicate_fieldnames", "primitive_large_offsets", "primitive_no_batches",
    "recursive_nested", "extension",
]
CASES = [c for c in CASES if (GOLDEN / f"generated_{c}.arrow_file").exists()]
TOKEN = "t0k3n-for-tests"
USER, PASSWORD = "alice", "wonderland"

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")


def read_file(path):
    """pyarrow's own reading of an IPC file or stream."""
    with open(path, "rb") as f:
        if f.read(6) == b"ARROW1":
            return pyarrow.ipc.open_file(path).read_all()
    return pyarrow.ipc.open_stream(path).read_all()


class Server:
    """`flightshuffle flight serve` on a free port; stop() checks a clean exit."""

    def __init__(self, files, *extra, host="127.0.0.1"):
        self.proc = subprocess.Popen(
            [str(CLI), "flight", "serve", "--listen", f"{host}:0", *map(str, extra),
             *map(str, files)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on (grpc(\+tls)?)://(.+):(\d+)$", line.strip())
        if not m:
            self.proc.kill()
            raise AssertionError(f"no 'listening on' line: {line!r} {self.proc.stderr.read()}")
        self.scheme, self.port = m.group(1), int(m.group(4))
        self.uri = f"{self.scheme}://{'localhost' if self.scheme == 'grpc+tls' else host}:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the server did not stop within 30 s")
        err = self.proc.stderr.read()
        assert rc == 0, f"exit {rc}: {err}"
        assert "LeakSanitizer" not in err and "AddressSanitizer" not in err, err
        return err


@pytest.fixture(scope="module")
def golden_server():
    s = Server([GOLDEN / f"generated_{c}.arrow_file" for c in CASES] +
               [GOLDEN / "generated_primitive.stream"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def auth_server():
    s = Server([GOLDEN / "generated_primitive.arrow_file"], "--auth-token", TOKEN,
               "--user", USER, "--password", PASSWORD)
    yield s
    s.stop()


def bearer():
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])


# ---- plain TCP, every method --------------------------------------------------


def test_list_flights_describes_every_file(golden_server):
    client = flight.connect(golden_server.uri)
    infos = {f.descriptor.path[0].decode(): f for f in client.list_flights()}
    assert "generated_primitive" in infos and "generated_primitive-2" in infos  # .stream twin
    for case in CASES:
        path = GOLDEN / f"generated_{case}.arrow_file"
        info = infos[f"generated_{case}"]
        ref = read_file(path)
        assert info.schema.equals(ref.schema, check_metadata=True)
        assert info.total_records == ref.num_rows
        assert info.total_bytes == path.stat().st_size
        assert len(info.endpoints) == 1
        ep = info.endpoints[0]
        assert ep.ticket.ticket == f"generated_{case}".encode()
        assert [loc.uri.decode() for loc in ep.locations] == [golden_server.uri]
    # Criteria is a name prefix.
    some = list(client.list_flights(criteria=b"generated_dict"))
    assert {f.descriptor.path[0] for f in some} == {b"generated_dictionary",
                                                     b"generated_dictionary_unsigned"}


@pytest.mark.parametrize("case", CASES)
def test_do_get_matches_pyarrow(golden_server, case):
    client = flight.connect(golden_server.uri)
    path = GOLDEN / f"generated_{case}.arrow_file"
    info = client.get_flight_info(flight.FlightDescriptor.for_path(f"generated_{case}"))
    got = client.do_get(info.endpoints[0].ticket).read_all()
    ref = read_file(path)
    assert got.schema.equals(ref.schema, check_metadata=True)
    assert got.equals(ref)


def test_do_get_stream_format_file(golden_server):
    client = flight.connect(golden_server.uri)
    got = client.do_get(flight.Ticket(b"generated_primitive-2")).read_all()
    assert got.equals(read_file(GOLDEN / "generated_primitive.stream"))


def test_get_schema(golden_server):
    """(pyarrow 26 has no PollFlightInfo call: the C tests cover it.)"""
    client = flight.connect(golden_server.uri)
    d = flight.FlightDescriptor.for_path("generated_nested")
    ref = read_file(GOLDEN / "generated_nested.arrow_file")
    assert client.get_schema(d).schema.equals(ref.schema, check_metadata=True)


def test_do_put_then_do_get(golden_server):
    client = flight.connect(golden_server.uri)
    ref = read_file(GOLDEN / "generated_dictionary.arrow_file")
    d = flight.FlightDescriptor.for_path("uploads", "dict")
    writer, _ = client.do_put(d, ref.schema)
    for b in ref.to_batches(max_chunksize=3):
        writer.write_batch(b)
    writer.close()
    info = client.get_flight_info(d)
    assert info.total_records == ref.num_rows
    got = client.do_get(info.endpoints[0].ticket).read_all()
    assert got.equals(ref)
    assert b"uploads/dict" in [r.body.to_pybytes() for r in
                               client.do_action(flight.Action("list-paths", b""))]
    # A second upload replaces the first; drop removes it.
    writer, _ = client.do_put(d, ref.schema)
    writer.write_table(ref.slice(0, 2))
    writer.close()
    assert client.do_get(flight.Ticket(b"uploads/dict")).read_all().num_rows == 2
    list(client.do_action(flight.Action("drop", b"uploads/dict")))
    with pytest.raises(KeyError, match="uploads/dict"):
        client.do_get(flight.Ticket(b"uploads/dict")).read_all()


def test_do_put_cannot_replace_a_served_file(golden_server):
    client = flight.connect(golden_server.uri)
    ref = read_file(GOLDEN / "generated_primitive.arrow_file")
    writer, _ = client.do_put(flight.FlightDescriptor.for_path("generated_primitive"), ref.schema)
    writer.write_table(ref)
    with pytest.raises(pa.ArrowException, match="served file"):
        writer.close()


def test_do_exchange_echoes(golden_server):
    client = flight.connect(golden_server.uri)
    ref = read_file(GOLDEN / "generated_nested.arrow_file")
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(b"echo"))
    writer.begin(ref.schema)
    for b in ref.to_batches():
        writer.write_batch(b)
        assert reader.read_chunk().data.equals(b)
    writer.write_metadata(b"just metadata")
    assert reader.read_chunk().app_metadata.to_pybytes() == b"just metadata"
    writer.done_writing()
    assert reader.read_all().num_rows == 0
    writer.close()


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_do_exchange_bounded_when_client_does_not_read(tmp_path):
    """A client that writes 256 MiB into the echo without reading must be held
    back by flow control (the server stops reading once its echo queue is
    full), not make the server buffer it all; then every batch comes back."""
    server = Server([GOLDEN / "generated_primitive.arrow_file"])
    try:
        client = flight.connect(server.uri)
        batch = pa.record_batch([pa.array(range(1 << 17), type=pa.int64())], names=["x"])
        n = 256  # 1 MiB each
        base_kib = vm_hwm_kib(server.proc.pid)
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(b"echo"))
        writer.begin(batch.schema)
        written = []

        def write_all():
            for i in range(n):
                writer.write_batch(batch)
                written.append(i)
            writer.done_writing()

        t = threading.Thread(target=write_all, daemon=True)
        t.start()
        time.sleep(3)
        stalled_at = len(written)
        assert stalled_at < n, "the client wrote everything without reading: nothing held it back"
        grown_mib = (vm_hwm_kib(server.proc.pid) - base_kib) / 1024
        assert grown_mib < 128, f"the server grew by {grown_mib:.0f} MiB for an unread echo"
        got = 0
        for chunk in reader:
            assert chunk.data.equals(batch)
            got += 1
        t.join(timeout=30)
        assert got == n
        writer.close()
    finally:
        server.stop()


def test_actions(golden_server):
    client = flight.connect(golden_server.uri)
    types = {a.type for a in client.list_actions()}
    assert {"list-paths", "drop", "ping", "whoami"} <= types
    assert [r.body.to_pybytes() for r in client.do_action(flight.Action("ping", b""))] == [b"pong"]
    paths = {r.body.to_pybytes() for r in client.do_action(flight.Action("list-paths", b""))}
    assert {f"generated_{c}".encode() for c in CASES} <= paths
    with pytest.raises(pa.ArrowInvalid, match="unknown action 'nope'"):
        list(client.do_action(flight.Action("nope", b"")))
    with pytest.raises(flight.FlightUnauthorizedError, match="served file"):
        list(client.do_action(flight.Action("drop", b"generated_primitive")))


def test_unknown_and_malformed_tickets(golden_server):
    client = flight.connect(golden_server.uri)
    for t in [b"no-such-flight", b"../../etc/passwd", b"/etc/passwd",
              str(GOLDEN / "generated_primitive.arrow_file").encode()]:
        with pytest.raises(KeyError, match="no flight for ticket"):
            client.do_get(flight.Ticket(t)).read_all()
    for t in [b"", b"bad\x00ticket", b"x" * 5000]:
        with pytest.raises(pa.ArrowInvalid, match="malformed ticket"):
            client.do_get(flight.Ticket(t)).read_all()
    with pytest.raises(KeyError, match="no flight named"):
        client.get_flight_info(flight.FlightDescriptor.for_path("nope"))
    assert golden_server.alive()


def test_client_killed_mid_stream(golden_server, tmp_path):
    """A client that dies in the middle of a long DoGet: the server cancels
    that stream and keeps serving."""
    big = tmp_path / "big.arrows"
    t = pa.table({"x": pa.array(range(2_000_000), pa.int64()),
                  "s": pa.array([str(i) for i in range(2_000_000)])})
    with pa.OSFile(str(big), "wb") as f, pyarrow.ipc.new_stream(f, t.schema) as w:
        for b in t.to_batches(max_chunksize=10_000):
            w.write_batch(b)
    s = Server([big])
    try:
        script = textwrap.dedent(f"""
            import os, pyarrow.flight as fl
            r = fl.connect({s.uri!r}).do_get(fl.Ticket(b"big"))
            r.read_chunk()
            print("read one", flush=True)
            os._exit(0)
        """)
        for _ in range(3):
            p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=60)
            assert "read one" in p.stdout, p.stderr
        assert s.alive()
        client = flight.connect(s.uri)
        assert client.do_get(flight.Ticket(b"big")).read_all().num_rows == 2_000_000
        # And a reader abandoned in-process (cancelled by pyarrow).
        r = client.do_get(flight.Ticket(b"big"))
        r.read_chunk()
        r.cancel()
        del r
        assert [x.body.to_pybytes() for x in client.do_action(flight.Action("ping", b""))] == [b"pong"]
    finally:
        s.stop()


def test_sigint_stops_cleanly():
    s = Server([GOLDEN / "generated_primitive.arrow_file"])
    client = flight.connect(s.uri)
    assert len(list(client.list_flights())) == 1
    assert "SIGINT" in s.stop(signal.SIGINT)


def test_restart_on_same_port():
    s = Server([GOLDEN / "generated_primitive.arrow_file"])
    port = s.port
    s.stop()
    proc = subprocess.Popen([str(CLI), "flight", "serve", "--listen", f"127.0.0.1:{port}",
                             str(GOLDEN / "generated_primitive.arrow_file")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"listening on grpc://127.0.0.1:{port}"
        client = flight.connect(f"grpc://127.0.0.1:{port}")
        assert client.do_get(flight.Ticket(b"generated_primitive")).read_all().num_rows > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_bad_command_lines(tmp_path):
    r = subprocess.run([str(CLI), "flight", "serve", "--listen", "127.0.0.1:0",
                        str(tmp_path / "missing.arrow")], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "missing.arrow" in r.stderr
    r = subprocess.run([str(CLI), "flight", "serve", "--listen", "127.0.0.1:0",
                        "--tls-cert", str(tmp_path / "c.pem")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "key" in r.stderr
    r = subprocess.run([str(CLI), "flight", "serve"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr


# ---- auth ------------------------------------------------------------------------


def test_missing_or_wrong_token_is_unauthenticated(auth_server):
    client = flight.connect(auth_server.uri)
    with pytest.raises(flight.FlightUnauthenticatedError, match="Bearer"):
        list(client.list_flights())
    wrong = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer nope")])
    for call in [lambda: list(client.list_flights(options=wrong)),
                 lambda: client.do_get(flight.Ticket(b"generated_primitive"), options=wrong).read_all(),
                 lambda: client.get_schema(flight.FlightDescriptor.for_path("x"), options=wrong),
                 lambda: list(client.list_actions(options=wrong))]:
        # (pyarrow raises a plain OSError for GetSchema; the status is the same.)
        with pytest.raises((flight.FlightUnauthenticatedError, OSError), match="unauthenticated"):
            call()
    with pytest.raises(flight.FlightUnauthenticatedError):
        w, _ = client.do_put(flight.FlightDescriptor.for_path("p"), pa.schema([("a", pa.int8())]),
                             options=wrong)
        w.close()
    assert auth_server.alive()


def test_token_grants_access(auth_server):
    client = flight.connect(auth_server.uri)
    got = client.do_get(flight.Ticket(b"generated_primitive"), options=bearer()).read_all()
    assert got.equals(read_file(GOLDEN / "generated_primitive.arrow_file"))
    assert [r.body.to_pybytes() for r in
            client.do_action(flight.Action("whoami", b""), options=bearer())] == [USER.encode()]


def test_handshake_basic_token_header(auth_server):
    """pyarrow's authenticate_basic_token: 'authorization: Basic ...' on the
    Handshake call, the bearer token back in the 'authorization' header."""
    client = flight.connect(auth_server.uri)
    key, value = client.authenticate_basic_token(USER, PASSWORD)
    assert key == b"authorization" and value == f"Bearer {TOKEN}".encode()
    opts = flight.FlightCallOptions(headers=[(key, value)])
    assert len(list(client.list_flights(options=opts))) == 1
    with pytest.raises(flight.FlightUnauthenticatedError, match="invalid username or password"):
        client.authenticate_basic_token(USER, "wrong")
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.authenticate_basic_token("bob", PASSWORD)


class BasicAuthHandler(flight.ClientAuthHandler):
    """The older handshake: BasicAuth in the HandshakeRequest payload, the
    token in the response payload, sent back as 'auth-token-bin'."""

    def __init__(self, user, password):
        super().__init__()
        self.basic = flight.BasicAuth(user, password)
        self.token = b""

    def authenticate(self, outgoing, incoming):
        outgoing.write(self.basic.serialize())
        self.token = incoming.read()

    def get_token(self):
        return self.token


def test_handshake_basic_auth_payload(auth_server):
    client = flight.connect(auth_server.uri)
    handler = BasicAuthHandler(USER, PASSWORD)
    client.authenticate(handler)
    assert handler.token == TOKEN.encode()
    assert len(list(client.list_flights())) == 1  # auth-token-bin on every call
    bad = flight.connect(auth_server.uri)
    with pytest.raises(flight.FlightUnauthenticatedError, match="invalid username or password"):
        bad.authenticate(BasicAuthHandler(USER, "nope"))


def test_handshake_without_auth_echoes(golden_server):
    class Echo(flight.ClientAuthHandler):
        def authenticate(self, outgoing, incoming):
            outgoing.write(b"hello")
            self.got = incoming.read()

        def get_token(self):
            return b""

    h = Echo()
    flight.connect(golden_server.uri).authenticate(h)
    assert h.got == b"hello"


# ---- TLS ---------------------------------------------------------------------------


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("no openssl command")
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}-cn",
                "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.pem",
                cwd=d)
    # A second CA whose client certificates the server must refuse.
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=other",
            "-keyout", "other.key", "-out", "other.pem", cwd=d)
    return d


def test_tls(certs):
    s = Server([GOLDEN / "generated_nested.arrow_file"], "--tls-cert", certs / "server.pem",
               "--tls-key", certs / "server.key")
    try:
        assert s.scheme == "grpc+tls"
        client = flight.connect(s.uri, tls_root_certs=(certs / "ca.pem").read_bytes())
        info = list(client.list_flights())[0]
        assert info.endpoints[0].locations[0].uri.decode().startswith("grpc+tls://")
        got = client.do_get(flight.Ticket(b"generated_nested")).read_all()
        assert got.equals(read_file(GOLDEN / "generated_nested.arrow_file"))
        # A plain-TCP client against the TLS server fails, and quickly.
        plain = flight.connect(f"grpc://localhost:{s.port}")
        t0 = time.monotonic()
        with pytest.raises(flight.FlightUnavailableError):
            list(plain.list_flights(options=flight.FlightCallOptions(timeout=10)))
        assert time.monotonic() - t0 < 10
        assert s.alive()
        assert len(list(client.list_flights())) == 1
    finally:
        s.stop()


def test_mutual_tls(certs):
    s = Server([GOLDEN / "generated_primitive.arrow_file"], "--tls-cert", certs / "server.pem",
               "--tls-key", certs / "server.key", "--tls-client-ca", certs / "ca.pem")
    try:
        ca = (certs / "ca.pem").read_bytes()
        client = flight.connect(s.uri, tls_root_certs=ca,
                                cert_chain=(certs / "client.pem").read_bytes(),
                                private_key=(certs / "client.key").read_bytes())
        got = client.do_get(flight.Ticket(b"generated_primitive")).read_all()
        assert got.equals(read_file(GOLDEN / "generated_primitive.arrow_file"))
        # The TLS peer is the caller's identity.
        who = [r.body.to_pybytes() for r in client.do_action(flight.Action("whoami", b""))]
        assert who == [b"client-cn"]
        opts = flight.FlightCallOptions(timeout=10)
        for kwargs in [{}, {"cert_chain": (certs / "other.pem").read_bytes(),
                            "private_key": (certs / "other.key").read_bytes()}]:
            bad = flight.connect(s.uri, tls_root_certs=ca, **kwargs)
            with pytest.raises(flight.FlightUnavailableError):
                list(bad.list_flights(options=opts))
        assert s.alive()
    finally:
        s.stop()
