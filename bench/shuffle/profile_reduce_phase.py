"""profile_reduce_phase.py -- the reduce window's samples of a `perf script
-F time,ip,sym` dump of the bench's workers (profile_reduce_phase.sh), each
counted once, under the first rule its call stack matches; then the leaf
functions of what no rule matched.

    python3 profile_reduce_phase.py SCRIPT [T0 T1]

Without T0 T1 the window is found in the dump: from the first sample with
fsh_reduce_task_run on its stack (reduce tasks start after every map is
done, with merge off) to the last one with it."""
import collections
import re
import sys

XXH = ["XXH3", "XXH_INLINE_XXH3", "hashLong"]
# (name, any of these frames on the stack, and also one of these or None)
RULES = [
    # (libxxhash's dispatched XXH3 shows as [unknown]: the read_block frame decides)
    ("server: fsh_map_file_read_block (XXH3, first-touch faults, slice)", ["fsh_map_file_read_block"],
     ["get_next"]),
    ("server: bundle copy (next_bundle)", ["next_bundle"], None),
    ("server: rest of get_next (open, index, slices)", ["get_next", "fsh_worker_do_get"], None),
    ("server: locate answers", ["fsh_worker_locate"], None),
    ("server: gRPC send (srv_*, grpc write)", ["srv_do_get_produce", "srv_"], None),
    ("client: block XXH3 verify", ["feed_block", "end_block", "on_message", "block_done"], XXH),
    ("client: decode (fsh_ipc_decode_*)", ["fsh_ipc_decode_framed", "fsh_ipc_decode_message"], None),
    ("client: batch validate", ["fsh_batch_validate"], None),
    ("client: direct mmap populate", ["map_range"], None),
    ("client: direct pread", ["read_span", "direct_slot"], ["pread", "__libc_pread", "__pread"]),
    ("client: locate request", ["fr_direct_locate"], None),
    ("client: rest of direct reads", ["direct_slot", "read_span", "run_slots"], ["fr_direct", "direct_", "read_span", "same_file"]),
    ("client: DoGet receive (fetch_stream)", ["fetch_stream"], None),
    ("client: rest of the fetch job", ["fr_run_job"], None),
    ("reduce: row checksums", ["fsh_task_row_checksums"], None),
    ("reduce: rest (fr_next, queue, unref)", ["fsh_reduce_task_run"], None),
    ("gRPC / poller threads", ["grpc_", "gpr_", "cq_", "pollset", "tcp_", "fsh_flight_"], None),
]


def samples(path):
    t, frames = None, []
    for line in open(path, errors="replace"):
        m = re.match(r"^\s*\S.*?\s(\d+\.\d+):", line) or re.match(r"^\s*(\d+\.\d+):", line)
        if m:
            if t is not None:
                yield t, frames
            t, frames = float(m.group(1)), []
        elif line.strip():
            frames.append(line.strip())
    if t is not None:
        yield t, frames


def window(path):
    r0 = r1 = None
    for t, fr in samples(path):
        if any("fsh_reduce_task_run" in f for f in fr):
            r0 = t if r0 is None else r0
            r1 = t
    return r0, r1


def leaf(fr):
    if not fr:
        return "?"
    parts = fr[0].split()
    name = parts[1] if len(parts) > 1 else parts[0]
    return re.sub(r"\+0x[0-9a-f]+$", "", name)


def main():
    path = sys.argv[1]
    t0, t1 = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else window(path)
    if t0 is None:
        sys.exit("no reduce samples in " + path)
    counts, leaves, other, total = collections.Counter(), collections.Counter(), collections.Counter(), 0
    for t, fr in samples(path):
        if not t0 <= t <= t1:
            continue
        total += 1
        leaves[leaf(fr)] += 1
        for name, need, also in RULES:
            if any(n in f for f in fr for n in need) and (
                    also is None or any(a in f for f in fr for a in also)):
                counts[name] += 1
                break
        else:
            counts["other"] += 1
            other[leaf(fr)] += 1
    print(f"{total} samples in the reduce window [{t0}, {t1}] ({t1 - t0:.3f} s)")
    for name, n in counts.most_common():
        print(f"  {100.0 * n / max(total, 1):5.1f}%  {name}")
    print("top leaf functions (all samples of the window):")
    for name, n in leaves.most_common(15):
        print(f"  {100.0 * n / max(total, 1):5.1f}%  {name}")
    print("top leaf functions of 'other':")
    for name, n in other.most_common(8):
        print(f"  {100.0 * n / max(total, 1):5.1f}%  {name}")


if __name__ == "__main__":
    main()
