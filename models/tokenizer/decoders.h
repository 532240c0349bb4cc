// Decoders of tokenizer.json ("decoder"): ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace, WordPiece, BPEDecoder and Sequence. Each maps the
// list of token strings to a new list (HF decode_chain); the final text is the
// concatenation.
#ifndef EXPERTD_MODELS_TOKENIZER_DECODERS_H_
#define EXPERTD_MODELS_TOKENIZER_DECODERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Thread-safe (const, stateless).
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
  // True if the decoder (or a part of a Sequence) is ByteFallback.
  virtual bool HasByteFallback() const { return false; }
  // True if the last token decodes differently from the others (BPEDecoder),
  // so a streaming decoder must hold its text back.
  virtual bool HasLastTokenRule() const { return false; }
};

// Null JSON yields nullptr (HF then joins tokens with spaces). Unknown types are
// InvalidArgument errors naming the type.
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j);

// Rust's String::from_utf8_lossy (also unicode::SanitizeUtf8).
std::string Utf8Lossy(const std::string& bytes);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_DECODERS_H_
