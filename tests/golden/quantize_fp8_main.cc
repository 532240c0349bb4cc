// quantize-fp8: writes an FP8 (block-scaled E4M3) copy of a checkpoint and
// the same weights dequantized to fp32 (tests/golden/fp8_checkpoint.h).
//   quantize-fp8 SRC_DIR FP8_DIR DEQUANT_DIR [BLOCK_ROWS BLOCK_COLS [f32|bf16]]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/golden/fp8_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6 && argc != 7) {
    std::fprintf(stderr,
                 "usage: %s SRC_DIR FP8_DIR DEQUANT_DIR [BLOCK_ROWS BLOCK_COLS [f32|bf16]]\n",
                 argv[0]);
    return 2;
  }
  expertd::fp8::Fp8CheckpointOptions o;
  if (argc >= 6) {
    o.block_rows = std::atoll(argv[4]);
    o.block_cols = std::atoll(argv[5]);
    if (o.block_rows <= 0 || o.block_cols <= 0) {
      std::fprintf(stderr, "block sizes must be positive integers\n");
      return 2;
    }
  }
  if (argc == 7) {
    const std::string s = argv[6];
    if (s != "f32" && s != "bf16") {
      std::fprintf(stderr, "scale dtype must be f32 or bf16, got '%s'\n", argv[6]);
      return 2;
    }
    o.scale_dtype = s == "bf16" ? expertd::models::DType::kBF16 : expertd::models::DType::kF32;
  }
  expertd::fp8::Fp8CheckpointStats st;
  absl::Status s = expertd::fp8::WriteFp8Checkpoint(argv[1], argv[2], argv[3], o, &st);
  if (!s.ok()) {
    std::fprintf(stderr, "quantize-fp8: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf(
      "quantized %lld tensors (%llu bytes with scales, %llu as bf16), kept %lld\n",
      static_cast<long long>(st.quantized_tensors), static_cast<unsigned long long>(st.fp8_bytes),
      static_cast<unsigned long long>(st.dense_bytes), static_cast<long long>(st.kept_tensors));
  return 0;
}
