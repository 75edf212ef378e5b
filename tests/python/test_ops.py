"""test_ops.py -- flightshuffle.ops.group_by and join against pyarrow's
Table.group_by().aggregate() and Table.join() on random tables (nulls,
skewed int64 keys, utf8 and dictionary keys, several batches)."""
import math
import random

import pyarrow as pa
import pytest

import flightshuffle as fs
from flightshuffle import ops


def _random_table(seed, n, n_keys=20, batches=3):
    rnd = random.Random(seed)

    def maybe(v, p=0.1):
        return None if rnd.random() < p else v

    k1 = [maybe(0 if rnd.random() < 0.5 else rnd.randrange(n_keys)) for _ in range(n)]
    k2 = [maybe(f"s{rnd.randrange(4)}") for _ in range(n)]
    k3 = [maybe(rnd.choice(["apple", "kiwi", "fig", ""])) for _ in range(n)]
    vi = [maybe(rnd.randrange(-1000, 1000), 0.2) for _ in range(n)]
    vf = [maybe(rnd.randrange(100000) / 64.0, 0.2) for _ in range(n)]
    vs = [maybe(f"x{rnd.randrange(30)}", 0.2) for _ in range(n)]
    ids = list(range(n))
    t = pa.table({
        "k1": pa.array(k1, pa.int64()),
        "k2": pa.array(k2, pa.string()),
        "k3": pa.array(k3, pa.string()).dictionary_encode(),
        "vi": pa.array(vi, pa.int32()),
        "vf": pa.array(vf, pa.float64()),
        "vs": pa.array(vs, pa.string()),
        "id": pa.array(ids, pa.int64()),
    })
    cut = sorted(rnd.sample(range(1, n), batches - 1)) if n > batches else []
    bounds = [0] + cut + [n]
    return pa.Table.from_batches(
        [b for lo, hi in zip(bounds, bounds[1:]) for b in t.slice(lo, hi - lo).to_batches()],
        schema=t.schema)


def _norm(v):
    if isinstance(v, float):
        return round(v, 6)
    return v


def _rows(table, columns):
    """Rows as tuples of the given columns, dictionaries decoded, sorted."""
    cols = []
    for c in columns:
        a = table.column(c)
        if pa.types.is_dictionary(a.type):
            a = a.cast(a.type.value_type)
        cols.append([_norm(v) for v in a.to_pylist()])
    rows = list(zip(*cols))
    return sorted(rows, key=lambda r: [(v is None, v if v is not None else 0) for v in r])


AGGS = [("vi", "sum"), ("vf", "sum"), ("vi", "mean"), ("vi", "min"), ("vi", "max"),
        ("vf", "min"), ("vs", "max"), ("vs", "count_distinct"), ("vi", "count"),
        (None, "count_all")]


@pytest.mark.parametrize("keys", [["k1"], ["k2", "k3"], ["k3", "k1", "k2"], ["k3"]])
@pytest.mark.parametrize("seed", [1, 2])
def test_group_by_matches_pyarrow(keys, seed):
    t = _random_table(seed, 2000)
    got = pa.table(ops.group_by(t, keys, AGGS))
    want = t.group_by(keys).aggregate([(c, f) if c else ([], f) for c, f in AGGS])
    names = keys + ["count_all" if f == "count_all" else f"{c}_{f}" for c, f in AGGS]
    assert set(names) <= set(want.column_names)
    assert got.column_names == names
    assert got.num_rows == want.num_rows
    assert _rows(got, names) == _rows(want, names)


def test_group_by_global_and_empty():
    t = _random_table(3, 500)
    got = pa.table(ops.group_by(t, [], [("vi", "sum"), (None, "count_all")]))
    assert got.to_pylist() == [{"vi_sum": pa.compute.sum(t["vi"]).as_py(), "count_all": 500}]
    empty = t.slice(0, 0)
    got = pa.table(ops.group_by(empty, ["k1"], [("vi", "sum")]))
    assert got.num_rows == 0 and got.column_names == ["k1", "vi_sum"]


def test_two_phase_group_by():
    t = _random_table(4, 3000, batches=6)
    aggs = [("vi", "sum"), ("vi", "mean"), ("vs", "count_distinct"), ("vf", "max"),
            (None, "count_all")]
    parts = [ops.group_by(t.slice(lo, 1000), ["k1", "k2"], aggs, partial=True)
             for lo in (0, 1000, 2000)]
    final = pa.table(ops.merge_partials(parts, t.schema, ["k1", "k2"], aggs))
    want = t.group_by(["k1", "k2"]).aggregate([(c, f) if c else ([], f) for c, f in aggs])
    assert _rows(final, final.column_names) == _rows(want, final.column_names)


@pytest.mark.parametrize("join_type", list(ops.JOIN_TYPES))
@pytest.mark.parametrize("build", ["left", "right"])
@pytest.mark.parametrize("keys", [["k1"], ["k1", "k2"], ["k3"]])
def test_join_matches_pyarrow(join_type, build, keys):
    left = _random_table(10, 400).select(["k1", "k2", "k3", "vi", "id"])
    right = _random_table(11, 300).select(["k1", "k2", "k3", "vs", "id"])
    got = pa.table(ops.join(left, right, keys, keys, join_type, build=build))
    want = left.join(right, keys, keys, join_type=join_type, right_suffix="_right",
                     coalesce_keys=False)
    cols = ["id", "vi"] + ([] if "semi" in join_type or "anti" in join_type else
                           ["id_right", "vs"])
    assert got.num_rows == want.num_rows
    assert _rows(got, cols) == _rows(want, cols)


def test_join_key_type_mismatch():
    t = _random_table(5, 10)
    with pytest.raises(fs.FlightShuffleError) as e:
        ops.join(t, t, ["k1"], ["k2"])
    assert "'k1'" in str(e.value) and "'k2'" in str(e.value)


def test_group_by_decimal_matches_pyarrow():
    import decimal
    rnd = random.Random(8)
    n = 1500
    g = [None if rnd.random() < 0.05 else rnd.randrange(30) for _ in range(n)]
    d = [None if rnd.random() < 0.2 else decimal.Decimal(rnd.randrange(-10**9, 10**9)).scaleb(-2)
         for _ in range(n)]
    t = pa.table({"g": pa.array(g, pa.int64()), "d": pa.array(d, pa.decimal128(12, 2))})
    aggs = [("d", "sum"), ("d", "min"), ("d", "max")]
    got = pa.table(ops.group_by(t, ["g"], aggs))
    want = t.group_by(["g"]).aggregate(aggs)
    assert got.schema.field("d_sum").type == want.schema.field("d_sum").type  # decimal128(38, 2)
    names = ["g", "d_sum", "d_min", "d_max"]
    assert _rows(got, names) == _rows(want, names)


# ---- `flightshuffle bench ops` on a local cluster ---------------------------------

import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("FSH_CLI", REPO / "build" / "flightshuffle"))


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("direct_reads", ["on", "off"])
def test_bench_ops_on_a_cluster(tmp_path, direct_reads):
    """bench ops at a tiny size: the fs and flight rows run as jobs on a local
    cluster of worker processes (their pids printed, every stage's time
    shown), the memory row in process; every run's rows and checksum equal
    the single-process reference run's; the result line carries the ratios
    and verified=yes; no worker outlives the bench and the spill directory
    is left empty."""
    spill = tmp_path / "spill"
    spill.mkdir()
    r = subprocess.run([str(CLI), "bench", "ops", "--sort-rows", "30000", "--left-rows", "30000",
                        "--right-rows", "3000", "--runs", "2", "--workers", "3",
                        "--partitions", "4", "--spill-dir", str(spill),
                        "--direct-reads", direct_reads],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert f"direct reads {direct_reads})" in out.splitlines()[0], out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("result: "), out
    res = dict(kv.split("=", 1) for kv in last[len("result: "):].split())
    assert res["verified"] == "yes" and res["workers"] == "3"
    for w in ["sort", "join_group_by"]:
        for base in ["memory", "fs"]:
            assert float(res[f"{w}_flight_vs_{base}"]) > 0
            assert float(res[f"{w}_flight_vs_{base}_cpu"]) > 0
        assert float(res[f"{w}_flight_gbps"]) > 0
    pids = [int(m) for m in re.findall(r"^  worker \d+ grpc://127\.0\.0\.1:\d+ pid (\d+)$", out,
                                       re.M)]
    assert len(pids) == 3, out
    # the join's runs equal the reference: same rows, same checksum; the
    # sort's (streamed, no reference run) have the input's rows and row
    # checksum and are in order
    for w, rows in [("sort", 30000), ("join_group_by", 64)]:
        if w == "sort":
            ref = re.search(r"^  sort: (\d+) rows of .* input checksum=([0-9a-f]{16})$", out,
                            re.M)
            tail = r"  in order \(\d+ batches; check [\d.]+ s\)"
        else:
            ref = re.search(rf"^  reference {w} +[\d.]+ s  rows=(\d+) "
                            rf"checksum=([0-9a-f]{{16}})$", out, re.M)
            tail = ""
        assert ref, out
        assert int(ref.group(1)) == rows  # 64 categories (groups) in the dims table
        runs = re.findall(rf"^  run \d+ {w} +(memory|fs|flight) .* rows=(\d+) "
                          rf"checksum=([0-9a-f]{{16}}){tail}$", out, re.M)
        assert sorted(b for b, _, _ in runs) == ["flight"] * 2 + ["fs"] * 2 + ["memory"] * 2
        assert all((n, c) == ref.groups() for _, n, c in runs), runs
    # the cluster runs name their stages by operator: a distributed sort
    # is a range staging stage, its scatter, the result; the join +
    # group-by is the join's two hash exchanges, then the aggregate's
    stages = re.findall(r"^      stages \(seconds/task seconds/bytes\): (.*)$", out, re.M)
    assert len(stages) == 2 * 2 * 2, out
    assert sum(1 for s in stages if re.fullmatch(
        r"sort: range-stage \S+MB, sort: range-scatter \S+MB, sort: result \S+MB", s)) == 4, \
        stages
    assert sum(1 for s in stages if re.fullmatch(
        r"join: hash \S+MB, join: hash \S+MB, aggregate: hash \S+MB, aggregate: result \S+MB",
        s)) == 4, stages
    # and what each cluster run spilled (shuffle files, operators)
    assert len(re.findall(r"^      spilled \d+MB \(shuffle files\), \d+MB \(operators\)$", out,
                          re.M)) == 2 * 2 * 2, out
    time.sleep(0.2)
    assert all(_gone(p) for p in pids), "a worker outlived the bench"
    assert list(spill.iterdir()) == []


def test_bench_ops_bad_flags():
    r = subprocess.run([str(CLI), "bench", "ops", "--workers", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--workers" in r.stderr
    r = subprocess.run([str(CLI), "bench", "ops", "--direct-reads", "maybe"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--direct-reads" in r.stderr
