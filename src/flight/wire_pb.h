/* wire_pb.h -- what the protobuf-c based codecs (wire_messages.c) share with
 * the hand-written FlightData codec (wire_flight_data.c): the allocator
 * that routes protobuf-c through fsh_malloc, and the descriptor
 * conversions. Private to the wire codecs. */
#ifndef FSH_FLIGHT_WIRE_PB_H
#define FSH_FLIGHT_WIRE_PB_H

#include "Flight.pb-c.h"
#include "wire.h"

/* protobuf-c allocations through fsh_malloc / fsh_free. */
extern ProtobufCAllocator fsh_flight_pb_allocator;

/* Fills *pb (initialised here) with views of d's fields: nothing is
 * copied, and *pb is only valid while d is. */
void fsh_flight_pb_descriptor_view(const fsh_flight_descriptor *d,
                                   Arrow__Flight__Protocol__FlightDescriptor *pb);
/* Deep copy of an unpacked descriptor into *out (zeroed first). */
FSH_NODISCARD int fsh_flight_pb_descriptor_copy(const Arrow__Flight__Protocol__FlightDescriptor *pb,
                                                fsh_flight_descriptor *out, fsh_error *err);
/* Unpacks a FlightDescriptor from contiguous bytes into *out. */
FSH_NODISCARD int fsh_flight_pb_descriptor_unpack(const uint8_t *data, size_t size,
                                                  fsh_flight_descriptor *out, fsh_error *err);

#endif
