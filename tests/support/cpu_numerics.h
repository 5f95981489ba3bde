// The CPU numerics a comparison with float32 references runs at. The references (transformers,
// PyTorch) compute in float32 throughout, which the f32-input numerics meets up to the order of its
// sums. Where the CPU has the AVX-512 BF16 dot product, its default multiplies bf16 weights by
// inputs rounded to bf16 (each off by up to 2^-9 of itself, as a bf16 model on PyTorch would be), so
// that numerics is held to the same references at a tolerance of its own.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernels/simd.h"

namespace tf::test {

struct CpuNumerics {
  std::string name;
  bool has_bf16_inputs;
};

// What this machine has: f32 inputs always, bf16 inputs where the CPU has the dot product.
inline std::vector<CpuNumerics> cpu_numerics_here() {
  std::vector<CpuNumerics> here = {{"f32 inputs", false}};
  if (cpu::simd_level_supported(cpu::SimdLevel::avx512_bf16)) here.push_back({"bf16 inputs", true});
  return here;
}

// Runs the CPU kernels at one numerics while alive, then restores the level it found.
class CpuNumericsScope {
 public:
  explicit CpuNumericsScope(const CpuNumerics& numerics) {
    if (numerics.has_bf16_inputs) {
      cpu::set_simd_level_for_testing(cpu::SimdLevel::avx512_bf16);
    } else if (cpu::simd_level_has_bf16_dot(saved_)) {
      cpu::set_simd_level_for_testing(cpu::SimdLevel::avx512);
    }
  }
  CpuNumericsScope(const CpuNumericsScope&) = delete;
  CpuNumericsScope& operator=(const CpuNumericsScope&) = delete;
  ~CpuNumericsScope() { cpu::set_simd_level_for_testing(saved_); }

 private:
  cpu::SimdLevel saved_ = cpu::simd_level();
};

// The f32-input numerics, the one float32 references are met at to their own tolerance.
inline CpuNumerics f32_inputs() { return {"f32 inputs", false}; }

// Keeps a whole test binary at f32 inputs (register it with ::testing::AddGlobalTestEnvironment):
// the GPU suites hold the GPU to the CPU model at tolerances set when the CPU had only f32 inputs.
class F32InputsThroughout : public ::testing::Environment {
 public:
  void SetUp() override { scope_ = std::make_unique<CpuNumericsScope>(f32_inputs()); }
  void TearDown() override { scope_.reset(); }

 private:
  std::unique_ptr<CpuNumericsScope> scope_;
};

// Logits at bf16 inputs against float32 references, as a share of the largest reference logit:
// twice the largest seen on the tiny fixtures (2.4% on the hybrids, whose gates amplify the
// rounding; 0.6% on the Qwen3s). A kernel that pairs the wrong inputs is off by whole logits, and
// the kernel tests hold its order bit for bit.
constexpr float kBf16InputsRelativeTolerance = 0.05f;

inline float logit_tolerance(const CpuNumerics& numerics, float f32_tolerance, float largest_reference_logit) {
  return numerics.has_bf16_inputs ? kBf16InputsRelativeTolerance * largest_reference_logit : f32_tolerance;
}

}  // namespace tf::test
