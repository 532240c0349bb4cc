// GenerateModel: writes a complete Hugging Face model directory for a ZooSpec.
//
//   DIR/tokenizer.json, tokenizer_config.json   (zoo_tokenizer.h)
//   DIR/model.safetensors                       or, with spec.shards = N > 1,
//   DIR/model-0000i-of-0000N.safetensors + model.safetensors.index.json
//   DIR/generation_config.json
//   DIR/config.json                             written LAST
//
// Every file is written atomically (temp + rename) and config.json comes last,
// so "DIR/config.json exists" means the directory is complete -- the serve
// script relies on that to generate on demand. DIR is created if missing
// (parents included). The output is a pure function of the spec: the same
// spec (seed included) gives byte-identical files.
#ifndef EXPERTD_MODELS_ZOO_GENERATOR_H_
#define EXPERTD_MODELS_ZOO_GENERATOR_H_

#include <string>

#include "absl/status/status.h"
#include "models/zoo/zoo_spec.h"

namespace expertd::models::zoo {

absl::Status GenerateModel(const ZooSpec& spec, const std::string& dir);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_GENERATOR_H_
