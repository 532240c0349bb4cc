// TextStreamer: turns a request's generated token ids into UTF-8-safe text
// deltas (the tokenizer's streaming detokenizer behind a small interface, so
// the scheduler does not depend on the tokenizer's types).
#ifndef EXPERTD_SERVER_TEXT_STREAMER_H_
#define EXPERTD_SERVER_TEXT_STREAMER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace expertd::server {

class TextStreamer {
 public:
  virtual ~TextStreamer() = default;
  // The text that token `id` completes (may be empty while a character is
  // incomplete). Concatenated deltas + Flush() == the full decode.
  virtual std::string Push(int32_t id) = 0;
  virtual std::string Flush() = 0;
};

using TextStreamerFactory = std::function<std::unique_ptr<TextStreamer>(bool skip_special_tokens)>;

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_TEXT_STREAMER_H_
