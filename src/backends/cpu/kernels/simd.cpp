// Picks the SIMD level the CPU kernels dispatch to.
#include "backends/cpu/kernels/simd.h"

#include <atomic>

#include "core/error.h"

namespace tf::cpu {

namespace {

SimdLevel best_supported_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::avx2;
  return SimdLevel::generic;
}

std::atomic<SimdLevel>& current_level() {
  static std::atomic<SimdLevel> level{best_supported_level()};
  return level;
}

}  // namespace

bool simd_level_supported(SimdLevel level) {
  __builtin_cpu_init();
  switch (level) {
    case SimdLevel::avx512: return __builtin_cpu_supports("avx512f");
    case SimdLevel::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    default: return "generic";
  }
}

std::string cpu_numerics_description() {
  const SimdLevel level = simd_level();
  return std::string(simd_level_name(level)) +
         (simd_level_fuses(level) ? ", fused multiply-add" : ", multiply then add");
}

SimdLevel simd_level() { return current_level().load(std::memory_order_relaxed); }

void set_simd_level_for_testing(SimdLevel level) {
  if (!simd_level_supported(level)) fail("this CPU does not support the requested SIMD level");
  current_level().store(level, std::memory_order_relaxed);
}

}  // namespace tf::cpu
