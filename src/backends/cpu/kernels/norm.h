// RMSNorm over the last dimension, per row, in one fixed order.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tf::cpu {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gain, for n_rows rows of `dim` (y may alias x).
// Also used for Qwen3's QK-norm with one row per (token, head).
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const WeightVector& gain, float eps,
              float* y);

}  // namespace tf::cpu
