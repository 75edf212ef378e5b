/* transport.c -- the gRPC channel arguments the Flight client and server
 * share: the HTTP/2 tuning of the bulk data path (bench_flight measures
 * each of them; see the comments). */
#include "flight/wire.h"

size_t fsh_flight_transport_args(grpc_arg *args, size_t cap) {
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
  return n;
}
