// RMSNorm on the CPU: the sum of squares in the fixed lane order of simd.h, then a per-element scale.
#include "backends/cpu/kernels/norm.h"

#include <cmath>
#include <vector>

#include "backends/cpu/kernels/simd.h"

namespace tf::cpu {

void rms_norm(const float* x, int64_t n_rows, int64_t dim, const WeightVector& gain, float eps,
              float* y) {
  // The gain as f32 once per call, not a dtype switch per element.
  thread_local std::vector<float> gain_values;
  gain_values.resize(size_t(dim));
  for (int64_t i = 0; i < dim; ++i) gain_values[size_t(i)] = load_as_f32(gain.data, gain.dtype, i);
  const float* g = gain_values.data();
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* x_row = x + r * dim;
    float* y_row = y + r * dim;
    const float sum_of_squares = dot_fixed_order<kGenericWidth>(x_row, x_row, dim);
    const float inverse_rms = 1.0f / std::sqrt(sum_of_squares / float(dim) + eps);
    // Hugging Face order: normalize first, then multiply by the gain.
    for (int64_t i = 0; i < dim; ++i) y_row[i] = (x_row[i] * inverse_rms) * g[i];
  }
}

}  // namespace tf::cpu
