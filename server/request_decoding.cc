#include "server/request_decoding.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace expertd::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 32;

// Walks one message's fields. Returns the first invalid string ("field:
// not valid UTF-8 (byte N)"); sets *malformed when the bytes are not a
// well-formed message (then protobuf must not see them: it would report a
// truncated string's bytes as bad UTF-8).
std::optional<std::string> Walk(const Descriptor* type, absl::string_view bytes,
                                const std::string& prefix, int depth, bool* malformed) {
  if (depth > kMaxDepth) {
    *malformed = true;
    return std::nullopt;
  }
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {  // the end, or a zero tag (never valid)
      if (static_cast<size_t>(in.CurrentPosition()) != bytes.size()) *malformed = true;
      return std::nullopt;
    }
    const int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const FieldDescriptor* field = type->FindFieldByNumber(number);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == nullptr || !delimited ||
        (field->type() != FieldDescriptor::TYPE_STRING &&
         field->type() != FieldDescriptor::TYPE_MESSAGE)) {
      if (!WireFormatLite::SkipField(&in, tag)) {
        *malformed = true;
        return std::nullopt;
      }
      continue;
    }
    uint32_t length = 0;
    std::string value;
    if (!in.ReadVarint32(&length) || length > bytes.size() ||
        !in.ReadString(&value, static_cast<int>(length))) {
      *malformed = true;
      return std::nullopt;
    }
    const std::string name = prefix + field->name();
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (std::optional<size_t> bad = FirstInvalidUtf8(value)) {
        return absl::StrCat(name, ": not valid UTF-8 (byte ", *bad, ")");
      }
    } else {
      std::optional<std::string> inner =
          Walk(field->message_type(), value, name + ".", depth + 1, malformed);
      if (inner.has_value() || *malformed) return inner;
    }
  }
}

absl::Status NotAMessage(const Descriptor* type) {
  return absl::InvalidArgumentError(
      absl::StrCat("the request is not a valid ", type->full_name(), " message"));
}

}  // namespace

std::optional<size_t> FirstInvalidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;  // truncated sequence
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return i;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::nullopt;
}

std::optional<std::string> FindInvalidUtf8Field(const Descriptor* type, absl::string_view bytes) {
  bool malformed = false;
  return Walk(type, bytes, "", 0, &malformed);
}

absl::Status DecodeMessage(absl::string_view bytes, google::protobuf::Message* message) {
  bool malformed = false;
  if (std::optional<std::string> bad = Walk(message->GetDescriptor(), bytes, "", 0, &malformed)) {
    return absl::InvalidArgumentError(*bad);
  }
  if (malformed || !message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return NotAMessage(message->GetDescriptor());
  }
  return absl::OkStatus();
}

}  // namespace expertd::server
