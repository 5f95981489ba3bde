#!/usr/bin/env bash
# Runs a bundle made by tools/gpu_bundle.sh on the GPU machine: the GPU tests, the synthetic
# benches (decode and verify rounds, bf16 with and without CUDA graphs and overlapped launches, MLX
# 4-bit, a 27B-class shape, 4k prefill; forced acceptance lengths through the HTTP server), the
# linear-layer tile configuration tables (linear-configs*.md, to edit linear()'s dispatch from), and
# compute-sanitizer. Each step runs under `timeout`; logs,
# the bench receipts and a summary go to $OUT. Run from a checkout of the same commit (the tests
# read tests/fixtures from it).
# Usage: OUT=dir tools/gpu_run.sh [BUNDLE_DIR] [tests|bench|mlx4|server|hybrid-server|cache|spec|linear|sanitize|all]   (defaults:
# build-cuda/bundle all; all leaves out sanitize, which is slow; mlx4: just the 4-bit decode bench and
# configuration table; server: just the forced-acceptance runs through the HTTP server (hybrid-server:
# on the 27B hybrid shape, with and without the prompt cache); spec: the
# embedded model's proposers, its drafter on the GPU; cache: the prefix cache's time to first token and
# decode against no cache)
#
# A device call carries at most 64 MiB (working tree + carried bundle.tar.xz, extracted there first);
# the tracked models make the tree larger. Before the call, here, leave the bf16 target and the random Qwen3-tokenizer fixture out
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
  # What the linear kernels' bits rest on: an mma's k slots added as one set, wgmma's bits equal to
  # mma.sync's (bench/receipts/h100-mma-bits-probe.md); it fails where those bits differ.
  run_step probe_mma_bits 60 "$BUNDLE/probe_mma_bits"
  for test_binary in "$BUNDLE"/gpu_test_*; do
    run_step "$(basename "$test_binary")" "${TF_GPU_TEST_SECONDS:-300}" "$test_binary"
  done
  # The model tests again with every kernel launched plainly (no programmatic dependent launch).
  for test_binary in "$BUNDLE"/gpu_test_cuda_*; do
    TF_CUDA_PDL=0 run_step "$(basename "$test_binary")-no-pdl" "${TF_GPU_TEST_SECONDS:-300}" "$test_binary"
  done
fi

linear_table() {  # step name, receipt, bench_cuda_linear flags...
  # cuBLAS is not bundled: the machine's CUDA libraries (the same major version as the build's).
  local name=$1 receipt=$2 cuda_libs
  shift 2
  cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | paste -sd:)
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH${cuda_libs:+:$cuda_libs}" TF_COMMAND="OUT=\$OUT tools/gpu_run.sh BUNDLE $MODE" \
    TF_COMMIT="${TF_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
    run_step "$name" 420 "$BUNDLE/bench_cuda_linear" "$OUT/$receipt" "$@"
  grep -E "^M=" "$OUT/$name.log"
}

server_benches() {
  # Through the HTTP server, forced acceptance lengths (the replay proposer alone, L tokens a round)
  # against draft off: the embedded 4-bit model, then a synthetic qwen3-8b behind the same tokenizer.
  for served in "embedded-mlx4|8201|--model models/tensorfold-code-target-mlx4 --drafter none" \
                "qwen3-8b|8202|--synthetic qwen3-8b --model models/tensorfold-code-target-mlx4 --ctx 4096 --parallel 4"; do
    IFS='|' read -r name port serve_args <<<"$served"
    run_step "server-forced-accept-$name" 300 python3 tools/bench_concurrent.py \
      --server-cmd "$BUNDLE/tensorfold serve --device cuda $serve_args --port $port --bench-extensions" \
      --base-url "http://127.0.0.1:$port" --forced-accept 1 4 16 47 --alone --waves 2 --cases rewrite,code \
      --max-tokens 256 --receipt "$OUT/h200-server-forced-acceptance-$name.md"
  done
}

hybrid_server_benches() {
  # The Qwen3.6-27B-shaped hybrid (synthetic, MLX 4-bit) through the HTTP server: a lone rename at
  # forced acceptance lengths against draft off, with the prompt cache (whose recurrent-state
  # checkpoints a hybrid's rounds pay for) and without it.
  for served in "qwen3.6-27b|8203|" "qwen3.6-27b-no-prompt-cache|8204|--no-prompt-cache"; do
    IFS='|' read -r name port extra <<<"$served"
    run_step "server-forced-accept-$name" 300 python3 tools/bench_concurrent.py \
      --server-cmd "$BUNDLE/tensorfold serve --device cuda --synthetic qwen3.6-27b --synthetic-bits 4 --model models/tensorfold-code-target-mlx4 --ctx 4096 --parallel 4 $extra --port $port --bench-extensions" \
      --base-url "http://127.0.0.1:$port" --forced-accept 1 16 47 --alone --waves 2 --cases rewrite \
      --max-tokens 256 --receipt "$OUT/h200-server-forced-acceptance-$name.md"
  done
}

mlx4_benches() {
  # MLX 4-bit weights (group 64, 4-bit LM head) kept packed and dequantized in registers.
  run_step bench-qwen3-8b-mlx4 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b --bits 4 \
    --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 2 4 8 16 32 64 128 \
    --receipt "$OUT/h200-qwen3-8b-synthetic-mlx4.md"
}

cache_benches() {
  # The prefix cache on a synthetic qwen3-8b (bf16): time to first token of a 4,000-token prompt with
  # 3,900 tokens cached against cold, and decode with the cache on against a --no-prompt-cache server.
  local serve=("$BUNDLE/tensorfold" serve --device cuda --synthetic qwen3-8b --model models/tensorfold-code-target-mlx4
               --ctx 8192 --parallel 4)
  "${serve[@]}" --port 8211 >"$OUT/cache-server.log" 2>&1 &
  local cached_pid=$!
  "${serve[@]}" --port 8212 --no-prompt-cache >"$OUT/nocache-server.log" 2>&1 &
  local uncached_pid=$!
  for port in 8211 8212; do
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
  done
  run_step cache-ttft-qwen3-8b 300 python3 tools/bench_prompt_cache.py ttft --url http://127.0.0.1:8211 \
    --vocab 150000 --repeats 5
  run_step cache-decode-qwen3-8b 300 python3 tools/bench_prompt_cache.py decode --url http://127.0.0.1:8211 \
    --url-b http://127.0.0.1:8212 --vocab 150000 --repeats 5 --max-tokens 256
  kill "$cached_pid" "$uncached_pid"; wait "$cached_pid" "$uncached_pid" 2>/dev/null
}

if [ "$MODE" = cache ]; then
  cache_benches
  cat "$OUT"/cache-*.log
fi

if [ "$MODE" = hybrid-server ]; then
  hybrid_server_benches
  cat "$OUT"/server-*.log
fi

if [ "$MODE" = server ]; then
  server_benches
  cat "$OUT"/server-*.log
fi

if [ "$MODE" = mlx4 ]; then
  mlx4_benches
  linear_table linear-mlx4 linear-configs-mlx4.md --bits 4 --rows 1,8,16,32,64,128
  cat "$OUT"/bench-*.log
fi

if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  # Decode and the verify-round curve as shipped (CUDA graphs; overlapped launches up to 8 rows),
  # then without overlapped launches, then kernel by kernel; then a 27B-class shape, then one
  # 4,096-token prefill.
  run_step bench-qwen3-8b 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 2 4 8 16 32 64 128 \
    --receipt "$OUT/h200-qwen3-8b-synthetic-bf16.md"
  TF_CUDA_PDL=0 run_step bench-qwen3-8b-no-pdl 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 16 64 --receipt "$OUT/h200-qwen3-8b-synthetic-bf16-no-pdl.md"
  TF_CUDA_PDL=0 TF_CUDA_GRAPHS=0 run_step bench-qwen3-8b-eager 300 "$BUNDLE/tensorfold" bench --device cuda \
    --synthetic qwen3-8b --prompt-len 512 --decode 64 --repeats 3 --verify-rows 1 16 64 \
    --receipt "$OUT/h200-qwen3-8b-synthetic-bf16-eager.md"
  run_step bench-qwen3.5-27b-dense 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3.5-27b-dense \
    --prompt-len 512 --decode 32 --repeats 3 --verify-rows 1 16 64 --receipt "$OUT/h200-qwen3.5-27b-dense-synthetic-bf16.md"
  mlx4_benches
  run_step bench-qwen3-8b-prefill-4096 300 "$BUNDLE/tensorfold" bench --device cuda --synthetic qwen3-8b \
    --prompt-len 4096 --decode 4 --repeats 3 --receipt "$OUT/h200-qwen3-8b-synthetic-bf16-prefill-4096.md"
  # The embedded model end to end through the engine: small, so launch-bound; draft off against
  # long copy and n-gram (`spec` runs its drafter too).
  run_step spec-bench-embedded-mlx4 150 "$BUNDLE/tensorfold" spec-bench --device cuda \
    --model models/tensorfold-code-target-mlx4 --drafter none --waves 2 --max-tokens 256 \
    --receipt "$OUT/h200-spec-bench-trained-mlx4.md"
  server_benches
  cat "$OUT"/bench-*.log "$OUT"/spec-bench-*.log "$OUT"/server-*.log
fi

if [ "$MODE" = spec ]; then
  # The embedded 4-bit target and its block drafter, both on the GPU: every proposer set on the
  # held-out cases (exactness checked reply by reply), then the spec-bench cases.
  run_step spec-eval-embedded-mlx4 480 "$BUNDLE/tensorfold" spec-eval --device cuda \
    --model models/tensorfold-code-target-mlx4 --drafter models/tensorfold-code-drafter --per-kind 24 \
    --streams 1 4 --modes long-copy drafter both all --receipt "$OUT/h200-spec-eval-tensorfold-code-mlx4.md"
  run_step spec-bench-embedded-mlx4-drafter 150 "$BUNDLE/tensorfold" spec-bench --device cuda \
    --model models/tensorfold-code-target-mlx4 --drafter models/tensorfold-code-drafter --waves 2 --max-tokens 256 \
    --receipt "$OUT/h200-spec-bench-trained-mlx4-gpu-drafter.md"
  cat "$OUT"/spec-*.log
fi

if [ "$MODE" = sanitize ]; then
  # compute-sanitizer, each run bounded (about 15 minutes in all at the defaults).
  sanitize() {  # tool, test binary, gtest filter or "", seconds (default TF_SANITIZE_SECONDS or 60)
    local name="$1-$2" filter=()
    [ -n "$3" ] && filter=("--gtest_filter=$3")
    run_step "$name" "${4:-${TF_SANITIZE_SECONDS:-60}}" compute-sanitizer --tool "$1" --error-exitcode 3 "$BUNDLE/$2" "${filter[@]}"
    tail -3 "$OUT/$name.log"
  }
  export TF_GPU_TEST_QUICK=1  # the kernel tests leave out their largest cases
  # memcheck: every GPU test program (the model ones on the cases that reach every kernel and path).
  sanitize memcheck gpu_test_elementwise_kernels ""
  sanitize memcheck gpu_test_linear ""
  sanitize memcheck gpu_test_sampling ""
  sanitize memcheck gpu_test_attention "" 120
  sanitize memcheck gpu_test_cuda_model_invariance '*GraphReplay*:*Chunking*/0:*Picks*/3'
  sanitize memcheck gpu_test_cuda_model_parity "" 90
  sanitize memcheck gpu_test_cuda_speculation '*DraftedEqualsUndrafted*/1:*ConcurrentEqualsSoloSampled*:*LogprobsChangeNoToken*' 200
  sanitize memcheck gpu_test_cuda_drafter "" 120
  # racecheck (shared-memory hazards): every kernel test, and one parity case of the model.
  sanitize racecheck gpu_test_elementwise_kernels ""
  sanitize racecheck gpu_test_linear "" 300  # the staged configurations took it past 100 s (quick mode)
  sanitize racecheck gpu_test_attention "" 150
  sanitize racecheck gpu_test_cuda_drafter '*MatchTheCpuDrafter*' 150
  sanitize racecheck gpu_test_cuda_model_parity '*LogitsMatchTheCpuModel/0'
  sanitize racecheck gpu_test_sampling "" 150
fi

if [ "$MODE" = linear ] || [ "$MODE" = all ]; then
  linear_table linear linear-configs.md --configs-only
  linear_table linear-mlx4 linear-configs-mlx4.md --bits 4 --rows 1,8,16,32,64,128
  # The cost of invariance at prefill sizes: linear()'s own choice against cuBLAS up to 4,096 rows.
  linear_table linear-large-m linear-large-m.md --configs-only --dispatch-only --rows 1,16,64,256,1024,4096
  linear_table linear-large-m-mlx4 linear-large-m-mlx4.md --bits 4 --dispatch-only --rows 1,16,64,256,1024,4096

fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
grep -hE "^\[  FAILED|^FAIL|relative error|greedy steps compared" "$OUT"/gpu_test_*.log 2>/dev/null | tee -a "$OUT/summary.txt"
exit $failed
