#!/usr/bin/env bash
# Builds every GPU test and the GPU decode benchmark for a GPU machine that has
# no Bazel (the H200 device machine) into .device/cuda/ (git-ignored; carry it
# with the run: docs/cuda.md "How to run on an H200"). The GPU tests are the
# labels in $GPU_TESTS (tools/gpu_check.sh bundle passes every cc_test that
# depends on //engine/backend/cuda:cuda_test_util), else the backend's own.
#   bin/    the binaries (-c opt, our code linked statically, stripped)
#   lib/    every shared library they need except CUDA's own and glibc's
#   glibc/  this machine's loader and C runtime, for a device machine whose
#           glibc is older (run_on_device.sh falls back to them)
# CUDA's libraries (cudart, cuBLAS, cuBLASLt) are taken from the device
# machine's /usr/local/cuda/lib64 (rpath), not bundled.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
if [ -n "${GPU_TESTS:-}" ]; then
  read -r -a TESTS <<< "$(echo $GPU_TESTS)"
else
  TESTS=()
  for t in cuda_backend_test cuda_ops_test cuda_matmul_test cuda_attention_test cuda_engine_test; do
    TESTS+=("//engine/backend/cuda:$t")
  done
fi
# bin/ is flat: two tests with one name would overwrite each other.
dups=$(for t in "${TESTS[@]}"; do echo "${t##*:}"; done | sort | uniq -d)
[ -z "$dups" ] || { echo "GPU tests share a name: $dups"; exit 1; }
TARGETS=("${TESTS[@]}" //engine/backend/cuda/bench:cuda_decode_benchmark)
tools/bazel.sh build -c opt --dynamic_mode=off --strip=always "${TARGETS[@]}"
out=.device/cuda
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/glibc"
for t in "${TESTS[@]}"; do  # //pkg:name -> bazel-bin/pkg/name
  pkg=${t#//}
  cp "bazel-bin/${pkg%%:*}/${t##*:}" "$out/bin/"
done
cp bazel-bin/engine/backend/cuda/bench/cuda_decode_benchmark "$out/bin/"
chmod u+w "$out"/bin/*
for b in "$out"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
  case "$lib" in
    */cuda/*|*libcuda.so*|*libcudart*|*libcublas*) ;;  # the device machine's own CUDA
    */libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*) cp -L "$lib" "$out/glibc/" ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cp -L /lib64/ld-linux-x86-64.so.2 "$out/glibc/"
du -sh "$out" "$out"/*
echo "bundle ready in $out (the device tool carries at most 64 MiB)"
