"""phase_cpu.py -- the workers' CPU-seconds per phase of `flightshuffle
bench shuffle`, beside its own figures (bench/shuffle/PROFILE_REDUCE.md).

    python3 bench/shuffle/phase_cpu.py BINARY [bench shuffle options...]

Runs BINARY bench shuffle with the options, reads the worker pids from its
output, and samples the workers' utime + stime (/proc/PID/stat) every
10 ms. A run's baselines (socket copy, file write) come before its
shuffle, in the bench process, and its "run N:" line is printed (and
flushed) as its reduce phase ends, so a run's reduce window is the
reduce_s seconds before that line and its map window the map_s before
that. Prints per run: map / reduce s, the workers' CPU-s in each, and a
`phase_cpu:` line with medians (reduce CPU-s per GB of table bytes) and
the load average before and after."""
import os
import re
import statistics
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def main():
    binary, args = sys.argv[1], sys.argv[2:]
    load0 = open("/proc/loadavg").read().split()[:3]
    p = subprocess.Popen([binary, "bench", "shuffle"] + args, stdout=subprocess.PIPE, text=True,
                         bufsize=1)
    pids, last, series, lines, stop = [], {}, [], [], False

    def sampler():
        while not stop:
            tot = 0.0
            for pid in list(pids):
                c = cpu_of(pid)
                if c is not None:
                    last[pid] = c
                tot += last.get(pid, 0.0)
            series.append((time.monotonic(), tot))
            time.sleep(0.01)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    for line in p.stdout:
        t = time.monotonic()
        sys.stdout.write(line)
        m = re.search(r"worker \d+: pid (\d+)", line)
        if m:
            pids.append(int(m.group(1)))
        lines.append((t, line))
    p.wait()
    stop = True
    th.join()
    load1 = open("/proc/loadavg").read().split()[:3]

    def cpu_at(t):
        best = series[0][1]
        for ts, c in series:
            if ts > t:
                break
            best = c
        return best

    table_bytes = None
    reduce_cpu, map_cpu, reduce_s = [], [], []
    for t, line in lines:
        m = re.match(r"run \d+: total ([\d.]+) s \(map ([\d.]+) s, reduce ([\d.]+) s", line)
        if not m:
            continue
        total, ms, rs = map(float, m.groups())
        r = cpu_at(t) - cpu_at(t - rs)
        mm = cpu_at(t - rs) - cpu_at(t - rs - ms)
        reduce_cpu.append(r)
        map_cpu.append(mm)
        reduce_s.append(rs)
        print(f"  phase_cpu run: map {ms:.3f} s {mm:.2f} CPU-s, reduce {rs:.3f} s {r:.2f} CPU-s")
    for _, line in lines:
        m = re.search(r"table bytes (\d+)", line)
        if m:
            table_bytes = int(m.group(1))
    if not reduce_cpu or not table_bytes:
        sys.exit("phase_cpu: no runs in the output")
    gb = table_bytes / 1e9
    print(f"phase_cpu: reduce_s_median={statistics.median(reduce_s):.3f} "
          f"reduce_cpu_s_median={statistics.median(reduce_cpu):.2f} "
          f"reduce_cpu_s_per_gb={statistics.median(reduce_cpu) / gb:.3f} "
          f"map_cpu_s_per_gb={statistics.median(map_cpu) / gb:.3f} "
          f"worker_cpu_s_total={series[-1][1]:.2f} load_before={'/'.join(load0)} "
          f"load_after={'/'.join(load1)}")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
