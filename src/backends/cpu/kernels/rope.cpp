// Rotary position embedding, rotate-half form, with angles rounded as transformers rounds them.
#include "backends/cpu/kernels/rope.h"

#include <cmath>

namespace tf::cpu {

namespace {

// The one place an angle is formed: position * inverse frequency in f32, then f32 cos and sin.
void rope_cos_sin(int32_t position, float inverse_frequency, float* cos_out, float* sin_out) {
  const float angle = float(position) * inverse_frequency;
  *cos_out = std::cos(angle);
  *sin_out = std::sin(angle);
}

}  // namespace

void rope_apply(float* x, int64_t n_rows, int64_t n_heads, int64_t head_dim,
                const int32_t* positions, const std::vector<float>& inverse_frequencies) {
  const int64_t half = head_dim / 2;
  const size_t n_pairs = size_t(half);
  std::vector<float> cos_values(n_pairs), sin_values(n_pairs);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < half; ++i)
      rope_cos_sin(positions[r], inverse_frequencies[size_t(i)], &cos_values[size_t(i)], &sin_values[size_t(i)]);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* head = x + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float first = head[i], second = head[i + half];
        const float c = cos_values[size_t(i)], s = sin_values[size_t(i)];
        head[i] = first * c - second * s;
        head[i + half] = second * c + first * s;
      }
    }
  }
}

}  // namespace tf::cpu
