#!/usr/bin/env bash
# Builds the CUDA kernels, GPU tests and the linear-layer benchmark with nvcc alone (the GPU machine
# has none of the project's -dev packages), runs tests then bench, and writes logs and the receipt to
# $OUT. Usage: OUT=dir tools/gpu_check.sh [--build-only]
# The CUDA model and engine tests (gtest) are built with CMake on the build machine instead and run
# here from a bundle: tools/gpu_bundle.sh, then tools/gpu_run.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build-gpu/out}
BUILD=build-gpu
mkdir -p "$OUT" "$BUILD/obj"
ARCH="-gencode=arch=compute_90a,code=sm_90a"
NVCC_FLAGS="-std=c++20 -O3 $ARCH -Isrc -Itests/gpu -Xcompiler -ffp-contract=off"
CXX_FLAGS="-std=c++20 -O2 -ffp-contract=off -fno-fast-math -Wno-psabi -Isrc"
# The CPU twins and what they need; none of it uses an external library.
CPU_SOURCES="src/backends/cpu/kernels/*.cpp src/models/rope_frequencies.cpp src/core/dtype.cpp src/core/thread_pool.cpp src/sampling/sampler.cpp src/backends/cuda/affine_layout.cpp"
KERNEL_SOURCES="src/backends/cuda/*.cu"
JOBS=$(nproc)

build() {
  local start=$SECONDS
  ls $CPU_SOURCES | xargs -P "$JOBS" -I{} sh -c 'g++ '"$CXX_FLAGS"' -c {} -o '"$BUILD"'/obj/$(basename {} .cpp).o' || return 1
  ls $KERNEL_SOURCES tests/gpu/test_*.cu bench/bench_cuda_linear.cu |
    xargs -P "$JOBS" -I{} sh -c 'nvcc '"$NVCC_FLAGS"' -c {} -o '"$BUILD"'/obj/$(basename {} .cu).cu.o' || return 1
  local kernels cpu
  kernels=$(for f in $KERNEL_SOURCES; do echo "$BUILD/obj/$(basename "$f" .cu).cu.o"; done)
  cpu=$(for f in $CPU_SOURCES; do echo "$BUILD/obj/$(basename "$f" .cpp).o"; done)
  for t in tests/gpu/test_*.cu; do
    name=$(basename "$t" .cu)
    nvcc $ARCH -o "$BUILD/$name" "$BUILD/obj/$name.cu.o" $kernels $cpu -lpthread || return 1
  done
  nvcc $ARCH -o "$BUILD/bench_cuda_linear" "$BUILD/obj/bench_cuda_linear.cu.o" $kernels -lcublas || return 1
  echo "build: $((SECONDS - start)) s"
}

{ nvidia-smi -L 2>/dev/null; nvcc --version | tail -1; } | tee "$OUT/build.log"
if ! build >>"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
tail -1 "$OUT/build.log"
[ "${1:-}" = "--build-only" ] && exit 0

declare -A result
tests_failed=0
for t in "$BUILD"/test_*; do
  name=$(basename "$t")
  if timeout 300 "$t" >>"$OUT/gpu-tests.log" 2>&1; then result[$name]=PASS; else result[$name]=FAIL; tests_failed=1; fi
done

TF_COMMAND="OUT=\$OUT tools/gpu_check.sh" TF_COMMIT="${TF_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
  timeout 420 "$BUILD/bench_cuda_linear" "$OUT/h200-linear-bf16.md" >"$OUT/bench.log" 2>&1
bench_rc=$?

# compute-sanitizer last, bounded, so a slow tool cannot cost the numbers above.
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    for t in "$BUILD"/test_elementwise_kernels "$BUILD"/test_attention "$BUILD"/test_linear; do
      echo "== $tool $(basename "$t")" >>"$OUT/sanitizer.log"
      TF_GPU_TEST_QUICK=1 timeout 40 compute-sanitizer --tool "$tool" --error-exitcode 3 "$t" >>"$OUT/sanitizer.log" 2>&1
      result["$tool $(basename "$t")"]="rc=$?"
    done
  done
fi

echo
echo "== GPU tests"
grep -E "^(PASS|FAIL)|failure" "$OUT/gpu-tests.log"
echo
echo "== bench (rc=$bench_rc)"
grep -E "^(GPU|device-to-device|weights|M=|ours vs)" "$OUT/bench.log"
echo
echo "== summary"
for key in "${!result[@]}"; do printf '%-40s %s\n' "$key" "${result[$key]}"; done | sort
exit $((tests_failed || bench_rc))
