#include "server/request_decoding.h"

#include "gtest/gtest.h"
#include "proto/expertd.pb.h"

namespace expertd::server {
namespace {

// Proto3 refuses invalid UTF-8 in string fields at serialization too, so the
// bad bytes are spliced into the wire form of a message holding a valid
// placeholder of the same length.
std::string WithBytesReplaced(const std::string& wire, const std::string& placeholder,
                              const std::string& bad) {
  std::string out = wire;
  const size_t at = out.find(placeholder);
  EXPECT_NE(at, std::string::npos);
  out.replace(at, placeholder.size(), bad);
  return out;
}

TEST(RequestDecodingTest, FirstInvalidUtf8) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("bad \xFF utf-8"), 4u);
  EXPECT_EQ(FirstInvalidUtf8(std::string("a\xC3", 2)), 1u);  // truncated
  EXPECT_EQ(FirstInvalidUtf8("ab\xC0\xAF"), 2u);             // overlong
  EXPECT_EQ(FirstInvalidUtf8("abc\xED\xA0\x80"), 3u);        // surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);       // > U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xE2\x82"), 0u);
}

TEST(RequestDecodingTest, InvalidUtf8InTextIsNamedWithItsOffset) {
  v1::GenerateRequest req;
  req.set_text("hello PLACEHOLDER!");
  req.mutable_stopping()->set_max_new_tokens(4);
  const std::string wire =
      WithBytesReplaced(req.SerializeAsString(), "PLACEHOLDER", "wor\xFFld\xFE\xFE\xFE\xFE\xFE");
  v1::GenerateRequest out;
  absl::Status s = DecodeMessage(wire, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "text: not valid UTF-8 (byte 9)");
}

TEST(RequestDecodingTest, InvalidUtf8InANestedStopString) {
  v1::GenerateRequest req;
  req.mutable_token_ids()->add_ids(5);
  req.mutable_stopping()->add_stop("fine");
  req.mutable_stopping()->add_stop("XYZ");
  const std::string wire = WithBytesReplaced(req.SerializeAsString(), "XYZ", "a\x80z");
  v1::GenerateRequest out;
  absl::Status s = DecodeMessage(wire, &out);
  EXPECT_EQ(s.message(), "stopping.stop: not valid UTF-8 (byte 1)");
}

TEST(RequestDecodingTest, ValidAndMalformedMessages) {
  v1::GenerateRequest req;
  req.set_text("h\xC3\xA9llo");
  req.set_request_id("abc");
  v1::GenerateRequest out;
  ASSERT_TRUE(DecodeMessage(req.SerializeAsString(), &out).ok());
  EXPECT_EQ(out.text(), req.text());
  EXPECT_EQ(out.request_id(), "abc");
  absl::Status s = DecodeMessage(std::string("\x12\x40short", 7), &out);  // length past the end
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expertd.v1.GenerateRequest"), std::string::npos) << s;
  EXPECT_TRUE(DecodeMessage("", &out).ok());  // the empty message is valid protobuf
}

}  // namespace
}  // namespace expertd::server
