"""test_plans_verify.py -- `flightshuffle run PLAN.json --verify` on plans
whose result depends on the partitioning (a local limit, top-N, sort or
aggregate as the last operator; the single-process reference runs the
plan as one partition): the output is what pyarrow computes file by file
(one IPC file a partition), the verify line says what was compared
("compared as the plan allows: ..."), in process and on a local cluster;
a partition-dependent operator followed by others cannot be verified and
says so (verified=no, exit 1) rather than pass or fail by value."""
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("FSH_CLI", REPO / "build" / "flightshuffle"))
MODES = [[], ["--workers", "2"]]
MODE_IDS = ["in_process", "workers2"]


def run(*args):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)


def result_line(out):
    lines = [l for l in out.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1, out
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


def verify_line(out):
    lines = [l for l in out.splitlines() if l.startswith("verify: ")]
    assert len(lines) == 1, out
    return lines[0]


def write_files(tmp_path, sizes):
    """One IPC file per partition, of sizes[i] rows: id unique, g a group."""
    d = tmp_path / "data"
    d.mkdir()
    tables, base = [], 0
    for i, n in enumerate(sizes):
        ids = list(range(base, base + n))
        t = pa.table({"id": pa.array(ids, pa.int64()),
                      "g": pa.array([(x * 31) % 17 for x in ids], pa.int64()),
                      "v": pa.array([(x * 7919) % 1009 for x in ids], pa.int64())})
        with ipc.new_file(str(d / f"part-{i:03d}.arrow"), t.schema) as w:
            for b in t.to_batches(max_chunksize=250):
                w.write_batch(b)
        tables.append(t)
        base += n
    return d, tables


def run_plan(tmp_path, nodes, mode):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": nodes}))
    out = tmp_path / "out.arrow"
    r = run("run", plan, *mode, "--verify", "--output", out)
    return r, out


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_local_limit_is_each_files_head(tmp_path, mode):
    d, tables = write_files(tmp_path, [900, 300, 1200, 0])
    r, out = run_plan(tmp_path, [{"op": "scan", "ipc": str(d)},
                                 {"op": "limit", "n": 500, "local": True}], mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert result_line(r.stdout)["verified"] == "yes"
    assert "compared as the plan allows" in verify_line(r.stdout)
    got = ipc.open_file(str(out)).read_all()
    want = pa.concat_tables([t.slice(0, 500) for t in tables])
    assert got.num_rows == 500 + 300 + 500
    assert got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_local_top_n_is_each_files_top(tmp_path, mode):
    d, tables = write_files(tmp_path, [700, 40, 1000])
    r, out = run_plan(tmp_path, [{"op": "scan", "ipc": str(d)},
                                 {"op": "top_n", "n": 60, "local": True,
                                  "keys": [{"column": "v", "descending": True}, "id"]}], mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert result_line(r.stdout)["verified"] == "yes"
    assert "its input partition's top n" in verify_line(r.stdout)
    got = ipc.open_file(str(out)).read_all().to_pylist()
    want = []
    for t in tables:
        rows = sorted(t.to_pylist(), key=lambda x: (-x["v"], x["id"]))
        want += rows[:60]
    assert got == want


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_local_aggregate_is_each_files_groups(tmp_path, mode):
    d, tables = write_files(tmp_path, [600, 800])
    r, out = run_plan(tmp_path, [{"op": "scan", "ipc": str(d)},
                                 {"op": "aggregate", "local": True, "keys": ["g"],
                                  "aggs": [{"fn": "count_star", "name": "n"},
                                           {"fn": "sum", "column": "v", "name": "sv"}]}], mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert result_line(r.stdout)["verified"] == "yes"
    assert "group keys are the reference's" in verify_line(r.stdout)
    got = sorted((x["g"], x["n"], x["sv"]) for x in ipc.open_file(str(out)).read_all().to_pylist())
    want = []
    for t in tables:
        a = t.group_by("g").aggregate([("g", "count"), ("v", "sum")])
        want += [(x["g"], x["g_count"], x["v_sum"]) for x in a.to_pylist()]
    assert got == sorted(want)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_generated_local_limit_verifies(tmp_path, mode):
    # the plan: 8 partitions of a scan, 100 rows each
    r, _ = run_plan(tmp_path, [
        {"op": "scan", "generate": "keyed", "rows": 200000, "batch_rows": 5000, "partitions": 8},
        {"op": "limit", "n": 100, "local": True}], mode)
    assert r.returncode == 0, r.stdout + r.stderr
    res = result_line(r.stdout)
    assert res["verified"] == "yes" and res["rows"] == "800"
    assert "first min(n, its rows) rows of its input partition" in verify_line(r.stdout)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("tail", [
    [{"op": "repartition", "by": "random", "partitions": 4, "seed": 5},
     {"op": "limit", "n": 50, "local": True}],
    [{"op": "repartition", "by": "hash", "keys": ["key"], "partitions": 3},
     {"op": "top_n", "n": 20, "local": True, "keys": ["amount", "id"]}],
    [{"op": "sort", "local": True, "keys": ["key", "id"]}],
], ids=["random_local_limit", "hash_local_top_n", "local_sort"])
def test_partition_dependent_tails_verify(tmp_path, mode, tail):
    r, _ = run_plan(tmp_path, [
        {"op": "scan", "generate": "keyed", "rows": 30000, "batch_rows": 2000, "partitions": 5,
         "key_range": 400}] + tail, mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert result_line(r.stdout)["verified"] == "yes"
    assert "compared as the plan allows" in verify_line(r.stdout)


def test_partition_dependent_operator_not_last_is_not_verified(tmp_path):
    r, _ = run_plan(tmp_path, [
        {"op": "scan", "generate": "keyed", "rows": 30000, "batch_rows": 2000, "partitions": 5},
        {"op": "limit", "n": 10, "local": True},
        {"op": "filter", "predicate": {"op": ">", "args": [{"col": "amount"}, {"lit": 0}]}}], [])
    assert r.returncode == 1
    assert result_line(r.stdout)["verified"] == "no"
    line = verify_line(r.stdout)
    assert line.startswith("verify: not possible:") and "(limit)" in line, line
