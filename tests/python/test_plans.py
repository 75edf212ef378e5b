"""test_plans.py -- `flightshuffle explain` and `flightshuffle run` as a user
runs them: every example plan in examples/plans/ runs with --verify on the
memory, fs and flight (in-process workers) backends; plans over IPC files
written by pyarrow are checked against pyarrow's own sort / filter /
group-by (the reference
implementation); invalid plans fail before running with a message naming
the operator and the column; with --operator-memory the sorts, aggregates
and joins spill to --operator-spill-dir, still verify, and leave it empty."""
import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("FSH_CLI", REPO / "build" / "flightshuffle"))
EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.json"))


def run(*args, check=None):
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def result_line(out):
    lines = [l for l in out.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1 and out.rstrip().splitlines()[-1] == lines[0], out
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


def test_there_is_an_example_per_shuffling_operator():
    ops = set()
    for p in EXAMPLES:
        for n in json.loads(p.read_text())["nodes"]:
            ops.add(n["op"] + (":" + n["by"] if n["op"] == "repartition" else ""))
    for op in ["repartition:hash", "repartition:random", "repartition:range", "gather",
               "into_partitions", "into_batches", "sort", "limit", "join", "aggregate"]:
        assert op in ops, op
    assert any("merge_threshold" in json.loads(p.read_text()) for p in EXAMPLES)


@pytest.mark.parametrize("backend", ["memory", "fs", "flight"])
@pytest.mark.parametrize("plan", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_verified(plan, backend):
    # flight: 3 in-process workers, map outputs in their stores, reducers
    # fetching over loopback DoGet
    extra = ["--flight-workers", "3"] if backend == "flight" else []
    r = run("run", plan, "--backend", backend, *extra, "--verify", check=0)
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    assert res["backend"] == backend
    assert int(res["rows"]) > 0


@pytest.mark.parametrize("plan", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_explain_prints_stages(plan):
    r = run("explain", plan, check=0)
    head = r.stdout.splitlines()[0]
    assert head.startswith("plan: ")
    n_stages = int(head.split(" stage(s)")[0].split()[-1])
    assert sum(1 for l in r.stdout.splitlines() if l.startswith("stage ")) == n_stages


def test_pre_shuffle_merge_flag():
    plan = REPO / "examples" / "plans" / "pre_shuffle_merge.json"
    outs = {}
    for flag in ["on", "off", "auto"]:
        r = run("run", plan, "--pre-shuffle-merge", flag, "--verify", check=0)
        line = next(l for l in r.stdout.splitlines() if l.startswith("output: "))
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        outs[flag] = kv
        assert result_line(r.stdout)["verified"] == "yes"
    assert int(outs["off"]["map_outputs"]) == int(outs["off"]["map_tasks"])
    assert int(outs["on"]["map_outputs"]) < int(outs["on"]["map_tasks"])
    # the plan's threshold (32) is below sqrt(64 * 64): auto merges
    assert int(outs["auto"]["map_outputs"]) < int(outs["auto"]["map_tasks"])
    assert outs["on"]["checksum"] == outs["off"]["checksum"] == outs["auto"]["checksum"]


def write_ipc_dir(tmp_path, n_files=3, rows=2000):
    d = tmp_path / "data"
    d.mkdir()
    tables = []
    for i in range(n_files):
        base = i * rows
        t = pa.table({
            "k": pa.array([(x * 7919) % 501 if x % 13 else None for x in range(base, base + rows)],
                          pa.int64()),
            "s": pa.array([f"w{x % 37}" for x in range(base, base + rows)]),
            "v": pa.array([float(x % 1000) / 7 for x in range(base, base + rows)]),
            "unused": pa.array([x for x in range(base, base + rows)], pa.int32()),
        })
        with ipc.new_file(str(d / f"part-{i:03d}.arrow"), t.schema) as w:
            for b in t.to_batches(max_chunksize=333):
                w.write_batch(b)
        tables.append(t)
    return d, pa.concat_tables(tables)


def read_arrow(path):
    return ipc.open_file(str(path)).read_all()


@pytest.mark.parametrize("backend", ["memory", "fs"])
def test_ipc_scan_sort_matches_pyarrow(tmp_path, backend):
    d, table = write_ipc_dir(tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": 4, "nodes": [
        {"op": "scan", "ipc": str(d), "columns": ["k", "v"]},
        {"op": "filter", "predicate": {"op": ">", "args": [{"col": "v"}, {"lit": 20.0}]}},
        {"op": "sort", "keys": [{"column": "k", "descending": True, "nulls_first": True}, "v"]},
    ]}))
    out = tmp_path / "out.arrow"
    r = run("run", plan, "--backend", backend, "--verify", "--output", out, check=0)
    assert result_line(r.stdout)["verified"] == "yes"
    got = read_arrow(out)
    kept = table.select(["k", "v"]).filter(pc.greater(table["v"], 20.0)).to_pylist()
    # k descending with nulls first, then v ascending (a stable sort keeps file order after)
    want = sorted(kept, key=lambda r: (r["k"] is not None, -(r["k"] or 0), r["v"]))
    assert got.schema.names == ["k", "v"]
    assert got.to_pylist() == want


def test_ipc_scan_group_by_matches_pyarrow(tmp_path):
    d, table = write_ipc_dir(tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": 3, "nodes": [
        {"op": "scan", "ipc": str(d)},
        {"op": "aggregate", "keys": ["s"], "aggs": [
            {"fn": "count_star", "name": "n"}, {"fn": "sum", "column": "k", "name": "sk"},
            {"fn": "count", "column": "k", "name": "ck"}, {"fn": "max", "column": "v", "name": "mv"}]},
    ]}))
    out = tmp_path / "out.arrow"
    run("run", plan, "--verify", "--output", out, check=0)
    got = {r["s"]: r for r in read_arrow(out).to_pylist()}
    want = table.group_by("s").aggregate([("s", "count"), ("k", "sum"), ("k", "count"),
                                          ("v", "max")])
    assert len(got) == want.num_rows
    for row in want.to_pylist():
        g = got[row["s"]]
        assert (g["n"], g["sk"], g["ck"], g["mv"]) == (row["s_count"], row["k_sum"],
                                                       row["k_count"], row["v_max"])


def test_into_partitions_keeps_order_through_output(tmp_path):
    d, table = write_ipc_dir(tmp_path, n_files=2, rows=1001)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": [
        {"op": "scan", "ipc": str(d), "columns": ["unused"]},
        {"op": "into_partitions", "partitions": 5},
        {"op": "into_batches", "rows": 100},
    ]}))
    out = tmp_path / "out.arrow"
    run("run", plan, "--backend", "fs", "--verify", "--output", out, check=0)
    assert read_arrow(out).column("unused").to_pylist() == table.column("unused").to_pylist()


@pytest.mark.parametrize("nodes,needles", [
    ([{"op": "filter", "predicate": {"op": "=", "args": [{"col": "nme"}, {"lit": "x"}]}}],
     ["plan operator 1 (filter)", "'nme'"]),
    ([{"op": "filter", "predicate": {"op": "+", "args": [{"col": "name"}, {"lit": 1}]}}],
     ["plan operator 1 (filter)", "name"]),
    ([{"op": "explode"}], ["plan operator 1", "unknown operator 'explode'"]),
    ([{"id": "s", "op": "sort", "keys": ["missing"]}], ["plan operator 1 (sort 's')", "'missing'"]),
])
def test_invalid_plans_fail_before_running(tmp_path, nodes, needles):
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps({"nodes": [
        {"op": "scan", "generate": "synthetic", "rows": 10}] + nodes}))
    for cmd in ["run", "explain"]:
        r = run(cmd, plan, check=1)
        for n in needles:
            assert n in r.stderr, r.stderr
        assert "result:" not in r.stdout


def test_workers_flag_runs_on_a_local_cluster():
    # the distributed runs proper: test_plans_cluster.py
    plan = REPO / "examples" / "plans" / "broadcast_join.json"
    r = run("run", plan, "--workers", "2", "--verify", check=0)
    res = result_line(r.stdout)
    assert res["verified"] == "yes" and res["workers"] == "2"


def write_table_dir(path, table, n_files):
    path.mkdir()
    step = (table.num_rows + n_files - 1) // n_files
    for i in range(n_files):
        part = table.slice(i * step, step)
        with ipc.new_file(str(path / f"f{i}.arrow"), table.schema) as w:
            w.write_table(part, max_chunksize=97)


@pytest.mark.parametrize("strategy", ["partitioned", "broadcast"])
@pytest.mark.parametrize("jtype,pa_type", [
    ("inner", "inner"), ("left", "left outer"), ("right", "right outer"),
    ("full", "full outer"), ("left_semi", "left semi"), ("left_anti", "left anti")])
def test_joins_match_pyarrow(tmp_path, jtype, pa_type, strategy):
    if strategy == "broadcast" and jtype in ("right", "full"):
        pytest.skip("a broadcast right side cannot keep its unmatched rows")
    left = pa.table({"lid": pa.array(range(1500), pa.int64()),
                     "k": pa.array([None if i % 11 == 0 else (i * 37) % 90 for i in range(1500)],
                                   pa.int64())})
    right = pa.table({"rid": pa.array(range(400), pa.int64()),
                      "k2": pa.array([None if i % 7 == 0 else (i * 13) % 120 for i in range(400)],
                                     pa.int64())})
    write_table_dir(tmp_path / "l", left, 3)
    write_table_dir(tmp_path / "r", right, 2)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": 4, "nodes": [
        {"id": "l", "op": "scan", "ipc": str(tmp_path / "l")},
        {"id": "r", "op": "scan", "ipc": str(tmp_path / "r")},
        {"op": "join", "left": "l", "right": "r", "left_keys": ["k"], "right_keys": ["k2"],
         "type": jtype, "strategy": strategy},
    ]}))
    out = tmp_path / "out.arrow"
    r = run("run", plan, "--verify", "--output", out, check=0)
    assert result_line(r.stdout)["verified"] == "yes"
    got = read_arrow(out)
    want = left.join(right, keys="k", right_keys="k2", join_type=pa_type)
    if jtype in ("left_semi", "left_anti"):
        assert got.schema.names == ["lid", "k"]
        assert sorted(got.column("lid").to_pylist()) == sorted(want.column("lid").to_pylist())
    else:
        assert got.schema.names == ["lid", "k", "rid", "k2"]
        pairs = lambda t: sorted(zip(t.column("lid").to_pylist(), t.column("rid").to_pylist()),
                                 key=lambda p: (p[0] is None, p[0] or 0, p[1] is None, p[1] or 0))
        assert pairs(got) == pairs(want)


def test_flight_backend_spilling_to_a_given_directory(tmp_path):
    # every map output spills (memory limit 0) into <dir>/w<i>; all of it
    # is gone once the run ends, and the output still equals the reference
    plan = REPO / "examples" / "plans" / "join_group_by.json"
    r = run("run", plan, "--backend", "flight", "--flight-workers", "2", "--memory-limit", "0",
            "--spill-dir", tmp_path, "--verify", check=0)
    assert result_line(r.stdout)["verified"] == "yes"
    assert list(tmp_path.iterdir()) == []


# plans whose sort / aggregate / join must spill under a tiny budget, with
# that budget (bytes per operator instance) and the operator that spills
SPILLING = {
    "sort": (64 << 10, "(sort)"),
    "repartition_range": (64 << 10, "(sort)"),
    "repartition_hash": (64 << 10, "(aggregate)"),
    "group_by_float_sums": (4 << 10, "[final aggregate]"),
    "join_group_by": (256 << 10, "(join 'j')"),
    "broadcast_join": (64 << 10, "(join)"),
}


def spill_line(out):
    lines = [l for l in out.splitlines() if l.startswith("spill: ")]
    assert len(lines) == 1, out
    head, _, summary = lines[0][len("spill: "):].partition(" | ")
    return dict(kv.split("=", 1) for kv in head.split()), summary


@pytest.mark.parametrize("backend", ["memory", "fs", "flight"])
@pytest.mark.parametrize("plan", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_verified_with_operator_memory(tmp_path, plan, backend):
    budget, op = SPILLING.get(plan.stem, (64 << 10, None))
    dirs = [tmp_path / "s1", tmp_path / "s2"]
    for d in dirs:
        d.mkdir()
    extra = ["--flight-workers", "2"] if backend == "flight" else []
    r = run("run", plan, "--backend", backend, *extra, "--operator-memory", budget,
            "--operator-spill-dir", dirs[0], "--operator-spill-dir", dirs[1], "--verify",
            check=0)
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    head, summary = spill_line(r.stdout)
    assert int(head["operator_memory"]) == budget
    assert int(res["spill_files"]) == int(head["files"])
    assert int(res["spilled_bytes"]) == int(head["bytes"])
    if op is not None:
        assert int(head["files"]) > 0 and int(head["bytes"]) > 0, r.stdout
        assert op in summary, summary
        # the per-operator byte counts add up to the total
        per_op = [int(part.split("bytes=")[1]) for part in summary.split("; ")]
        assert sum(per_op) == int(head["bytes"])
    for d in dirs:
        assert list(d.iterdir()) == []
    # the same output as without a budget (the in-memory run's rows)
    r0 = run("run", plan, "--backend", backend, *extra, check=0)
    assert result_line(r0.stdout)["rows"] == res["rows"]


def test_operator_memory_too_small_names_the_operator(tmp_path):
    plan = REPO / "examples" / "plans" / "join_group_by.json"
    r = run("run", plan, "--operator-memory", "100", "--operator-spill-dir", tmp_path, check=1)
    assert "plan operator 3 (join 'j')" in r.stderr, r.stderr
    assert "over the budget" in r.stderr and "not implemented" not in r.stderr
    assert list(tmp_path.iterdir()) == []
    r = run("run", plan, "--operator-memory", "0", check=2)
    assert "--operator-memory" in r.stderr


def test_operator_memory_default_spill_dir_is_removed(tmp_path):
    before = {p.name for p in Path("/tmp").glob("fsh-opspill-*")}
    plan = REPO / "examples" / "plans" / "sort.json"
    r = run("run", plan, "--operator-memory", "64K", "--verify", check=0)
    assert result_line(r.stdout)["verified"] == "yes"
    assert int(spill_line(r.stdout)[0]["files"]) > 0
    assert {p.name for p in Path("/tmp").glob("fsh-opspill-*")} == before


def test_flight_workers_flag_is_checked():
    plan = REPO / "examples" / "plans" / "gather.json"
    r = run("run", plan, "--backend", "flight", "--flight-workers", "0", check=2)
    assert "--flight-workers" in r.stderr
    r = run("run", plan, "--backend", "nosuch", check=2)
    assert "nosuch" in r.stderr


def test_bench_ops_small():
    r = run("bench", "ops", "--sort-rows", "20000", "--left-rows", "20000", "--right-rows", "2000",
            "--runs", "2", "--flight-workers", "2", check=0)
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    for w in ["sort", "join_group_by"]:
        for base in ["memory", "fs"]:
            assert float(res[f"{w}_flight_vs_{base}"]) > 0
    # every run of a plan printed the same checksum (the memory backend's)
    for w in ["sort", "join_group_by"]:
        sums = {l.split("checksum=")[1].split()[0] for l in r.stdout.splitlines()
                if l.strip().startswith("run ") and f" {w} " in l}
        assert len(sums) == 1, sums
        if w == "sort":  # the input's (the sort's stream is checked against it), in order
            assert sums == set(re.findall(r"input checksum=([0-9a-f]{16})", r.stdout)), r.stdout
            assert all("  in order (" in l for l in r.stdout.splitlines()
                       if l.strip().startswith("run ") and " sort " in l), r.stdout
        rows = sum(1 for l in r.stdout.splitlines() if l.strip().startswith("run ") and f" {w} " in l)
        assert rows == 2 * 3


def test_bench_ops_operator_memory():
    # the spilling runs beside the in-memory ones: both plans spill, their
    # output equals the memory backend's (verified), ratios are reported
    r = run("bench", "ops", "--sort-rows", "20000", "--left-rows", "40000", "--right-rows",
            "20000", "--runs", "1", "--flight-workers", "2", "--operator-memory", "64K", check=0)
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    for w in ["sort", "join_group_by"]:
        assert float(res[f"{w}_spill_vs_memory"]) > 0
        assert float(res[f"{w}_spilled_mb"]) > 0
    assert sum(1 for l in r.stdout.splitlines() if "memory+spill" in l and "spilled" in l) == 4
