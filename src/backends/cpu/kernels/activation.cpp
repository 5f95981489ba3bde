// SwiGLU on the CPU, with silu written as PyTorch computes it.
#include "backends/cpu/kernels/activation.h"

#include <algorithm>

#include "backends/cpu/kernels/exp.h"
#include "backends/cpu/kernels/simd.h"

namespace tf::cpu {

// out may be gate: each element is read before it is written.
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
    constexpr int64_t kBlock = 256;
    float e[kBlock];
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      const int64_t m = std::min(kBlock, n - begin);
      for (int64_t i = 0; i < m; ++i) e[i] = -gate[begin + i];
      exp_in_place<W>(e, m);
      for (int64_t i = 0; i < m; ++i) out[begin + i] = (gate[begin + i] / (1.0f + e[i])) * up[begin + i];
    }
  });
}

double sum_of_exps(const float* x, int64_t n, float shift) {
  double sum = 0.0;
  run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
    constexpr int64_t kBlock = 256;
    float e[kBlock];
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      const int64_t m = std::min(kBlock, n - begin);
      for (int64_t i = 0; i < m; ++i) e[i] = x[begin + i] - shift;
      exp_in_place<W>(e, m);
      for (int64_t i = 0; i < m; ++i) sum += double(e[i]);
    }
  });
  return sum;
}

}  // namespace tf::cpu
