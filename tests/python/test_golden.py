"""test_golden.py -- every IPC stream and file of apache/arrow-testing's
integration corpus ($FSH_SHARED or ../shared relative to the repo), read by
our reader, equals what pyarrow reads from the same file."""
import os
from pathlib import Path

import pyarrow as pa
import pytest

import flightshuffle as fs

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("FSH_SHARED", REPO.parent / "shared"))
ROOT = SHARED / "arrow-testing" / "data" / "arrow-ipc-stream" / "integration"

FILES = sorted(p for p in ROOT.glob("*/*") if p.suffix in (".stream", ".arrow_file"))


def _id(p):
    return f"{p.parent.name}/{p.name}"


def test_corpus_present():
    if not ROOT.is_dir():
        pytest.skip(f"no golden corpus at {ROOT}")
    assert len(FILES) > 50


@pytest.mark.parametrize("path", FILES, ids=[_id(p) for p in FILES])
def test_golden(path):
    try:
        if path.suffix == ".arrow_file":
            want = pa.ipc.open_file(path).read_all()
        else:
            want = pa.ipc.open_stream(path).read_all()
    except pa.ArrowException as e:
        pytest.skip(f"pyarrow cannot read it either: {e}")
    got = fs.read_ipc(path)
    assert got.schema.equals(want.schema, check_metadata=True), f"{got.schema}\n!=\n{want.schema}"
    assert got.equals(want)
    # and back out through our writer, read by pyarrow
    again = pa.ipc.open_stream(fs.write_ipc_buffer(got)).read_all()
    assert again.equals(want)
