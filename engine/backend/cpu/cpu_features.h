// The instruction sets the CPU kernels may use, detected once at run time
// (cpuid through __builtin_cpu_supports). The build targets AVX2 + FMA
// (.bazelrc); wider kernels live in files whose functions carry a target
// attribute and are only called when the CPU has the features.
//
// EXPERTD_CPU_ISA=scalar|avx2|avx512 in the environment caps the choice (to
// compare kernels on one machine); a value above what the CPU has is ignored.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_CPU_FEATURES_H_
#define EXPERTD_ENGINE_BACKEND_CPU_CPU_FEATURES_H_

namespace expertd::engine::cpu {

enum class CpuIsa {
  kScalar,  // portable reference kernels
  kAvx2,    // AVX2 + FMA + F16C (the build's baseline)
  kAvx512,  // AVX-512 F + BW + VL + DQ
};

const char* CpuIsaName(CpuIsa isa);  // "scalar", "avx2", "avx512"
// The widest ISA this CPU supports, capped by EXPERTD_CPU_ISA. Cached.
CpuIsa BestCpuIsa();
// Whether this CPU can run `isa`'s kernels.
bool CpuSupports(CpuIsa isa);
// Whether the bf16-activation matmul (vdpbf16ps) can run: AVX-512 with
// AVX512_BF16, and EXPERTD_CPU_ISA not capping below avx512. Cached.
bool CpuSupportsBf16Dot();
// Whether the quantized bf16-activation matmul can run: the bf16 dot product
// and AVX512_VBMI (its FP8 decoding looks bytes up in 128-entry tables,
// vpermi2b; every CPU with AVX512_BF16 has it but Cooper Lake). Cached.
bool CpuSupportsQuantBf16Dot();
// Whether the AVX-512 int8-activation kernel can run: the bf16 dot product
// and AVX512_VNNI (vpdpbusd). Cached.
bool CpuSupportsInt8Dot();
// Whether int8 activations (MatmulActivations::kInt8) can run at all: the
// VNNI kernel, or its AVX2 twin (vpmaddubsw) when EXPERTD_CPU_ISA does not
// cap the CPU to scalar. Cached.
bool CpuSupportsInt8Activations();

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_CPU_FEATURES_H_
