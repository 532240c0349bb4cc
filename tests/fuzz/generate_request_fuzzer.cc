// Fuzz target: a GenerateRequest from the wire through everything the
// daemon does before the engine: decoding (UTF-8 checks), field validation
// with a byte tokenizer, stop-string matching over a generated text, and
// sampling with the validated parameters.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/expertd.pb.h"
#include "server/generation_request.h"
#include "server/request_decoding.h"
#include "server/stop_matcher.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace expertd;

// One id per byte: every text tokenizes, and prompt length follows size.
absl::StatusOr<std::vector<int32_t>> ByteTokenizer(const std::string& text, bool) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

void SampleAFewTokens(const server::GenerationRequest& r) {
  engine::SamplingParams p;
  p.seed = r.sampling.seed;
  p.temperature = r.sampling.temperature;
  p.top_k = r.sampling.top_k;
  p.top_p = r.sampling.top_p;
  p.min_p = r.sampling.min_p;
  p.repetition_penalty = r.sampling.repetition_penalty;
  p.presence_penalty = r.sampling.presence_penalty;
  p.frequency_penalty = r.sampling.frequency_penalty;
  p.logprobs = r.logprobs;
  p.top_logprobs = r.logprobs ? r.top_logprobs : 0;
  FUZZ_REQUIRE(engine::ValidateSamplingParams(p).ok());  // validation upstream guarantees it
  engine::Sampler sampler(p, r.prompt);
  std::vector<float> logits(256);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 37 + r.prompt.size()) % 17) - 8.0f;
  for (int step = 0; step < 3; ++step) {
    engine::SampleResult t = sampler.Sample(logits);
    FUZZ_REQUIRE(t.token >= 0 && t.token < 256);
  }
}

// DecodeMessage checks every string before protobuf parses: protobuf itself
// must never find invalid UTF-8 (it would log a non-JSON line and the
// client would get no offset).
void AbortOnProtobufUtf8Error(google::protobuf::LogLevel, const char*, int,
                              const std::string& message) {
  FUZZ_REQUIRE(message.find("UTF-8") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool installed = [] {
    google::protobuf::SetLogHandler(&AbortOnProtobufUtf8Error);
    return true;
  }();
  (void)installed;
  v1::GenerateRequest req;
  absl::Status decoded =
      server::DecodeMessage(absl::string_view(reinterpret_cast<const char*>(data), size), &req);
  if (!decoded.ok()) {
    FUZZ_REQUIRE(decoded.code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  server::ValidationLimits limits;
  limits.model_name = "m";
  limits.vocab_size = 256;
  limits.max_context = 512;
  limits.max_prompt_bytes = 4096;
  auto r = server::ValidateGenerateRequest(req, limits, ByteTokenizer, 42, "req-1");
  if (!r.ok()) {
    const absl::StatusCode c = r.status().code();
    FUZZ_REQUIRE(c == absl::StatusCode::kInvalidArgument ||
                 c == absl::StatusCode::kFailedPrecondition);
    return 0;
  }
  FUZZ_REQUIRE(!r->prompt.empty());
  FUZZ_REQUIRE(static_cast<int64_t>(r->prompt.size()) + r->max_new_tokens <= limits.max_context);
  SampleAFewTokens(*r);
  // Stream the prompt's own bytes back as "generated" text through the
  // request's stop strings: emitted text + held back must be the input.
  server::StopStringMatcher stops(r->stop);
  std::string text = req.text(), emitted;
  for (size_t i = 0; i < text.size() && !stops.stopped(); i += 3) {
    server::StopStringMatcher::Result res = stops.Append(absl::string_view(text).substr(i, 3));
    emitted += res.emit;
  }
  if (!stops.stopped()) {
    emitted += stops.Flush();
    FUZZ_REQUIRE(emitted == text);
  } else {
    FUZZ_REQUIRE(text.compare(0, emitted.size(), emitted) == 0);
  }
  return 0;
}
