// Fuzz target: tokenizer.json (Hugging Face tokenizers' format) loading, and
// encode/decode with whatever tokenizer a file describes.
#include <cstdint>
#include <string>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using expertd::models::Tokenizer;
  auto tok = Tokenizer::LoadFromJson(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!tok.ok()) {
    FUZZ_REQUIRE(!tok.status().message().empty());
    return 0;
  }
  for (const char* text : {"Hello, world! 123", " \xC3\xA9t\xC3\xA9\n\t  <|endoftext|>", ""}) {
    auto ids = (*tok)->Encode(text, /*add_special_tokens=*/true);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) FUZZ_REQUIRE((*tok)->IsValidId(id));
    auto back = (*tok)->Decode(*ids, /*skip_special_tokens=*/false);
    (void)back;
  }
  return 0;
}
