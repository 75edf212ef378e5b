"""offcpu.py -- where the threads of bench_flight's processes sleep.

Reads `perf script -F comm,pid,tid,time,event,trace,ip,sym` of a
`perf record -e sched:sched_switch -e sched:sched_wakeup -g` run and prints,
per thread of the given pids that slept >= 50 times: how often and how long
it slept (voluntary switches: state S or D), in which call (the first user
frame above the syscall: epoll_wait = a poller, futex = a condition
variable / completion queue wait), and which threads woke it.
See OFFCPU.md beside this file.

    python3 bench/flight/offcpu.py PID,PID < perf-script.txt
"""
import collections
import re
import sys
# perf script -F pid,tid,comm,time,event,trace,sym  (with -g)
ev=None; recs=[]
cur=None
def flush():
    if cur: recs.append(cur)
for line in sys.stdin:
    if not line.strip():
        continue
    if not line.startswith('\t'):
        flush()
        m=re.match(r'\s*(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)',line)
        if not m: cur=None; continue
        cur=dict(comm=m.group(1),pid=int(m.group(2)),tid=int(m.group(3)),t=float(m.group(4)),ev=m.group(5),trace=m.group(6),stack=[])
    else:
        if cur is not None:
            parts=line.split(None,1)
            cur['stack'].append(parts[1].strip() if len(parts)>1 else '')
flush()
pids=set(int(x) for x in sys.argv[1].split(','))
# role of a thread from stacks
role={}
def upath(st):
    seen=False; out=[]
    for f in st:
        if 'entry_SYSCALL' in f: seen=True; continue
        if seen and f and 'unknown' not in f: out.append(f)
    return out
sleep_start={}
sleep=collections.defaultdict(lambda: collections.Counter())
sleepn=collections.defaultdict(lambda: collections.Counter())
names={}
tids_pid={}
wakers=collections.defaultdict(collections.Counter)
t0=t1=None
for r in recs:
    if r['ev']=='sched:sched_switch':
        m=re.search(r'prev_pid=(\d+).*prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+)',r['trace'])
        prev=int(m.group(1)); st=m.group(2); nxt=int(m.group(4))
        if r['pid'] in pids and prev==r['tid'] and st.startswith(('S','D')):
            up=upath(r['stack'])
            key=(up[0] if up else '?')
            # classify role: innermost frame from our lib or grpc loop
            rl=None
            for f in up:
                if any(k in f for k in ('poller_main','srv_worker_main','pluck_within','fsh_flight_reader','get_one','stream_main','do_get','worker')):
                    rl=f; break
            role.setdefault(r['tid'],collections.Counter())[rl or '/'.join(up[:4])]+=1
            sleep_start[r['tid']]=(r['t'],key)
            tids_pid[r['tid']]=r['pid']
        if nxt in sleep_start:
            ts,key=sleep_start.pop(nxt)
            sleep[nxt][key]+=r['t']-ts; sleepn[nxt][key]+=1
    elif r['ev']=='sched:sched_wakeup':
        m=re.search(r'pid=(\d+)',r['trace'])
        wk=int(m.group(1))
        if r['pid'] in pids: wakers[wk][r['tid']]+=1
for tid in sorted(sleep, key=lambda t:(tids_pid[t],t)):
    tot=sum(sleep[tid].values()); n=sum(sleepn[tid].values())
    if n<50: continue
    print(f"pid {tids_pid[tid]} tid {tid} role {role[tid].most_common(1)[0][0][:60]}: sleeps {n}, {tot*1000:.0f} ms off-cpu")
    for k,v in sleep[tid].most_common(4):
        print(f"     in {k[:50]:50s} n={sleepn[tid][k]:6d} {v*1000:8.1f} ms  avg {v/sleepn[tid][k]*1e6:7.0f} us")
    w=wakers[tid].most_common(4)
    print("     woken by tids:",w)
