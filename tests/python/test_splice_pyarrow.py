"""test_splice_pyarrow.py -- fsh_ipc_splicer (src/ipc/splice.c) on messages
pyarrow wrote, read back by pyarrow: for every type of cases.py, and for
one table of all of them, pyarrow writes a stream of several batches
(slices at odd offsets, an empty one); the C driver (tests/ipc/test_splice
case stream_file, with FSH_SPLICE_IN / FSH_SPLICE_OUT) splices its record
batches into ONE message -- checking the bytes against our decode / concat
/ encode path -- and writes a stream of it; pyarrow reads that: one batch,
valid, equal to the table pyarrow wrote. Unions and dictionaries are
refused by the splicer (a .refused file naming the field) and only those.

The driver is <dir of FSH_LIB>/ipc_test_splice (FSH_SPLICE_DRIVER
overrides)."""
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from cases import CASES

DRIVER = Path(os.environ.get("FSH_SPLICE_DRIVER")
              or Path(os.environ["FSH_LIB"]).parent / "ipc_test_splice")

pytestmark = pytest.mark.skipif(not DRIVER.exists(), reason=f"no driver at {DRIVER}")


def refused_type(t: pa.DataType) -> bool:
    if pa.types.is_union(t) or pa.types.is_dictionary(t):
        return True
    if isinstance(t, pa.ExtensionType):
        return refused_type(t.storage_type)
    return any(refused_type(t.field(i).type) for i in range(t.num_fields))


def splice(table: pa.Table, tmp_path: Path):
    """The driver's output for a stream of slices of table's one batch:
    (the spliced table, the table written) or (None, reason) when refused."""
    b = table.combine_chunks().to_batches()[0]
    n = b.num_rows
    batches = [b.slice(0, 5), b.slice(5, 0), b.slice(5, 9), b.slice(14), b.slice(3, n - 7)]
    src = tmp_path / "in.arrows"
    out = tmp_path / "out.arrows"
    with pa.OSFile(str(src), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for x in batches:
            w.write_batch(x)
    env = dict(os.environ, FSH_SPLICE_IN=str(src), FSH_SPLICE_OUT=str(out))
    r = subprocess.run([str(DRIVER), "stream_file"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    refused = Path(str(out) + ".refused")
    if refused.exists():
        return None, refused.read_text()
    return pa.ipc.open_stream(pa.memory_map(str(out))).read_all(), \
        pa.Table.from_batches(batches, table.schema)


def check(got: pa.Table, want: pa.Table):
    assert len(got.to_batches()) == 1
    got.validate(full=True)
    assert got.schema.equals(want.schema, check_metadata=True)
    assert got.num_rows == want.num_rows
    assert got.equals(want)
    assert got.to_batches()[0].equals(pa.concat_batches(want.to_batches()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_type(case, tmp_path):
    table = CASES[case]()
    got, want = splice(table, tmp_path)
    refused = [f.name for f in table.schema if refused_type(f.type)]
    if refused:
        assert got is None, f"{case}: spliced a type the splicer should refuse"
        assert any(f"column '{name}'" in want for name in refused), want
        return
    assert got is not None, f"{case}: refused: {want}"
    check(got, want)


def test_all_types_in_one_table(tmp_path):
    cols, names = [], []
    for case in sorted(CASES):
        t = CASES[case]()
        if refused_type(t.schema.field(0).type):
            continue
        cols.append(t.column(0))
        names.append(pa.field(case, t.schema.field(0).type, metadata=t.schema.field(0).metadata))
    table = pa.Table.from_arrays(cols, schema=pa.schema(names))
    assert table.num_columns >= 20
    got, want = splice(table, tmp_path)
    assert got is not None, want
    check(got, want)
