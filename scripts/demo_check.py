#!/usr/bin/env python3
"""demo_check.py -- checks the output of `flightshuffle demo` with pyarrow.

Reads every *.arrows (IPC stream, pyarrow.ipc.open_stream) and *.arrow (IPC
file, pyarrow.ipc.open_file) file of the folder given and checks that they
all hold the same table: same schema (metadata included) and same values,
whatever the compression and the batch boundaries. Prints one line per file
and a summary; exits 1 on any mismatch or unreadable file.

    .venv/bin/python scripts/demo_check.py build/demo
"""
import pathlib
import sys

import pyarrow as pa
import pyarrow.ipc


def read(path):
    """Returns (table, number of batches) of an IPC stream or file."""
    if path.suffix == ".arrows":
        with pa.ipc.open_stream(path) as reader:
            batches = list(reader)
            schema = reader.schema
    else:
        with pa.ipc.open_file(path) as reader:
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            schema = reader.schema
    return pa.Table.from_batches(batches, schema=schema), len(batches)


def describe_difference(ref, table):
    if not ref.schema.equals(table.schema, check_metadata=True):
        return f"schema differs:\n{table.schema}\nexpected:\n{ref.schema}"
    if ref.num_rows != table.num_rows:
        return f"{table.num_rows} rows, expected {ref.num_rows}"
    for name, a, b in zip(ref.column_names, ref.columns, table.columns):
        if not a.equals(b):
            return f"column {name!r} differs"
    return "tables differ"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    folder = pathlib.Path(argv[1])
    paths = sorted(p for p in folder.iterdir() if p.suffix in (".arrows", ".arrow") and p.is_file())
    streams = [p for p in paths if p.suffix == ".arrows"]
    files = [p for p in paths if p.suffix == ".arrow"]
    if not streams or not files:
        print(f"demo_check: {folder} must hold IPC streams (*.arrows) and files (*.arrow); "
              f"found {len(streams)} and {len(files)}", file=sys.stderr)
        return 1

    ref, ref_path, failures = None, None, 0
    for path in paths:
        kind = "stream" if path.suffix == ".arrows" else "file"
        try:
            table, nbatches = read(path)
        except (pa.ArrowException, OSError) as e:
            print(f"FAIL {path.name}: pyarrow cannot read it as an IPC {kind}: {e}")
            failures += 1
            continue
        line = (f"{path.name:<28} {kind:<6} {path.stat().st_size:>10} bytes  "
                f"{table.num_rows} rows x {table.num_columns} columns in {nbatches} batches")
        if ref is None:
            ref, ref_path = table, path
        elif not table.equals(ref, check_metadata=True):
            print(f"FAIL {line}: differs from {ref_path.name}: {describe_difference(ref, table)}")
            failures += 1
            continue
        print(f"ok   {line}")

    if ref is None:
        print("demo_check: no file could be read", file=sys.stderr)
        return 1
    print(f"schema: {', '.join(f'{f.name}: {f.type}' for f in ref.schema)}")
    print(f"demo_check: {len(paths) - failures} of {len(paths)} files "
          f"({len(streams)} streams, {len(files)} files) hold the same table "
          f"({ref.num_rows} rows) with pyarrow {pa.__version__}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
