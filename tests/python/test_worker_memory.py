"""test_worker_memory.py -- a worker gives its memory back between shuffles
(src/shuffle/worker.c, "the keeper"): on a `flightshuffle local` cluster of
2 worker processes, a shuffle job of 16 M rows (512 MiB), then idle. Right
after the job (released) each worker still keeps the released images'
memfds in its pool for the next shuffle, and says so in its "stats" line;
a few seconds later the pool is empty (stats and the worker's own
/proc/<pid>/fd agree: no image memfd open), nothing is charged, and its
RSS has fallen well below its peak: what it holds beyond its RSS at start
is under a fifth of what the shuffle made it grow by (measured: 4-5%;
before the keeper: 33%, and the whole pool, ~0.25 GB a worker, kept idle).
Run with --images vm (anonymous mappings, named "[anon:fsh-image]" in
/proc/<pid>/maps where the kernel names them; the stats line's
pooled_memfds counts pooled images of either kind) and with --images memfd
(the workers' default).

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import subprocess
import time
from pathlib import Path

import pyarrow.flight as flight
import pytest

from jobs import read_cluster_ready

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

STATS = re.compile(r"map_outputs=(\d+) memory_bytes=(\d+) spilled_outputs=(\d+) "
                   r"spilled_bytes=(\d+) pooled_memfds=(\d+) pooled_bytes=(\d+)$")


def status_bytes(pid, key):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def image_memfds(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += "memfd:fsh-image" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return n


def image_maps(pid):
    """Mappings of VM images (named by the store where the kernel allows)."""
    return sum("[anon:fsh-image]" in line
               for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


def stats(uri):
    c = flight.connect(uri)
    try:
        line = list(c.do_action(flight.Action("stats", b"")))[0].body.to_pybytes().decode()
    finally:
        c.close()
    m = STATS.match(line)
    assert m, line
    return dict(zip(["map_outputs", "memory_bytes", "spilled_outputs", "spilled_bytes",
                     "pooled_memfds", "pooled_bytes"], map(int, m.groups())))


@pytest.mark.parametrize("images", ["vm", "memfd"])
def test_idle_worker_gives_memory_back(tmp_path, images):
    spill = tmp_path / "spill"
    log = open(tmp_path / "local.log", "w")
    proc = subprocess.Popen([str(CLI), "local", "--workers", "2", "--spill-dir", str(spill),
                             "--memory-limit", "4G", "--images", images,
                             "--pool-idle-ms", "3000", "--builders-idle-ms", "3000"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        driver, ws = read_cluster_ready(proc, 2)
        base = {pid: status_bytes(pid, "VmRSS") for _, pid in ws}

        job = subprocess.run([str(CLI), "job", "shuffle", "--driver", driver, "--maps", "16",
                              "--reduces", "16", "--rows", str(16 << 20), "--progress-ms",
                              "200", "--timeout-s", "300"], capture_output=True, text=True,
                             timeout=320)
        assert job.returncode == 0 and "verified=yes" in job.stdout, job.stdout + job.stderr
        peak = {pid: status_bytes(pid, "VmHWM") for _, pid in ws}
        # released (the job settles after its releases), the pool kept for a next shuffle
        pooled = sum(stats(uri)["pooled_memfds"] for uri, _ in ws)
        assert pooled > 0, "nothing pooled right after the release"
        if images == "vm":
            assert all(image_memfds(pid) == 0 for _, pid in ws), "memfds with --images vm"
        named = sum(image_maps(pid) for _, pid in ws)  # 0 where the kernel names none
        if images == "vm":
            print(f"pooled images {pooled}, named VM image mappings {named}")

        # then idle: the pool and the builders go (3 s unused as asked -- the defaults are
        # 30 s --, the keeper ticks every second)
        deadline = time.time() + 15
        while True:
            st = {pid: stats(uri) for uri, pid in ws}
            gone = all(s["pooled_memfds"] == 0 and image_memfds(pid) == 0 and
                       image_maps(pid) == 0 for pid, s in st.items())
            if gone or time.time() > deadline:
                break
            time.sleep(0.2)
        for pid, s in st.items():
            assert s == dict(map_outputs=0, memory_bytes=0, spilled_outputs=0, spilled_bytes=0,
                             pooled_memfds=0, pooled_bytes=0), (pid, s)
            assert image_memfds(pid) == 0, pid
            assert image_maps(pid) == 0, pid
        time.sleep(0.5)  # the trim after the drain
        for _, pid in ws:
            grew = peak[pid] - base[pid]
            kept = status_bytes(pid, "VmRSS") - base[pid]
            # each worker runs about half of the 16 maps and reduces (512 MiB in all), but the
            # split is whoever asks first: 122 MiB on one worker was seen in a CI run
            assert grew > 64 << 20, f"worker {pid} grew by {grew} bytes only: not a large shuffle"
            assert kept < grew / 5, (f"worker {pid}: RSS {kept} bytes above its start after idle, "
                                     f"its peak was {grew} above")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode == 0, (tmp_path / "local.log").read_text()
    assert list(spill.rglob("*")) == []
