"""bench_flight_pyarrow.py -- the pyarrow.flight (Arrow C++) side of
bench_flight: DoGet throughput of the reference implementation on loopback,
pyarrow client <- pyarrow server, with the same shape of data as
bench_flight serves (int64 keys, float64 values with ~1% nulls, short utf8
names; batches of --batch-rows rows, 8 distinct ones cycled), and, with
--our-uri, pyarrow's client reading from OUR server (bench_flight's, whose
ticket is the number of batches; --our-batches and --our-bytes say how many
and how many bytes they make).

bench_flight runs this itself; alone:
    .venv/bin/python bench/flight/bench_flight_pyarrow.py --bytes 1e9 --runs 5

Prints min / median / max per line, then (GB/s)
    result: pyarrow_min= pyarrow_med= pyarrow_max= pyclient_ours_min= ..."""
import argparse
import statistics
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

K = 8


def make_batches(rows):
    out = []
    for k in range(K):
        ids = pa.array(range(k * rows, (k + 1) * rows), pa.int64())
        keys = pc.bit_wise_and(pc.multiply(ids, 2654435761), (1 << 20) - 1)
        values = pc.if_else(pc.equal(pc.bit_wise_and(ids, 127), 0), None,
                            pc.divide(pc.cast(ids, pa.float64()), 7.0))
        names = pc.binary_join_element_wise("name-", pc.cast(keys, pa.string()), "")
        names = pc.if_else(pc.equal(pc.bit_wise_and(ids, 101), 5), None, names)
        out.append(pa.record_batch([keys, values, names], names=["key", "value", "name"]))
    return out


def wire_size(b):
    return b.serialize().size


class Server(flight.FlightServerBase):
    def __init__(self, batches):
        super().__init__("grpc://127.0.0.1:0")
        self.batches = batches

    def do_get(self, context, ticket):
        n = int(ticket.ticket.decode())
        t = pa.Table.from_batches([self.batches[i % K] for i in range(n)])  # no copies
        return flight.RecordBatchStream(t)


def drain(client, n):
    reader = client.do_get(flight.Ticket(str(n).encode()))
    got = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        got += chunk.data.num_rows
    return got


def measure(uri, n, rows, runs, total_bytes):
    client = flight.connect(uri)
    assert drain(client, min(n, 8)) == min(n, 8) * rows  # warm-up and check
    secs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got = drain(client, n)
        secs.append(time.perf_counter() - t0)
        assert got == n * rows, (got, n * rows)
    client.close()
    gbps = sorted(total_bytes / s / 1e9 for s in secs)
    return gbps[0], statistics.median(gbps), gbps[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=float, default=1 << 30)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch-rows", type=int, default=131072)
    ap.add_argument("--our-uri")
    ap.add_argument("--our-batches", type=int, help="batches to ask our server for")
    ap.add_argument("--our-bytes", type=float, help="the bytes they make on the wire")
    a = ap.parse_args()
    batches = make_batches(a.batch_rows)
    sizes = [wire_size(b) for b in batches]
    n = max(1, int(a.bytes / (sum(sizes) / K)))
    total = sum(sizes[i % K] for i in range(n))
    server = Server(batches)
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        mn, med, mx = measure(f"grpc://127.0.0.1:{server.port}", n, a.batch_rows, a.runs, total)
    finally:
        server.shutdown()
    print(f"  {'pyarrow.flight DoGet, 1 stream':40s} {mn:6.2f} {med:6.2f} {mx:6.2f} GB/s"
          f"   ({n} batches, {total / 1e6:.0f} MB)")
    omn = ours = omx = 0.0
    if a.our_uri:
        omn, ours, omx = measure(a.our_uri, a.our_batches or n, a.batch_rows, a.runs,
                                 a.our_bytes or total)
        print(f"  {'pyarrow client <- our server':40s} {omn:6.2f} {ours:6.2f} {omx:6.2f} GB/s")
    print(f"result: pyarrow_min={mn:.3f} pyarrow_med={med:.3f} pyarrow_max={mx:.3f} "
          f"pyclient_ours_min={omn:.3f} pyclient_ours_med={ours:.3f} "
          f"pyclient_ours_max={omx:.3f}", flush=True)


if __name__ == "__main__":
    main()
