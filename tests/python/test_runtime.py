"""test_runtime.py -- the distributed job runtime with real processes:
`flightshuffle local` (a driver and worker processes) runs shuffle jobs
submitted with `flightshuffle job shuffle`; workers are killed with SIGKILL
during the map stage, during the reduce stage, two at once, while a
reducer fetches from it, or hung with SIGSTOP. Each job must end
succeeded, its per-partition rows and checksums identical to a run
without failure, and the summary's recomputed tasks
exactly the map tasks the lost workers had reported done: each worker logs
"job J stage S task T attempt A done, reporting" before its task-done call
and "..., reported" once the driver has the answer, so the recomputed set
must hold every "reported" task of the victims and nothing but their
"reporting" ones (the two differ only for a task whose report was in flight
at the kill, in practice never). Bad control input gets a clear error.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import jobs

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

MAPS, REDUCES, ROWS = 24, 8, 4_500_000  # maps of ~190k rows: the map stage must outlast a few
# progress reports (10 ms apart) for the kills "during the map stage" to land in it
JOB_ARGS = ["--maps", str(MAPS), "--reduces", str(REDUCES), "--rows", str(ROWS),
            "--batch-rows", "25000", "--slots", "1", "--progress-ms", "10", "--timeout-s", "60"]


class Cluster:
    """`flightshuffle local --workers n`; its stderr is collected."""

    def __init__(self, n, timeout_ms=1000, direct_reads=True):
        self.p = subprocess.Popen(
            [str(CLI), "local", "--workers", str(n), "--heartbeat-timeout-ms", str(timeout_ms),
             "--run-seconds", "120", "--direct-reads", "on" if direct_reads else "off"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.workers = {}  # i -> (uri, pid)
        self.err = []
        self.on_line = None  # called with each stderr line once it is in err (drain thread)
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            if line.startswith("driver "):
                self.driver = line.split()[1]
            m = re.match(r"worker (\d+) (\S+) pid (\d+)", line)
            if m:
                self.workers[int(m.group(1))] = (m.group(2), int(m.group(3)))
            if line.startswith("cluster ready"):
                return
        self.stop()
        raise AssertionError("the cluster did not start: " + "".join(self.err))

    def _drain(self):
        for line in self.p.stderr:
            self.err.append(line)
            if self.on_line:
                self.on_line(line)

    def reported(self, uri, stage=1, word="reported"):
        """{task} the worker at uri reported done for stage (from its log);
        word "reporting": the ones it was about to report."""
        pat = re.compile(re.escape(f"worker {uri}: job ") + r"\d+ stage (\d+) task (\d+) "
                         r"attempt (\d+) done, " + word + "$")
        out = set()
        for line in list(self.err):
            m = pat.search(line)
            if m and int(m.group(1)) == stage:
                out.add(int(m.group(2)))
        return out

    def stop(self):
        for _, pid in self.workers.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        # no worker left behind
        for _, pid in self.workers.values():
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.fixture
def cluster():
    made = []

    def make(n, timeout_ms=1000, direct_reads=True):
        c = Cluster(n, timeout_ms, direct_reads)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def run_job(driver, on_progress=None, extra=()):
    return jobs.run_job(CLI, driver, JOB_ARGS, on_progress, extra)


@pytest.fixture(scope="module")
def reference():
    """The partitions of a run without failure."""
    c = Cluster(3)
    try:
        rc, text, parts, res, rec = run_job(c.driver)
    finally:
        c.stop()
    assert rc == 0, text
    assert res["verified"] == "yes" and res["recomputed"] == "0"
    assert len(parts) == REDUCES
    assert sum(r for r, _ in parts.values()) == ROWS
    return parts


def check(rc, text, parts, res, rec, reference, c, victims, stage=1, also=()):
    """The job succeeded with the reference's partitions; the recomputed
    tasks are exactly the victims' reported outputs of `stage` (plus the
    (stage, task) pairs `also`)."""
    assert rc == 0, text
    assert res["state"] == "succeeded" and res["verified"] == "yes", text
    assert parts == reference
    reported, reporting = set(), set()
    for uri in victims:
        reported |= {(stage, t) for t in c.reported(uri, stage)}
        reporting |= {(stage, t) for t in c.reported(uri, stage, word="reporting")}
    got = set(rec) - set(also)
    assert len(set(rec)) == len(rec), text
    assert set(also) <= set(rec), (sorted(also), sorted(rec), text)
    assert reported <= got <= reporting, (sorted(reported), sorted(got), sorted(reporting), text)
    assert got, "no recomputed task: the victims held nothing"
    assert int(res["recomputed"]) == len(rec)


def kill_when(cond, pids, sig=signal.SIGKILL):
    """An on_progress that sends sig to pids once cond(*done per stage);
    records the progress at that moment in ["at"]."""
    state = {"at": None}

    def on_progress(*done):
        if state["at"] is None and cond(*done):
            for pid in pids:
                os.kill(pid, sig)
            state["at"] = done
    return on_progress, state


def stage_status(c, job):
    """[(done, total) per stage] of the job as the driver answers it now
    (`flightshuffle job status`)."""
    p = subprocess.run([str(CLI), "job", "status", "--driver", c.driver, "--job", str(job)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    return [(int(d), int(t)) for d, t in
            re.findall(r"^  stage \d+ \S+ +(\d+)/(\d+) done", p.stdout, re.M)]


def kill_before_next_stage_reads(c, stage, held):
    """An on_progress and its state for a kill that must land before stage
    + 1, whose tasks read the victim's outputs of `stage`, has read them --
    it may take ~50 ms, less than a progress line needs to reach the test.
    c.on_line freezes every worker (SIGSTOP) the moment the driver logs
    `stage` complete; the next progress line asks the driver how many tasks
    of stage + 1 are done, d. A task starts only on a free slot (--slots 1:
    one per worker), so at most d + 3 had started: if that is below its
    task count, one at least starts after the thaw and must read the
    victim's output, which is then gone. So the victim -- a worker that ran
    tasks of every stage in `held`, worker 2 if it did (its "reporting"
    lines precede its reports, so they are in c.err before the driver's
    line) -- is killed while frozen and the others resume. st: "at" the progress
    line, "status" the driver's [(done, total)] while frozen, "victim" the
    worker killed or None (the freeze came too late: nothing was killed).
    The cluster's heartbeat timeout must be long: a freeze makes no worker
    dead."""
    frozen = threading.Event()
    st = {"at": None, "job": None, "status": None, "victim": None}
    done_line = re.compile(r"driver: job (\d+) stage %d \(\S+\) complete$" % stage)

    def on_line(line):  # the drain thread: freeze at once, nothing else
        m = done_line.search(line)
        if m and not frozen.is_set():
            for _, pid in c.workers.values():
                os.kill(pid, signal.SIGSTOP)
            st["job"] = int(m.group(1))
            frozen.set()

    def on_progress(*done):
        if not frozen.is_set() or st["at"] is not None:
            return
        st["at"] = done
        st["status"] = stage_status(c, st["job"])
        d, total = st["status"][stage]  # of stage + 1 (index stage)
        eligible = [i for i, (u, _) in sorted(c.workers.items())
                    if all(c.reported(u, h, word="reporting") for h in held)]
        if eligible and d + len(c.workers) < total:
            st["victim"] = 2 if 2 in eligible else eligible[0]
            os.kill(c.workers[st["victim"]][1], signal.SIGKILL)
        for i, (_, pid) in c.workers.items():
            if i != st["victim"]:
                os.kill(pid, signal.SIGCONT)

    c.on_line = on_line
    st["frozen"] = frozen
    return on_progress, st


def run_killed_before_reads(cluster, stage, held, reference, extra=()):
    """Runs the job (extra) on a new cluster of 3 workers (heartbeat
    timeout a minute: the readers' failed fetches tell the driver) with
    kill_before_next_stage_reads(stage, held) until a kill landed in time,
    at most 5 times; a run whose freeze came too late (the test
    descheduled) tests no kill but must still verify. Returns (cluster,
    victim's uri, st, run_job's result)."""
    for _ in range(5):
        c = cluster(3, timeout_ms=60000)
        cb, st = kill_before_next_stage_reads(c, stage, held)
        rc, text, parts, res, rec = run_job(c.driver, cb, extra)
        assert st["frozen"].is_set(), f"the driver never logged stage {stage} complete\n{text}"
        if st["victim"] is not None:
            return c, c.workers[st["victim"]][0], st, (rc, text, parts, res, rec)
        assert rc == 0 and res["verified"] == "yes" and parts == reference, text
        c.stop()  # thaws any worker still frozen (the job ended before a progress line)
    pytest.fail(f"5 times the workers were frozen only after stage {stage + 1} had started "
                f"all but 3 of its tasks: {st}")


@pytest.mark.parametrize("incremental", ["off", "on"])
def test_kill_one_worker_during_the_map_stage(cluster, reference, incremental):
    """With incremental retrieval on, reducers are already running (and
    reading) when the worker dies: those that read its outputs are retried."""
    c = cluster(3)
    uri, pid = c.workers[3]
    cb, st = kill_when(lambda m, r: m >= 6 and c.reported(uri), [pid])
    rc, text, parts, res, rec = run_job(c.driver, cb, ["--incremental", incremental])
    assert st["at"] is not None and st["at"][0] < MAPS, f"not during the map stage: {st}"
    check(rc, text, parts, res, rec, reference, c, [uri])


def test_coalesced_maps_equal_the_reference(cluster, reference):
    """--maps-per-task 4: the map stage runs 6 tasks of 4 consecutive maps
    each, and every partition's rows and checksum equal those of the run
    with a task per map; a worker killed during that map stage: its runs
    are recomputed, the partitions still equal the reference."""
    c = cluster(3)
    rc, text, parts, res, rec = run_job(
        c.driver, lambda *done: None, ["--maps-per-task", "4"])
    assert rc == 0 and res["verified"] == "yes", text
    assert parts == reference
    totals = {int(t) for t in re.findall(r"^progress: stage 1 \d+/(\d+)", text, re.M)}
    assert totals == {MAPS // 4}, text
    # The kill waits for the victim's first report; when that came with the
    # map stage's last task (its runs all finished last), the kill fell in
    # the reduce stage: that run must still verify, and the case is tried
    # again on a fresh cluster (at most 5 times).
    for _ in range(5):
        c = cluster(3)
        uri, pid = c.workers[3]
        cb, st = kill_when(lambda m, r: m >= 2 and c.reported(uri), [pid])
        rc, text, parts, res, rec = run_job(c.driver, cb, ["--maps-per-task", "4"])
        assert st["at"] is not None, f"never killed: {st}\n{text}"
        if st["at"][0] < MAPS // 4:
            break
        assert rc == 0 and res["verified"] == "yes" and parts == reference, text
        c.stop()
    else:
        pytest.fail(f"5 times the victim reported its first run only as the map stage ended: {st}")
    check(rc, text, parts, res, rec, reference, c, [uri])
    assert all(t < MAPS // 4 for s, t in rec if s == 1), rec


def test_kill_one_worker_during_the_reduce_stage(cluster, reference):
    """Killed once the map stage is complete, before the reduces have read
    its outputs (kill_before_next_stage_reads)."""
    c, uri, st, (rc, text, parts, res, rec) = run_killed_before_reads(cluster, 1, [1], reference)
    assert st["status"][0] == (MAPS, MAPS) and st["status"][1][0] < REDUCES, st
    check(rc, text, parts, res, rec, reference, c, [uri])


def test_kill_two_workers_at_once(cluster, reference):
    c = cluster(4)
    (u1, p1), (u2, p2) = c.workers[1], c.workers[4]
    cb, st = kill_when(lambda m, r: m >= 4 and (c.reported(u1) or c.reported(u2)), [p1, p2])
    rc, text, parts, res, rec = run_job(c.driver, cb)
    assert st["at"] is not None and st["at"][0] < MAPS, f"not during the map stage: {st}"
    check(rc, text, parts, res, rec, reference, c, [u1, u2])


def test_a_hung_worker_sigstop(cluster, reference):
    c = cluster(3)
    uri, pid = c.workers[1]
    cb, st = kill_when(lambda m, r: m >= 6 and c.reported(uri), [pid], signal.SIGSTOP)
    try:
        rc, text, parts, res, rec = run_job(c.driver, cb)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert st["at"] is not None and st["at"][0] < MAPS, f"not during the map stage: {st}"
    check(rc, text, parts, res, rec, reference, c, [uri])


THEN = 6


@pytest.fixture(scope="module")
def reference2():
    """The partitions of a two-shuffle run without failure."""
    c = Cluster(3)
    try:
        rc, text, parts, res, rec = run_job(c.driver, extra=["--then-reduces", str(THEN)])
    finally:
        c.stop()
    assert rc == 0, text
    assert res["verified"] == "yes" and res["recomputed"] == "0"
    assert len(parts) == THEN and sum(r for r, _ in parts.values()) == ROWS
    return parts


def test_two_shuffles_lost_worker_held_both(cluster, reference2):
    """Killed during the last stage, the victim held outputs of both
    shuffles: its outputs of the second are recomputed, and so are the map
    tasks of the first that those need again -- exactly the victim's own if
    the first shuffle was still held, or (recursively) every map task if it
    had already been released when the second stage completed (the driver
    logs that it brings the stage back). The kill lands once the second
    stage is complete, before the last has read its outputs
    (kill_before_next_stage_reads)."""
    c, uri, st, (rc, text, parts, res, rec) = run_killed_before_reads(
        cluster, 2, [1, 2], reference2, ["--then-reduces", str(THEN)])
    assert st["status"][1] == (REDUCES, REDUCES) and st["status"][2][0] < THEN, st
    first = c.reported(uri, 1)
    assert first, "the victim held no output of the first shuffle"
    brought_back = any("stage 1: its output (shuffle" in line and "was released" in line
                       for line in c.err)
    also = range(MAPS) if brought_back else first
    check(rc, text, parts, res, rec, reference2, c, [uri], stage=2,
          also=[(1, t) for t in also])
    assert {t for s, t in rec if s == 1} == set(also), (sorted(rec), brought_back)


BIG = ["--reduces", "2"]  # partitions of 1.5 M rows: each reducer fetches for a while


@pytest.fixture(scope="module")
def reference_big():
    """The partitions of a run without failure, 2 reduces."""
    c = Cluster(3)
    try:
        rc, text, parts, res, rec = run_job(c.driver, extra=BIG)
    finally:
        c.stop()
    assert rc == 0, text
    assert res["verified"] == "yes" and res["recomputed"] == "0"
    assert len(parts) == 2 and sum(r for r, _ in parts.values()) == ROWS
    return parts


@pytest.mark.parametrize("direct_reads", [False, True], ids=["doget", "direct"])
def test_kill_a_worker_while_a_reducer_fetches_from_it(cluster, reference_big, direct_reads):
    """kill -9 a worker while the reducers fetch from it. To make sure a
    fetch is under way (a reduce takes ~0.1 s), the victim is first frozen
    (SIGSTOP) as soon as the map stage is complete: the reducers' calls to
    it hang mid-fetch for 0.5 s, then it is killed. The heartbeat timeout
    is a minute: only a reducer's failed fetch can tell the driver in time
    -- its retry names the victim's "lost map outputs", the driver
    recomputes exactly the victim's outputs and the job verifies.
    With same-host direct reads a reducer that already opened the victim's
    files or memory images reads on, frozen or dead victim or not, so the
    loss may go unnoticed (nothing is recomputed) or be found by a later
    locate; either way the job verifies and recomputes at most the
    victim's outputs. A reduce that ran ON the victim has no fetch to fail
    for it: the driver's task-wait poll of it (every 2 s) is refused by the
    dead process and the reduce is retried elsewhere -- the job must end
    well within half the minute-long heartbeat timeout. Direct reads off
    is the fetch between hosts.

    The freeze comes the moment the driver logs the map stage complete
    (the drain thread; a progress line may reach the test after the whole
    reduce stage), on a worker that ran map tasks (worker 3 if it did).
    Should the reduces be done by then (the test descheduled; the driver,
    asked while the victim is frozen, says so), the run tests nothing but
    must verify, and runs again on a new cluster (at most 5 times)."""
    for _ in range(5):
        c = cluster(3, timeout_ms=60000, direct_reads=direct_reads)
        frozen = threading.Event()
        st = {"at": None, "job": None, "status": None, "victim": None}

        def on_line(line):  # the drain thread: freeze at once
            m = re.search(r"driver: job (\d+) stage 1 \(\S+\) complete$", line)
            if m and not frozen.is_set():
                held = [i for i, (u, _) in sorted(c.workers.items())
                        if c.reported(u, 1, word="reporting")]
                st["victim"] = 3 if 3 in held else held[0]
                os.kill(c.workers[st["victim"]][1], signal.SIGSTOP)
                st["job"] = int(m.group(1))
                frozen.set()

        def on_progress(*done):
            if frozen.is_set() and st["at"] is None:
                st["at"] = done
                st["status"] = stage_status(c, st["job"])
                time.sleep(0.5)  # the reducers are launched and stuck fetching from it
                os.kill(c.workers[st["victim"]][1], signal.SIGKILL)

        c.on_line = on_line
        t0 = time.time()
        rc, text, parts, res, rec = run_job(c.driver, on_progress, BIG)
        took = time.time() - t0
        assert frozen.is_set(), f"the driver never logged the map stage complete\n{text}"
        if st["at"] is not None and st["status"][1][0] < 2:
            break
        assert rc == 0 and res["verified"] == "yes" and parts == reference_big, text
        c.stop()  # thaws the victim if the job ended before a progress line
    else:
        pytest.fail(f"5 times the reduces were done before the freeze: {st}")
    uri = c.workers[st["victim"]][0]
    if direct_reads:
        assert rc == 0 and res["verified"] == "yes", text
        assert parts == reference_big
        reporting = {(1, t) for t in c.reported(uri, 1, word="reporting")}
        assert set(rec) <= reporting, (sorted(rec), sorted(reporting), text)
        assert took < 30, f"{took:.1f} s (heartbeat timeout 60 s): a task on the dead " \
            f"worker waited for the timeout\n{text}"
        return
    check(rc, text, parts, res, rec, reference_big, c, [uri])
    fetch_failed = [line for line in text.splitlines()
                    if re.match(r"\s*stage 2 task \d+ attempt \d+: ", line)
                    and "lost map outputs" in line and uri in line]
    assert fetch_failed, text
    assert took < 40, f"{took:.1f} s: the loss was not found by the fetch"


def test_bad_control_input(cluster):
    c = cluster(1)
    with flight.connect(c.driver) as client:
        with pytest.raises(pa.ArrowException, match="malformed JobPlan"):
            list(client.do_action(flight.Action("submit", b"\xff\xff\xff")))
        with pytest.raises(pa.ArrowException, match="malformed TaskDone"):
            list(client.do_action(flight.Action("task-done", b"\xff\xff")))
        with pytest.raises(pa.ArrowException, match="unknown action 'nope'"):
            list(client.do_action(flight.Action("nope", b"")))
        # JobPlan{stages: [StagePlan{stage_id: 1, kind: "bogus"}], backend: 2}
        stage = b"\x08\x01\x12\x05bogus"
        plan = b"\x12" + bytes([len(stage)]) + stage + b"\x30\x02"
        with pytest.raises(pa.ArrowException, match="unknown task type 'bogus'"):
            list(client.do_action(flight.Action("submit", plan)))
    uri, _ = c.workers[1]
    with flight.connect(uri) as client:
        body = b"FSTE\x01\x00\x00\x00" + (5).to_bytes(4, "little") + (0).to_bytes(4, "little")
        with pytest.raises(pa.ArrowException, match="unknown task type 'bogus'"):
            list(client.do_action(flight.Action("task", body + b"bogus")))
    p = subprocess.run([str(CLI), "job", "status", "--driver", c.driver, "--job", "99"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "no job 99" in p.stderr
    # the cluster still works
    p = subprocess.run([str(CLI), "job", "shuffle", "--driver", c.driver, "--maps", "2",
                        "--reduces", "2", "--rows", "1000"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "verified=yes" in p.stdout, p.stdout + p.stderr


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args):
    p = subprocess.Popen([str(CLI)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on "), (line, p.stderr.read() if p.poll() else "")
    return p, line.split()[2]


def _alive_workers(driver):
    from test_local_cluster import ALIVE, workers  # its WorkerList decoder
    return sum(w["state"] == ALIVE for w in workers(driver))


def test_driver_restart_mid_job(tmp_path):
    """The driver is killed (SIGKILL) while a job runs and a new one starts
    on the same address: the job's client fails with a clear error, the
    workers (never crashing) register again, the old job is unknown to the
    new driver, and a new job runs and verifies."""
    port = _free_port()
    listen = f"127.0.0.1:{port}"
    d, uri = _start(["driver", "--listen", listen, "--heartbeat-timeout-ms", "1000"])
    ws = [_start(["worker", "--listen", "127.0.0.1:0", "--driver", uri,
                  "--spill-dir", str(tmp_path / f"w{i}")])[0] for i in range(2)]
    try:
        deadline = time.time() + 10
        while _alive_workers(uri) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert _alive_workers(uri) == 2
        state = {"killed": False}

        def on_progress(*done):
            if not state["killed"] and done[0] >= 2:
                d.kill()
                state["killed"] = True
        rc, text, parts, res, rec = run_job(uri, on_progress)
        assert state["killed"] and rc == 1, text
        assert "job shuffle:" in text and "result:" not in text, text
        d.wait(timeout=10)
        d, uri2 = _start(["driver", "--listen", listen, "--heartbeat-timeout-ms", "1000"])
        assert uri2 == uri
        deadline = time.time() + 15
        while _alive_workers(uri) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert _alive_workers(uri) == 2
        p = subprocess.run([str(CLI), "job", "status", "--driver", uri, "--job", "1"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and "no job 1" in p.stderr, p.stderr
        p = subprocess.run([str(CLI), "job", "shuffle", "--driver", uri, "--maps", "6",
                            "--reduces", "4", "--rows", "60000", "--batch-rows", "5000"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "verified=yes" in p.stdout, p.stdout + p.stderr
        assert all(w.poll() is None for w in ws), "a worker died"
    finally:
        for w in ws:
            w.send_signal(signal.SIGTERM)
        for w in ws:
            assert w.wait(timeout=30) == 0, w.stderr.read()
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
