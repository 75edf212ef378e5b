"""test_cli.py -- the `flightshuffle ipc ...` commands as a user runs them:
exit codes, what they print, and their files checked with pyarrow (the
reference implementation). Golden files are read in place from shared/."""
import gzip
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("FSH_CLI", REPO / "build" / "flightshuffle"))
SHARED = Path(os.environ.get("FSH_SHARED", REPO.parent / "shared"))
GOLDEN = SHARED / "arrow-testing" / "data" / "arrow-ipc-stream" / "integration"
NAMES = sorted(p.name[: -len(".json.gz")] for p in (GOLDEN / "1.0.0-littleendian").glob("*.json.gz"))


def run(*args, check=None):
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def golden(name, ext, version="1.0.0-littleendian"):
    return GOLDEN / version / f"{name}{ext}"


def read_pyarrow(path):
    with open(path, "rb") as f:
        head = f.read(6)
    if head == b"ARROW1":
        return ipc.open_file(path).read_all()
    return ipc.open_stream(path).read_all()


def test_cat_prints_schema_and_batch_rows():
    r = run("ipc", "cat", golden("generated_nested", ".stream"), check=0)
    t = read_pyarrow(golden("generated_nested", ".stream"))
    for field in t.schema:
        assert field.name in r.stdout
    assert f"total: " in r.stdout and f"{t.num_rows} rows" in r.stdout
    batches = ipc.open_stream(golden("generated_nested", ".stream")).read_all().to_batches()
    for i, b in enumerate(batches):
        assert f"batch {i}: {b.num_rows} rows" in r.stdout


@pytest.mark.parametrize("name", NAMES)
def test_validate_accepts_golden_files(name):
    for ext in (".stream", ".arrow_file"):
        r = run("ipc", "validate", golden(name, ext), check=0)
        assert "valid" in r.stdout


@pytest.mark.parametrize("name", NAMES)
def test_equals_golden_file_and_its_json(name):
    run("ipc", "equals", golden(name, ".arrow_file"), golden(name, ".json.gz"), check=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fmt", ["stream", "file"])
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_from_json_writes_what_pyarrow_reads(tmp_path, name, fmt, codec):
    out = tmp_path / f"out.{fmt}"
    run("ipc", "from-json", golden(name, ".json.gz"), out, "--format", fmt, "--compression", codec,
        check=0)
    ours = read_pyarrow(out)
    reference = read_pyarrow(golden(name, ".arrow_file"))
    assert ours.schema.equals(reference.schema, check_metadata=True)
    assert ours.equals(reference)
    # and we read our own output back equal to the JSON
    run("ipc", "equals", out, golden(name, ".json.gz"), check=0)


@pytest.mark.parametrize("name", NAMES)
def test_to_json_round_trips(tmp_path, name):
    r = run("ipc", "to-json", golden(name, ".arrow_file"), check=0)
    doc = json.loads(r.stdout)
    assert {"schema", "batches"} <= set(doc)
    js = tmp_path / "back.json"
    js.write_text(r.stdout)
    run("ipc", "equals", js, golden(name, ".json.gz"), check=0)
    run("ipc", "equals", js, golden(name, ".arrow_file"), check=0)


def test_to_json_matches_the_golden_json_document():
    name = "generated_primitive"
    ours = json.loads(run("ipc", "to-json", golden(name, ".arrow_file"), check=0).stdout)
    with gzip.open(golden(name, ".json.gz")) as f:
        theirs = json.load(f)
    assert [f["name"] for f in ours["schema"]["fields"]] == [f["name"] for f in theirs["schema"]["fields"]]
    assert [b["count"] for b in ours["batches"]] == [b["count"] for b in theirs["batches"]]


def test_equals_names_the_first_difference(tmp_path):
    t = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["x", "y", "z"])})
    u = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["x", "Y", "z"])})
    for name, table in (("t", t), ("u", u)):
        with ipc.new_file(tmp_path / f"{name}.arrow", table.schema) as w:
            w.write_table(table)
    run("ipc", "equals", tmp_path / "t.arrow", tmp_path / "t.arrow", check=0)
    r = run("ipc", "equals", tmp_path / "t.arrow", tmp_path / "u.arrow", check=1)
    assert "'s'" in r.stderr and "row 1" in r.stderr, r.stderr


def test_equals_ignores_batch_boundaries(tmp_path):
    t = pa.table({"a": pa.array(range(100), pa.int32())})
    with ipc.new_stream(tmp_path / "one.arrows", t.schema) as w:
        w.write_table(t)
    with ipc.new_stream(tmp_path / "many.arrows", t.schema) as w:
        w.write_table(t, max_chunksize=7)
    run("ipc", "equals", tmp_path / "one.arrows", tmp_path / "many.arrows", check=0)


def test_validate_rejects_truncated_file_naming_the_message(tmp_path):
    data = golden("generated_nested", ".stream").read_bytes()
    bad = tmp_path / "truncated.arrows"
    bad.write_bytes(data[: len(data) // 2])
    r = run("ipc", "validate", bad, check=1)
    assert str(bad) in r.stderr and "message" in r.stderr, r.stderr


def test_validate_rejects_invalid_utf8_naming_the_field(tmp_path):
    # a utf8 column whose bytes are not UTF-8: pyarrow writes it as binary
    # data under a utf8 type when we build the array from raw buffers
    offsets = pa.py_buffer(pa.array([0, 2, 4], pa.int32()).buffers()[1])
    data = pa.py_buffer(b"ok\xff\xfe")
    arr = pa.Array.from_buffers(pa.utf8(), 2, [None, offsets, data])
    t = pa.table({"text": arr})
    path = tmp_path / "bad_utf8.arrow"
    with ipc.new_file(path, t.schema) as w:
        w.write_table(t)
    r = run("ipc", "validate", path, check=1)
    assert "text" in r.stderr and "UTF-8" in r.stderr.upper().replace("UTF8", "UTF-8"), r.stderr


def test_missing_file_and_bad_usage():
    r = run("ipc", "cat", "/nonexistent/file.arrow", check=1)
    assert "/nonexistent/file.arrow" in r.stderr
    assert run("ipc", "bogus", "x").returncode == 2
    r = run("ipc", "from-json", golden("generated_primitive", ".json.gz"), "/tmp/x", "--compression", "snappy")
    assert r.returncode == 2 and "snappy" in r.stderr


def test_wrong_magic_is_a_clear_error(tmp_path):
    p = tmp_path / "junk.arrow"
    p.write_bytes(b"NOTARROW" + b"\0" * 64)
    r = run("ipc", "validate", p, check=1)
    assert str(p) in r.stderr
