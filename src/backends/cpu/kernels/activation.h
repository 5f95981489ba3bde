// SwiGLU: out = silu(gate) * up, elementwise.
#pragma once
#include <cstdint>

namespace tf::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tf::cpu
