"""jobs.py -- what the real-process runtime tests share: reading a
`flightshuffle local` cluster's start-up lines, running `flightshuffle job
shuffle` against a driver and parsing what it prints."""
import re
import subprocess
import time


def read_cluster_ready(proc, n_workers, timeout=60):
    """Reads `flightshuffle local`'s stdout (proc) up to its "cluster
    ready: N workers" line. Returns (driver uri, [(worker uri, pid)]);
    fails (with stderr, when the process ended) otherwise."""
    lines = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("cluster ready"):
            break
    assert lines and lines[-1] == f"cluster ready: {n_workers} workers", (
        lines, proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
    driver = lines[0].split()[1]
    ws = [(l.split()[2], int(l.split()[4])) for l in lines if l.startswith("worker ")]
    assert len(ws) == n_workers, lines
    return driver, ws


def run_job(cli, driver, job_args, on_progress=None, extra=()):
    """Runs `cli job shuffle --driver driver job_args extra`;
    on_progress(done of stage 1, of stage 2, ...) per progress line.
    Returns (returncode, stdout + stderr, {partition: (rows, checksum)},
    the result line's fields, [(stage, task)] of the summary's recomputed
    section)."""
    p = subprocess.Popen([str(cli), "job", "shuffle", "--driver", driver] + list(job_args) +
                         list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    for line in p.stdout:
        out.append(line)
        if line.startswith("progress:") and on_progress:
            on_progress(*[int(d) for d in re.findall(r"stage \d+ (\d+)/\d+", line)])
    err = p.stderr.read()
    p.wait(timeout=60)
    text = "".join(out)
    parts = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in
             re.finditer(r"^partition (\d+) rows (\d+) checksum (\w+)$", text, re.M)}
    res = {}
    for line in out:
        if line.startswith("result: "):
            res = dict(kv.split("=", 1) for kv in line.split()[1:])
    rec, section = [], None
    for line in out:
        s = line.strip()
        if re.match(r"(retried|recomputed|ignored late answers): \d+", s):
            section = s.split(":")[0]
            continue
        m = re.match(r"stage (\d+) task (\d+) attempt \d+: ", s)
        if m and section == "recomputed":
            rec.append((int(m.group(1)), int(m.group(2))))
    return p.returncode, text + err, parts, res, rec
