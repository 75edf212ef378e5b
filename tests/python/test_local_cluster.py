"""test_local_cluster.py -- the control plane from the outside:
`flightshuffle local` (a driver and N worker processes on loopback) lists
its workers alive and leaves no process nor spill file behind, whether it
ends after --run-seconds or on SIGINT; `flightshuffle driver` with
`flightshuffle worker --driver` processes marks a worker killed with
SIGKILL dead within the heartbeat timeout, and refuses malformed bodies
with INVALID_ARGUMENT. `local --auth-token T --keepalive-ms N`: the driver
and every worker refuse callers without T, a job sent with T runs, the
workers got --keepalive-ms; a worker stopped with SIGTERM deregisters: the
driver lists it dead at once, not after its heartbeat timeout. The driver's
"workers" action is read with
pyarrow.flight; its WorkerList (proto/Sched.proto) is decoded by hand.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from jobs import read_cluster_ready

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

ALIVE, DEAD = 1, 2


# ---- a minimal protobuf reader (varints and length-delimited fields) ----

def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _fields(buf):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"unexpected wire type {wt}")
        yield num, v


def decode_worker_list(buf):
    """WorkerList -> [{id, uri, state, age_ms}]."""
    out = []
    for num, v in _fields(buf):
        if num != 1:
            continue
        w = {"id": 0, "uri": "", "state": 0, "age_ms": 0}
        for n2, v2 in _fields(v):
            if n2 == 1:
                w["id"] = v2
            elif n2 == 2:
                w["uri"] = bytes(v2).decode()
            elif n2 == 3:
                w["state"] = v2
            elif n2 == 4:
                w["age_ms"] = v2
        out.append(w)
    return out


def workers(driver_uri, token=None):
    opts = flight.FlightCallOptions(
        headers=[(b"authorization", f"Bearer {token}".encode())] if token else [])
    with flight.connect(driver_uri) as client:
        res = list(client.do_action(flight.Action("workers", b""), opts))
    assert len(res) == 1
    return decode_worker_list(res[0].body.to_pybytes())


# ---- processes ----------------------------------------------------------

def processes_mentioning(text):
    """Pids whose command line contains `text`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(int(d.name))
    return out


def pid_alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def start_local(tmp_path, *extra):
    spill = tmp_path / "spill"
    proc = subprocess.Popen([str(CLI), "local", "--workers", "3", "--spill-dir", str(spill),
                             "--heartbeat-timeout-ms", "1500", *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver, ws = read_cluster_ready(proc, 3)
    return proc, spill, driver, ws


def check_gone(proc, spill, pids):
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert "ended with" not in err and "killed" not in err, err
    assert processes_mentioning(str(spill)) == []
    assert not any(pid_alive(p) for p in pids)
    assert list(spill.rglob("*")) == []
    return err


def test_local_lists_alive_workers_then_leaves_nothing(tmp_path):
    proc, spill, driver, ws = start_local(tmp_path, "--run-seconds", "3")
    try:
        listed = workers(driver)
        assert sorted(w["uri"] for w in listed) == sorted(u for u, _ in ws)
        assert all(w["state"] == ALIVE for w in listed)
        assert len({w["id"] for w in listed}) == 3
        assert all(w["age_ms"] < 1500 for w in listed)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check_gone(proc, spill, [p for _, p in ws])


def test_local_sigint_mid_run_stops_everything(tmp_path):
    proc, spill, driver, ws = start_local(tmp_path)
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "SIGINT" in check_gone(proc, spill, [p for _, p in ws])


def start_listening(args):
    proc = subprocess.Popen([str(CLI), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("listening on "), (line, proc.stderr.read())
    return proc, line.split()[2]


def test_driver_marks_a_killed_worker_dead(tmp_path):
    timeout_ms = 1000
    procs = []
    try:
        driver, duri = start_listening(["driver", "--listen", "127.0.0.1:0",
                                        "--heartbeat-timeout-ms", timeout_ms])
        procs.append(driver)
        wuris = []
        for i in range(2):
            w, wuri = start_listening(["worker", "--listen", "127.0.0.1:0", "--spill-dir",
                                       tmp_path / f"w{i}", "--driver", duri])
            procs.append(w)
            wuris.append(wuri)
        deadline = time.time() + 20
        while time.time() < deadline:
            ws = {w["uri"]: w for w in workers(duri)}
            if all(u in ws and ws[u]["state"] == ALIVE for u in wuris):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"workers did not register: {workers(duri)}")
        # heartbeats keep them alive well past the timeout
        time.sleep(2 * timeout_ms / 1000)
        assert all(w["state"] == ALIVE for w in workers(duri))
        procs[1].kill()
        procs[1].wait()
        killed = time.time()
        while time.time() < killed + 10:
            ws = {w["uri"]: w for w in workers(duri)}
            if ws[wuris[0]]["state"] == DEAD:
                break
            time.sleep(0.05)
        took = time.time() - killed
        assert ws[wuris[0]]["state"] == DEAD, ws
        assert ws[wuris[0]]["age_ms"] >= timeout_ms
        # within the timeout (plus the checker's period and some slack)
        assert took < timeout_ms / 1000 + 1.0, took
        assert ws[wuris[1]]["state"] == ALIVE
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs if p is not procs[1]] == [0, 0]


def test_driver_refuses_bad_bodies(tmp_path):
    driver, duri = start_listening(["driver", "--listen", "127.0.0.1:0"])
    try:
        with flight.connect(duri) as client:
            for kind, body, needle in [("register", b"\xff\xff\xff", "malformed Register"),
                                       ("register", b"", "no worker uri"),
                                       ("heartbeat", b"\xff\xff\xff", "malformed Heartbeat"),
                                       ("heartbeat", b"", "no worker id")]:
                # INVALID_ARGUMENT arrives in pyarrow as ArrowInvalid
                with pytest.raises(pa.ArrowInvalid, match=needle):
                    list(client.do_action(flight.Action(kind, body)))
            # heartbeat of an unknown worker: NOT_FOUND, i.e. register again
            with pytest.raises(KeyError, match="register again"):  # ArrowKeyError
                list(client.do_action(flight.Action("heartbeat", b"\x08\x07")))
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=15)
    assert driver.returncode == 0


@pytest.mark.parametrize("args,needle", [
    (["local"], "--workers N is required"),
    (["local", "--workers", "0"], "expected 1..64"),
    (["driver"], "--listen HOST:PORT is required"),
    (["driver", "--listen", "127.0.0.1:0", "--heartbeat-timeout-ms", "x"], "expected"),
])
def test_bad_arguments_exit_2(args, needle):
    p = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert needle in p.stderr


TOKEN = "s3cret-token"


def test_local_auth_token_and_keepalive(tmp_path):
    proc, spill, driver, ws = start_local(tmp_path, "--auth-token", TOKEN, "--keepalive-ms", 700,
                                          "--heartbeat-timeout-ms", 60000)
    try:
        # every process requires the token
        for uri in [driver] + [u for u, _ in ws]:
            with pytest.raises(flight.FlightUnauthenticatedError):
                workers(uri)
        assert [w["state"] for w in workers(driver, TOKEN)] == [ALIVE] * 3
        # the workers were given the keepalive (and the token)
        for _, pid in ws:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert cmd[cmd.index(b"--keepalive-ms") + 1] == b"700", cmd
            assert cmd[cmd.index(b"--auth-token") + 1] == TOKEN.encode(), cmd
        job = [str(CLI), "job", "shuffle", "--driver", driver, "--maps", "4", "--reduces", "3",
               "--rows", "20000", "--batch-rows", "1000", "--timeout-s", "60"]
        r = subprocess.run(job, capture_output=True, text=True, timeout=90)
        assert r.returncode != 0 and "Bearer" in r.stderr + r.stdout, r
        r = subprocess.run(job + ["--auth-token", TOKEN], capture_output=True, text=True,
                           timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "verified=yes" in r.stdout, r.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    check_gone(proc, spill, [pid for _, pid in ws])


def test_a_worker_stopped_cleanly_deregisters(tmp_path):
    """SIGTERM: the worker deregisters; the driver (heartbeat timeout 60 s)
    lists it dead at once, the others alive."""
    proc, spill, driver, ws = start_local(tmp_path, "--heartbeat-timeout-ms", 60000)
    try:
        uri, pid = ws[0]
        os.kill(pid, signal.SIGTERM)
        t0 = time.time()
        while time.time() < t0 + 5:
            states = {w["uri"]: w["state"] for w in workers(driver)}
            if states[uri] == DEAD:
                break
            time.sleep(0.05)
        took = time.time() - t0
        assert states[uri] == DEAD, states
        assert took < 3, took
        assert [states[u] for u, _ in ws[1:]] == [ALIVE, ALIVE]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    err = proc.stderr.read()
    assert f"{uri} deregistered" in err, err
    assert processes_mentioning(str(spill)) == []
