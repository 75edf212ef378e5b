"""arg_summary.py -- tables of bench/flight/arg_sweep.sh's logs (OFFCPU.md,
session 8).

    python3 bench/flight/arg_summary.py LOG...            per row and variant:
        ours / pyarrow GB/s, ratio, CPU s/GB (ours, both ends), faults/GB;
        min / median / max over the rounds
    python3 bench/flight/arg_summary.py --paired VAR LOG...   per row: VAR
        against "base" of the same round (and log): in how many rounds VAR's
        CPU s/GB was lower, VAR/base of CPU s/GB and of the ratio to pyarrow
"""
import re
import statistics as st
import sys


def parse(files):
    """{(file, round, row): {variant: {ours, pa, ratio, cpu, pf}}}"""
    runs = {}
    for f in files:
        cur = None
        sect = 'g'
        for l in open(f):
            m = re.match(r'=== round (\d+) (?:rows \S+ )?variant (\S+)', l)
            if m:
                cur = (int(m.group(1)), m.group(2))
                sect = 'g'
                continue
            if cur is None:
                continue
            if l.startswith('  CPU seconds'):
                sect = 'c'
                continue
            if l.startswith('  page faults'):
                sect = 'p'
                continue
            m = re.match(r'  (Do(?:Get|Put) \d+ streams? +\d+ MiB)\s+(.*)', l)
            if not m:
                continue
            row = re.sub(r'\s+', ' ', m.group(1))
            rest = m.group(2).split()
            d = runs.setdefault((f, cur[0], row), {}).setdefault(cur[1], {})
            if sect == 'g':  # raw TCP x3, ours x3, pyarrow x3 (or -), ours/TCP, ours/pa
                d['ours'] = float(rest[4])
                d['pa'] = float(rest[7]) if rest[7] != '-' else float('nan')
                d['ratio'] = float(rest[-1].rstrip('x')) if rest[-1] != '-' else float('nan')
            elif sect == 'c':
                d['cpu'] = float(rest[1])
            else:
                d['pf'] = int(rest[1])
    return runs


def mmm(xs, fmt='.2f'):
    xs = [x for x in xs if x == x]
    if not xs:
        return '-'
    return f"{min(xs):{fmt}} / {st.median(xs):{fmt}} / {max(xs):{fmt}}"


def main():
    args = sys.argv[1:]
    paired = None
    if args and args[0] == '--paired':
        paired, args = args[1], args[2:]
    runs = parse(args)
    rows = []
    variants = []
    for (_, _, row), d in sorted(runs.items(), key=lambda kv: kv[0][1]):
        if row not in rows:
            rows.append(row)
        for v in d:
            if v not in variants:
                variants.append(v)
    if paired:
        print(f"| row | pairs | {paired}'s CPU lower | CPU s/GB {paired}/base min / median / max "
              f"| ratio to pyarrow {paired}/base min / median / max |")
        print("|---|---|---|---|---|")
        for r in rows:
            cr, rr = [], []
            for k, d in runs.items():
                if k[2] == r and 'base' in d and paired in d:
                    cr.append(d[paired]['cpu'] / d['base']['cpu'])
                    rr.append(d[paired]['ratio'] / d['base']['ratio'])
            if cr:
                print(f"| {r} | {len(cr)} | {sum(1 for x in cr if x < 1)} | {mmm(cr)} | {mmm(rr)} |")
        return
    for r in rows:
        print(f"{r}: min / median / max over the rounds")
        print("| variant | runs | ours GB/s | pyarrow GB/s | ours/pa | CPU s/GB ours | faults/GB median |")
        print("|---|---|---|---|---|---|---|")
        for v in variants:
            d = [x[v] for k, x in runs.items() if k[2] == r and v in x]
            if d:
                print(f"| {v} | {len(d)} | {mmm([x['ours'] for x in d])} | {mmm([x['pa'] for x in d])} | "
                      f"{mmm([x['ratio'] for x in d])} | {mmm([x['cpu'] for x in d], '.3f')} | "
                      f"{st.median([x.get('pf', 0) for x in d]):.0f} |")
        print()


main()
