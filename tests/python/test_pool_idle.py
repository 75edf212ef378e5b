"""test_pool_idle.py -- the worker's idle windows for its back-to-back
caches (worker.c's keeper; store.c's memfd pool): `flightshuffle worker
--pool-idle-ms / --builders-idle-ms MS|never` and `bench shuffle
--worker-pool-idle-ms MS|never`, which passes both to its workers (or
--worker-builders-idle-ms the second alone).
Bad values exit 2 naming the option and the value; with "never" the
workers keep the released images' memfds between runs, so the bench says
the first run began cold and every later one warm (from the workers' own
"stats", summed), and its result line counts the warm runs. `flightshuffle
local --pool-idle-ms / --builders-idle-ms` checks them the same way and
passes each to every worker it starts (their command lines), nothing when
not given.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import re
import subprocess
from pathlib import Path

import pytest

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

SMALL = ["--workers", "2", "--maps", "4", "--reduces", "4", "--bytes", "4M"]


@pytest.mark.parametrize("option", ["--pool-idle-ms", "--builders-idle-ms"])
@pytest.mark.parametrize("value", ["abc", "-5", "86400001", "", "10ms", "Never"])
def test_worker_rejects_bad_idle_ms(option, value):
    p = subprocess.run([str(CLI), "worker", "--listen", "127.0.0.1:0", option, value],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{option} '{value}': expected milliseconds 0..86400000 or never" in p.stderr, p.stderr


@pytest.mark.parametrize("args,needle", [
    (SMALL + ["--backend", "flight", "--worker-pool-idle-ms", "x"],
     "--worker-pool-idle-ms 'x': expected milliseconds 0..86400000 or never"),
    (SMALL + ["--backend", "flight", "--worker-pool-idle-ms", "-1"],
     "--worker-pool-idle-ms '-1'"),
    (SMALL + ["--backend", "flight", "--worker-builders-idle-ms", "5s"],
     "--worker-builders-idle-ms '5s': expected milliseconds 0..86400000 or never"),
    (SMALL + ["--backend", "memory", "--worker-pool-idle-ms", "never"],
     "--worker-pool-idle-ms and --worker-builders-idle-ms need workers"),
])
def test_bench_rejects_bad_idle_ms(tmp_path, args, needle):
    p = subprocess.run([str(CLI), "bench", "shuffle", "--spill-dir", str(tmp_path), *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr, p.stderr


@pytest.mark.parametrize("cmd,option", [
    (["worker", "--listen", "127.0.0.1:0"], "--images"),
    (["local", "--workers", "1"], "--images"),
    (["bench", "shuffle", *SMALL, "--backend", "flight"], "--worker-images"),
])
@pytest.mark.parametrize("value", ["VM", "shm", "", "memfd2"])
def test_rejects_bad_images(tmp_path, cmd, option, value):
    p = subprocess.run([str(CLI), *cmd, option, value], capture_output=True, text=True,
                       timeout=30, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{option} '{value}': expected vm, memfd, private or vm-4k" in p.stderr, p.stderr


@pytest.mark.parametrize("images", ["vm", "memfd"])
def test_bench_images_warm_pool(tmp_path, images):
    """Each kind of image is pooled between runs and reused (--worker-images)."""
    p = subprocess.run([str(CLI), "bench", "shuffle", "--spill-dir", str(tmp_path), *SMALL,
                        "--backend", "flight", "--runs", "2", "--worker-pool-idle-ms", "never",
                        "--worker-images", images],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"worker_images={images}" in p.stdout and "verified=yes" in p.stdout, p.stdout
    pools = re.findall(r"pool (cold|warm) as the run began: (\d+) memfds", p.stdout)
    assert [s for s, _ in pools] == ["cold", "warm"], p.stdout


def test_bench_never_keeps_the_pool_warm(tmp_path):
    p = subprocess.run([str(CLI), "bench", "shuffle", "--spill-dir", str(tmp_path), *SMALL,
                        "--backend", "flight", "--runs", "3", "--worker-pool-idle-ms", "never"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    pools = re.findall(r"pool (cold|warm) as the run began: (\d+) memfds, ([\d.]+) MB pooled in "
                       r"the workers \(--worker-pool-idle-ms never\)", p.stdout)
    assert len(pools) == 3, p.stdout
    # fresh workers hold nothing; each later run finds the previous run's
    # released images (one memfd per map output at least)
    assert pools[0] == ("cold", "0", "0.0"), p.stdout
    for state, memfds, mb in pools[1:]:
        assert state == "warm" and int(memfds) >= 4 and float(mb) > 0, p.stdout
    # (the workers' CPU is counted in clock ticks: at 4M a run may show 0)
    assert len(re.findall(r"workers' CPU [\d.]+ s \([\d.]+ s per GB\)", p.stdout)) == 3, p.stdout
    result = [l for l in p.stdout.splitlines() if l.startswith("result: ")]
    assert len(result) == 1, p.stdout
    fields = dict(kv.split("=", 1) for kv in result[0][len("result: "):].split())
    assert fields["verified"] == "yes"
    assert fields["pool_warm_runs"] == "2"
    assert fields["worker_pool_idle_ms"] == "never"
    assert float(fields["worker_cpu_s_per_gb_median"]) >= 0


@pytest.mark.parametrize("option", ["--pool-idle-ms", "--builders-idle-ms"])
@pytest.mark.parametrize("value", ["abc", "-5", "86400001", "10ms", "Never"])
def test_local_rejects_bad_idle_ms(option, value):
    p = subprocess.run([str(CLI), "local", "--workers", "1", option, value],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"local: {option} '{value}': expected milliseconds 0..86400000 or never" in p.stderr, \
        p.stderr


def _local_worker_args(tmp_path, extra):
    """Starts `flightshuffle local --workers 2` with extra, waits for the
    cluster, and returns each worker's command line (from /proc), then stops it."""
    p = subprocess.Popen([str(CLI), "local", "--workers", "2", "--spill-dir", str(tmp_path),
                          "--run-seconds", "60", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = []
        for line in p.stdout:
            m = re.match(r"worker \d+ \S+ pid (\d+)$", line.strip())
            if m:
                pids.append(int(m.group(1)))
            if line.startswith("cluster ready"):
                break
        assert len(pids) == 2, p.stderr.read() if p.poll() is not None else pids
        return [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] for pid in pids]
    finally:
        p.terminate()
        p.wait(timeout=30)
        p.stdout.close()
        p.stderr.close()


def test_local_passes_idle_ms_to_workers(tmp_path):
    for argv in _local_worker_args(tmp_path, ["--pool-idle-ms", "never",
                                              "--builders-idle-ms", "250"]):
        assert argv[1] == b"worker", argv
        i = argv.index(b"--pool-idle-ms")
        assert argv[i + 1] == b"never", argv
        i = argv.index(b"--builders-idle-ms")
        assert argv[i + 1] == b"250", argv
    # not given: the workers' own default (no option passed)
    for argv in _local_worker_args(tmp_path / "b", []):
        assert b"--pool-idle-ms" not in argv and b"--builders-idle-ms" not in argv, argv
