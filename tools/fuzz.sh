#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/fuzz_*.cpp, clang, ASan + UBSan) and runs each for SECONDS,
# starting from its seed corpus fuzz/corpus/<target>/; fails on any crash, leak, timeout, memory
# blow-up or sanitizer report. New corpus entries and crash inputs stay under build-fuzz/.
#   tools/fuzz.sh SECONDS [TARGET ...]     (SECONDS=0: replay the seeds only)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: tools/fuzz.sh SECONDS [TARGET ...]}
shift
build=${TF_FUZZ_BUILD_DIR:-build-fuzz}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DTF_FUZZ=ON -DTF_BUILD_TESTS=OFF -DTF_CUDA=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi
cmake --build "$build" -j"${TF_FUZZ_BUILD_JOBS:-2}" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for target in "${targets[@]}"; do
  work="$build/corpus/$target" artifacts="$build/artifacts/$target/"
  mkdir -p "$work" "$artifacts" "fuzz/corpus/$target"
  rm -f "$artifacts"*
  log="$build/$target.log"
  flags=(-rss_limit_mb=2048 -timeout=20 -max_len=65536 -print_final_stats=1 "-artifact_prefix=$artifacts")
  if ((seconds == 0)); then
    flags+=(-runs=0)
  else
    flags+=("-max_total_time=$seconds")
  fi
  echo "== $target: ${seconds}s"
  status=0
  "$build/fuzz/$target" "${flags[@]}" "$work" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?
  grep -E '^(stat::|#[0-9]+ +DONE)' "$log" | tr '\n' ' '; echo
  if ((status != 0)) || compgen -G "$artifacts*" >/dev/null || grep -qE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:' "$log"; then
    echo "!! $target failed (exit $status); log: $log; inputs: $artifacts" >&2
    grep -E -A 30 'ERROR:|runtime error:|fuzz invariant broken|deadly signal' "$log" | head -60 >&2 || true
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "fuzzing failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing passed: ${targets[*]}"
