"""test_shuffle_faults.py -- faults of `flightshuffle worker` processes seen by
pyarrow.flight, a client that knows nothing of our block checksums:

- a spill file with one byte flipped on disk: DoGet of the damaged partition
  fails with an error naming the worker, the map output, the partition and
  the checksum -- never wrong rows; the other partitions read intact and the
  worker goes on serving;
- a spill file deleted from disk: DoGet fails naming the file (NOT_FOUND);
  the worker goes on serving;
- a full spill directory (a 2 MiB tmpfs the test mounts; root only): the
  DoPut fails naming ENOSPC and the directory, nothing is listed or served,
  no file is left, another shuffle still works; with a roomy second spill
  directory the writer falls over to it and every map output is complete;
- a worker killed with SIGKILL while pyarrow streams from it: the read
  fails (no hang);
- spill directories that cannot be used: at start (a read-only mount, a
  regular file, a path under a file) the worker exits 1 naming the
  directory and why; one remounted read-only under a running worker fails
  the DoPut that must spill, naming the file and EROFS, holds nothing of
  it, and serves again once the directory is writable;
- the memory budget exhausted with no spill directory at all: the DoPut
  fails saying so; a map output that fits is still taken.

Every test stops its workers and unmounts its tmpfs in a finally block."""
import os
import signal
import struct
import subprocess
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from test_worker import (CLI, Worker, check_worker_holds, flights_by_partition,
                         put_map_output, read_ticket, table)

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")


def ticket(shuffle, partition, maps):
    """A shuffle ticket (layout in shuffle.h) for (map, attempt) pairs."""
    return flight.Ticket(b"FSHT\x01\x00\x00\x00" + struct.pack("<QiI", shuffle, partition, len(maps))
                         + b"".join(struct.pack("<qiI", m, a, 0) for m, a in maps))


def spill_files(d):
    return sorted(p for p in d.iterdir() if p.name.startswith("fshspill-"))


def flip_data_byte(path):
    """Flips one byte in the middle of the blocks of a map-output file (from
    its trailer and index header: schema_length, data_end)."""
    raw = bytearray(path.read_bytes())
    index_len = struct.unpack_from("<Q", raw, len(raw) - 24)[0]
    header = len(raw) - 24 - index_len
    schema_len, data_end = struct.unpack_from("<qq", raw, header + 32)
    at = (schema_len + data_end) // 2
    raw[at] ^= 0x5A
    path.write_bytes(bytes(raw))


def expected_tables(parts, schema):
    return [pa.Table.from_batches(p, schema=schema) if p else schema.empty_table() for p in parts]


def test_corrupted_spill_file(tmp_path):
    w = Worker("--memory-limit", "0", "--spill-dir", tmp_path)
    try:
        n_parts = 3
        parts, _ = put_map_output(w.client, 5, 0, 0, n_parts, table(1, 6000), "none")
        want = expected_tables(parts, table(0, 1).schema)
        [f] = spill_files(tmp_path)
        flip_data_byte(f)
        failed = 0
        for p in range(n_parts):
            try:
                got = read_ticket(w.client, ticket(5, p, [(0, 0)]))
            except pa.ArrowException as e:
                failed += 1
                msg = str(e)
                for needle in (w.uri, "map 0", f"partition {p}", "checksum", str(f)):
                    assert needle in msg, (needle, msg)
                continue
            assert got.to_pylist() == want[p].to_pylist(), f"partition {p}: wrong rows"
        assert failed == 1
        # the worker goes on serving
        parts2, _ = put_map_output(w.client, 6, 0, 0, 2, table(2, 500), "lz4")
        check_worker_holds(w, 6, parts2, 2, table(0, 1).schema)
    finally:
        w.stop()


def test_missing_spill_file(tmp_path):
    w = Worker("--memory-limit", "0", "--spill-dir", tmp_path)
    try:
        put_map_output(w.client, 7, 0, 0, 2, table(3, 800), "zstd")
        [f] = spill_files(tmp_path)
        f.unlink()
        with pytest.raises(pa.ArrowException) as e:  # NOT_FOUND
            read_ticket(w.client, ticket(7, 1, [(0, 0)]))
        assert str(f) in str(e.value) and w.uri in str(e.value), str(e.value)
        parts, _ = put_map_output(w.client, 8, 0, 0, 2, table(4, 800), "none")
        check_worker_holds(w, 8, parts, 2, table(0, 1).schema)
        list(w.client.do_action(flight.Action("release", b"7")))
    finally:
        w.stop()


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only), unmounted afterwards whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    d = tmp_path / "tmpfs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_disk_full_one_spill_dir(tmpfs):
    w = Worker("--memory-limit", "64K", "--spill-dir", tmpfs)
    try:
        with pytest.raises(pa.ArrowException) as e:
            put_map_output(w.client, 11, 0, 0, 2, table(5, 200000), "none", chunk=8192)
        msg = str(e.value)
        assert "ENOSPC" in msg and str(tmpfs) in msg and "map 0" in msg, msg
        assert flights_by_partition(w.client, 11) == {}
        with pytest.raises(pa.ArrowException, match="not held here"):
            read_ticket(w.client, ticket(11, 0, [(0, 0)]))
        assert list(tmpfs.iterdir()) == []
        parts, _ = put_map_output(w.client, 12, 0, 0, 2, table(6, 1000), "lz4")
        check_worker_holds(w, 12, parts, 2, table(0, 1).schema)
    finally:
        w.stop()


def test_disk_full_falls_over_to_next_dir(tmpfs, tmp_path):
    roomy = tmp_path / "roomy"
    w = Worker("--memory-limit", "64K", "--spill-dir", tmpfs, "--spill-dir", roomy)
    try:
        n_parts = 3
        expected = [[] for _ in range(n_parts)]
        for m in range(5):  # ~1.2 MB each: the tmpfs takes one, then fills mid-file
            parts, meta = put_map_output(w.client, 13, m, 0, n_parts, table(20 + m, 50000),
                                         "none", chunk=4096)
            for p in range(n_parts):
                assert meta["rows"][p] == sum(b.num_rows for b in parts[p])
                expected[p].extend(parts[p])
        assert [p for d in (tmpfs, roomy) for p in d.iterdir() if p.name.endswith(".tmp")] == []
        assert len(spill_files(tmpfs)) >= 1 and len(spill_files(roomy)) >= 3
        check_worker_holds(w, 13, expected, n_parts, table(0, 1).schema)
        list(w.client.do_action(flight.Action("release", b"13")))
        assert spill_files(tmpfs) == [] and spill_files(roomy) == []
    finally:
        w.stop()


def test_worker_killed_while_streaming():
    w = Worker("--memory-limit", "1G")
    try:
        for m in range(4):
            put_map_output(w.client, 15, m, 0, 1, table(30 + m, 100000), "none", chunk=8192)
        opts = flight.FlightCallOptions(timeout=20)
        reader = w.client.do_get(ticket(15, 0, [(m, 0) for m in range(4)]), options=opts)
        reader.read_chunk()
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait(timeout=10)
        t0 = time.monotonic()
        with pytest.raises(pa.ArrowException):
            while True:
                reader.read_chunk()  # StopIteration would mean a complete stream
        assert time.monotonic() - t0 < 15
    finally:
        w.client.close()
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def start_fails(*extra):
    """Runs `flightshuffle worker` expecting it to refuse to start: its
    exit status and standard error."""
    p = subprocess.run([str(CLI), "worker", "--listen", "127.0.0.1:0", *map(str, extra)],
                       capture_output=True, text=True, timeout=30)
    assert "listening on" not in p.stdout, p.stdout
    return p.returncode, p.stderr


def test_unusable_spill_dirs_at_start(tmpfs, tmp_path):
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    for d, why in ((tmpfs, "is not writable: Read-only file system"),
                   (a_file, "cannot list it: Not a directory"),
                   (a_file / "sub", "cannot create")):
        rc, err = start_fails("--spill-dir", tmp_path / "fine", "--spill-dir", d)
        assert rc == 1, (d, rc, err)
        assert f"spill directory {d}" in err and why in err, (d, err)
    assert a_file.read_text() == "not a directory"


def test_spill_dir_turns_read_only(tmpfs):
    w = Worker("--memory-limit", "64K", "--spill-dir", tmpfs)
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
        with pytest.raises(pa.ArrowException) as e:
            put_map_output(w.client, 31, 0, 0, 2, table(7, 20000), "none", chunk=8192)
        msg = str(e.value)
        for needle in ("shuffle 31 map 0", "memory budget is exhausted",
                       f"creating spill file {tmpfs}/", "Read-only file system"):
            assert needle in msg, (needle, msg)
        assert flights_by_partition(w.client, 31) == {}
        with pytest.raises(pa.ArrowException, match="not held here"):
            read_ticket(w.client, ticket(31, 0, [(0, 0)]))
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
        assert list(tmpfs.iterdir()) == []
        parts, _ = put_map_output(w.client, 32, 0, 0, 2, table(8, 20000), "none", chunk=8192)
        check_worker_holds(w, 32, parts, 2, table(0, 1).schema)
        assert len(spill_files(tmpfs)) == 1
    finally:
        w.stop()


def test_memory_exhausted_without_spill_dir():
    w = Worker("--memory-limit", "64K")
    try:
        with pytest.raises(pa.ArrowException) as e:
            put_map_output(w.client, 41, 0, 0, 2, table(9, 20000), "none", chunk=8192)
        msg = str(e.value)
        assert "shuffle 41 map 0" in msg and w.uri in msg, msg
        assert "memory budget is exhausted, and the store has no spill directory" in msg, msg
        assert flights_by_partition(w.client, 41) == {}
        parts, _ = put_map_output(w.client, 42, 0, 0, 2, table(10, 50), "lz4")
        check_worker_holds(w, 42, parts, 2, table(0, 1).schema)
    finally:
        w.stop()
