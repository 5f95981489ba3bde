// RoPE inverse frequencies, computed as transformers computes them, for every backend.
#include "models/rope_frequencies.h"

#include <cmath>

namespace tf {

std::vector<float> rope_inverse_frequencies(int64_t head_dim, double theta) {
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  std::vector<float> inverse_frequencies(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = float(2 * i) / float(head_dim);
    inverse_frequencies[size_t(i)] = 1.0f / std::pow(float(theta), exponent);
  }
  return inverse_frequencies;
}

}  // namespace tf
