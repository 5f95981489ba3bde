// Gated DeltaNet per-token kernels on the CPU; every sum runs in one fixed order.
#include "backends/cpu/kernels/gated_delta_net.h"

#include <cmath>

#include "backends/cpu/kernels/simd.h"

namespace tf::cpu {

void causal_conv_silu(const float* const* window, const float* weight, int64_t channels, int64_t kernel,
                      float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    float sum = 0.0f;
    for (int64_t j = 0; j < kernel; ++j) sum = sum + weight[c * kernel + j] * window[j][c];
    out[c] = silu(sum);
  }
}

void l2_normalize(float* x, int64_t n, float divisor) {
  const float sum_of_squares = dot_fixed_order<kGenericWidth>(x, x, n);
  const float inverse_norm = 1.0f / std::sqrt(sum_of_squares + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] * inverse_norm) / divisor;
}

float delta_decay(float a, float a_log, float dt_bias) {
  const float x = a + dt_bias;
  // PyTorch's softplus: x itself above its threshold of 20, log1p(exp(x)) below.
  const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
  return -std::exp(a_log) * softplus;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float delta_beta(float b) { return sigmoid(b); }

// Sums over the key dimension run i = 0, 1, ... in order, each a plain multiply then add (the build
// has -ffp-contract=off), vectorised across the value dimension only, which changes no sum.
void gated_delta_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
                      int64_t key_dim, int64_t value_dim, float* out) {
  const float decay = std::exp(g);
  float remembered[kMaxValueHeadDim];  // S^T k, then overwritten by the delta
  float* delta = remembered;
  for (int64_t j = 0; j < value_dim; ++j) remembered[j] = 0.0f;
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    const float k_i = k[i];
    for (int64_t j = 0; j < value_dim; ++j) {
      row[j] = row[j] * decay;
      remembered[j] = remembered[j] + row[j] * k_i;
    }
  }
  for (int64_t j = 0; j < value_dim; ++j) delta[j] = (v[j] - remembered[j]) * beta;
  if (out)
    for (int64_t j = 0; j < value_dim; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    const float k_i = k[i];
    for (int64_t j = 0; j < value_dim; ++j) row[j] = row[j] + k_i * delta[j];
    if (out) {
      const float q_i = q[i];
      for (int64_t j = 0; j < value_dim; ++j) out[j] = out[j] + row[j] * q_i;
    }
  }
}

}  // namespace tf::cpu
