"""test_flight_malloc.py -- our Flight client keeps the pages gRPC receives
into (src/flight/transport.c, fsh_flight_malloc_setup).

gRPC mallocs every received message's slices on the thread that reads the
socket and the reader frees them on its own; without a top pad glibc gives
the top of that thread's arena back after each burst of frees and the next
receives fault the pages in again. The check: the CLI's `flight get` of
512 MiB (128 batches of 4 MiB) from a pyarrow.flight server, its minor page
faults (wait4's rusage) with the pad (the default) against the same
command with FSH_FLIGHT_MALLOC_TOP_PAD=0 (malloc left as glibc sets it,
the reference), 3 runs each, interleaved. Measured (2 shared CPUs,
loaded): with the pad 7-13k faults, without 13-34k.

The CLI is <dir of FSH_LIB>/flightshuffle (FSH_CLI overrides)."""
import os
import statistics
import subprocess
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

CLI = Path(os.environ.get("FSH_CLI") or Path(os.environ["FSH_LIB"]).parent / "flightshuffle")

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI at {CLI}")

ROWS = 65536  # 8 int64 columns: 4 MiB a batch, as bench_flight's rows
BATCHES = 128


class BatchServer(flight.FlightServerBase):
    """DoGet: the ticket is a count n; n copies of one 4 MiB batch."""

    def __init__(self):
        super().__init__("grpc://127.0.0.1:0")
        self.batch = pa.record_batch(
            [pa.array(range(c, c + ROWS), pa.int64()) for c in range(8)],
            names=[f"c{c}" for c in range(8)])

    def do_get(self, context, ticket):
        n = int(ticket.ticket)
        return flight.GeneratorStream(self.batch.schema, (self.batch for _ in range(n)))


def get_faults(uri, env):
    """Minor page faults of one `flightshuffle flight get` of BATCHES batches."""
    p = subprocess.Popen([str(CLI), "flight", "get", uri, str(BATCHES), "-o", os.devnull],
                         env={**os.environ, **env}, stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    assert f"received {BATCHES} batches" in err, err
    return usage.ru_minflt


def test_receive_keeps_its_pages():
    env_default = {k: v for k, v in os.environ.items()}
    if "top_pad" in env_default.get("GLIBC_TUNABLES", ""):
        pytest.skip("GLIBC_TUNABLES sets top_pad: the library leaves malloc alone")
    srv = BatchServer()
    threading.Thread(target=srv.serve, daemon=True).start()
    try:
        uri = f"grpc://127.0.0.1:{srv.port}"
        padded, plain = [], []
        for _ in range(3):
            plain.append(get_faults(uri, {"FSH_FLIGHT_MALLOC_TOP_PAD": "0"}))
            padded.append(get_faults(uri, {"FSH_FLIGHT_MALLOC_TOP_PAD": ""}))
    finally:
        srv.shutdown()
    # 512 MiB is 131,072 pages: without the pad a few in ten come back as
    # faults; with it the receive path faults hardly at all beyond the
    # process's fixed cost (measured ~7k for start-up, pooled bodies, ...).
    assert statistics.median(padded) < 0.75 * statistics.median(plain), (padded, plain)
