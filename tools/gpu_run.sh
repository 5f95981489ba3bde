#!/usr/bin/env bash
# Runs a bundle made by tools/gpu_bundle.sh on the GPU machine: the GPU tests, the synthetic
# benches (decode and verify rounds with and without CUDA graphs, a 27B-class shape, 4k prefill), and the linear-layer tile
# configuration table (linear-configs.md, to edit linear_bf16's dispatch from). Each step runs under `timeout`; logs,
# the bench receipt and a summary go to $OUT. Run from a checkout of the same commit (the tests
# read tests/fixtures from it).
# Usage: OUT=dir tools/gpu_run.sh [BUNDLE_DIR] [tests|bench|linear|all]   (defaults: build-cuda/bundle all)
#
# A device call carries at most 64 MiB (working tree + carried bundle); the tracked models make the
# tree larger. Before the call, here, leave the bf16 target and the random Qwen3-tokenizer fixture out
# (the GPU tests use the 4-bit copy and the drafter), and put them back after:
#   git sparse-checkout set --no-cone '/*' '!/models/tensorfold-code-target/' '!/tests/fixtures/models/qwen3-tiny-chat/'
#   git sparse-checkout disable
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=$(realpath "${1:-build-cuda/bundle}")
MODE=${2:-all}
OUT=${OUT:-$BUNDLE/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TF_SOURCE_DIR=$PWD

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader; } 2>&1 | tee "$OUT/device.log"
failed=0
summary=()

run_step() {  # name, seconds, command...
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  timeout "$seconds" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-36s rc=%-4s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  [ "$rc" -eq 0 ] || failed=1
  echo "${summary[-1]}"
}

if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  for test_binary in "$BUNDLE"/gpu_test_*; do
    run_step "$(basename "$test_binary")" "${TF_GPU_TEST_SECONDS:-300}" "$test_binary"
  done
fi

if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  # Decode and the verify-round curve with CUDA graphs (the default), then the same launched kernel
  # by kernel, then a 27B-class shape, then prefill of one 4,096-token chunk.
  run_step bench-qwen3-8b 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 2 4 8 16 32 64 128 \
    --receipt "$OUT/h200-qwen3-8b-synthetic-bf16.md"
  TF_CUDA_GRAPHS=0 run_step bench-qwen3-8b-eager 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 16 64 --receipt "$OUT/h200-qwen3-8b-synthetic-bf16-eager.md"
  run_step bench-qwen3.5-27b-dense 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3.5-27b-dense \
    --prompt-len 512 --decode 32 --repeats 3 --verify-rows 1 16 64 --receipt "$OUT/h200-qwen3.5-27b-dense-synthetic-bf16.md"
  run_step bench-qwen3-8b-prefill-4096 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 4096 --decode 4 --repeats 3 --receipt "$OUT/h200-qwen3-8b-synthetic-bf16-prefill-4096.md"
  cat "$OUT"/bench-*.log
fi

if [ "$MODE" = linear ] || [ "$MODE" = all ]; then
  # cuBLAS is not bundled: the machine's CUDA libraries (the same major version as the build's).
  cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | paste -sd:)
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH${cuda_libs:+:$cuda_libs}" TF_COMMAND="OUT=\$OUT tools/gpu_run.sh BUNDLE linear" \
    TF_COMMIT="${TF_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
    run_step linear 420 "$BUNDLE/bench_cuda_linear" "$OUT/linear-configs.md" --configs-only
  grep -E "^M=" "$OUT/linear.log"
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
grep -hE "^\[  FAILED|^FAIL|relative error|greedy steps compared" "$OUT"/gpu_test_*.log 2>/dev/null | tee -a "$OUT/summary.txt"
exit $failed
