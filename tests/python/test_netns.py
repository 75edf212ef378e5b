"""test_netns.py -- a job on hosts with their own addresses (issue 5,
section 5): the test makes network namespaces (`ip netns` + veth pairs into
a bridge in the root namespace, a private /24 unused on this machine), runs
the driver on the bridge's address in the root namespace and one worker in
each namespace on that namespace's address, and cuts one host's link
(`ip link set <its veth> down` on the root side) mid-shuffle, once the
victim has reported some map tasks done.

The job must still end succeeded, its partitions (rows, checksums) identical
to the same job run before on the same cluster without failure, and its
summary's recomputed tasks exactly the map tasks the victim had reported
done (from the workers' logs, as in test_runtime.py: every "reported" task
of the victim and nothing but its "reporting" ones). A cut link sends
nothing back (no RST, no FIN): the driver must find the victim by its
heartbeat timeout and the other workers' fetches from it by Flight keepalive
(--keepalive-ms), so the job ends within seconds of the cut, not after TCP's
~15-minute retransmission timeout.

Everything made (namespaces, veths, bridge, processes) is removed in a
fixture's finally, and the test checks that nothing is left. Needs root and
iproute2 (scripts/deps.sh); skipped, saying why, only when not root or when
namespaces cannot be made here (a container without CAP_NET_ADMIN).

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import jobs

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

N_HOSTS = 3
MAPS, REDUCES, ROWS = 24, 8, 3_000_000
JOB_ARGS = ["--maps", str(MAPS), "--reduces", str(REDUCES), "--rows", str(ROWS),
            "--batch-rows", "25000", "--slots", "1", "--progress-ms", "10", "--timeout-s", "50"]
HEARTBEAT_TIMEOUT_MS = 1500
STOP_S = 8  # SIGTERM to exit, every process (in-flight calls get 2 s)
THROTTLE = "80mbit"  # mid-fetch: ~10 MB/s out of the victim, its outputs take seconds
# NETNS_KEEPALIVE_MS=60000 shows the test failing without a short keepalive:
# the processes with a stream or call on the cut link do not stop.
KEEPALIVE_MS = int(os.environ.get("NETNS_KEEPALIVE_MS", "500"))


def ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p


def free_subnet():
    """A 10.213.X.0/24 that no address or route of this machine touches."""
    used = ip("-4", "addr").stdout + ip("-4", "route").stdout
    for i in range(256):
        x = (os.getpid() + i) % 200 + 20
        if f"10.213.{x}." not in used:
            return f"10.213.{x}"
    pytest.skip("no free 10.213.X.0/24 subnet")


def why_no_netns():
    """None if this process can make namespaces, else the reason."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root (CI runs as root)"
    if not shutil.which("ip"):
        return "no `ip` (iproute2; scripts/deps.sh installs it)"
    probe = f"fshprobe{os.getpid()}"
    p = ip("netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"cannot create a network namespace: {p.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


class Proc:
    """A process whose stdout's first line is read and whose stderr is
    collected (both as lists of lines)."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.err.append(line)

    def listening(self, timeout=20):
        """The URI of its "listening on URI" line."""
        line = [None]
        t = threading.Thread(target=lambda: line.__setitem__(0, self.p.stdout.readline()),
                             daemon=True)
        t.start()
        t.join(timeout)
        if not line[0] or not line[0].startswith("listening on "):
            raise AssertionError(f"no 'listening on' line: {line[0]!r} {''.join(self.err)}")
        return line[0].split()[2]


class Hosts:
    """N namespaces, each with a veth into a bridge of the root namespace.
    Every name carries this run's pid; remove() deletes all of it."""

    def __init__(self, n):
        pid = os.getpid()
        self.net = free_subnet()
        self.bridge = f"fsb{pid}"
        self.root_addr = f"{self.net}.1"
        self.ns = [f"fsh{pid}h{k}" for k in range(1, n + 1)]
        self.veth = [f"fsv{pid}r{k}" for k in range(1, n + 1)]  # root ends
        self.addr = [f"{self.net}.{10 + k}" for k in range(1, n + 1)]
        self.procs = []
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.root_addr}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for k in range(n):
                ns, root_end, ns_end = self.ns[k], self.veth[k], f"fsv{pid}n{k + 1}"
                ip("netns", "add", ns)
                ip("link", "add", root_end, "type", "veth", "peer", "name", ns_end)
                ip("link", "set", ns_end, "netns", ns)
                ip("link", "set", root_end, "master", self.bridge)
                ip("link", "set", root_end, "up")
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "addr", "add", f"{self.addr[k]}/24", "dev", ns_end)
                ip("-n", ns, "link", "set", ns_end, "up")
        except BaseException:
            self.remove()
            raise

    def run(self, k, argv):
        """argv run in host k's namespace (`ip netns exec` execs it: the
        process's pid is the program's)."""
        p = Proc(["ip", "netns", "exec", self.ns[k], *argv])
        self.procs.append(p)
        return p

    def throttle(self, k, rate):
        """Host k's outgoing traffic limited to rate (tc tbf on its end of
        the veth pair)."""
        ip_ns = ["ip", "netns", "exec", self.ns[k]]
        p = subprocess.run(ip_ns + ["tc", "qdisc", "add", "dev", f"fsv{os.getpid()}n{k + 1}",
                                    "root", "tbf", "rate", rate, "burst", "64kb",
                                    "latency", "100ms"], capture_output=True, text=True, timeout=20)
        if p.returncode != 0:
            pytest.skip(f"cannot throttle a link here (tc tbf): {p.stderr.strip()}")

    def cut(self, k):
        ip("link", "set", self.veth[k], "down")

    def leftovers(self):
        """Names of this run still present (namespaces, links)."""
        ns = ip("netns", "list").stdout
        links = ip("-o", "link").stdout
        return ([n for n in self.ns if re.search(rf"^{n}\b", ns, re.M)] +
                [lk for lk in [self.bridge, *self.veth] if re.search(rf": {lk}[@:]", links)])

    def remove(self):
        for p in self.procs:
            if p.p.poll() is None:
                p.p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10  # for all of them together, then SIGKILL
        for p in self.procs:
            try:
                p.p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.p.kill()
                p.p.wait()
        for ns in self.ns:  # takes its veth end, and so the pair, with it
            ip("netns", "del", ns, check=False)
        for lk in [*self.veth, self.bridge]:
            if re.search(rf": {lk}[@:]", ip("-o", "link").stdout):
                ip("link", "del", lk, check=False)


@pytest.fixture
def hosts():
    """make(n) -> Hosts; all of them removed after the test, pass or fail,
    then checked gone (names and processes)."""
    why = why_no_netns()
    if why:
        print(f"test_netns skipped: {why}")
        pytest.skip(why)
    made = []

    def make(n):
        made.append(Hosts(n))
        return made[-1]

    try:
        yield make
    finally:
        for h in made:
            h.remove()
    for h in made:
        assert not h.leftovers(), f"left behind: {h.leftovers()}"
        for p in h.procs:
            with pytest.raises(ProcessLookupError):
                os.kill(p.p.pid, 0)


def run_job(driver, on_progress=None, extra=()):
    return jobs.run_job(CLI, driver, JOB_ARGS, on_progress, extra)


def tasks_logged(proc, uri, job, word):
    """{map task} of job's stage 1 that the worker at uri logged "done, word"."""
    pat = re.compile(re.escape(f"worker {uri}: job {job} stage 1 task ") +
                     r"(\d+) attempt \d+ done, " + word + "$")
    return {int(m.group(1)) for m in map(pat.search, list(proc.err)) if m}


@pytest.mark.parametrize("when", ["map-stage", "incremental", "mid-fetch"])
def test_cut_one_hosts_link_mid_shuffle(hosts, tmp_path, when):
    """map-stage: the link is cut during the map stage (the driver finds the
    victim silent by its heartbeat timeout). incremental: the same with
    --incremental on, the reducers running beside the maps and fetching the
    victim's outputs as they come. mid-fetch: the victim's outgoing
    traffic is throttled (tc tbf) so that fetching its map outputs takes
    seconds, and the link is cut during the reduce stage, while the other
    workers' reducers are streaming from it: only keepalive ends those
    streams (nothing comes back on a cut link)."""
    incremental = "on" if when == "incremental" else "off"
    t0 = time.time()
    h = hosts(N_HOSTS)
    driver = Proc([str(CLI), "driver", "--listen", f"{h.root_addr}:0",
                   "--heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS),
                   "--keepalive-ms", str(KEEPALIVE_MS)])
    h.procs.append(driver)
    duri = driver.listening()
    assert duri.startswith(f"grpc://{h.root_addr}:"), duri
    workers = []
    for k in range(N_HOSTS):
        w = h.run(k, [str(CLI), "worker", "--listen", f"{h.addr[k]}:0", "--driver", duri,
                      "--keepalive-ms", str(KEEPALIVE_MS), "--spill-dir", str(tmp_path / f"w{k}")])
        uri = w.listening()
        assert uri.startswith(f"grpc://{h.addr[k]}:"), uri
        workers.append((w, uri))
    deadline = time.time() + 15
    while time.time() < deadline and sum("registered" in line for line in driver.err) < N_HOSTS:
        time.sleep(0.05)
    assert sum("registered" in line for line in driver.err) == N_HOSTS, "".join(driver.err)
    # every worker registered from its own address
    for _, uri in workers:
        assert any(f" {uri} registered" in line for line in driver.err), (uri, driver.err)

    # job 1: the reference, without failure, on the same hosts
    rc, text, ref, res, rec = run_job(duri, extra=["--incremental", incremental])
    assert rc == 0, text
    assert res["state"] == "succeeded" and res["verified"] == "yes" and res["recomputed"] == "0"
    assert len(ref) == REDUCES and sum(r for r, _ in ref.values()) == ROWS
    # the shuffle crossed the hosts: every worker ran map tasks of it
    for w, uri in workers:
        assert tasks_logged(w, uri, 1, "reported"), f"{uri} ran no map task of job 1"

    # job 2: cut the last host's link once it has reported map tasks done
    victim, vuri = workers[-1]
    state = {"at": None, "t": None, "reduce_start": None}
    if when == "mid-fetch":
        h.throttle(N_HOSTS - 1, THROTTLE)

    def on_progress(m, r):
        if state["at"] is not None or not tasks_logged(victim, vuri, 2, "reported"):
            return
        if when != "mid-fetch" and m >= 6:
            h.cut(N_HOSTS - 1)
            state["at"], state["t"] = (m, r), time.time()
        elif when == "mid-fetch" and m == MAPS:
            # the reducers start at once; let their streams get going
            if state["reduce_start"] is None:
                state["reduce_start"] = time.time()
            elif time.time() - state["reduce_start"] >= 0.3:
                h.cut(N_HOSTS - 1)
                state["at"], state["t"] = (m, r), time.time()

    rc, text, parts, res, rec = run_job(duri, on_progress, ["--incremental", incremental])
    t_end = time.time()
    if when == "mid-fetch":
        assert state["at"] is not None and state["at"][1] < REDUCES, f"not mid-fetch: {state}"
    else:
        assert state["at"] is not None and state["at"][0] < MAPS, f"not mid-shuffle: {state}"
    assert rc == 0, text + "".join(driver.err)
    assert res["state"] == "succeeded" and res["verified"] == "yes", text
    assert parts == ref
    # the victim is still running (a cut link, not a dead process) and the
    # driver found it silent: by its heartbeat timeout or an unreachable call
    assert victim.p.poll() is None
    assert any(re.search(re.escape(f" {vuri} ") + r"(declared )?dead \(", line)
               for line in driver.err), "".join(driver.err)
    # exactly the tasks recomputed because of that worker
    reported = {(1, t) for t in tasks_logged(victim, vuri, 2, "reported")}
    reporting = {(1, t) for t in tasks_logged(victim, vuri, 2, "reporting")}
    got = set(rec)
    assert len(got) == len(rec), text
    assert reported <= got <= reporting, (sorted(reported), sorted(got), sorted(reporting), text)
    assert got, "no recomputed task: the victim held nothing"
    assert int(res["recomputed"]) == len(rec)
    # found by timeouts of seconds, not TCP's minutes
    assert t_end - state["t"] < 30, f"the job took {t_end - state['t']:.1f} s after the cut"
    # every process stops cleanly on SIGTERM, the victim too: no task,
    # fetch or call is left waiting on the cut link (keepalive ends them)
    stops = {}
    for name, p in [("driver", driver)] + [(uri, w) for w, uri in workers]:
        p.p.send_signal(signal.SIGTERM)
    for name, p in [("driver", driver)] + [(uri, w) for w, uri in workers]:
        try:
            rc = p.p.wait(timeout=max(0.1, t_end + STOP_S - time.time()))
        except subprocess.TimeoutExpired:
            rc = None
        stops[name] = (rc, round(time.time() - t_end, 1))
    assert all(rc == 0 for rc, _ in stops.values()), (
        f"not stopped within {STOP_S} s of SIGTERM, or failed: {stops} (victim {vuri})\n"
        + "".join(victim.err[-20:]))
    print(f"netns: cut at progress {state['at']}, job done {t_end - state['t']:.1f} s later, "
          f"recomputed {sorted(t for _, t in got)}; stops {stops}; test {time.time() - t0:.1f} s")
