/* wire_status.c -- errno-style codes <-> gRPC status codes, the mapping
 * flight.h documents (both directions use the same table). */
#include "wire.h"

#include <errno.h>

static const struct {
  int code;
  grpc_status_code status;
} map[] = {
    {ENOENT, GRPC_STATUS_NOT_FOUND},
    {EINVAL, GRPC_STATUS_INVALID_ARGUMENT},
    {EACCES, GRPC_STATUS_UNAUTHENTICATED},
    {EPERM, GRPC_STATUS_PERMISSION_DENIED},
    {ENOTSUP, GRPC_STATUS_UNIMPLEMENTED},
    {ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED},
    {ECANCELED, GRPC_STATUS_CANCELLED},
    {EAGAIN, GRPC_STATUS_UNAVAILABLE},
    {ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {EEXIST, GRPC_STATUS_ALREADY_EXISTS},
};

/* 0 -> OK; an unlisted code -> INTERNAL. */
grpc_status_code fsh_flight_status_from_errno(int code) {
  if (code == 0) return GRPC_STATUS_OK;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (map[i].code == code) return map[i].status;
  return GRPC_STATUS_INTERNAL;
}

/* OK -> 0; statuses outside the table -> EIO (INTERNAL, UNKNOWN, DATA_LOSS,
 * FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE). */
int fsh_flight_errno_from_status(grpc_status_code status) {
  if (status == GRPC_STATUS_OK) return 0;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (map[i].status == status) return map[i].code;
  return EIO;
}
