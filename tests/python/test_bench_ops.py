"""test_bench_ops.py -- the verification of `flightshuffle bench ops`'s sort,
which streams every run's result through a check instead of holding it:
a clean run verifies on every backend (memory in process, fs and flight on
a local cluster); a result stream corrupted before the check (--corrupt:
two rows swapped, a row dropped, a row duplicated, a value changed) makes
every backend's run fail -- OUT OF ORDER at the swapped row, or a row
count / checksum unlike the input's -- and the bench end with verified=no
and status 1. The rows the check reports are compared with the input's
row count the bench printed (and, corrupted, with one row more or less).
--sort-bytes picks the row count from the bytes.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import subprocess
from pathlib import Path

import pytest

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

ROWS = 40000


def bench(*args, timeout=120):
    return subprocess.run([str(CLI), "bench", "ops", "--plans", "sort", "--runs", "1",
                           "--workers", "2", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def result_fields(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1, stdout
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


RUN = re.compile(r"run 0 sort +(memory|fs|flight) .* rows=(\d+) checksum=([0-9a-f]{16})(.*)")


def runs(stdout):
    """backend -> (rows, checksum, the rest of the line) of every sort run."""
    return {m.group(1): (int(m.group(2)), m.group(3), m.group(4))
            for m in RUN.finditer(stdout)}


def input_of(stdout):
    m = re.search(r"sort: (\d+) rows of .*input checksum=([0-9a-f]{16})", stdout)
    assert m, stdout
    return int(m.group(1)), m.group(2)


def test_clean_sort_verifies():
    r = bench("--sort-rows", ROWS)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert result_fields(r.stdout)["verified"] == "yes"
    rows, checksum = input_of(r.stdout)
    assert rows == ROWS
    got = runs(r.stdout)
    assert sorted(got) == ["flight", "fs", "memory"], r.stdout
    for backend, (n, c, rest) in got.items():
        assert (n, c) == (ROWS, checksum), (backend, r.stdout)
        assert "in order" in rest and "MISMATCH" not in rest, r.stdout
    assert re.search(r"peak RSS \(VmHWM\): this process [0-9.]+ GB", r.stdout)
    # a small sort: the default store budget is its floor, 1 GiB a worker, said so
    assert result_fields(r.stdout)["worker_budget_gib"] == "1.00"
    assert "store budget 1.00 GiB a worker (the default, from the sort's size)" in r.stdout


@pytest.mark.parametrize("mode", ["order", "drop", "duplicate", "change"])
def test_corrupted_stream_is_caught(mode):
    r = bench("--sort-rows", ROWS, "--corrupt", mode)
    assert r.returncode == 1, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert result_fields(r.stdout)["verified"] == "no"
    rows, checksum = input_of(r.stdout)
    got = runs(r.stdout)
    assert sorted(got) == ["flight", "fs", "memory"], r.stdout
    want_rows = {"order": rows, "drop": rows - 1, "duplicate": rows + 1, "change": rows}[mode]
    for backend, (n, c, rest) in got.items():
        assert n == want_rows, (backend, r.stdout)
        if mode == "order":  # the same rows, out of order at the swapped first row's successor
            assert c == checksum and "OUT OF ORDER at row 1 " in rest, (backend, r.stdout)
            assert "MISMATCH" not in rest
        else:  # in order, but not the input's rows
            assert c != checksum and "MISMATCH with the input" in rest, (backend, r.stdout)
            assert "in order" in rest


def test_sort_bytes_picks_the_rows():
    r = bench("--sort-bytes", "3M")
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    m = re.search(r"sort: (\d+) rows of .*, ([0-9.]+) MB", r.stdout)
    assert m, r.stdout
    mb = float(m.group(2))
    assert abs(mb - 3 * 1024 * 1024 / 1e6) < 0.05, r.stdout  # within ~1.5% of 3 MiB
    assert result_fields(r.stdout)["verified"] == "yes"


def test_memory_limit_is_the_budget():
    r = bench("--sort-rows", ROWS, "--memory-limit", "768M")
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert result_fields(r.stdout)["worker_budget_gib"] == "0.75"
    assert "store budget 0.75 GiB a worker (--memory-limit)" in r.stdout
    assert result_fields(r.stdout)["verified"] == "yes"
