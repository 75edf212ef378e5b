"""test_c_data.py -- pyarrow <-> the C library through the Arrow C Data
Interface: every type goes in and comes back equal, with the very same
buffer addresses (no copies), through Table / RecordBatch / RecordBatchReader
and the PyCapsule protocol both ways."""
import gc

import pyarrow as pa
import pytest

import flightshuffle as fs
from cases import CASES, N, addresses, c_addresses

VARIANTS = ["full", "sliced"]


def variant(t: pa.Table, v: str) -> pa.Table:
    return t.slice(3, N - 8) if v == "sliced" else t


def assert_same_table(got: pa.Table, want: pa.Table):
    assert got.schema.equals(want.schema, check_metadata=True), f"{got.schema}\n!=\n{want.schema}"
    assert got.equals(want), f"{got}\n!=\n{want}"


@pytest.mark.parametrize("v", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_table_roundtrip_zero_copy(case, v):
    t = variant(CASES[case](), v)
    before = c_addresses(t)
    ours = fs.Table.from_arrow(t)
    for b in ours.batches:
        b.validate()
    back = ours.to_pyarrow()
    assert_same_table(back, t)
    assert c_addresses(back) == before


@pytest.mark.parametrize("v", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_roundtrip_zero_copy(case, v):
    t = variant(CASES[case](), v)
    (batch,) = t.to_batches()
    ours = fs.RecordBatch.from_arrow(batch)
    assert ours.num_rows == batch.num_rows and ours.num_columns == batch.num_columns
    back = pa.record_batch(ours)
    assert back.equals(batch)
    assert back.schema.equals(batch.schema, check_metadata=True)
    assert c_addresses(back) == c_addresses(batch)


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_roundtrip_zero_copy(case):
    t = CASES[case]()
    batches = t.to_batches() + [t.slice(0, 0).to_batches()[0] if t.slice(0, 0).to_batches()
                                else t.to_batches()[0].slice(0, 0)] + t.slice(5).to_batches()
    reader = pa.RecordBatchReader.from_batches(t.schema, batches)
    back = fs.RecordBatchStream.from_arrow(reader).to_pyarrow()
    got = list(back)
    assert len(got) == len(batches)
    for g, b in zip(got, batches):
        assert g.equals(b)
        assert c_addresses(g) == c_addresses(b)


@pytest.mark.parametrize("case", ["int32", "string", "large_binary", "list", "struct", "bool",
                                  "decimal256", "dict_uint16", "fixed_size_binary"])
def test_pa_buffer_addresses(case):
    """The plain pyarrow view of it: pa.Array.buffers()[i].address."""
    t = CASES[case]()
    back = fs.roundtrip(t)
    for name in t.column_names:
        assert addresses(back.column(name)) == addresses(t.column(name))
        if pa.types.is_dictionary(t.column(name).type):
            assert addresses(back.column(name).chunk(0).dictionary) == \
                addresses(t.column(name).chunk(0).dictionary)


def test_roundtrip_releases_everything():
    """The producer's release runs once everything is gone: pyarrow's pool
    returns to where it started."""
    gc.collect()
    base = pa.total_allocated_bytes()
    t = pa.table({"a": pa.array(range(100_000)), "s": pa.array([str(i) for i in range(100_000)])})
    assert pa.total_allocated_bytes() > base
    back = fs.roundtrip(t)
    ours = fs.Table.from_arrow(back)
    again = fs.roundtrip(fs.RecordBatch.from_arrow(t.to_batches()[0]).to_pyarrow())
    assert again.equals(t.to_batches()[0])
    del t, back, ours, again
    gc.collect()
    assert pa.total_allocated_bytes() == base


def test_zero_rows_and_no_batches():
    schema = pa.schema([("a", pa.int32()), ("b", pa.list_(pa.string()))], metadata={"k": "v"})
    empty = pa.Table.from_batches([], schema)
    ours = fs.Table.from_arrow(empty)
    assert ours.num_rows == 0 and ours.batches == []
    back = pa.table(ours)
    assert back.schema.equals(schema, check_metadata=True) and back.num_rows == 0
    one_empty = pa.Table.from_batches([pa.record_batch([pa.array([], pa.int32()),
                                                        pa.array([], pa.list_(pa.string()))],
                                                       schema=schema)])
    back = fs.roundtrip(one_empty)  # (pyarrow drops empty chunks itself)
    assert back.equals(one_empty) and back.schema.equals(schema, check_metadata=True)


# ---- the PyCapsule protocol ------------------------------------------------


class OnlyStream:
    """A third-party producer exposing only __arrow_c_stream__."""

    def __init__(self, t):
        self.t = t

    def __arrow_c_stream__(self, requested_schema=None):
        return self.t.__arrow_c_stream__(requested_schema)


class OnlyArray:
    def __init__(self, b):
        self.b = b

    def __arrow_c_array__(self, requested_schema=None):
        return self.b.__arrow_c_array__(requested_schema)


def test_capsules_into_pyarrow():
    t = CASES["wide"]()
    ours = fs.Table.from_arrow(t)
    assert pa.table(ours).equals(t)
    assert pa.schema(ours.schema).equals(t.schema, check_metadata=True)
    assert pa.schema(ours).equals(t.schema)
    b = ours.batches[0]
    assert pa.record_batch(b).equals(t.to_batches()[0])
    assert pa.table(b).equals(t)  # a batch is a one-batch stream, too
    reader = pa.RecordBatchReader.from_stream(ours.to_stream())
    assert reader.read_all().equals(t)
    # requested_schema is a hint a producer may ignore
    cap = ours.__arrow_c_stream__(requested_schema=t.schema.__arrow_c_schema__())
    assert pa.RecordBatchReader._import_from_c_capsule(cap).read_all().equals(t)


def test_capsules_from_third_parties():
    t = CASES["wide"]()
    assert fs.Table.from_arrow(OnlyStream(t)).to_pyarrow().equals(t)
    b = t.to_batches()[0]
    got = fs.RecordBatch.from_arrow(OnlyArray(b))
    assert got.to_pyarrow().equals(b)
    assert isinstance(fs.from_arrow(OnlyArray(b)), fs.RecordBatch)
    assert isinstance(fs.from_arrow(OnlyStream(t)), fs.Table)
    assert fs.Schema.from_arrow(t.schema).to_pyarrow().equals(t.schema, check_metadata=True)


def test_unconsumed_capsules_are_released():
    t = CASES["wide"]()
    gc.collect()
    ours = fs.Table.from_arrow(t)
    for _ in range(50):
        ours.__arrow_c_stream__()
        ours.batches[0].__arrow_c_array__()
        ours.schema.__arrow_c_schema__()
    del ours
    gc.collect()
    base = pa.total_allocated_bytes()
    del t
    gc.collect()
    assert pa.total_allocated_bytes() < base  # nothing of ours kept pyarrow's memory alive


def test_stream_is_single_use():
    t = CASES["int32"]()
    s = fs.Table.from_arrow(t).to_stream()
    cap = s.__arrow_c_stream__()
    with pytest.raises(ValueError, match="consumed"):
        s.__arrow_c_stream__()
    assert pa.RecordBatchReader._import_from_c_capsule(cap).read_all().equals(t)


def test_iterate_our_stream():
    t = pa.Table.from_batches(CASES["string"]().to_batches() * 3)
    s = fs.RecordBatchStream.from_arrow(t)
    got = [b.to_pyarrow() for b in s]
    assert len(got) == 3 and all(g.equals(t.to_batches()[0]) for g in got)


def test_batch_slice_and_equals():
    t = CASES["struct"]()
    b = fs.RecordBatch.from_arrow(t.to_batches()[0])
    s = b.slice(4, 6)
    assert s.to_pyarrow().equals(t.to_batches()[0].slice(4, 6))
    assert b.equals(t.to_batches()[0]) and not s.equals(t.to_batches()[0])
    with pytest.raises(IndexError):
        b.slice(20, 10)


@pytest.mark.parametrize("t", [pa.string_view(), pa.binary_view(), pa.list_view(pa.int32()),
                               pa.run_end_encoded(pa.int32(), pa.int64())])
def test_unsupported_types_fail_cleanly(t):
    if pa.types.is_run_end_encoded(t):
        arr = pa.RunEndEncodedArray.from_arrays(pa.array([2, 3], pa.int32()), pa.array([7, 8]))
    elif pa.types.is_list_view(t):
        arr = pa.array([[1], None], t)
    else:
        arr = pa.array(["a", None], t)
    with pytest.raises(fs.FlightShuffleError, match="not supported"):
        fs.Table.from_arrow(pa.table({"x": arr}))
