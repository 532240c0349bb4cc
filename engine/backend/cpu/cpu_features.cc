#include "engine/backend/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace expertd::engine::cpu {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "scalar";
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

namespace {

CpuIsa Detect() {
  CpuIsa best = CpuIsa::kScalar;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) best = isa;
  }
  if (const char* cap = std::getenv("EXPERTD_CPU_ISA"); cap != nullptr) {
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2}) {
      if (std::strcmp(cap, CpuIsaName(isa)) == 0 && isa < best) best = isa;
    }
  }
  return best;
}

}  // namespace

CpuIsa BestCpuIsa() {
  static const CpuIsa isa = Detect();
  return isa;
}

bool CpuSupportsBf16Dot() {
  static const bool ok = BestCpuIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  return ok;
}

bool CpuSupportsQuantBf16Dot() {
  static const bool ok = CpuSupportsBf16Dot() && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

bool CpuSupportsInt8Dot() {
  static const bool ok = CpuSupportsBf16Dot() && __builtin_cpu_supports("avx512vnni");
  return ok;
}

bool CpuSupportsInt8Activations() {
  static const bool ok = CpuSupportsInt8Dot() || BestCpuIsa() >= CpuIsa::kAvx2;
  return ok;
}

}  // namespace expertd::engine::cpu
