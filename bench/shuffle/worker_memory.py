"""worker_memory.py -- what each worker of a `flightshuffle local` cluster
holds after back-to-back shuffle jobs and after idle (WORKER_MEMORY.md):
VmRSS, VmHWM, anonymous and shmem RSS (/proc/<pid>/status, smaps_rollup),
the image memfds it has open and their bytes (/proc/<pid>/fd), its
"stats" line, and -- when MALLINFO_SO names a build of
worker_memory_mallinfo.c -- glibc's mallinfo2() arena / mmapped / free.

usage: .venv/bin/python bench/shuffle/worker_memory.py BINARY WORKERS ROWS JOBS MAPS REDUCES IDLE_S
  (32 bytes a row: 134217728 rows = 4 GiB; the workers have no memory limit,
  like `bench shuffle`'s)"""
import os, re, subprocess, sys, time, tempfile
import pyarrow.flight as flight

binary, nw, rows, jobs, maps, reduces, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
env = dict(os.environ)
MI = os.environ.get("MALLINFO_SO")
if MI:
    env["LD_PRELOAD"] = MI
    os.makedirs("/tmp/fsh_mallinfo", exist_ok=True)
spill = tempfile.mkdtemp(prefix="fsh-wmem")
p = subprocess.Popen([binary, "local", "--workers", str(nw), "--spill-dir", spill, "--memory-limit", str(1 << 50)],
                     stdout=subprocess.PIPE, text=True, env=env)
ws, driver = [], None
for line in p.stdout:
    m = re.match(r"driver (\S+)", line)
    if m: driver = m.group(1)
    m = re.match(r"worker \d+ (\S+) pid (\d+)", line)
    if m: ws.append((m.group(1), int(m.group(2))))
    if line.startswith("cluster ready"): break

def kb(path, key):
    for l in open(path):
        if l.startswith(key + ":"): return int(l.split()[1]) * 1024
    return 0

def mi(pid):
    if not MI: return {}
    out = f"/tmp/fsh_mallinfo/{pid}.out"
    if os.path.exists(out): os.unlink(out)
    open(f"/tmp/fsh_mallinfo/{pid}.req", "w").close()
    for _ in range(100):
        if os.path.exists(out): return dict(kv.split("=") for kv in open(out).read().split())
        time.sleep(0.05)
    return {}

def memfds(pid):
    n = b = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "fsh-image" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                n += 1; b += os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except OSError: pass
    return n, b

G = 1 << 30
def report(tag):
    tot = 0
    for uri, pid in ws:
        st = f"/proc/{pid}/status"; sr = f"/proc/{pid}/smaps_rollup"
        rss, hwm = kb(st, "VmRSS"), kb(st, "VmHWM")
        anon, shm = kb(sr, "Anonymous"), kb(st, "RssShmem")
        n, b = memfds(pid)
        m = mi(pid)
        c = flight.connect(uri)
        stats = list(c.do_action(flight.Action("stats", b"")))[0].body.to_pybytes().decode()
        c.close()
        tot += rss
        print(f"{tag:10s} pid {pid}: rss {rss/G:.2f}G hwm {hwm/G:.2f}G anon {anon/G:.2f}G shmem {shm/G:.2f}G "
              f"memfds {n} {b/G:.2f}G heap arena {int(m.get('arena',0))/G:.2f}G mmapped {int(m.get('hblkhd',0))/G:.2f}G "
              f"free {int(m.get('fordblks',0))/G:.2f}G | {stats}", flush=True)
    print(f"{tag:10s} sum rss {tot/G:.2f}G", flush=True)

try:
    report("start")
    for j in range(jobs):
        t = time.time()
        r = subprocess.run([binary, "job", "shuffle", "--driver", driver, "--maps", str(maps), "--reduces", str(reduces),
                            "--rows", str(rows), "--progress-ms", "200", "--slots", "2", "--timeout-s", "600"], capture_output=True, text=True)
        res = [l for l in r.stdout.splitlines() if l.startswith("result")]
        print(f"job {j+1}: {time.time()-t:.1f}s rc {r.returncode} {res} {r.stderr[-300:] if r.returncode else ''}", flush=True)
        time.sleep(0.3)
        report(f"after{j+1}")
    time.sleep(idle)
    report(f"idle{idle:g}s")
finally:
    p.terminate(); p.wait(timeout=60)
