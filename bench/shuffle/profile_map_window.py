"""profile_map_window.py -- who spends the map window's worker CPU at
1000 x 1000 with the pre-shuffle merge on (bench/shuffle/PROFILE_1000.md,
session 7b): each sample of a profile_map_phase.sh `.script` dump in the
map window is counted once as a map task (fsh_map_task_run on its stack),
a merge (fsh_shuffle_store_merge) or another thread (task-done RPCs, gRPC
polling...); then the merge's samples by the first rule they match.

    python3 bench/shuffle/profile_map_window.py OUT.script

(profile_map_phase.py's rules split the map tasks' own samples.)"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_map_phase import samples, window  # noqa: E402

# (name, any of these on the stack, and also one of these or None); the
# merge's input verify (get_block) is inlined: its XXH3 frame is the sign
MERGE_RULES = [
    ("input verify: page faults on the parts' mapped images", ["XXH3", "libxxhash"],
     ["asm_exc_page_fault"]),
    ("input verify: XXH3 (get_block)", ["XXH3", "libxxhash"], None),
    ("output memfd write: fresh tmpfs pages", ["pwrite_all"],
     ["shmem_alloc_and_add_folio", "shmem_alloc_folio", "clear_page"]),
    ("output memfd write: the copy and the rest", ["pwrite_all"], None),
    ("decode input blocks (fsh_ipc_decode_framed)", ["fsh_ipc_decode_framed"], None),
    ("concat of the decoded batches", ["concat_", "copy_bits", "fsh_concat"], None),
    ("rest of the output flush (encode, block list)", ["flush_partition"], None),
    ("parts dropped: munmap of their images", ["fsh_store_drop"], None),
    ("parts opened (index, mapping)", ["open_part", "fsh_store_open"], None),
    ("rest of the merge", ["fsh_shuffle_store_merge"], None),
]
OTHER_RULES = [
    ("task-done notifications (fsh_sched_notify_task_done RPCs)", ["fsh_sched_notify_task_done"]),
    ("gRPC polling / executor threads", ["grpc_"]),
    ("task start", ["fsh_worker_tasks_start"]),
]


def main():
    path = sys.argv[1]
    t0, t1 = window(path)
    if t0 is None or t1 is None:
        sys.exit("no map or reduce samples in " + path)
    top, merge, total = collections.Counter(), collections.Counter(), 0
    for t, fr in samples(path):
        if not t0 <= t < t1:
            continue
        total += 1
        s = " ".join(fr)
        if "fsh_map_task_run" in s:
            top["map tasks"] += 1
        elif "fsh_shuffle_store_merge" in s:
            top["merges"] += 1
            for name, need, also in MERGE_RULES:
                if any(n in s for n in need) and (also is None or any(a in s for a in also)):
                    merge[name] += 1
                    break
        else:
            for name, need in OTHER_RULES:
                if any(n in s for n in need):
                    top["other threads: " + name] += 1
                    break
            else:
                top["other threads: the rest"] += 1
    print(f"{total} samples in the map window [{t0}, {t1})")
    for name, n in top.most_common():
        print(f"  {100.0 * n / max(total, 1):5.1f}%  {n:6d}  {name}")
    m = max(top["merges"], 1)
    print(f"the merges' {top['merges']} samples:")
    for name, n in merge.most_common():
        print(f"  {100.0 * n / m:5.1f}%  {n:6d}  {name}")


if __name__ == "__main__":
    main()
