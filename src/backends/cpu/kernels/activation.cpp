// SwiGLU on the CPU, with silu written as PyTorch computes it.
#include "backends/cpu/kernels/activation.h"

#include <cmath>

namespace tf::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

}  // namespace tf::cpu
