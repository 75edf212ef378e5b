"""test_sort.py -- our stable sort against pyarrow.compute.sort_indices on
random record batches: integers of every width, floats with NaN and -0.0,
strings, binary, dates, timestamps, decimals, bools, dictionary columns
(compared with pyarrow's sort of the decoded column), nulls, duplicates,
slices, several keys, both directions and null placements; top-N against
the sorted prefix, the merge of sorted runs against pyarrow's stable sort of
their concatenation, range boundaries against quantiles of pyarrow's sort.

Floats sort as pyarrow sorts them (NaN beside the nulls whatever the
direction), so float columns carry NaN in every direction and null
placement."""
import decimal
import functools
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import flightshuffle as fs

N = 2000


@functools.lru_cache(maxsize=None)
def random_batch(seed: int, nan: bool, n: int = N) -> pa.RecordBatch:
    rnd = random.Random(seed)

    def maybe(v):
        return None if rnd.random() < 0.1 else v

    def flt():
        x = rnd.random()
        if nan and x < 0.05:
            return float("nan")
        if x < 0.1:
            return -0.0
        if x < 0.15:
            return 0.0
        if x < 0.17:
            return float("inf") if x < 0.16 else float("-inf")
        return rnd.randint(-40, 40) / 4

    words = ["", "a", "ab", "abc", "abcdefgh", "abcdefghi", "abcdefgh\x00", "b", "zz", "é", "ü"]
    cols = {
        "i8": pa.array([maybe(rnd.randint(-128, 127)) for _ in range(n)], pa.int8()),
        "i64": pa.array([maybe(rnd.choice([rnd.randint(-50, 50), -2**63, 2**63 - 1]))
                         for _ in range(n)], pa.int64()),
        "u32": pa.array([maybe(rnd.randint(0, 2**32 - 1)) for _ in range(n)], pa.uint32()),
        "u64": pa.array([maybe(rnd.choice([rnd.randint(0, 2**64 - 1), 0, 2**64 - 1, 5]))
                         for _ in range(n)], pa.uint64()),
        "f64": pa.array([maybe(flt()) for _ in range(n)], pa.float64()),
        "f32": pa.array([maybe(flt()) for _ in range(n)], pa.float32()),
        "s": pa.array([maybe(rnd.choice(words) + rnd.choice(words)) for _ in range(n)], pa.string()),
        "ls": pa.array([maybe(rnd.choice(words)) for _ in range(n)], pa.large_string()),
        "bin": pa.array([maybe(rnd.choice(words).encode()) for _ in range(n)], pa.binary()),
        "d32": pa.array([maybe(rnd.randint(-1000, 1000)) for _ in range(n)], pa.int32()).cast(pa.date32()),
        "ts": pa.array([maybe(rnd.randint(-10**12, 10**12)) for _ in range(n)], pa.int64()).cast(
            pa.timestamp("us")),
        "dec": pa.array([maybe(decimal.Decimal(rnd.randint(-10**20, 10**20)).scaleb(-3))
                         for _ in range(n)], pa.decimal128(30, 3)),
        "b": pa.array([maybe(rnd.random() < 0.5) for _ in range(n)], pa.bool_()),
        "small": pa.array([maybe(rnd.randint(0, 3)) for _ in range(n)], pa.int32()),
    }
    cols["dict"] = pa.array([maybe(rnd.choice(words)) for _ in range(n)]).dictionary_encode()
    return pa.record_batch(cols)


def decoded(b: pa.RecordBatch) -> pa.RecordBatch:
    cols = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in b.columns]
    return pa.record_batch(cols, names=b.schema.names)


KEY_SETS = [["i8"], ["i64"], ["u32"], ["u64"], ["f64"], ["f32"], ["s"], ["ls"], ["bin"], ["d32"],
            ["ts"], ["dec"], ["b"], ["dict"], ["small", "s"], ["small", "f64", "i64"],
            ["b", "dict", "u64"], ["s", "small"]]


def rows(b: pa.RecordBatch):
    """Rows as Python values, NaN made comparable."""
    def fix(v):
        return "NaN" if isinstance(v, float) and v != v else v
    return [{k: fix(v) for k, v in r.items()} for r in decoded(b).to_pylist()]


def arrow_sort(b: pa.RecordBatch, sort_keys, nulls="at_end"):
    """pyarrow's stable sort of b (dictionaries decoded), null placement
    given per key as pyarrow >= 25 wants it."""
    keys = [(k, d, nulls) for k, d in sort_keys]
    return pc.sort_indices(decoded(b), sort_keys=keys).to_pylist()


@pytest.mark.parametrize("keys", KEY_SETS, ids=lambda k: "+".join(k))
@pytest.mark.parametrize("order", ["ascending", "descending", "mixed"])
@pytest.mark.parametrize("nulls", ["at_end", "at_start"])
@pytest.mark.parametrize("sliced", [False, True])
def test_sort_indices_like_pyarrow(keys, order, nulls, sliced):
    b = random_batch(KEY_SETS.index(keys), True)
    if sliced:
        b = b.slice(7, N - 20)
    dirs = ["descending" if (order == "descending" or (order == "mixed" and i % 2)) else "ascending"
            for i in range(len(keys))]
    sort_keys = list(zip(keys, dirs))
    want = arrow_sort(b, sort_keys, nulls)
    got = list(fs.sort.sort_indices(b, sort_keys, null_placement=nulls))
    assert got == want
    sorted_b = fs.sort.sort_batch(b, sort_keys, null_placement=nulls).to_pyarrow()
    assert rows(sorted_b) == rows(b.take(pa.array(want, pa.int64())))


@pytest.mark.parametrize("n", [0, 1, 10, N - 1, N, N + 10])
def test_top_n_is_the_sorted_prefix(n):
    b = random_batch(n, False)
    sort_keys = [("small", "descending"), ("s", "ascending")]
    want = arrow_sort(b, sort_keys)[:n]
    assert list(fs.sort.top_n_indices(b, n, sort_keys)) == want
    assert rows(fs.sort.top_n(b, n, sort_keys).to_pyarrow()) == rows(b.take(pa.array(want, pa.int64())))


@pytest.mark.parametrize("parts", [1, 2, 7, 100, 5000])
@pytest.mark.parametrize("keys", [["i64"], ["s", "small"], ["dict"]], ids=lambda k: "+".join(k))
def test_range_boundaries_are_quantiles(parts, keys):
    b = random_batch(parts, False)
    n = b.num_rows
    order = arrow_sort(b, [(k, "ascending") for k in keys])
    proj = b.select(keys)
    values = decoded(proj).to_pylist()
    picked = []
    for p in range(1, parts):
        r = order[n * p // parts]
        if picked and values[picked[-1]] == values[r]:
            continue
        picked.append(r)
    want = proj.take(pa.array(picked, pa.int64()))
    got = fs.sort.range_boundaries(b, parts, keys).to_pyarrow()
    assert got.num_rows <= parts - 1
    assert rows(got) == rows(want)


@pytest.mark.parametrize("keys", [["i64"], ["s", "small"], ["dict", "f64"]],
                         ids=lambda k: "+".join(k))
@pytest.mark.parametrize("nulls", ["at_end", "at_start"])
def test_merge_sorted_like_a_stable_sort(keys, nulls):
    b = random_batch(len(keys) + 100, False)
    sort_keys = [(k, "descending" if i % 2 else "ascending") for i, k in enumerate(keys)]
    cuts = [0, 300, 301, 1200, N]
    runs = [b.slice(lo, hi - lo) for lo, hi in zip(cuts, cuts[1:])]
    runs = [r.take(pa.array(arrow_sort(r, sort_keys, nulls), pa.int64())) for r in runs]
    glued = pa.Table.from_batches(runs).combine_chunks().to_batches()[0]
    want = glued.take(pa.array(arrow_sort(glued, sort_keys, nulls), pa.int64()))
    got = fs.sort.merge_sorted(runs, sort_keys, null_placement=nulls).to_pyarrow()
    assert rows(got) == rows(want)


def test_errors():
    b = random_batch(1, False, 10)
    with pytest.raises(KeyError):
        fs.sort.sort_indices(b, "nope")
    with pytest.raises(ValueError):
        fs.sort.sort_indices(b, [("i64", "sideways")])
    lists = pa.record_batch({"l": pa.array([[1], [2]])})
    with pytest.raises(fs.FlightShuffleError, match="'l'"):
        fs.sort.sort_indices(lists, "l")
