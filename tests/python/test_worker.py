"""test_worker.py -- `flightshuffle worker` processes driven by pyarrow.flight,
the reference Flight client: map outputs written with DoPut (descriptor path
["shuffle", id, "map", m, "attempt", a, "partitions", n, "compression", c],
each batch's app_metadata its partition id as a little-endian int32), the
PutResult's metadata decoded, ListFlights showing one flight per (shuffle,
partition) with rows and bytes, DoGet of each listed ticket returning exactly
the rows written to that partition (map outputs in ticket order), spill
under a tiny memory limit over two spill directories, release by DoAction,
leftovers of an earlier run removed at start, and a clean stop on SIGTERM
and SIGINT.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import signal
import struct
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")


class Worker:
    """`flightshuffle worker` on a free port; stop() checks a clean exit."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen(
            [str(CLI), "worker", "--listen", "127.0.0.1:0", *map(str, extra)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on (grpc://(.+):(\d+))$", line.strip())
        if not m:
            self.proc.kill()
            raise AssertionError(f"no 'listening on' line: {line!r} {self.proc.stderr.read()}")
        self.uri = m.group(1)
        self.client = flight.connect(self.uri)

    def stop(self, sig=signal.SIGTERM):
        self.client.close()
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert rc == 0, self.proc.stderr.read()


def table(seed, rows):
    return pa.table({
        "key": pa.array([(seed * 7919 + i) % 1000 for i in range(rows)], pa.int64()),
        "name": pa.array([None if i % 11 == 0 else f"r{seed}-{i}" for i in range(rows)], pa.string()),
        "tag": pa.array([["a", "b", "c"][i % 3] for i in range(rows)]).dictionary_encode(),
    })


def put_map_output(client, shuffle, map_id, attempt, n_parts, t, compression="lz4",
                   chunk=97):
    """Writes t's rows as one map output: row i goes to partition key mod n.
    Returns (per-partition expected tables, the decoded PutResult)."""
    path = ["shuffle", str(shuffle), "map", str(map_id), "attempt", str(attempt),
            "partitions", str(n_parts), "compression", compression]
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), t.schema)
    parts = [[] for _ in range(n_parts)]
    for off in range(0, t.num_rows, chunk):
        piece = t.slice(off, chunk)
        keys = piece["key"].to_pylist()
        for p in range(n_parts):
            mask = pa.array([k % n_parts == p for k in keys])
            sub = piece.filter(mask)
            if sub.num_rows == 0:
                continue
            for batch in sub.to_batches():
                writer.write_with_metadata(batch, pa.py_buffer(struct.pack("<i", p)))
                parts[p].append(batch)
    writer.done_writing()
    buf = reader.read()
    writer.close()
    assert buf is not None
    return parts, decode_put_result(buf.to_pybytes())


def decode_put_result(b):
    """PutResult: "FSHP", version 1, 3 zero bytes, u64 shuffle, i64 map,
    i32 attempt, i32 n, then n x (i64 rows, i64 bytes, u64 checksum)."""
    assert b[:4] == b"FSHP" and b[4] == 1
    shuffle, map_id, attempt, n = struct.unpack_from("<QqiI", b, 8)
    entries = [struct.unpack_from("<qqQ", b, 32 + 24 * i) for i in range(n)]
    assert len(b) == 32 + 24 * n
    return {"shuffle": shuffle, "map": map_id, "attempt": attempt,
            "rows": [e[0] for e in entries], "bytes": [e[1] for e in entries]}


def flights_by_partition(client, shuffle):
    out = {}
    for info in client.list_flights():
        path = [p.decode() for p in info.descriptor.path]
        assert len(path) == 4 and path[0] == "shuffle" and path[2] == "partition", path
        if int(path[1]) == shuffle:
            out[int(path[3])] = info
    return out


def read_ticket(client, ticket):
    return client.do_get(ticket).read_all()


def check_worker_holds(w, shuffle, expected, n_parts, schema):
    """Every partition's flight: rows/bytes listed, DoGet == what was written."""
    infos = flights_by_partition(w.client, shuffle)
    assert sorted(infos) == list(range(n_parts))
    for p in range(n_parts):
        info = infos[p]
        want = pa.Table.from_batches(expected[p], schema=schema) if expected[p] else schema.empty_table()
        assert info.total_records == want.num_rows
        assert info.total_bytes > 0 or want.num_rows == 0
        assert len(info.endpoints) == 1
        assert [str(loc.uri.decode() if isinstance(loc.uri, bytes) else loc.uri)
                for loc in info.endpoints[0].locations] == [w.uri]
        got = read_ticket(w.client, info.endpoints[0].ticket)
        assert got.schema.equals(schema), (got.schema, schema)
        assert got.num_rows == want.num_rows
        assert got.cast(want.schema).equals(want) or \
            got.to_pylist() == want.to_pylist(), f"partition {p} differs"


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_put_list_get_release(compression):
    w = Worker("--memory-limit", "1G")
    try:
        n_parts = 5
        expected = [[] for _ in range(n_parts)]
        for m in range(3):  # map outputs in map id order == the ticket's order
            t = table(m, 700 + 50 * m)
            parts, meta = put_map_output(w.client, 7, m, 0, n_parts, t, compression)
            assert meta["shuffle"] == 7 and meta["map"] == m and meta["attempt"] == 0
            for p in range(n_parts):
                assert meta["rows"][p] == sum(b.num_rows for b in parts[p])
                expected[p].extend(parts[p])
        check_worker_holds(w, 7, expected, n_parts, table(0, 1).schema)
        results = list(w.client.do_action(flight.Action("release", b"7")))
        assert b"3 map outputs" in results[0].body.to_pybytes()
        assert flights_by_partition(w.client, 7) == {}
        # a ticket of a released shuffle: NOT_FOUND naming the map output
        with pytest.raises(pa.ArrowException, match="map 0"):
            read_ticket(w.client, flight.Ticket(
                b"FSHT\x01\x00\x00\x00" + struct.pack("<QiI", 7, 0, 1) + struct.pack("<qiI", 0, 0, 0)))
    finally:
        w.stop()


def test_spill_two_dirs_and_leftovers(tmp_path):
    d0, d1 = tmp_path / "nvme0", tmp_path / "nvme1"
    d0.mkdir()
    (d0 / "fshspill-00000000000000aa-s1-m1-a0-3.arrows").write_bytes(b"old")
    (d0 / "fshspill-00000000000000aa-s1-m2-a0-4.arrows.tmp").write_bytes(b"old")
    (d0 / "unrelated.arrows").write_bytes(b"keep")
    w = Worker("--memory-limit", "16K", "--spill-dir", d0, "--spill-dir", d1)
    try:
        assert sorted(p.name for p in d0.iterdir()) == ["unrelated.arrows"]
        n_parts = 3
        expected = [[] for _ in range(n_parts)]
        for m in range(4):
            parts, _ = put_map_output(w.client, 9, m, 1, n_parts, table(10 + m, 3000), "zstd")
            for p in range(n_parts):
                expected[p].extend(parts[p])
        spilled = [p for d in (d0, d1) for p in d.iterdir() if p.name.startswith("fshspill-")]
        assert len(spilled) >= 3
        assert any(p.parent == d0 for p in spilled) and any(p.parent == d1 for p in spilled)
        check_worker_holds(w, 9, expected, n_parts, table(0, 1).schema)
        list(w.client.do_action(flight.Action("release", b"9")))
        assert [p for d in (d0, d1) for p in d.iterdir() if p.name.startswith("fshspill-")] == []
    finally:
        w.stop(signal.SIGINT)
    assert (d0 / "unrelated.arrows").read_bytes() == b"keep"


def test_bad_requests():
    w = Worker()
    try:
        schema = table(0, 1).schema
        # a descriptor that is not a map-output path
        writer, _ = w.client.do_put(flight.FlightDescriptor.for_path("shuffle", "1"), schema)
        with pytest.raises(pa.ArrowException, match="descriptor"):
            writer.write_table(table(0, 5))
            writer.close()
        # a batch without its partition id, then one out of range
        path = ["shuffle", "1", "map", "0", "attempt", "0", "partitions", "2", "compression",
                "none"]
        for meta in (None, struct.pack("<i", 5)):
            writer, _ = w.client.do_put(flight.FlightDescriptor.for_path(*path), schema)
            with pytest.raises(pa.ArrowException, match="partition"):
                batch = table(0, 5).to_batches()[0]
                if meta is None:
                    writer.write_batch(batch)
                else:
                    writer.write_with_metadata(batch, pa.py_buffer(meta))
                writer.close()
        # nothing was kept from the failed puts
        assert flights_by_partition(w.client, 1) == {}
        # tickets that are not shuffle tickets (or name paths) are refused
        for t in (b"../../etc/passwd", b"FSHT", b""):
            with pytest.raises(pa.ArrowException):
                read_ticket(w.client, flight.Ticket(t))
        with pytest.raises(pa.ArrowException, match="decimal"):
            list(w.client.do_action(flight.Action("release", b"seven")))
    finally:
        w.stop()


def test_auth_token():
    w = Worker("--auth-token", "s3cret")
    try:
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(w.client.list_flights())
        opts = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret")])
        assert list(w.client.list_flights(options=opts)) == []
    finally:
        w.stop()
