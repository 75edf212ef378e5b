"""threadtime.py -- per-thread time accounting of a perf sched trace
(bench/flight/OFFCPU.md, section 6).

    perf record -m 16M -a -e sched:sched_switch -e sched:sched_wakeup -o s.data -- CMD
    perf script -i s.data -F comm,pid,tid,cpu,time,event,trace > s.txt
    python3 bench/flight/threadtime.py PIDS [T0 T1] < s.txt

For each thread of the given pids (comma list; 'all' for every pid seen):
on-CPU time, run-queue wait (runnable: woken or preempted, not running)
and sleep, over the window [T0, T1] (default: first to last event of
those pids). Also the CPU time of every other process in the window
(the machine's other load). On-CPU time is counted per CPU, from one
switch to the next, so it never exceeds the CPUs even when perf lost
events; run-queue wait and sleep follow each thread's own switches and
wake-ups (approximate when events were lost)."""
import collections, re, sys
pids = None if sys.argv[1] == 'all' else set(int(x) for x in sys.argv[1].split(','))
win = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else None
ev_re = re.compile(r'\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)')
sw_re = re.compile(r'prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)')
wk_re = re.compile(r'comm=(.*?) pid=(\d+)')
evs = []
tid_pid = {}
tid_comm = {}
for line in sys.stdin:
    m = ev_re.match(line)
    if not m: continue
    comm, pid, tid, cpu, t, ev, tr = m.groups()
    tid_pid[int(tid)] = int(pid); tid_comm.setdefault(int(tid), comm)
    evs.append((float(t), ev, int(cpu), tr))
ours = lambda tid: tid != 0 and (pids is None or tid_pid.get(tid) in pids)
state = {}   # tid -> ('run'|'wait'|'sleep', since)
acc = collections.defaultdict(lambda: collections.Counter())
def enter(tid, st, t):
    old = state.get(tid)
    if old is not None:
        a, b = max(old[1], lo), min(t, hi)
        if b > a: acc[tid][old[0]] += b - a
    state[tid] = (st, t)
oncpu = {}
runacc = collections.Counter()
lo, hi = (win if win else (-1e18, 1e18))
for t, ev, cpu, tr in evs:
    if ev == 'sched:sched_switch':
        m = sw_re.search(tr)
        prev, pst, nxt = int(m.group(2)), m.group(3), int(m.group(5))
        tid_comm.setdefault(prev, m.group(1)); tid_comm.setdefault(nxt, m.group(4))
        c = oncpu.get(cpu)
        if c is not None:  # the CPU's time since its last switch: its thread ran
            a, b = max(c[1], lo), min(t, hi)
            if b > a and c[0]: runacc[c[0]] += b - a
        oncpu[cpu] = (nxt, t)
        if prev: enter(prev, 'wait' if pst.startswith('R') else 'sleep', t)
        if nxt: enter(nxt, 'run', t)
    elif ev == 'sched:sched_wakeup':
        m = wk_re.search(tr)
        w = int(m.group(2))
        if state.get(w, ('sleep',))[0] == 'sleep': enter(w, 'wait', t)
end = evs[-1][0] if evs else 0
for tid in list(state): enter(tid, state[tid][0], end)
span = (min(end, hi) - max(evs[0][0], lo)) if evs else 0
print(f"window {span*1000:.0f} ms")
tot = collections.Counter(); other = 0.0
rows = []
for tid in set(acc) | set(runacc):
    c = acc[tid]
    c['run'] = runacc[tid]  # per CPU: robust to lost events
    if ours(tid):
        rows.append((tid_pid.get(tid, 0), tid, c)); tot.update(c)
    else:
        other += c['run']
for pid, tid, c in sorted(rows):
    if c['run'] + c['wait'] < 0.002 * span: continue
    print(f"  {pid:7d} {tid:7d} {tid_comm.get(tid,'?')[:16]:16s} run {c['run']*1000:7.1f} ms ({c['run']/span*100:4.0f}%)  runq-wait {c['wait']*1000:6.1f} ms  sleep {c['sleep']*1000:7.1f} ms")
print(f"ours: {tot['run']/span:.2f} cores busy, run-queue wait {tot['wait']*1000:.0f} ms; everything else: {other/span:.2f} cores")
