"""profile_map_phase.py -- the map window's samples of a `perf script -F
time,ip,sym` dump of the bench's workers (profile_map_phase.sh), each
counted once, under the first rule its call stack matches.

    python3 profile_map_phase.py SCRIPT [T0 T1]

Without T0 T1 the window is found in the dump: from the first sample with
fsh_map_task_run on its stack to the first with fsh_reduce_task_run (reduce
tasks start after every map is done)."""
import collections
import re
import sys

# (name, any of these frames on the stack, and also one of these or None)
RULES = [
    ("memfd write: tmpfs page allocation", ["pwrite_all"],
     ["shmem_alloc_and_add_folio", "shmem_alloc_folio", "clear_page"]),
    ("memfd write: the copy and the rest of pwrite", ["pwrite_all"], None),
    ("builder growth (fsh_realloc)", ["fsh_realloc"], None),
    ("builder resets (the writer's free: cache_put)", ["cache_put", "reset_partition"], None),
    ("fsh_kern_push_binary", ["fsh_kern_push_binary"], None),
    ("fsh_kern_push_fixed", ["fsh_kern_push_fixed"], None),
    ("count_slots", ["fsh_kern_count_slots"], None),
    ("rest of the builder append", ["fsh_partition_builder_append"], None),
    ("block XXH3 (tee_writev)", ["tee_writev"], None),
    ("block XXH3 (one call, block_digest)", ["block_digest"], None),
    ("the copy into the write stage (sink_writev)", ["sink_writev"], None),
    ("rest of write_built (layout, metadata)", ["write_built"], None),
    ("rest of the block flush (encode, concat)", ["flush_partition"], None),
    ("generator", ["fsh_synthetic_batch"], None),
    ("row checksums", ["fsh_task_row_checksums_path"], None),
    ("key hash", ["fsh_hash_columns"], None),
    ("partition ids", ["fsh_partition_hash"], None),
    ("rest of the writer's close (index)", ["fsh_map_file_writer_close"], None),
    ("rest of the map task", ["fsh_map_task_run"], None),
]


def samples(path):
    t, frames = None, []
    for line in open(path, errors="replace"):
        m = re.match(r"^\s*(\d+\.\d+):", line)
        if m:
            if t is not None:
                yield t, frames
            t, frames = float(m.group(1)), []
        elif line.strip():
            frames.append(line.strip())
    if t is not None:
        yield t, frames


def window(path):
    m0 = r0 = None
    for t, fr in samples(path):
        if m0 is None and any("fsh_map_task_run" in f for f in fr):
            m0 = t
        if r0 is None and any("fsh_reduce_task_run" in f for f in fr):
            r0 = t
    return m0, r0


def main():
    path = sys.argv[1]
    t0, t1 = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else window(path)
    if t0 is None or t1 is None:
        sys.exit("no map or reduce samples in " + path)
    counts, total = collections.Counter(), 0
    for t, fr in samples(path):
        if not t0 <= t < t1:
            continue
        total += 1
        for name, need, also in RULES:
            if any(n in f for f in fr for n in need) and (
                    also is None or any(a in f for f in fr for a in also)):
                counts[name] += 1
                break
        else:
            counts["not in a map task"] += 1
    print(f"{total} samples in the map window [{t0}, {t1})")
    for name, n in counts.most_common():
        print(f"  {100.0 * n / max(total, 1):5.1f}%  {name}")


if __name__ == "__main__":
    main()
