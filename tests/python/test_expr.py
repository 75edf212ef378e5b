"""test_expr.py -- the expression library (flightshuffle.expr) against
pyarrow.compute on random tables with nulls (several batches, a sliced
one, a dictionary-encoded string column): filter, arithmetic, comparisons,
Kleene logic, IS NULL, IN, BETWEEN, LIKE, CAST; and errors."""
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import flightshuffle as fsh
from flightshuffle import expr as fx

WORDS = ["", "a", "ab", "abc", "b", "ba", "h\u00e9llo", "x%y", "a_c", "abcab", "zz", "cab"]


def random_table(seed, n=3000, batches=3):
    rng = random.Random(seed)

    def maybe(v):
        return None if rng.random() < 0.12 else v

    parts = []
    for _ in range(batches):
        m = n // batches
        cols = {
            "i64": pa.array([maybe(rng.randint(-10**6, 10**6)) for _ in range(m)], pa.int64()),
            "i32": pa.array([maybe(rng.randint(-100, 100)) for _ in range(m)], pa.int32()),
            "f64": pa.array([maybe(rng.uniform(-50, 50)) for _ in range(m)], pa.float64()),
            "s": pa.array([maybe(rng.choice(WORDS)) for _ in range(m)], pa.string()),
            "d": pa.array([maybe(rng.choice(WORDS)) for _ in range(m)],
                          pa.string()).dictionary_encode(),
            "b": pa.array([maybe(rng.random() < 0.5) for _ in range(m)], pa.bool_()),
            "u8": pa.array([maybe(rng.randint(0, 255)) for _ in range(m)], pa.uint8()),
        }
        parts.append(pa.record_batch(list(cols.values()), names=list(cols.keys())))
    t = pa.Table.from_batches(parts)
    return t.slice(7, t.num_rows - 20)  # offsets != 0


def col(name):
    return {"col": name}


def lit(v, type=None):
    d = {"lit": v}
    if type:
        d["type"] = type
    return d


def op(o, *args, **kw):
    d = {"op": o, "args": list(args)}
    d.update(kw)
    return d


def same(got, want):
    got = got.combine_chunks() if isinstance(got, pa.ChunkedArray) else got
    want = want.combine_chunks() if isinstance(want, pa.ChunkedArray) else want
    if pa.types.is_dictionary(want.type):
        want = want.cast(want.type.value_type)
    if pa.types.is_dictionary(got.type):
        got = got.cast(got.type.value_type)
    assert got.type == want.type, (got.type, want.type)
    assert got.to_pylist() == want.to_pylist()


@pytest.fixture(scope="module", params=[1, 2])
def table(request):
    return random_table(request.param)


def test_filter_compound(table):
    pred = op("or", op("and", op(">", col("i32"), lit(10)), op("like", col("d"), lit("%b%"))),
              op("is_null", col("f64")))
    got = fx.filter(table, pred)
    mask = pc.or_kleene(pc.and_kleene(pc.greater(table["i32"], 10),
                                      pc.match_like(table["d"].cast(pa.string()), "%b%")),
                        pc.is_null(table["f64"]))
    want = table.filter(mask, null_selection_behavior="drop")
    assert got.num_rows == want.num_rows
    for name in table.column_names:
        same(got[name], want[name])


@pytest.mark.parametrize("o,f", [("+", pc.add_checked), ("-", pc.subtract_checked),
                                 ("*", pc.multiply_checked)])
def test_arith_int(table, o, f):
    got = fx.evaluate(table, op(o, col("i64"), col("i32")))
    same(got, f(table["i64"], table["i32"].cast(pa.int64())))
    got = fx.evaluate(table, op(o, col("u8"), lit(7)))
    same(got, f(table["u8"].cast(pa.int64()), 7))


def test_arith_float_and_division(table):
    same(fx.evaluate(table, op("*", col("f64"), col("i32"))),
         pc.multiply(table["f64"], table["i32"].cast(pa.float64())))
    same(fx.evaluate(table, op("/", col("f64"), lit(4.0))), pc.divide(table["f64"], 4.0))
    # integer division truncates toward zero, as pyarrow's divide on ints
    nz = table.filter(pc.not_equal(table["i32"], 0))
    same(fx.evaluate(nz, op("/", col("i64"), col("i32"))),
         pc.divide_checked(nz["i64"], nz["i32"].cast(pa.int64())))


@pytest.mark.parametrize("o,f", [("=", pc.equal), ("!=", pc.not_equal), ("<", pc.less),
                                 ("<=", pc.less_equal), (">", pc.greater),
                                 (">=", pc.greater_equal)])
def test_compare(table, o, f):
    same(fx.evaluate(table, op(o, col("i32"), col("i64"))),
         f(table["i32"].cast(pa.int64()), table["i64"]))
    same(fx.evaluate(table, op(o, col("f64"), lit(1))), f(table["f64"], 1.0))
    same(fx.evaluate(table, op(o, col("s"), col("d"))), f(table["s"], table["d"].cast(pa.string())))
    same(fx.evaluate(table, op(o, col("s"), lit("ab"))), f(table["s"], "ab"))


def test_logic_null_in_between_like_cast(table):
    b = table["b"]
    c = pc.greater(table["i32"], 0)
    same(fx.evaluate(table, op("and", col("b"), op(">", col("i32"), lit(0)))), pc.and_kleene(b, c))
    same(fx.evaluate(table, op("or", col("b"), op(">", col("i32"), lit(0)))), pc.or_kleene(b, c))
    same(fx.evaluate(table, op("not", col("b"))), pc.invert(b))
    same(fx.evaluate(table, op("is_null", col("d"))), pc.is_null(table["d"]))
    same(fx.evaluate(table, op("is_not_null", col("s"))), pc.is_valid(table["s"]))
    # IN without nulls in the list: null in, null out (pyarrow's is_in
    # returns false for a null value, so the null rows are set back)
    isin = pc.is_in(table["i32"], value_set=pa.array([1, 2, 3, -50], pa.int32()))
    want = pc.if_else(pc.is_null(table["i32"]), pa.scalar(None, pa.bool_()), isin)
    same(fx.evaluate(table, op("in", col("i32"), lit(1), lit(2), lit(3), lit(-50))), want)
    same(fx.evaluate(table, op("between", col("f64"), lit(-10), lit(10.5))),
         pc.and_kleene(pc.greater_equal(table["f64"], -10.0), pc.less_equal(table["f64"], 10.5)))
    for pat in ["ab%", "%ab", "%b%", "a_c", "h_llo", "%a%b%", "x\\%y", "a\\_c", "_", "%"]:
        same(fx.evaluate(table, op("like", col("s"), lit(pat))), pc.match_like(table["s"], pat))
        same(fx.evaluate(table, op("like", col("d"), lit(pat))),
             pc.match_like(table["d"].cast(pa.string()), pat))
    same(fx.evaluate(table, op("cast", col("i32"), type="int8")), pc.cast(table["i32"], pa.int8()))
    same(fx.evaluate(table, op("cast", col("u8"), type="float64")),
         pc.cast(table["u8"], pa.float64()))
    same(fx.evaluate(table, op("cast", col("i64"), type="int16", on_error="null")),
         pc.if_else(pc.and_(pc.greater_equal(table["i64"], -32768), pc.less_equal(table["i64"], 32767)),
                    pc.cast(table["i64"], pa.int16(), safe=False), pa.scalar(None, pa.int16())))


def test_project_schema(table):
    got = fx.project(table, {"key": col("d"), "twice": op("*", col("i64"), lit(2)),
                             "flag": op("<", col("f64"), lit(0.0))})
    assert got.column_names == ["key", "twice", "flag"]
    assert got.schema.field("key").type == table.schema.field("d").type
    assert got.schema.field("twice").type == pa.int64()
    assert got.schema.field("flag").type == pa.bool_()
    same(got["key"], table["d"])
    same(got["twice"], pc.multiply_checked(table["i64"], 2))


def test_errors():
    t = random_table(3, n=30, batches=1)
    with pytest.raises(fsh.FlightShuffleError, match="unknown column 'nope'"):
        fx.filter(t, op(">", col("nope"), lit(1)))
    with pytest.raises(fsh.FlightShuffleError, match=r"column 's' is utf8"):
        fx.evaluate(t, op("+", col("s"), lit(1)))
    with pytest.raises(fsh.FlightShuffleError, match=r"predicate .* is int64, not bool"):
        fx.filter(t, op("+", col("i64"), lit(1)))
    with pytest.raises(fsh.FlightShuffleError, match=r"\$\.args\[1\]: unknown operator 'xor'"):
        fx.Expression(op("and", col("b"), op("xor", col("b"), col("b"))))
    with pytest.raises(fsh.FlightShuffleError, match="division by zero"):
        fx.evaluate(t, op("/", col("i64"), lit(0)))
    got = fx.evaluate(t, op("/", col("i64"), lit(0), on_error="null"))
    assert got.null_count == len(got)
    e = fx.Expression('{"op":"<","args":[{"col":"a"},{"lit":2.5}]}')
    assert e.to_json() == '{"op":"<","args":[{"col":"a"},{"lit":2.5}]}'
