/* transport.c -- the gRPC channel arguments the Flight client and server
 * share: the HTTP/2 tuning of the bulk data path (bench_flight measures
 * each of them; see the comments) and keepalive, which finds a peer that is
 * gone (host down, link cut, process stopped) while a call waits on it. */
#include "flight/wire.h"

#include <stdatomic.h>

static int64_t clamp_keepalive(int64_t option) {
  if (option < 0) return -1;
  return option < 100 ? 100 : option > 86400000 ? 86400000 : option;
}

/* What keepalive_ms = 0 means in this process (fsh_flight_set_default_keepalive_ms). */
static _Atomic int64_t default_keepalive_ms = 10000;

void fsh_flight_set_default_keepalive_ms(int64_t ms) {
  atomic_store(&default_keepalive_ms, ms == 0 ? 10000 : clamp_keepalive(ms));
}

int64_t fsh_flight_keepalive_ms(int64_t option) {
  if (option == 0) return atomic_load(&default_keepalive_ms);
  return clamp_keepalive(option);
}

size_t fsh_flight_transport_args(grpc_arg *args, size_t cap, int64_t keepalive_ms, bool client) {
  size_t n = 0;
  /* A fixed 16 MiB receive window per stream instead of gRPC's BDP
   * estimator, which on loopback keeps the window small and the reads
   * tiny (8 KiB) for long stretches: DoGet 1 stream of 4 MiB batches went
   * from ~2.3 to ~3.1 GB/s and from ~0.48 to ~0.30 CPU-s/GB. The window
   * bounds what a peer may send ahead of a reader: at most 16 MiB per
   * stream is buffered for a slow consumer (plus one message). */
  static const struct {
    const char *key;
    int value;
  } tuned[] = {
      {GRPC_ARG_HTTP2_BDP_PROBE, 0},
      {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20},
  };
  for (size_t i = 0; i < sizeof tuned / sizeof tuned[0] && n < cap; i++, n++) {
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)tuned[i].key;
    args[n].value.integer = tuned[i].value;
  }
  /* Keepalive: while calls are in flight, ping the peer after keepalive_ms
   * without anything received, and fail the connection (its calls end
   * UNAVAILABLE) when an answer takes longer than keepalive_ms. Without it
   * a reducer fetching from a stopped worker, or across a cut link, waits
   * for TCP's retransmission timeout (~15 min). No pings on an idle
   * connection (no calls).
   * A client sends at most 2 pings between two frames of data (or headers)
   * received: a gRPC C++ server with default settings (pyarrow.flight's)
   * allows one ping per 5 minutes while it sends nothing, counts each
   * earlier one as a strike and after 3 strikes ends the connection with
   * GOAWAY "too_many_pings" (the stream fails UNAVAILABLE); unlimited
   * pings made every pyarrow stream that paused > ~3 keepalive intervals
   * (tests/python/test_flight_keepalive.py) fail. 2 still finds a peer
   * that stops mid-stream (the first ping goes unanswered). Our server
   * accepts pings at any interval (a client of ours or another), and
   * pings without limit. */
  const int ka = keepalive_ms > 0 && keepalive_ms < INT32_MAX ? (int)keepalive_ms : INT32_MAX;
  const struct {
    const char *key;
    int value;
  } keepalive[] = {
      {GRPC_ARG_KEEPALIVE_TIME_MS, ka},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0},
      {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, client ? 2 : 0},
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 0},
      {GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0},
  };
  for (size_t i = 0; i < sizeof keepalive / sizeof keepalive[0] && n < cap; i++, n++) {
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = (char *)keepalive[i].key;
    args[n].value.integer = keepalive[i].value;
  }
  return n;
}
