// SwiGLU: out = silu(gate) * up, elementwise; a softmax's denominator.
#pragma once
#include <cstdint>

namespace tf::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out);

// The sum of exp(x[i] - shift) over i < n, each exp in f32 (std::exp's bits) and summed in double
// in index order: a softmax's denominator for a proposer's confidence (a drafter's row of logits).
double sum_of_exps(const float* x, int64_t n, float shift);

}  // namespace tf::cpu
