"""test_plans_cluster.py -- `flightshuffle run PLAN.json --workers N` as a user
runs it: a local cluster (a driver in the CLI, N worker processes) runs the
plan's stages as plan-fragment tasks. Every example plan ends with
`verified=yes` (its result compared with the single-process reference
run) on the flight and fs backends -- those with a range or
into_partitions exchange (a distributed sort, into_partitions) as a
staging and a scatter stage each. A worker killed with SIGKILL mid-plan
(a join + group-by, a distributed sort): the plan still ends verified and
the job summary names the recomputed tasks. No worker process outlives
the run, Ctrl-C included. The limit example's upstream tasks that its
rows did not need are skipped by the driver (maps_skipped > 0)."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("FSH_CLI", REPO / "build" / "flightshuffle"))
EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.json"))


def needs_every_row(plan):
    """Whether a plan holds an exchange that needs every map's rows first
    (a range repartition, a distributed sort, into_partitions): it runs as
    a staging and a scatter stage, one more job stage than plan stages."""
    for n in json.loads(plan.read_text())["nodes"]:
        if n["op"] == "into_partitions":
            return True
        if n["op"] == "repartition" and n.get("by") == "range":
            return True
        if n["op"] == "sort" and not n.get("local", False):
            return True
    return False


def explain_stages(plan):
    r = run("explain", plan)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.splitlines()[0].split(" stage(s)")[0].split()[-1])


def run(*args, timeout=60):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def result_line(out):
    lines = [l for l in out.splitlines() if l.startswith("result: ")]
    assert len(lines) == 1 and out.rstrip().splitlines()[-1] == lines[0], out
    return dict(kv.split("=", 1) for kv in lines[0][len("result: "):].split())


def worker_pids(out):
    return [int(l.split()[-1]) for l in out.splitlines() if l.startswith("worker ")]


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie of ours would still be there; these are the CLI's children
    return False


def run_killing_a_worker(plan, pick, *extra, timeout_s=90, env=None, stderr_too=False):
    """Runs `flightshuffle run PLAN --workers 3 EXTRA... --heartbeat-timeout-ms
    1000 --verify` and SIGKILLs one worker: the one pick(line, workers)
    first names (its URI; workers: URI -> pid from the CLI's `worker N URI
    pid P` lines so far; pick returns None to wait on). Every stdout line
    must come within timeout_s of the start. Returns (stdout -- stderr
    merged in with stderr_too --, stderr or None, exit code, workers,
    killed URI or None)."""
    p = subprocess.Popen([str(CLI), "run", str(plan), "--workers", "3", *extra,
                          "--heartbeat-timeout-ms", "1000", "--verify"],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE,
                         text=True, env=env)
    out, workers, killed = [], {}, None
    deadline = time.time() + timeout_s
    try:
        for line in p.stdout:
            out.append(line)
            if line.startswith("worker ") and " pid " in line:
                f = line.split()
                workers[f[2]] = int(f[-1])
            if killed is None:
                killed = pick(line, workers)
                if killed is not None:
                    os.kill(workers[killed], signal.SIGKILL)
            assert time.time() < deadline
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = None if stderr_too else p.stderr.read()
    return "".join(out), err, p.returncode, workers, killed


def first_worker(workers):
    return next(iter(workers), None)


@pytest.mark.parametrize("backend", ["flight", "fs"])
@pytest.mark.parametrize("plan", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_on_three_workers(plan, backend):
    r = run("run", plan, "--workers", 3, "--backend", backend, "--verify")
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    assert res["backend"] == backend and res["workers"] == "3"
    if needs_every_row(plan):
        assert int(res["stages"]) > explain_stages(plan)
    else:
        assert int(res["stages"]) == explain_stages(plan)
    assert int(res["rows"]) > 0
    assert "job 1: succeeded" in r.stdout
    if plan.stem.startswith("limit"):
        # the driver stopped the limit's upstream stage once its rows
        # existed: of its tasks (40 a scan's, 32 a repartition's), those not
        # needed were skipped (never launched, or cancelled running), and
        # the summary says so
        n, tasks = (2500, 40) if plan.stem == "limit" else (1000, 32)
        assert int(res["rows"]) == n
        assert int(res["maps_skipped"]) > 0, r.stdout
        assert int(res["maps_cancelled"]) <= int(res["maps_skipped"])
        assert re.search(r"output: .* maps_skipped=%s " % res["maps_skipped"], r.stdout)
        m = re.search(r"stage \d .* (\d+)/%d done.*, (\d+) skipped \(limit reached; (\d+) "
                      r"cancelled running\)" % tasks, r.stdout)
        assert m, r.stdout
        done, skipped, cancelled = map(int, m.groups())
        assert done + skipped == tasks and skipped == int(res["maps_skipped"])
        assert cancelled == int(res["maps_cancelled"])
    else:
        assert int(res.get("maps_skipped", "0")) == 0
    # the driver's own check: every partition a task read to its end held
    # what its input's tasks wrote there
    assert "\n  verified yes\n" in r.stdout
    pids = worker_pids(r.stdout)
    assert len(pids) == 3
    time.sleep(0.2)
    assert all(gone(p) for p in pids), "a worker outlived the run"


@pytest.mark.parametrize("plan", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_with_pre_shuffle_merge_on(plan):
    """--pre-shuffle-merge on: the workers merge the map outputs they hold
    (runs of consecutive map ids) before the reducers read them; every
    example still verifies against the single-process run, in order."""
    r = run("run", plan, "--workers", 3, "--pre-shuffle-merge", "on", "--verify")
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    res = result_line(r.stdout)
    assert res["verified"] == "yes"
    assert "\n  verified yes\n" in r.stdout
    m = re.search(r"pre-shuffle merges (\d+): (\d+) map outputs, (\d+) bytes merged; (\d+) "
                  r"failed", r.stdout)
    if plan.stem in ("pre_shuffle_merge", "join_group_by"):  # 12+ maps per stage: runs exist
        assert m and int(m.group(1)) > 0, r.stdout
    if m:
        merges, outputs, nbytes, failed = map(int, m.groups())
        assert outputs >= 2 * merges and failed == 0, m.group(0)
        assert nbytes > 0 or merges == 0
    assert int(res["merges"]) == (int(m.group(1)) if m else 0)


def test_merge_auto_follows_the_threshold():
    """auto (the default): sqrt(64 x 64) = 64 is above the example plan's
    merge_threshold 32, so it merges, as in process; --merge-threshold 200
    overrides the plan's: nothing is merged."""
    plan = REPO / "examples" / "plans" / "pre_shuffle_merge.json"
    assert json.loads(plan.read_text())["merge_threshold"] == 32
    r = run("run", plan, "--workers", 3, "--merge-threshold", "200", "--verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pre-shuffle merges" not in r.stdout
    assert result_line(r.stdout)["merges"] == "0"
    r = run("run", plan, "--workers", 3, "--verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert result_line(r.stdout)["verified"] == "yes"
    assert re.search(r"pre-shuffle merges [1-9]", r.stdout), r.stdout


def stage_merges(out):
    """{stage number: (merges, map outputs merged)} from the summary's
    stage lines (0, 0 when a line names no merge)."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"  stage (\d+) .* done, ", line)
        if m:
            k = re.search(r", (\d+) merges of (\d+) map outputs$", line)
            got[int(m.group(1))] = (int(k.group(1)), int(k.group(2))) if k else (0, 0)
    return got


def test_plan_merge_policies_on_a_cluster(tmp_path):
    """The plan's settings decide under auto, as in process: the plan says
    "on" and its second exchange "off" -- the first exchange's 6 outputs
    are merged (one worker: runs of consecutive map ids, 3 merges of 2),
    the second's not; --pre-shuffle-merge on merges both (3 outputs: a
    merge of 2 and one left alone), off neither. Every run verifies."""
    plan = tmp_path / "two_exchanges.json"
    plan.write_text(json.dumps({
        "partitions": 3, "pre_shuffle_merge": "on", "nodes": [
            {"op": "scan", "generate": "keyed", "rows": 30000, "batch_rows": 1000,
             "partitions": 6, "key_range": 500, "seed": 3},
            {"op": "repartition", "by": "hash", "keys": ["key"], "partitions": 3},
            {"op": "aggregate", "keys": ["key", "grp"], "local": True,
             "aggs": [{"fn": "count_star", "name": "n"}]},
            {"op": "repartition", "by": "hash", "keys": ["grp"], "partitions": 3,
             "pre_shuffle_merge": "off"},
            {"op": "aggregate", "keys": ["grp"], "local": True,
             "aggs": [{"fn": "sum", "column": "n", "name": "n"}]}]}))
    want = {(): {1: (3, 6), 2: (0, 0), 3: (0, 0)},
            ("--pre-shuffle-merge", "on"): {1: (3, 6), 2: (1, 2), 3: (0, 0)},
            ("--pre-shuffle-merge", "off"): {1: (0, 0), 2: (0, 0), 3: (0, 0)}}
    for flags, stages in want.items():
        r = run("run", plan, "--workers", 1, *flags, "--verify")
        assert r.returncode == 0, f"{flags}: stdout: {r.stdout}\nstderr: {r.stderr}"
        res = result_line(r.stdout)
        assert res["verified"] == "yes", r.stdout
        assert stage_merges(r.stdout) == stages, (flags, r.stdout)
        assert int(res["merges"]) == sum(m for m, _ in stages.values()), r.stdout


def test_kill_a_worker_after_its_merge_is_published(tmp_path):
    """A worker SIGKILLed right after a merge of its outputs was published:
    the merged output and its parts' maps are lost with it, re-run
    (listed as recomputed, naming the worker), and the plan verifies."""
    plan = tmp_path / "big.json"
    plan.write_text(json.dumps(BIG))
    env = dict(os.environ, FSH_DRIVER_LOG="1")

    def after_a_merge(line, workers):
        # a plan stage merges runs of consecutive map ids held by one
        # worker, so whether a given stage merges depends on placement:
        # the first merge of any stage is the one to kill after
        m = re.search(r"stage \d+: merge \d+ published on (\S+)", line)
        return m.group(1) if m and m.group(1) in workers else None

    text, _, code, uris, killed = run_killing_a_worker(
        plan, after_a_merge, "--pre-shuffle-merge", "on", env=env, stderr_too=True)
    assert code == 0, text[-5000:]
    assert killed is not None, "no merge was published:\n" + text[-5000:]
    res = result_line("\n".join(l for l in text.splitlines()
                                 if not l.startswith("flightshuffle: ")))
    assert res["verified"] == "yes"
    assert int(res["recomputed"]) > 0, text[-5000:]
    summary = text[text.index("job 1: succeeded"):]
    assert f"was on worker {killed}" in summary
    time.sleep(0.2)
    assert all(gone(x) for x in uris.values())


BIG = {
    "name": "kill test: partitioned join + two-phase group-by",
    "partitions": 6,
    "nodes": [
        {"id": "facts", "op": "scan", "generate": "keyed", "rows": 8000000,
         "batch_rows": 8192, "partitions": 24, "key_range": 50000, "seed": 1},
        {"id": "dims", "op": "scan", "generate": "keyed", "rows": 50000, "batch_rows": 4096,
         "partitions": 3, "key_range": 50000, "seed": 2, "groups": 16},
        {"id": "dims_p", "op": "project", "input": "dims",
         "columns": [{"name": "dkey", "expr": {"col": "id"}},
                     {"name": "category", "expr": {"col": "grp"}}]},
        {"id": "j", "op": "join", "left": "facts", "right": "dims_p", "left_keys": ["key"],
         "right_keys": ["dkey"], "type": "inner", "strategy": "partitioned"},
        {"op": "aggregate", "keys": ["category"],
         "aggs": [{"fn": "count_star", "name": "n"},
                  {"fn": "sum", "column": "amount", "name": "total"}]},
    ],
}


BIG_SORT = {
    "name": "kill test: a distributed sort",
    "partitions": 6,
    "nodes": [
        {"op": "scan", "generate": "keyed", "rows": 4000000, "batch_rows": 8192,
         "partitions": 12, "key_range": 1000000, "seed": 3},
        {"op": "sort", "keys": ["key", {"column": "id", "descending": True}]},
    ],
}


@pytest.mark.parametrize("which", ["join_group_by", "sort"])
def test_kill_a_worker_mid_plan(tmp_path, which):
    plan = tmp_path / "big.json"
    plan.write_text(json.dumps(BIG if which == "join_group_by" else BIG_SORT))

    def mid_plan(line, workers):
        # mid-plan: some outputs of the first stage exist and the last
        # stage has not finished a task (a stage can pass between two
        # progress lines on a fast or quiet machine: do not wait for one
        # exact moment)
        if line.startswith("progress: stage 1 "):
            counts = [tuple(map(int, w.split("/"))) for w in line.split()[3::3]]
            if counts[0][0] >= 1 and counts[-1][0] == 0:
                return first_worker(workers)
        return None

    text, err, code, workers, killed = run_killing_a_worker(plan, mid_plan, timeout_s=60)
    pids = list(workers.values())
    assert code == 0, f"stdout: {text}\nstderr: {err}"
    assert killed is not None, "the first stage ended before a worker could be killed:\n" + text
    res = result_line(text)
    assert res["verified"] == "yes"
    assert int(res["recomputed"]) + int(res["retried"]) > 0, text
    # the summary lists the recomputed tasks with their reason (the worker)
    summary = text[text.index("job 1: succeeded"):]
    n_rec = int(summary.split("recomputed: ")[1].split()[0])
    assert n_rec == int(res["recomputed"])
    if n_rec:
        assert "was on worker grpc://" in summary
    time.sleep(0.2)
    assert all(gone(x) for x in pids)


def test_ctrl_c_stops_every_worker(tmp_path):
    plan = tmp_path / "big.json"
    plan.write_text(json.dumps(BIG))
    p = subprocess.Popen([str(CLI), "run", str(plan), "--workers", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        for line in p.stdout:
            if line.startswith("worker "):
                pids.append(int(line.split()[-1]))
            if line.startswith("progress: stage 1 "):
                p.send_signal(signal.SIGINT)
                break
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, p.stderr.read()
    assert "SIGINT, stopping the cluster" in p.stderr.read()
    assert len(pids) == 3
    assert all(gone(x) for x in pids), "a worker outlived the run"


def spill_line(out):
    lines = [l for l in out.splitlines() if l.startswith("spill: ")]
    assert len(lines) == 1, out
    return dict(kv.split("=", 1) for kv in lines[0][len("spill: "):].split(" | ")[0].split())


def test_operator_memory_reaches_the_workers(tmp_path):
    plan = REPO / "examples" / "plans" / "join_group_by.json"
    # within a small budget the operators spill on the workers and the
    # result still verifies
    r = run("run", plan, "--workers", 3, "--operator-memory", "256K", "--verify")
    assert r.returncode == 0, r.stdout + r.stderr
    res = result_line(r.stdout)
    assert res["verified"] == "yes" and res["operator_memory"] == str(256 * 1024)
    # the workers' spill reaches the summary (their answers): as many
    # operator instances spilled as in the in-process run of the same
    # partitions with that budget
    got = spill_line(r.stdout)
    assert got["operator_memory"] == str(256 * 1024)
    ref = run("run", plan, "--operator-memory", "256K", "--operator-spill-dir", tmp_path)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    want = spill_line(ref.stdout)
    assert int(want["operators_spilled"]) > 0
    assert got["operators_spilled"] == want["operators_spilled"], (r.stdout, ref.stdout)
    assert int(got["files"]) > 0 and int(got["bytes"]) > 0
    # the job summary: bytes fetched by the stages reading exchanges, and
    # input rows (no longer 0)
    line = [l for l in r.stdout.splitlines() if l.strip().startswith("bytes written")][0]
    fetched = int(line.split("fetched ")[1].split(",")[0])
    rows = int(line.split("input ")[1].split(" rows")[0])
    assert fetched > 0 and rows > 0, line
    # a budget nothing fits in: the job fails naming the operator (so the
    # budget is the workers' own, not ignored)
    r = run("run", plan, "--workers", 2, "--operator-memory", "1", "--max-attempts", "1")
    assert r.returncode == 1
    assert "the job failed" in r.stderr and "budget" in r.stderr and "plan operator" in r.stderr, r.stderr


def test_kill_a_worker_holding_a_limits_rows(tmp_path):
    """A global limit that needs every row its input has (n = the rows the
    filter keeps, counted by an in-process run): a worker SIGKILLed once
    6 of the limit's 40 upstream tasks are done holds outputs that counted
    toward n; they are recomputed elsewhere and the result still has n
    rows, verified against the single-process run."""
    scan = {"op": "scan", "generate": "keyed", "rows": 16000000, "batch_rows": 8192,
            "partitions": 40, "seed": 11}
    keep = {"op": "filter", "predicate": {"op": ">", "args": [{"col": "amount"}, {"lit": 998}]}}
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"nodes": [scan, keep]}))
    r = run("run", base)
    assert r.returncode == 0, r.stderr
    n = int(re.search(r"^output: rows=(\d+) ", r.stdout, re.M).group(1))
    assert n > 1000
    plan = tmp_path / "limit_all.json"
    plan.write_text(json.dumps({"nodes": [scan, keep, {"op": "limit", "n": n}]}))

    def six_upstream_done(line, workers):
        if line.startswith("progress: stage 1 "):
            done = int(line.split()[3].split("/")[0])
            if 6 <= done < 40:
                return first_worker(workers)
        return None

    text, err, code, workers, killed = run_killing_a_worker(plan, six_upstream_done)
    pids = list(workers.values())
    assert code == 0, f"stdout: {text}\nstderr: {err}"
    assert killed is not None, "the limit's stage ended before a worker could be killed:\n" + text
    res = result_line(text)
    assert res["verified"] == "yes" and int(res["rows"]) == n
    assert int(res["maps_skipped"]) == 0  # every row was needed
    assert int(res["recomputed"]) > 0, text
    assert "was on worker grpc://" in text[text.index("job 1: succeeded"):]
    time.sleep(0.2)
    assert all(gone(x) for x in pids)
