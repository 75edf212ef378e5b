"""test_ops_vs_pyarrow.py -- the operator corners where pyarrow is the
reference: how floats sort (NaN beside the nulls in both directions, -0.0
equal to 0.0, stable) in sort, top-N, merge and range boundaries against
pyarrow.compute.sort_indices; float group-by and join keys (NaN groups and
matches together, -0.0 and 0.0 apart) against Table.group_by and
Table.join; min/max of decimal256 and of dictionary columns against
pyarrow's group_by min/max (of the decoded column: pyarrow has no
dictionary min/max kernel)."""
import decimal
import math
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import flightshuffle as fs
from flightshuffle import ops

NAN = float("nan")


def _floats(rnd, n, nan=0.08, null=0.08):
    def one():
        x = rnd.random()
        if x < null:
            return None
        if x < null + nan:
            return NAN
        return rnd.choice([-0.0, 0.0, math.inf, -math.inf, rnd.randint(-6, 6) / 2])
    return [one() for _ in range(n)]


def _batch(seed, n=1500):
    rnd = random.Random(seed)
    return pa.record_batch({
        "f64": pa.array(_floats(rnd, n), pa.float64()),
        "f32": pa.array(_floats(rnd, n), pa.float32()),
        "f16": pa.array(_floats(rnd, n), pa.float64()).cast(pa.float16()),
        "small": pa.array([rnd.randrange(3) for _ in range(n)], pa.int32()),
        "id": pa.array(range(n), pa.int64()),
    })


def _arrow_order(b, keys, nulls):
    # pyarrow cannot sort float16: its exact float32 widening stands in
    cols = [c.cast(pa.float32()) if c.type == pa.float16() else c for c in b.columns]
    b = pa.record_batch(cols, names=b.schema.names)
    return pc.sort_indices(b, sort_keys=[(k, d, nulls) for k, d in keys]).to_pylist()


def _key(v):
    """A row value made comparable: NaN as a string, -0.0 told from 0.0."""
    if isinstance(v, float):
        if v != v:
            return ("nan",)
        return (v, math.copysign(1.0, v))
    return v


KEYS = [[("f64", "ascending")], [("f64", "descending")], [("f32", "descending")],
        [("f16", "ascending")], [("f16", "descending")],
        [("small", "ascending"), ("f64", "descending")],
        [("f64", "descending"), ("f32", "ascending")]]


@pytest.mark.parametrize("keys", KEYS, ids=lambda k: "+".join(f"{c}:{d[0]}" for c, d in k))
@pytest.mark.parametrize("nulls", ["at_end", "at_start"])
def test_float_sort_like_pyarrow(keys, nulls):
    b = _batch(KEYS.index(keys))
    want = _arrow_order(b, keys, nulls)
    got = list(fs.sort.sort_indices(b, keys, null_placement=nulls))
    assert got == want
    assert list(fs.sort.sort_indices(b.slice(5, 1000), keys, null_placement=nulls)) == \
        _arrow_order(b.slice(5, 1000), keys, nulls)
    for n in (1, 17, 700, 1500):
        assert list(fs.sort.top_n_indices(b, n, keys, null_placement=nulls)) == want[:n]


@pytest.mark.parametrize("nulls", ["at_end", "at_start"])
@pytest.mark.parametrize("direction", ["ascending", "descending"])
def test_float_merge_and_boundaries_like_pyarrow(nulls, direction):
    b = _batch(40)
    keys = [("f64", direction)]
    cuts = [0, 200, 201, 900, b.num_rows]
    runs = [b.slice(lo, hi - lo) for lo, hi in zip(cuts, cuts[1:])]
    runs = [r.take(pa.array(_arrow_order(r, keys, nulls), pa.int64())) for r in runs]
    glued = pa.Table.from_batches(runs).combine_chunks().to_batches()[0]
    want = glued.take(pa.array(_arrow_order(glued, keys, nulls), pa.int64()))
    got = fs.sort.merge_sorted(runs, keys, null_placement=nulls).to_pyarrow()
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    # boundaries: the rows at quantiles of pyarrow's order, repeats dropped
    parts = 9
    order = _arrow_order(b, keys, nulls)
    vals = [_key(v) if v is not None else None for v in b.column("f64").to_pylist()]
    picked = []
    for p in range(1, parts):
        r = order[b.num_rows * p // parts]
        prev = vals[picked[-1]] if picked else object()
        same = prev == vals[r] or (isinstance(prev, tuple) and isinstance(vals[r], tuple) and
                                   prev[0] == vals[r][0])  # -0.0 == 0.0 in the order
        if picked and same:
            continue
        picked.append(r)
    got = fs.sort.range_boundaries(b, parts, keys, null_placement=nulls).to_pyarrow()
    want_vals = [b.column("f64")[r].as_py() for r in picked]
    assert [_key(v) if v is not None else None for v in got.column(0).to_pylist()] == \
        [_key(v) if v is not None else None for v in want_vals]


def _group_rows(t, names):
    return sorted((tuple(_key(v) for v in r.values()) for r in t.select(names).to_pylist()),
                  key=repr)


@pytest.mark.parametrize("keys", [["f64"], ["f32", "small"], ["small", "f64", "f32"]])
def test_float_group_by_keys_like_pyarrow(keys):
    t = pa.Table.from_batches([_batch(7, 1000), _batch(8, 700)])
    aggs = [("id", "sum"), ("id", "count"), (None, "count_all")]
    got = pa.table(ops.group_by(t, keys, aggs))
    want = t.group_by(keys, use_threads=False).aggregate(
        [(c, f) if c else ([], f) for c, f in aggs])
    names = keys + ["id_sum", "id_count", "count_all"]
    assert got.num_rows == want.num_rows
    assert _group_rows(got, names) == _group_rows(want, names)
    # two phases: partial states merged by the final phase
    parts = [ops.group_by(t.slice(lo, 600), keys, aggs, partial=True) for lo in (0, 600, 1200)]
    final = pa.table(ops.merge_partials(parts, t.schema, keys, aggs))
    assert _group_rows(final, names) == _group_rows(want, names)


@pytest.mark.parametrize("join_type", ["inner", "left outer", "full outer", "left semi",
                                       "left anti"])
@pytest.mark.parametrize("build", ["left", "right"])
def test_float_join_keys_like_pyarrow(join_type, build):
    left = pa.table(_batch(21, 300)).select(["f64", "small", "id"])
    right = pa.table(_batch(22, 200)).select(["f64", "small", "id"])
    keys = ["f64", "small"]
    got = pa.table(ops.join(left, right, keys, keys, join_type, build=build))
    want = left.join(right, keys, keys, join_type=join_type, right_suffix="_right",
                     coalesce_keys=False)
    cols = ["id"] + ([] if "semi" in join_type or "anti" in join_type else ["id_right"])
    assert got.num_rows == want.num_rows
    assert _group_rows(got, cols) == _group_rows(want, cols)


def test_min_max_decimal256_like_pyarrow():
    rnd = random.Random(5)
    n = 2000
    g = [rnd.randrange(25) for _ in range(n)]
    d = [None if rnd.random() < 0.2 or gi == 24 else
         decimal.Decimal(rnd.randrange(-10**55, 10**55)).scaleb(-4) for gi in g]
    t = pa.table({"g": pa.array(g, pa.int64()), "d": pa.array(d, pa.decimal256(60, 4))})
    aggs = [("d", "min"), ("d", "max")]
    got = pa.table(ops.group_by(t, ["g"], aggs))
    want = t.group_by(["g"], use_threads=False).aggregate(aggs)
    assert got.schema.field("d_min").type == pa.decimal256(60, 4)
    assert _group_rows(got, ["g", "d_min", "d_max"]) == _group_rows(want, ["g", "d_min", "d_max"])
    parts = [ops.group_by(t.slice(lo, 500), ["g"], aggs, partial=True) for lo in range(0, n, 500)]
    final = pa.table(ops.merge_partials(parts, t.schema, ["g"], aggs))
    assert _group_rows(final, ["g", "d_min", "d_max"]) == _group_rows(want, ["g", "d_min", "d_max"])


@pytest.mark.parametrize("value_type", ["string", "int64", "float64", "decimal256"])
def test_min_max_dictionary_like_pyarrow_on_decoded(value_type):
    rnd = random.Random(value_type)
    n = 1500
    if value_type == "string":
        pool = pa.array(["", "a", "ab", "b", "zz", "é", "abc\x00"])
    elif value_type == "int64":
        pool = pa.array([-2**63, -5, 0, 7, 2**63 - 1], pa.int64())
    elif value_type == "float64":
        pool = pa.array([NAN, -1.5, 2.25, -math.inf, 1e300], pa.float64())
    else:
        pool = pa.array([decimal.Decimal(x) for x in ("-1e50", "3.5", "0", "12345678901234567890123")],
                        pa.decimal256(60, 1))
    g = [rnd.randrange(20) for _ in range(n)]
    picks = [None if rnd.random() < 0.15 or gi == 19 else rnd.randrange(len(pool)) for gi in g]
    plain = pool.take(pa.array(picks, pa.int64()))
    batches = []
    for lo in (0, 500, 1000):  # a different dictionary per batch
        part = plain.slice(lo, 500)
        batches.append(pa.record_batch({"g": pa.array(g[lo:lo + 500], pa.int64()),
                                        "v": part.dictionary_encode()}))
    aggs = [("v", "min"), ("v", "max")]
    got_parts = []
    for b in batches:
        got_parts.append(ops.group_by(b, ["g"], aggs, partial=True))
    schema = batches[0].schema
    final = pa.table(ops.merge_partials(got_parts, schema, ["g"], aggs))
    single = pa.table(ops.group_by(pa.Table.from_batches(batches), ["g"], aggs))
    ref = pa.table({"g": pa.array(g, pa.int64()), "v": plain})
    want = ref.group_by(["g"], use_threads=False).aggregate(aggs)
    assert final.schema.field("v_min").type == pool.type
    names = ["g", "v_min", "v_max"]
    assert _group_rows(final, names) == _group_rows(want, names)
    assert _group_rows(single, names) == _group_rows(want, names)
