"""test_bench_shuffle.py -- `flightshuffle bench shuffle`: a verified shuffle
of the synthetic table on a local cluster of worker processes (flight, fs)
or in-process threads (memory), at small sizes: every backend verifies
(per partition, the reduce side's rows and row checksum equal the map
sides'), lz4/zstd through flight, a memory limit far below the data makes
the flight stores spill, bad arguments exit 2 with a message, and no worker
process nor temp directory is left after the command ends -- normally, on a
worker-side error, or on SIGINT mid-run. Also the worker's task actions
refuse malformed bodies with INVALID_ARGUMENT.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

SMALL = ["--workers", "2", "--maps", "4", "--reduces", "4", "--bytes", "4M"]


def worker_pids(parent):
    """Pids of live processes whose parent is `parent` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            out.append(int(d.name))
    return out


def processes_mentioning(text):
    """Pids whose command line contains `text`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(int(d.name))
    return out


def bench(*args, tmp_path, timeout=60):
    spill = tmp_path / "spill"
    spill.mkdir(exist_ok=True)
    p = subprocess.run([str(CLI), "bench", "shuffle", "--spill-dir", str(spill), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    return p, spill


def result_fields(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1, stdout
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


def check_clean(spill):
    assert list(spill.iterdir()) == [], list(spill.rglob("*"))
    assert processes_mentioning(str(spill)) == []


@pytest.mark.parametrize("backend,extra", [
    ("memory", []),
    ("fs", []),
    ("flight", []),
    ("flight", ["--compression", "lz4"]),
    ("flight", ["--compression", "zstd"]),
    ("flight", ["--direct", "off"]),
])
def test_backends_verify(tmp_path, backend, extra):
    p, spill = bench(*SMALL, "--backend", backend, *extra, tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    r = result_fields(p.stdout)
    assert r["name"] == "bench_shuffle_cluster"
    assert r["verified"] == "yes"
    assert r["backend"] == backend
    assert (r["workers"], r["maps"], r["reduces"], r["bytes"]) == ("2", "4", "4", "4194304")
    assert float(r["gbps_median"]) > 0 and float(r["vs_socket"]) > 0
    assert int(r["spilled_bytes"]) == 0
    check_clean(spill)


def test_everything_spills_under_a_tiny_memory_limit(tmp_path):
    p, spill = bench("--workers", "2", "--maps", "6", "--reduces", "5", "--bytes", "6M",
                     "--backend", "flight", "--memory-limit", "64K", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    r = result_fields(p.stdout)
    assert r["verified"] == "yes"
    assert int(r["spilled_bytes"]) > 1 << 20
    check_clean(spill)


def test_direct_reads_on_and_off(tmp_path):
    # every run once with DoGet, once with same-host direct reads (a fresh
    # cluster each): both verify, one comparison line is the result
    p, spill = bench(*SMALL, "--backend", "flight", "--direct", "both", "--runs", "2",
                     "--memory-limit", "256K", tmp_path=tmp_path, timeout=90)
    assert p.returncode == 0, p.stderr + p.stdout
    r = result_fields(p.stdout)
    assert r["name"] == "bench_shuffle_direct"
    assert r["verified"] == "yes"
    assert float(r["gbps_median_on"]) > 0 and float(r["gbps_median_off"]) > 0
    assert int(r["spilled_bytes"]) > 0
    assert p.stdout.count("direct reads off:") == 2 and p.stdout.count("direct reads on:") == 2
    check_clean(spill)


@pytest.mark.parametrize("extra", [
    [],                                # memory images (memfds)
    ["--memory-limit", "16M"],         # spill files
])
def test_few_reducers_several_blocks_a_partition(tmp_path, extra):
    # 8 MiB of each map for each partition: two 4 MiB blocks each, the four
    # partitions' blocks interleaved in a map output, so that a reducer's
    # same-host read spans the other partitions' blocks too (a sparse span:
    # mapped with only its own blocks' pages populated, flight_fetch.c)
    p, spill = bench("--workers", "2", "--maps", "4", "--reduces", "4", "--bytes", "128M",
                     "--backend", "flight", *extra, tmp_path=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr + p.stdout
    r = result_fields(p.stdout)
    assert r["verified"] == "yes" and r["direct"] == "on"
    assert (int(r["spilled_bytes"]) > 0) == ("--memory-limit" in extra)
    check_clean(spill)


def test_many_small_partitions(tmp_path):
    # Many reduce tasks fetching from each other at once: tasks run on the
    # workers' own threads, never on Flight pool threads, so a peer's DoGet
    # is always served (this used to deadlock). Three runs, as it took.
    p, spill = bench("--workers", "3", "--maps", "20", "--reduces", "50", "--bytes", "2M",
                     "--backend", "flight", "--runs", "3", tmp_path=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout
    assert result_fields(p.stdout)["verified"] == "yes"
    check_clean(spill)


@pytest.mark.parametrize("backend", ["flight", "fs"])
def test_coalesced_reduces(tmp_path, backend):
    # --reduce-task-bytes: 0 runs a reduce task per partition; auto a task
    # per run of partitions, at least one per slot (2 workers x 2) and here
    # far fewer than the 40 partitions; 600K (partitions of ~100 KB) runs
    # of ~6. Every run verifies each partition against the maps.
    want = {"0": lambda n: n == 40, "auto": lambda n: 4 <= n < 40,
            "600K": lambda n: 5 <= n <= 16}
    for rtb, ok in want.items():
        p, spill = bench("--workers", "2", "--maps", "6", "--reduces", "40", "--bytes", "4M",
                         "--backend", backend, "--reduce-task-bytes", rtb, tmp_path=tmp_path)
        assert p.returncode == 0, p.stderr + p.stdout
        r = result_fields(p.stdout)
        assert r["verified"] == "yes"
        assert ok(int(r["reduce_tasks"])), (rtb, r["reduce_tasks"])
        assert f"reduce tasks {r['reduce_tasks']} over 40 partitions" in p.stdout
        check_clean(spill)


@pytest.mark.parametrize("backend", ["flight", "fs"])
def test_coalesced_maps(tmp_path, backend):
    # --maps-per-task: 1 runs a task per map; 10 runs of 10 consecutive maps
    # (6 tasks); auto with --merge-threshold 10 (sqrt(60 x 40) > 10) runs of
    # M x R / 100 maps, floored to keep two tasks per slot (2 workers x 2
    # slots): at least 8 tasks -- and then no pre-shuffle merge. Every run
    # verifies each partition against the maps.
    want = {"1": lambda n: n == 60, "10": lambda n: n == 6, "auto": lambda n: 8 <= n < 60}
    for mpt, ok in want.items():
        p, spill = bench("--workers", "2", "--maps", "60", "--reduces", "40", "--bytes", "4M",
                         "--backend", backend, "--merge-threshold", "10", "--maps-per-task", mpt,
                         tmp_path=tmp_path)
        assert p.returncode == 0, p.stderr + p.stdout
        r = result_fields(p.stdout)
        assert r["verified"] == "yes"
        assert ok(int(r["map_tasks"])), (mpt, r["map_tasks"])
        assert f"map tasks {r['map_tasks']} over 60 maps (--maps-per-task {mpt})" in p.stdout
        if backend == "flight":
            merged = re.search(r"pre-shuffle merge auto: (\d+) merges", p.stdout)
            assert merged and (int(merged.group(1)) == 0) == (mpt == "auto"), p.stdout
        check_clean(spill)


def test_coalesced_maps_survive_a_killed_worker(tmp_path):
    # runs of 5 maps (12 tasks); a worker SIGKILLed once half of the map
    # tasks (not of the maps) are done: the runs it held or ran are run
    # again (recomputed, or retried) elsewhere and the job verifies
    p, spill = bench("--workers", "3", "--maps", "60", "--reduces", "30", "--bytes", "6M",
                     "--backend", "flight", "--maps-per-task", "5", "--fail-worker", "0.5",
                     tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    r = result_fields(p.stdout)
    assert r["verified"] == "yes" and r["map_tasks"] == "12", p.stdout
    killed = re.search(r"killing worker \d+ \(pid \d+ (\S+)\) with SIGKILL: 6 of 12 map "
                       r"tasks done", p.stdout)
    assert killed, p.stdout
    again = re.findall(r"(?:recomputed|retried): stage 1 task (\d+) \(attempt \d+\): .*"
                       + re.escape(killed.group(1)), p.stdout)
    assert again and all(int(t) < 12 for t in again), p.stdout
    check_clean(spill)


@pytest.mark.parametrize("args,needle", [
    ([], "required"),
    (SMALL + ["--backend", "ray"], "unknown shuffle backend 'ray'"),
    (SMALL + ["--backend", "flight", "--compression", "gzip"], "compression"),
    (["--workers", "0", "--maps", "1", "--reduces", "1", "--bytes", "1M", "--backend", "fs"],
     "--workers '0'"),
    (["--workers", "1", "--maps", "x", "--reduces", "1", "--bytes", "1M", "--backend", "fs"],
     "--maps 'x'"),
    (["--workers", "1", "--maps", "1", "--reduces", "1", "--bytes", "12Q", "--backend", "fs"],
     "--bytes '12Q'"),
    (SMALL + ["--backend", "flight", "--memory-limit", "-5"], "--memory-limit '-5'"),
    (SMALL + ["--backend", "flight", "--bogus", "1"], "unknown option --bogus"),
    (SMALL + ["--backend"], "--backend needs a value"),
    (SMALL + ["--backend", "flight", "--reduce-task-bytes", "-1"], "--reduce-task-bytes '-1'"),
    (SMALL + ["--backend", "flight", "--maps-per-task", "0"], "--maps-per-task '0'"),
])
def test_bad_arguments_exit_2(tmp_path, args, needle):
    p, spill = bench(*args, tmp_path=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr
    check_clean(spill)


def test_sigint_mid_run_leaves_nothing(tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    proc = subprocess.Popen(
        [str(CLI), "bench", "shuffle", "--workers", "3", "--maps", "12", "--reduces", "12",
         "--bytes", "3G", "--backend", "flight", "--runs", "5", "--spill-dir", str(spill)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until every worker is up, then a little into the map phase
        deadline = time.time() + 30
        while time.time() < deadline and len(worker_pids(proc.pid)) < 3:
            time.sleep(0.05)
        kids = worker_pids(proc.pid)
        assert len(kids) == 3, proc.poll()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, errs = proc.communicate()
    assert rc == 130, out + errs
    assert "interrupted" in errs
    for pid in kids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    check_clean(spill)


def test_worker_refuses_bad_task_bodies(tmp_path):
    proc = subprocess.Popen([str(CLI), "worker", "--listen", "127.0.0.1:0", "--spill-dir",
                             str(tmp_path / "w")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        m = re.match(r"listening on (grpc://\S+)$", proc.stdout.readline().strip())
        assert m
        client = flight.connect(m.group(1))
        cases = [
            ("map-synthetic", b"", "map-synthetic: the body must be 64 bytes"),
            ("map-synthetic", b"FSMT" + b"\1" + bytes(59), "partitions"),
            ("reduce-verify", b"FSRT", "reduce-verify: the body must start with FSRT"),
            ("reduce-verify", b"FSRT\1" + bytes(35), "partition 0 of 0"),
        ]
        for kind, body, needle in cases:
            # INVALID_ARGUMENT arrives in pyarrow as ArrowInvalid
            with pytest.raises(pa.ArrowInvalid) as e:
                list(client.do_action(flight.Action(kind, body)))
            assert needle in str(e.value), str(e.value)
        # an fs task on a worker without --fs-dir names the problem
        body = bytearray(64)
        body[0:5] = b"FSMT\1"
        body[28:32] = (4).to_bytes(4, "little")      # partitions
        body[56:60] = (1024).to_bytes(4, "little")   # batch_rows
        body[61] = 1                                 # fs
        with pytest.raises(pa.ArrowInvalid) as e:
            list(client.do_action(flight.Action("map-synthetic", bytes(body))))
        assert "without --fs-dir" in str(e.value)
        stats = list(client.do_action(flight.Action("stats", b"")))[0].body.to_pybytes()
        assert re.match(rb"map_outputs=0 memory_bytes=0 spilled_outputs=0 spilled_bytes=0 "
                        rb"pooled_memfds=0 pooled_bytes=0$",
                        stats), stats
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
