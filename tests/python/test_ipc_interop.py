"""test_ipc_interop.py -- our IPC reader and writer against pyarrow, the
reference implementation: for every type, with nulls, sliced arrays,
empty batches and zero-row tables, in the stream and file formats, with
none / lz4 / zstd body compression, each way:
  - what WE write, pyarrow reads and finds equal to the source;
  - what PYARROW writes, we read and find equal."""
import pyarrow as pa
import pytest

import flightshuffle as fs
from cases import CASES, N

FORMATS = ["stream", "file"]
COMPRESSIONS = ["none", "lz4", "zstd"]
VARIANTS = ["full", "sliced", "batches", "zero_rows", "no_batches"]


def make(case: str, variant: str):
    """(schema, batches) of a case; empty batches are kept as they are
    (pyarrow's Table.to_batches would drop them)."""
    t = CASES[case]()
    b = t.to_batches()[0]
    if variant == "sliced":
        return t.schema, [b.slice(3, N - 8)]
    if variant == "batches":
        # several batches, one of them empty, each a slice of the source
        return t.schema, [b.slice(0, 5), b.slice(5, 0), b.slice(5, 9), b.slice(14)]
    if variant == "zero_rows":
        return t.schema, [b.slice(0, 0)]
    if variant == "no_batches":
        return t.schema, []
    return t.schema, [b]


def source(schema, batches, variant):
    """What we hand to fs.write_ipc: a Table, or a reader when empty batches
    must survive."""
    if variant in ("full", "sliced"):
        return pa.Table.from_batches(batches, schema)
    return pa.RecordBatchReader.from_batches(schema, batches)


def pa_read(path, fmt):
    if fmt == "file":
        return pa.ipc.open_file(path).read_all()
    return pa.ipc.open_stream(path).read_all()


def pa_write(schema, batches, path, fmt, compression):
    opts = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    new = pa.ipc.new_file if fmt == "file" else pa.ipc.new_stream
    with new(path, schema, options=opts) as w:
        for b in batches:
            w.write_batch(b)


def pa_batches(path, fmt):
    """The batches pyarrow reads, one by one (empty ones included)."""
    if fmt == "file":
        r = pa.ipc.open_file(path)
        return [r.get_batch(i) for i in range(r.num_record_batches)]
    return list(pa.ipc.open_stream(path))


def assert_same(got: pa.Table, want: pa.Table):
    assert got.schema.equals(want.schema, check_metadata=True), f"{got.schema}\n!=\n{want.schema}"
    assert got.num_rows == want.num_rows
    assert got.equals(want), f"{got}\n!=\n{want}"


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_we_write_pyarrow_reads(case, variant, fmt, compression, tmp_path):
    schema, batches = make(case, variant)
    path = tmp_path / f"out.{fmt}"
    fs.write_ipc(source(schema, batches, variant), path, format=fmt, compression=compression)
    assert_same(pa_read(path, fmt), pa.Table.from_batches(batches, schema))
    got = pa_batches(path, fmt)
    assert [b.num_rows for b in got] == [b.num_rows for b in batches]


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_pyarrow_writes_we_read(case, variant, fmt, compression, tmp_path):
    schema, batches = make(case, variant)
    path = tmp_path / f"in.{fmt}"
    pa_write(schema, batches, path, fmt, compression)
    assert_same(fs.read_ipc(path), pa.Table.from_batches(batches, schema))
    ours = fs.open_ipc(path)
    assert [b.num_rows for b in ours] == [b.num_rows for b in batches]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["wide", "nested_dictionary", "dense_union", "map", "null"])
def test_buffers_both_ways(case, fmt):
    t = CASES[case]()
    data = fs.write_ipc_buffer(t, format=fmt, compression="zstd")
    reader = pa.ipc.open_file(pa.py_buffer(data)) if fmt == "file" else \
        pa.ipc.open_stream(pa.py_buffer(data))
    assert_same(reader.read_all(), t)
    sink = pa.BufferOutputStream()
    pa_write(t.schema, t.to_batches(), sink, fmt, "lz4")
    assert_same(fs.read_ipc_buffer(sink.getvalue().to_pybytes()), t)
    assert_same(fs.read_ipc_buffer(data), t)


def test_our_writer_accepts_our_objects_and_readers(tmp_path):
    t = CASES["wide"]()
    ours = fs.Table.from_arrow(t)
    for i, data in enumerate([ours, ours.batches[0], ours.to_stream(),
                              pa.RecordBatchReader.from_batches(t.schema, t.to_batches()),
                              t.to_batches()[0]]):
        path = tmp_path / f"{i}.arrow"
        fs.write_ipc(data, path, format="file")
        assert_same(pa_read(path, "file"), t)
    # our reader's output is our own stream too
    s = fs.open_ipc(tmp_path / "0.arrow")
    assert [b.num_rows for b in s] == [N]


@pytest.mark.parametrize("deltas", [False, True])
def test_pyarrow_dictionary_replacement_and_deltas(deltas, tmp_path):
    """Stream format: dictionaries that change between batches, as
    replacements or as deltas."""
    schema = pa.schema([("d", pa.dictionary(pa.int32(), pa.string()))])
    b1 = pa.record_batch([pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()),
                                                         pa.array(["a", "b"]))], schema=schema)
    b2 = pa.record_batch([pa.DictionaryArray.from_arrays(pa.array([2, 0, 3], pa.int32()),
                                                         pa.array(["a", "b", "c", "d"]))],
                         schema=schema)
    b3 = pa.record_batch([pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()),
                                                         pa.array(["x", "y"]))], schema=schema)
    path = tmp_path / "d.stream"
    opts = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=deltas)
    with pa.ipc.new_stream(path, schema, options=opts) as w:
        for b in (b1, b2, b3):
            w.write_batch(b)
    got = fs.read_ipc(path)
    want = pa.Table.from_batches([b1, b2, b3])
    assert got.column(0).to_pylist() == want.column(0).to_pylist()


def test_we_write_changing_dictionaries_to_a_stream(tmp_path):
    schema = pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))])
    bs = [pa.record_batch([pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()),
                                                          pa.array([f"a{i}", f"b{i}"]))],
                          schema=schema) for i in range(3)]
    path = tmp_path / "d.stream"
    fs.write_ipc(pa.Table.from_batches(bs), path)
    got = pa_read(path, "stream")
    assert got.column(0).to_pylist() == pa.Table.from_batches(bs).column(0).to_pylist()


def test_errors(tmp_path):
    with pytest.raises(fs.FlightShuffleError, match="nope"):
        fs.read_ipc(tmp_path / "nope.arrow")
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"ARROW1\0\0garbage")
    with pytest.raises(fs.FlightShuffleError):
        fs.read_ipc(bad)
    with pytest.raises(ValueError, match="format"):
        fs.write_ipc(CASES["int8"](), tmp_path / "x", format="parquet")
    with pytest.raises(fs.FlightShuffleError):
        fs.write_ipc(CASES["int8"](), tmp_path / "x", compression="snappy")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("deltas", [False, True])
def test_we_write_growing_dictionaries(deltas, tmp_path):
    """A dictionary that grows batch after batch: replacements, or deltas
    when asked (pyarrow reads both)."""
    schema = pa.schema([("d", pa.dictionary(pa.int16(), pa.string()))])
    values = ["a", "b", "c", "d", "e", "f"]
    bs = [pa.record_batch([pa.DictionaryArray.from_arrays(
        pa.array([0, i + 1, None], pa.int16()), pa.array(values[:i + 2]))], schema=schema)
        for i in range(4)]
    path = tmp_path / "g.stream"
    fs.write_ipc(pa.RecordBatchReader.from_batches(schema, bs), path, dictionary_deltas=deltas)
    got = pa_read(path, "stream")
    assert got.column(0).to_pylist() == pa.Table.from_batches(bs).column(0).to_pylist()
    assert fs.read_ipc(path).column(0).to_pylist() == got.column(0).to_pylist()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_many_batches_one_encoder(case, compression, tmp_path):
    """Many batches of one shape through one writer: every record batch
    message after the first is made from the encoder's metadata template
    (encoder.c), with rows, null counts, buffer offsets and lengths and the
    body length that differ from batch to batch; pyarrow reads each."""
    t = CASES[case]()
    b = t.to_batches()[0]
    batches = [b.slice(off, ln) for off in range(0, N, 3) for ln in (0, 1, 4, N - off)
               if off + ln <= N]
    path = tmp_path / "many.stream"
    fs.write_ipc(pa.RecordBatchReader.from_batches(t.schema, batches), path, format="stream",
                 compression=compression)
    got = pa_batches(path, "stream")
    assert len(got) == len(batches)
    for g, want in zip(got, batches):
        assert g.equals(want), (case, compression)
