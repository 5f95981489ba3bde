// Picks the SIMD level the CPU kernels dispatch to.
#include "backends/cpu/kernels/simd.h"

#include <atomic>

#include "core/error.h"

namespace tf::cpu {

namespace {

SimdLevel best_supported_level() {
  __builtin_cpu_init();
  if (simd_level_supported(SimdLevel::avx512_bf16)) return SimdLevel::avx512_bf16;
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::avx2;
  return SimdLevel::generic;
}

SimdLevel without_bf16_dot(SimdLevel level) {
  return simd_level_has_bf16_dot(level) ? SimdLevel::avx512 : level;
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
    case SimdLevel::avx512_bf16:  // attention's bf16 path shuffles 16-bit words (AVX-512 BW)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512bf16");
    case SimdLevel::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx512_bf16: return "avx512-bf16";
    case SimdLevel::avx2: return "avx2";
    default: return "generic";
  }
}

std::string cpu_numerics_description(bool allow_bf16_dot) {
  const SimdLevel level = allow_bf16_dot ? simd_level() : without_bf16_dot(simd_level());
  return std::string(simd_level_name(level)) +
         (simd_level_fuses(level) ? ", fused multiply-add" : ", multiply then add") +
         (simd_level_has_bf16_dot(level) ? ", bf16 weights times bf16-rounded inputs, attention on bf16-rounded operands"
                                           : "");
}

SimdLevel simd_level() { return current_level().load(std::memory_order_relaxed); }

void turn_off_bf16_dot() { current_level().store(without_bf16_dot(simd_level()), std::memory_order_relaxed); }

void set_simd_level_for_testing(SimdLevel level) {
  if (!simd_level_supported(level)) fail("this CPU does not support the requested SIMD level");
  current_level().store(level, std::memory_order_relaxed);
}

}  // namespace tf::cpu
