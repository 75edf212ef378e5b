"""ab_summary.py -- the table of bench/flight/ab_pairs.sh's lines (one or
more logs): per pair and row, main's and the branch's medians, ratio to
pyarrow, CPU s/GB and cores (CPU x GB/s); then min / median / max per row
and binary. bench/flight/OFFCPU.md, section 6."""
import re, sys, statistics as st
rows = {}
lines = []
for f in sys.argv[1:]:
    for l in open(f):
        m = re.match(r'pair (\d+) (\S+) (\S+) load (\S+)-(\S+) ours (\S+)/(\S+)/(\S+) pa (\S+)/(\S+)/(\S+) ratio (\S+)x cpu ours (\S+) pa (\S+)', l)
        if not m: continue
        p, row, lab, l0, l1, omin, omed, omax, pmin, pmed, pmax, ratio, cpu, pcpu = m.groups()
        lines.append((f, int(p), row, lab, l0, l1, float(omed), float(pmed), float(ratio), float(cpu), float(pcpu)))
print("| row | run | load | main: ours / pa GB/s, ratio, CPU s/GB, cores | branch: ours / pa GB/s, ratio, CPU s/GB, cores |")
print("|---|---|---|---|---|")
agg = {}
for row in ("get1S", "get4S"):
    k = 0
    pairs = {}
    for (f, p, r, lab, l0, l1, om, pm, ra, cpu, pc) in lines:
        if r != row: continue
        pairs.setdefault((f, p), {})[lab] = (l0, l1, om, pm, ra, cpu, pc)
    for key in pairs:
        k += 1
        d = pairs[key]
        cell = lambda x: f"{x[2]:.2f} / {x[3]:.2f}, {x[4]:.2f}x, {x[5]:.3f}, {x[2]*x[5]:.2f}"
        print(f"| {'doget1_4m' if row=='get1S' else 'doget4_4m'} | {k} | {min(d['main'][0], d['branch'][0])}-{max(d['main'][1], d['branch'][1])} | {cell(d['main'])} | {cell(d['branch'])} |")
        for lab in ('main', 'branch'):
            agg.setdefault((row, lab), []).append(d[lab])
print()
for (row, lab), v in agg.items():
    r = [x[4] for x in v]; c = [x[5] for x in v]; cores = [x[2]*x[5] for x in v]
    print(f"{row} {lab}: ratio min/median/max {min(r):.2f} / {st.median(r):.2f} / {max(r):.2f}; CPU s/GB median {st.median(c):.3f} (min {min(c):.3f} max {max(c):.3f}); cores median {st.median(cores):.2f}")
