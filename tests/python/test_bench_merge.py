"""test_bench_merge.py -- the pre-shuffle merge of `flightshuffle bench
shuffle` (a synthetic job on a local cluster of worker processes, the
driver in the CLI): with --merge both every run goes once without and once
with the merge, both verify (per partition the reducers' rows and row
checksums equal the maps'), and the merged run reports merges that took in
most map outputs; merge on with incremental reduces and a worker SIGKILLed
late in the map stage (after merges of its outputs were published) still
verifies, listing the recomputed maps; auto leaves a small shuffle alone.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import subprocess
from pathlib import Path

import pytest

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")


def bench(*args, tmp_path, timeout=120):
    r = subprocess.run([str(CLI), "bench", "shuffle", "--backend", "flight", "--spill-dir",
                        str(tmp_path), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert list(tmp_path.iterdir()) == []
    return r.stdout


def result_fields(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1, stdout
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


def merge_lines(stdout):
    """(mode, merges, outputs, bytes, failed) of every run."""
    return [(m.group(1), *map(int, m.groups()[1:])) for m in re.finditer(
        r"pre-shuffle merge (\w+): (\d+) merges of (\d+) map outputs \((\d+) bytes\), (\d+) "
        r"failed", stdout)]


def test_merge_both_verifies_and_merges(tmp_path):
    maps = 48
    out = bench("--workers", 3, "--maps", maps, "--reduces", 40, "--bytes", "6M", "--merge",
                "both", "--runs", 2, tmp_path=tmp_path)
    res = result_fields(out)
    assert res["name"] == "bench_shuffle_merge" and res["verified"] == "yes", out
    runs = merge_lines(out)
    assert [r[0] for r in runs] == ["off", "on", "off", "on"], out
    for mode, merges, outputs, nbytes, failed in runs:
        if mode == "off":
            assert (merges, outputs, nbytes) == (0, 0, 0)
            continue
        assert failed == 0
        # groups of at least 2 outputs; with 3 workers at most one output
        # per worker is left unmerged (a group of one)
        assert merges >= 1 and outputs >= 2 * merges and outputs >= maps - 3, out
        assert nbytes > 0
    assert float(res["gbps_on_median"]) > 0 and float(res["gbps_off_median"]) > 0


def test_merge_on_survives_a_killed_worker(tmp_path):
    out = bench("--workers", 3, "--maps", 60, "--reduces", 30, "--bytes", "6M", "--merge", "on",
                "--incremental", "on", "--fail-worker", "0.9", tmp_path=tmp_path)
    res = result_fields(out)
    assert res["verified"] == "yes", out
    assert "killing worker" in out
    (mode, merges, outputs, _, _), = merge_lines(out)
    assert mode == "on" and merges >= 1
    # the maps the killed worker held (merged or not) were run again
    assert int(res["recomputed"]) > 0, out
    assert re.search(r"recomputed: stage 1 task \d+ \(attempt \d+\): its output .* was on "
                     r"worker grpc://", out), out


def test_merge_auto_leaves_a_small_shuffle_alone(tmp_path):
    out = bench("--workers", 2, "--maps", 8, "--reduces", 8, "--bytes", "2M", tmp_path=tmp_path)
    res = result_fields(out)
    assert res["verified"] == "yes"
    assert merge_lines(out) == [("auto", 0, 0, 0, 0)]


def test_bad_merge_argument_exits_2(tmp_path):
    r = subprocess.run([str(CLI), "bench", "shuffle", "--backend", "flight", "--workers", "2",
                        "--maps", "4", "--reduces", "4", "--bytes", "1M", "--merge", "maybe"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--merge 'maybe'" in r.stderr
