"""test_flight_client.py -- OUR Flight client (through the `flightshuffle
flight ...` CLI) against pyarrow.flight, the reference implementation.

A pyarrow.flight.FlightServerBase runs in-process on a thread (port 0)
serving the integration golden files (many column types, dictionaries,
nested types); we drive the CLI and compare what we receive with what
pyarrow served (reading our -o output with pyarrow.ipc.open_stream), and
what we send with what pyarrow stored. Also: bearer-token auth (a server
middleware), basic-credentials Handshake (header and payload styles),
TLS and mutual TLS with certificates made by openssl at test time,
error statuses surfaced with their messages, a server killed or stalled
mid-stream (an error, never a hang), and 300 MB messages both ways.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import subprocess
import sys
import textwrap
import threading
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

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")


def golden(case):
    return pa.ipc.open_file(GOLDEN / f"generated_{case}.arrow_file").read_all()


def nbytes(t):
    """A stand-in for total_bytes (pyarrow 26's Table.nbytes crashes on
    union columns, ChunkedArray.buffers() fails on extension types):
    what matters is that the number we print is the one served."""
    return 1000 * t.num_rows + len(t.schema)


def cli(*args, timeout=120, check=True):
    """Runs `flightshuffle flight ARGS`; returns the CompletedProcess."""
    p = subprocess.run([str(CLI), "flight", *map(str, args)], capture_output=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"flightshuffle flight {' '.join(map(str, args))} exited "
                             f"{p.returncode}:\n{p.stderr.decode(errors='replace')}")
    return p


def out(p):
    return p.stdout.decode()


def err(p):
    return p.stderr.decode(errors="replace")


def same(got: pa.Table, want: pa.Table):
    assert got.schema.equals(want.schema, check_metadata=True), f"{got.schema}\n!=\n{want.schema}"
    assert got.num_rows == want.num_rows
    assert got.equals(want)


# ---- the reference server -----------------------------------------------------------

class RefServer(flight.FlightServerBase):
    """Serves `tables` (ticket/path name -> Table), stores DoPuts, echoes
    DoExchange, answers a few actions."""

    def __init__(self, location="grpc://127.0.0.1:0", tables=None, **kw):
        super().__init__(location, **kw)
        self.tables = dict(tables or {})
        self.puts = {}
        self.scheme = location.split(":")[0]

    def uri(self, host="127.0.0.1"):
        return f"{self.scheme}://{host}:{self.port}"

    def _info(self, name):
        t = self.tables[name]
        return flight.FlightInfo(t.schema, flight.FlightDescriptor.for_path(name),
                                 [flight.FlightEndpoint(name, [self.uri()])],
                                 t.num_rows, nbytes(t))

    def _name(self, descriptor):
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            name = "/".join(p.decode() for p in descriptor.path)
        else:
            name = descriptor.command.decode()
        if name not in self.tables:
            raise KeyError(f"unknown flight '{name}'")
        return name

    def list_flights(self, context, criteria):
        for name in self.tables:
            yield self._info(name)

    def get_flight_info(self, context, descriptor):
        return self._info(self._name(descriptor))

    def get_schema(self, context, descriptor):
        return flight.SchemaResult(self.tables[self._name(descriptor)].schema)

    def do_get(self, context, ticket):
        name = ticket.ticket.decode()
        if name not in self.tables:
            raise KeyError(f"unknown ticket '{name}'")
        return flight.RecordBatchStream(self.tables[name])

    def do_put(self, context, descriptor, reader, writer):
        t = reader.read_all()
        self.puts[tuple(p.decode() for p in descriptor.path)] = t
        writer.write(pa.py_buffer(f"stored {t.num_rows} rows".encode()))

    def do_exchange(self, context, descriptor, reader, writer):
        started = False
        for chunk in reader:
            if not started:
                writer.begin(reader.schema)
                started = True
            if chunk.data is not None:
                writer.write_batch(chunk.data)
        if not started:
            writer.begin(reader.schema)

    def list_actions(self, context):
        return [("echo", "answers the body"), ("count", "answers 1, 2, 3")]

    def do_action(self, context, action):
        if action.type == "echo":
            yield flight.Result(action.body)
        elif action.type == "count":
            for i in (1, 2, 3):
                yield flight.Result(str(i).encode())
        else:
            raise NotImplementedError(f"no action '{action.type}'")


def serve(server):
    t = threading.Thread(target=server.serve, daemon=True)
    t.start()
    return server


@pytest.fixture(scope="module")
def tables():
    return {c: golden(c) for c in CASES}


@pytest.fixture(scope="module")
def ref(tables):
    s = serve(RefServer(tables=tables))
    yield s
    s.shutdown()


# ---- list / info / schema / get / put / exchange / actions --------------------------

def test_list(ref, tables):
    text = out(cli("list", ref.uri()))
    assert f"{len(tables)} flights" in text
    for name, t in tables.items():
        block = text.split(f'descriptor: path ["{name}"]\n')[1].split("flight ")[0]
        assert f"  schema: {len(t.schema)} fields\n" in block
        assert f"  total_records: {t.num_rows}\n" in block
        assert f"  total_bytes: {nbytes(t)}\n" in block
        assert f'  endpoint 0: ticket "{name}" {ref.uri()}\n' in block
        for f in t.schema:
            assert f"    {f.name}: " in block


@pytest.mark.parametrize("case", CASES)
def test_get(ref, tables, case, tmp_path):
    p = cli("get", ref.uri(), case, "-o", tmp_path / "got.arrows")
    got = pa.ipc.open_stream(tmp_path / "got.arrows").read_all()
    same(got, tables[case])
    assert f"{tables[case].num_rows} rows" in err(p)


def test_get_to_stdout(ref, tables):
    p = cli("get", ref.uri(), "primitive")
    same(pa.ipc.open_stream(pa.py_buffer(p.stdout)).read_all(), tables["primitive"])


@pytest.mark.parametrize("case", CASES)
def test_put(ref, case):
    path = GOLDEN / f"generated_{case}.arrow_file"
    p = cli("put", ref.uri(), f"put/{case}", path)
    want = pa.ipc.open_file(path).read_all()
    same(ref.puts[("put", case)], want)
    assert f"put result: \"stored {want.num_rows} rows\"" in out(p)


@pytest.mark.parametrize("case", ["primitive", "dictionary", "nested", "map", "union"])
def test_exchange(ref, case, tmp_path):
    path = GOLDEN / f"generated_{case}.arrow_file"
    if not path.exists():
        pytest.skip(f"no {path.name}")
    cli("exchange", ref.uri(), f"x/{case}", path, "-o", tmp_path / "echo.arrows")
    same(pa.ipc.open_stream(tmp_path / "echo.arrows").read_all(),
         pa.ipc.open_file(path).read_all())


def test_info_and_schema(ref, tables):
    t = tables["nested"]
    text = out(cli("info", ref.uri(), "nested"))
    assert 'descriptor: path ["nested"]' in text
    assert f"total_records: {t.num_rows}" in text
    text = out(cli("schema", ref.uri(), "nested"))
    assert text.startswith(f"schema: {len(t.schema)} fields\n")
    for f in t.schema:
        assert f"  {f.name}: " in text
    # a CMD descriptor
    assert 'descriptor: path ["nested"]' in out(cli("info", ref.uri(), "nested", "--cmd"))


def test_actions(ref):
    text = out(cli("list", ref.uri()))  # warm-up, then the actions
    text = out(cli("actions", ref.uri()))
    assert "echo: answers the body\n" in text and "count: answers 1, 2, 3\n" in text
    assert "2 actions" in text
    assert 'result 0: "hello flight"' in out(cli("action", ref.uri(), "echo", "hello flight"))
    text = out(cli("action", ref.uri(), "count"))
    assert 'result 0: "1"\nresult 1: "2"\nresult 2: "3"\n3 results' in text


# ---- errors ------------------------------------------------------------------------------

def test_unknown_ticket_is_not_found(ref):
    p = cli("get", ref.uri(), "nope", check=False)
    assert p.returncode == 1
    assert f"DoGet {ref.uri()}: NOT_FOUND: " in err(p) and "unknown ticket 'nope'" in err(p)


def test_unknown_flight_info(ref):
    p = cli("info", ref.uri(), "nope", check=False)
    assert p.returncode == 1
    assert f"GetFlightInfo {ref.uri()}: NOT_FOUND: " in err(p) and "unknown flight 'nope'" in err(p)


def test_unknown_action(ref):
    p = cli("action", ref.uri(), "nope", check=False)
    assert p.returncode == 1
    assert f"DoAction {ref.uri()}: UNIMPLEMENTED: " in err(p) and "no action 'nope'" in err(p)


def test_poll_is_unimplemented_in_pyarrow(ref):
    p = cli("poll", ref.uri(), "primitive", check=False)
    assert p.returncode == 1
    assert f"PollFlightInfo {ref.uri()}: UNIMPLEMENTED" in err(p)


def test_connection_refused():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli("list", f"grpc://127.0.0.1:{port}", "--timeout-ms", "5000", check=False)
    assert p.returncode == 1
    assert f"ListFlights grpc://127.0.0.1:{port}: UNAVAILABLE" in err(p)


def test_bad_uri():
    p = cli("list", "http://127.0.0.1:1", check=False)
    assert p.returncode == 1 and "http://127.0.0.1:1" in err(p)


# ---- auth --------------------------------------------------------------------------------

class NoopAuthHandler(flight.ServerAuthHandler):
    """Lets every call through the old-style auth (the middleware decides)."""

    def authenticate(self, outgoing, incoming):
        pass

    def is_valid(self, token):
        return ""


class BearerMiddleware(flight.ServerMiddleware):
    def __init__(self, token):
        self.token = token

    def sending_headers(self):
        return {"authorization": f"Bearer {self.token}"}


class BearerAuthFactory(flight.ServerMiddlewareFactory):
    """Every call needs "authorization: Bearer <token>"; a Handshake with
    "authorization: Basic base64(user:password)" answers the token in a
    response header (pyarrow's authenticate_basic_token convention)."""

    def __init__(self, token, user, password):
        import base64
        self.token = token
        self.basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.seen = []

    def start_call(self, info, headers):
        auth = headers.get("authorization", [None])[0]
        self.seen.append((info.method, auth))
        if info.method == flight.FlightMethod.HANDSHAKE:
            if auth == self.basic:
                return BearerMiddleware(self.token)
            raise flight.FlightUnauthenticatedError("bad credentials")
        if auth != f"Bearer {self.token}":
            raise flight.FlightUnauthenticatedError("invalid or missing token")
        return None


@pytest.fixture(scope="module")
def auth_server(tables):
    factory = BearerAuthFactory("s3cret-token", "alice", "wonderland")
    s = serve(RefServer(tables={"primitive": tables["primitive"]},
                        auth_handler=NoopAuthHandler(), middleware={"auth": factory}))
    s.factory = factory
    yield s
    s.shutdown()


def test_token_accepted(auth_server, tables, tmp_path):
    uri = auth_server.uri()
    assert "1 flights" in out(cli("list", uri, "--auth-token", "s3cret-token"))
    cli("get", uri, "primitive", "-o", tmp_path / "t.arrows", "--auth-token", "s3cret-token")
    same(pa.ipc.open_stream(tmp_path / "t.arrows").read_all(), tables["primitive"])
    cli("put", uri, "p", GOLDEN / "generated_primitive.arrow_file", "--auth-token", "s3cret-token")
    assert ("p",) in auth_server.puts
    # the header really is "authorization: Bearer <token>" on every call
    assert (flight.FlightMethod.DO_PUT, "Bearer s3cret-token") in auth_server.factory.seen


@pytest.mark.parametrize("token", [None, "wrong"])
def test_token_refused(auth_server, token):
    args = ["--auth-token", token] if token else []
    for cmd in (["list"], ["get", "primitive"], ["schema", "primitive"],
                ["put", "p", GOLDEN / "generated_primitive.arrow_file"],
                ["exchange", "x", GOLDEN / "generated_primitive.arrow_file"]):
        p = cli(cmd[0], auth_server.uri(), *cmd[1:], *args, check=False)
        assert p.returncode == 1, cmd
        assert "UNAUTHENTICATED" in err(p) and "invalid or missing token" in err(p), err(p)


def test_handshake_header_style(auth_server):
    uri = auth_server.uri()
    assert "token: s3cret-token" in out(cli("handshake", uri, "alice", "wonderland"))
    # --user/--password: Handshake first, then the calls carry the token
    assert "1 flights" in out(cli("list", uri, "--user", "alice", "--password", "wonderland"))
    p = cli("list", uri, "--user", "alice", "--password", "nope", check=False)
    assert p.returncode == 1 and "Handshake" in err(p) and "UNAUTHENTICATED" in err(p)


class PayloadAuthHandler(flight.ServerAuthHandler):
    """The older handshake: credentials in the request payload (BasicAuth
    protobuf: field 2 username, field 3 password), the token in the
    response payload."""

    def authenticate(self, outgoing, incoming):
        req = incoming.read()
        if b"bob" in req and b"builder" in req:
            outgoing.write(b"payload-token")
        else:
            raise flight.FlightUnauthenticatedError("who are you")

    def is_valid(self, token):
        return ""


def test_handshake_payload_style():
    s = serve(RefServer(auth_handler=PayloadAuthHandler()))
    try:
        assert "token: payload-token" in out(cli("handshake", s.uri(), "bob", "builder"))
        p = cli("handshake", s.uri(), "bob", "nope", check=False)
        assert p.returncode == 1 and "UNAUTHENTICATED" in err(p)
    finally:
        s.shutdown()


# ---- TLS -----------------------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, ext in [("server", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:flight.test"),
                      ("client", "extendedKeyUsage=clientAuth")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
                cwd=d)
    # a second, unrelated CA
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=other",
            "-keyout", "other.key", "-out", "other.pem", cwd=d)
    return d


def tls_server(certs, tables, mutual=False):
    kw = dict(tls_certificates=[flight.CertKeyPair((certs / "server.pem").read_bytes(),
                                                   (certs / "server.key").read_bytes())])
    if mutual:
        kw.update(verify_client=True, root_certificates=(certs / "ca.pem").read_bytes())
    return serve(RefServer("grpc+tls://127.0.0.1:0", tables={"primitive": tables["primitive"]},
                           **kw))


def test_tls(certs, tables, tmp_path):
    s = tls_server(certs, tables)
    try:
        uri = s.uri()
        assert uri.startswith("grpc+tls://")
        assert "1 flights" in out(cli("list", uri, "--tls-ca", certs / "ca.pem"))
        cli("get", uri, "primitive", "-o", tmp_path / "t.arrows", "--tls-ca", certs / "ca.pem")
        same(pa.ipc.open_stream(tmp_path / "t.arrows").read_all(), tables["primitive"])
        # the name checked can be overridden (the certificate names flight.test too)
        assert "1 flights" in out(cli("list", uri, "--tls-ca", certs / "ca.pem",
                                      "--tls-override-hostname", "flight.test"))
        p = cli("list", uri, "--tls-ca", certs / "ca.pem", "--tls-override-hostname",
                "elsewhere.test", "--timeout-ms", "5000", check=False)
        assert p.returncode == 1 and "UNAVAILABLE" in err(p)
        # an untrusted server certificate
        p = cli("list", uri, "--tls-ca", certs / "other.pem", "--timeout-ms", "5000", check=False)
        assert p.returncode == 1 and f"ListFlights {uri}: UNAVAILABLE" in err(p)
        # plaintext to a TLS server
        p = cli("list", f"grpc://127.0.0.1:{s.port}", "--timeout-ms", "5000", check=False)
        assert p.returncode == 1
    finally:
        s.shutdown()


def test_mutual_tls(certs, tables):
    s = tls_server(certs, tables, mutual=True)
    try:
        uri = s.uri()
        ok = cli("list", uri, "--tls-ca", certs / "ca.pem", "--tls-cert", certs / "client.pem",
                 "--tls-key", certs / "client.key")
        assert "1 flights" in out(ok)
        p = cli("list", uri, "--tls-ca", certs / "ca.pem", "--timeout-ms", "5000", check=False)
        assert p.returncode == 1, "a client without a certificate got in"
        p = cli("list", uri, "--tls-ca", certs / "ca.pem", "--tls-cert", certs / "client.pem",
                check=False)
        assert p.returncode == 1 and "both a client certificate and a key" in err(p)
    finally:
        s.shutdown()


def test_tls_missing_files(certs):
    p = cli("list", "grpc+tls://127.0.0.1:1", "--tls-ca", certs / "missing.pem", check=False)
    assert p.returncode == 1 and "missing.pem" in err(p)


# ---- a server that dies or stalls mid-stream -------------------------------------------------

SERVER_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import pyarrow as pa
    import pyarrow.flight as flight

    batch = pa.record_batch([pa.array(range(100000), pa.int64())], names=["x"])

    class S(flight.FlightServerBase):
        def do_get(self, context, ticket):
            how = ticket.ticket.decode()
            def gen():
                for i in range(1000):
                    if i == 3:
                        if how == "die":
                            os._exit(3)
                        time.sleep(3600)
                    yield batch
            return flight.GeneratorStream(batch.schema, gen())

    s = S("grpc://127.0.0.1:0")
    print(s.port, flush=True)
    s.serve()
""")


@pytest.fixture
def fragile_server(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    port = int(proc.stdout.readline())
    yield f"grpc://127.0.0.1:{port}", proc
    proc.kill()
    proc.wait()


def test_server_killed_mid_stream(fragile_server, tmp_path):
    uri, proc = fragile_server
    p = cli("get", uri, "die", "-o", tmp_path / "t.arrows", "--timeout-ms", "60000",
            timeout=90, check=False)
    assert p.returncode == 1
    assert f"DoGet {uri}: " in err(p)
    assert not (tmp_path / "t.arrows").exists()  # the output was not committed
    assert proc.wait(timeout=10) == 3


def test_server_stalled_hits_deadline(fragile_server, tmp_path):
    uri, proc = fragile_server
    p = cli("get", uri, "stall", "-o", tmp_path / "t.arrows", "--timeout-ms", "1500",
            timeout=60, check=False)
    assert p.returncode == 1
    assert f"DoGet {uri}: DEADLINE_EXCEEDED" in err(p)


# ---- 300 MB messages both ways ------------------------------------------------------------------

BIG = 300 << 20


def big_table():
    """One batch of one int64 column: 300 MiB of values."""
    data = pa.py_buffer(bytes(range(256)) * (BIG // 256))
    arr = pa.Array.from_buffers(pa.int64(), BIG // 8, [None, data])
    return pa.table({"x": arr})


def test_big_messages_both_ways(tmp_path):
    t = big_table()
    s = serve(RefServer(tables={"big": t}))
    try:
        cli("get", s.uri(), "big", "-o", tmp_path / "big.arrows", timeout=300)
        with pa.memory_map(str(tmp_path / "big.arrows")) as f:
            got = pa.ipc.open_stream(f).read_all()
            assert got.num_rows == t.num_rows and got.equals(t)
            del got
        (tmp_path / "big.arrows").unlink()
        # DoPut of one 300 MB batch
        with pa.OSFile(str(tmp_path / "big.arrow"), "wb") as f:
            with pa.ipc.new_file(f, t.schema) as w:
                w.write_table(t)
        p = cli("put", s.uri(), "big", tmp_path / "big.arrow", timeout=300)
        assert f"sent 1 batches, {t.num_rows} rows" in out(p)
        stored = s.puts[("big",)]
        assert stored.num_rows == t.num_rows and stored.equals(t)
    finally:
        s.shutdown()


# ---- our client against our own server (`flightshuffle flight serve`) ---------------------

@pytest.fixture
def our_server(tmp_path):
    files = []
    for case in ("primitive", "nested", "dictionary"):
        files.append(GOLDEN / f"generated_{case}.arrow_file")
    proc = subprocess.Popen([str(CLI), "flight", "serve", "--listen", "127.0.0.1:0",
                             "--auth-token", "tok", *map(str, files)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on "), line + proc.stderr.read().decode()
    port = line.strip().rsplit(":", 1)[1]
    yield f"grpc://127.0.0.1:{port}", proc
    proc.terminate()
    proc.wait(timeout=30)


def test_our_client_our_server(our_server, tmp_path):
    uri, _ = our_server
    tok = ["--auth-token", "tok"]
    text = out(cli("list", uri, *tok))
    for case in ("primitive", "nested", "dictionary"):
        assert f'descriptor: path ["generated_{case}"]' in text
        cli("get", uri, f"generated_{case}", "-o", tmp_path / f"{case}.arrows", *tok)
        same(pa.ipc.open_stream(tmp_path / f"{case}.arrows").read_all(), golden(case))
    # what we put, we get back (the server keys uploads by the joined path)
    cli("put", uri, "up/nested", GOLDEN / "generated_nested.arrow_file", *tok)
    cli("get", uri, "up/nested", "-o", tmp_path / "up.arrows", *tok)
    same(pa.ipc.open_stream(tmp_path / "up.arrows").read_all(), golden("nested"))
    cli("exchange", uri, "x", GOLDEN / "generated_dictionary.arrow_file", "-o",
        tmp_path / "x.arrows", *tok)
    same(pa.ipc.open_stream(tmp_path / "x.arrows").read_all(), golden("dictionary"))
    assert "whoami" in out(cli("actions", uri, *tok))
    p = cli("get", uri, "nope", *tok, check=False)
    assert p.returncode == 1 and f"DoGet {uri}: NOT_FOUND: " in err(p)
    p = cli("list", uri, check=False)
    assert p.returncode == 1 and "UNAUTHENTICATED" in err(p)
