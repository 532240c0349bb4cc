// Decoding a GenerateRequest from the wire ourselves (the service takes the
// raw bytes), so that a request the protobuf runtime would refuse gets a
// useful answer instead of gRPC's bare UNIMPLEMENTED/INTERNAL:
//   - invalid UTF-8 in a string field (proto3 requires UTF-8; the runtime
//     refuses the whole message and logs a non-JSON line) -> INVALID_ARGUMENT
//     naming the field and the byte offset of the first bad byte;
//   - bytes that are not a GenerateRequest -> INVALID_ARGUMENT.
// Bytes from the network: every input is decoded or refused, never trusted.
#ifndef EXPERTD_SERVER_REQUEST_DECODING_H_
#define EXPERTD_SERVER_REQUEST_DECODING_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace expertd::server {

// Offset of the first byte that breaks RFC 3629 UTF-8 (overlongs,
// surrogates and code points past U+10FFFF are invalid); nullopt when valid.
std::optional<size_t> FirstInvalidUtf8(absl::string_view s);

// Walks the wire format of `bytes` as a message of type `type` and finds the
// first string field (nested messages included) holding invalid UTF-8.
// Returns e.g. "text: not valid UTF-8 (byte 17)" or
// "stopping.stop: not valid UTF-8 (byte 3)"; nullopt when every string is
// valid or the bytes are not well-formed enough to tell.
std::optional<std::string> FindInvalidUtf8Field(const google::protobuf::Descriptor* type,
                                                absl::string_view bytes);

// Parses `bytes` into `message` (no UTF-8 error is logged by protobuf: the
// strings are checked first). INVALID_ARGUMENT on failure, with the reason.
absl::Status DecodeMessage(absl::string_view bytes, google::protobuf::Message* message);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_REQUEST_DECODING_H_
