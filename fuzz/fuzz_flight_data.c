/* fuzz_flight_data.c -- libFuzzer target: the input is one FlightData
 * message as received from the wire. It is decoded by the hand-written
 * codec (varints, lengths, wire types, unknown fields, the descriptor
 * through protobuf-c); when that succeeds and there is a data_header, the
 * IPC Message flatbuffer in it is peeked (verified). Errors are expected;
 * crashes, leaks and out-of-bounds reads are bugs. */
#include "flight/wire.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fsh_error err;
  fsh_flight_message m;
  if (fsh_flight_data_decode_bytes(data, size, &m, &err) == 0) {
    if (m.metadata) {
      fsh_ipc_message_type type;
      int64_t body_length;
      if (fsh_ipc_peek_message(m.metadata, &type, &body_length, &err) == 0) {
        /* what a reader checks next: the announced body is what came */
        (void)(m.body ? body_length == m.body->size : body_length == 0);
      }
    }
    fsh_flight_message_reset(&m);
  }
  return 0;
}
