"""ab_small_calls.py -- the table of bench/shuffle/ab_small_calls.sh's logs:
per benchmark case and metric, main's and the branch's min / median / max
over the pairs, and the median of the per-pair ratios branch / main (each
pair ran both builds back to back, so its ratio cancels most of the
machine's drifting load). bench/shuffle/NOTIFY.md, "Session 8"."""
import re, sys, statistics as st

METRICS = {
    "bench_flight": ["call_us", "call_thread_cpu_us", "open_call_close_us",
                     "open_call_close_cpu_us"],
    "bench_notify": ["baseline_thread_us", "baseline_process_us", "baseline_wall_us",
                     "delay_thread_us", "fresh_thread_us", "fresh_process_us"],
}
runs = {}  # (case, pair) -> {label: {metric: value}}
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r"pair (\d+) (main|branch) load \S+ result: (.*)", line)
        if not m:
            continue
        kv = dict(x.split("=", 1) for x in m.group(3).split() if "=" in x)
        if kv.get("verified") != "yes":
            print("not verified:", line.strip())
            continue
        name = kv["name"]
        case = name if name == "bench_flight" else \
            f"{name} delay_us={kv['delay_us']} results={kv['results']}"
        runs.setdefault((case, f, int(m.group(1))), {})[m.group(2)] = kv
cases = sorted({c for (c, _, _) in runs})
print("| case | metric | main min / median / max | branch min / median / max | branch/main (median of pairs) | pairs |")
print("|---|---|---:|---:|---:|---:|")
for case in cases:
    pairs = [v for (c, _, _), v in runs.items() if c == case and "main" in v and "branch" in v]
    for metric in METRICS[case.split()[0]]:
        a = [float(p["main"][metric]) for p in pairs]
        b = [float(p["branch"][metric]) for p in pairs]
        r = [y / x for x, y in zip(a, b) if x > 0]
        fmt = lambda v: f"{min(v):.1f} / {st.median(v):.1f} / {max(v):.1f}"
        print(f"| {case} | {metric} | {fmt(a)} | {fmt(b)} | {st.median(r):.2f} | {len(r)} |")
