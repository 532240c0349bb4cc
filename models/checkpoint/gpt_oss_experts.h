// gpt-oss stores a layer's experts as four fused tensors (every expert at
// once, gate and up interleaved, the matrices transposed against
// nn.Linear's [out, in]); the rest of expertd reads one expert's gate, up and
// down by name, [out, in], as every other architecture stores them. So the
// Checkpoint presents each fused layer as those per-expert tensors:
//
//   mlp.experts.gate_up_proj       [E, H, 2I]  -> experts.{e}.gate_proj.weight [I, H]
//                                                 (column 2i), experts.{e}.up_proj.weight
//                                                 [I, H] (column 2i + 1)
//   mlp.experts.gate_up_proj_bias  [E, 2I]     -> experts.{e}.{gate,up}_proj.bias [I]
//   mlp.experts.down_proj          [E, I, H]   -> experts.{e}.down_proj.weight [H, I]
//   mlp.experts.down_proj_bias     [E, H]      -> experts.{e}.down_proj.bias [H]
//
// OpenAI's published files (quantization_config quant_method "mxfp4") store
// the two matrices as MXFP4 instead, rows = output features:
//
//   mlp.experts.gate_up_proj_blocks [E, 2I, H / 32, 16] uint8, two e2m1 codes
//     a byte (low nibble first), gate_up_proj_scales [E, 2I, H / 32] uint8
//     (e8m0: 2^(s - 127)); row 2i is gate row i, row 2i + 1 up row i
//   mlp.experts.down_proj_blocks [E, H, I / 32, 16], down_proj_scales [E, H, I / 32]
//
// which stay MXFP4: each expert matrix [rows, cols] is presented as its
// codes, uint8 [rows, cols / 2] under the matrix's name, and its scales,
// uint8 [rows, cols / 32] under Mxfp4ScalesName (tensor_names.h), which is
// exactly the engine's MXFP4 weight layout (engine/backend/weight_format.h):
// the experts stay 4.25 bits a weight in memory, the pack and the kernels.
// Down's rows are consecutive in the file, so its views point into the
// mapping; gate's and up's rows alternate there, so theirs are copies.
//
// The dense per-expert tensors are copies (the fused ones are dropped from
// the name map); their `file` and `file_offset` are the fused tensor's.
#ifndef EXPERTD_MODELS_CHECKPOINT_GPT_OSS_EXPERTS_H_
#define EXPERTD_MODELS_CHECKPOINT_GPT_OSS_EXPERTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/checkpoint/checkpoint.h"
#include "models/config/model_config.h"

namespace expertd::models {

// For each MoE layer of a gpt-oss config whose fused gate_up_proj is in
// `tensors`: checks the four fused tensors (InvalidArgument naming a missing
// one or a wrong shape), adds the per-expert views (their bytes appended to
// `storage`) and removes the fused ones. Layers stored per expert already
// are left alone.
absl::Status SplitGptOssExperts(const ModelConfig& config,
                                std::map<std::string, TensorView, std::less<>>* tensors,
                                std::vector<std::unique_ptr<uint64_t[]>>* storage);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CHECKPOINT_GPT_OSS_EXPERTS_H_
