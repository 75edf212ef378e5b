"""bench_flight_pyarrow.py -- the pyarrow.flight (Arrow C++) side of
bench_flight: pyarrow's own Flight server and client on loopback moving the
same data as bench_flight's rows (8 non-null int64 columns, column c row i
= i * (c + 1) + c; batches of --small-rows and --large-rows rows). As on
our side, the server is a process of its own (this script with
--serve-only) and the clients live in this one.

bench_flight runs this with --serve-commands and drives it over stdin, one
command a line, one answer a line:
    hello                      -> ok
    get|put <streams> S|L <n>  -> ok <seconds> <cpu seconds> <page faults>
    ping 0|1 <n> <runs>        -> ok <microseconds per call>
(cpu: user + system time of this process, server and client, over the run;
page faults: minor + major, the same two processes)
n batches of the small (S) or large (L) size in total, over <streams>
concurrent streams, each on its own client (channel) and thread, moving
n / streams batches. DoGet clients read every batch (read_chunk); the
DoPut server reads every batch (read_chunk). ping: DoAction "ping" n times
on an open client (0) or on a client connected and closed for it (1),
median of runs rounds.

Alone, for a quick look:
    .venv/bin/python bench/flight/bench_flight_pyarrow.py --runs 5
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

STREAMS = 4


def make_data(cols, small_rows, large_rows):
    base = pa.array(range(large_rows), pa.int64())
    columns = [pc.add(pc.multiply(base, c + 1), c) for c in range(cols)]
    schema = pa.schema([pa.field(f"c{c}", pa.int64(), nullable=False) for c in range(cols)])
    large = pa.record_batch(columns, schema=schema)
    small = [large.slice(i * small_rows, small_rows) for i in range(large_rows // small_rows)]
    return schema, small, large


class Batches:
    def __init__(self, schema, small, large):
        self.schema, self.small, self.large = schema, small, large

    def batches(self, kind, n):
        if kind == "L":
            return [self.large] * n
        return [self.small[i % len(self.small)] for i in range(n)]


class Server(flight.FlightServerBase, Batches):
    def __init__(self, schema, small, large):
        flight.FlightServerBase.__init__(self, "grpc://127.0.0.1:0")
        Batches.__init__(self, schema, small, large)

    def do_get(self, context, ticket):
        t = ticket.ticket.decode()
        return flight.RecordBatchStream(
            pa.Table.from_batches(self.batches(t[0], int(t[1:])), schema=self.schema))

    def do_action(self, context, action):
        if action.type != "ping":
            raise flight.FlightServerError(f"unknown action {action.type}")
        return [flight.Result(b"pong")]

    def do_put(self, context, descriptor, reader, writer):
        got = 0
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            got += 1
        want = int(descriptor.command.decode()[1:])
        if got != want:
            raise flight.FlightServerError(f"got {got} batches, expected {want}")


def get_one(client, kind, n, rows, out, i):
    reader = client.do_get(flight.Ticket(f"{kind}{n}".encode()))
    got = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        got += chunk.data.num_rows
    out[i] = got == n * rows


def put_one(client, schema, batches, out, i):
    writer, _ = client.do_put(flight.FlightDescriptor.for_command(batches.tag.encode()), schema)
    for b in batches:
        writer.write_batch(b)
    writer.close()
    out[i] = True


def ping(client):
    res = list(client.do_action(flight.Action("ping", b"")))
    if len(res) != 1 or res[0].body.to_pybytes() != b"pong":
        raise RuntimeError("ping: not pong")


def small_call_us(uri, open_close, n, runs, keep):
    """Microseconds per call, median of runs rounds of n: a DoAction on an
    open client, or a client connected, pinged once and closed."""
    per = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            if open_close:
                c = flight.connect(uri)
                ping(c)
                c.close()
            else:
                ping(keep)
        per.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(per)


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_seconds(pid):
    """User + system seconds of another process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def faults():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt + r.ru_majflt


def proc_faults(pid):
    """Minor + major page faults of another process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[7]) + int(fields[9])


class Tagged(list):
    tag = ""


def run(clients, server, op, streams, kind, n, rows):
    per = n // streams
    out = [False] * streams
    threads = []
    for i in range(streams):
        if op == "get":
            t = threading.Thread(target=get_one, args=(clients[i], kind, per, rows, out, i))
        else:
            batches = Tagged(server.batches(kind, per))
            batches.tag = f"{kind}{per}"
            t = threading.Thread(target=put_one, args=(clients[i], server.schema, batches, out, i))
        threads.append(t)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    if not all(out):
        raise RuntimeError(f"{op} {streams} {kind} {n}: a stream failed")
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-commands", action="store_true")
    ap.add_argument("--serve-only", action="store_true", help="be the server process")
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--small-rows", type=int, default=65536)
    ap.add_argument("--large-rows", type=int, default=1048576)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=float, default=1024)
    a = ap.parse_args()
    schema, small, large = make_data(a.cols, a.small_rows, a.large_rows)
    if a.serve_only:  # the server process
        server = Server(schema, small, large)
        print(f"port {server.port}", flush=True)
        threading.Thread(target=server.serve, daemon=True).start()
        sys.stdin.read()  # until the parent closes our stdin
        server.shutdown()
        return
    proc = subprocess.Popen([sys.executable, __file__, "--serve-only", "--cols", str(a.cols),
                             "--small-rows", str(a.small_rows), "--large-rows",
                             str(a.large_rows)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    port = int(proc.stdout.readline().split()[1])
    server = Batches(schema, small, large)
    uri = f"grpc://127.0.0.1:{port}"
    clients = [flight.connect(uri) for _ in range(STREAMS)]
    rows = {"S": a.small_rows, "L": a.large_rows}
    try:
        if a.serve_commands:
            for line in sys.stdin:
                w = line.split()
                if not w:
                    continue
                try:
                    if w[0] == "hello":
                        print("ok", flush=True)
                    elif w[0] == "ping":  # ping <open_close 0|1> <n> <runs>
                        ping(clients[0])
                        us = small_call_us(uri, w[1] == "1", int(w[2]), int(w[3]), clients[0])
                        print(f"ok {us:.3f}", flush=True)
                    else:
                        op, streams, kind, n = w[0], int(w[1]), w[2], int(w[3])
                        cpu0 = cpu_seconds() + proc_cpu_seconds(proc.pid)
                        flt0 = faults() + proc_faults(proc.pid)
                        secs = run(clients, server, op, streams, kind, n, rows[kind])
                        cpu = cpu_seconds() + proc_cpu_seconds(proc.pid) - cpu0
                        flt = faults() + proc_faults(proc.pid) - flt0
                        print(f"ok {secs:.6f} {cpu:.6f} {flt}", flush=True)
                except Exception as e:  # report, keep serving
                    print(f"error {e!r}", flush=True)
        else:
            for op in ("get", "put"):
                for streams in (1, STREAMS):
                    for kind in ("S", "L"):
                        mb = 4 if kind == "S" else 64
                        n = max(STREAMS, int(a.mib / mb) // STREAMS * STREAMS)
                        nbytes = n * large.nbytes * (a.small_rows if kind == "S" else a.large_rows) / a.large_rows
                        secs = [run(clients, server, op, streams, kind, n, rows[kind])
                                for _ in range(a.runs)]
                        gbps = sorted(nbytes / s / 1e9 for s in secs)
                        print(f"  {op} {streams} {kind}: {gbps[0]:.2f} "
                              f"{statistics.median(gbps):.2f} {gbps[-1]:.2f} GB/s")
    finally:
        for c in clients:
            c.close()
        proc.stdin.close()
        proc.wait()


if __name__ == "__main__":
    main()
