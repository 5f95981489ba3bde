// The Gated DeltaNet's per-token pieces on the CPU: the causal depthwise convolution, the q/k
// normalisation and one step of the gated delta rule. Each works on one token (one row) in a fixed
// order, so a token's result depends on its inputs alone, never on how many tokens share a pass;
// the model runs the recurrence token by token with these in every path (prefill, decode, verify,
// and the replay that commits accepted rows).
#pragma once
#include <cmath>
#include <cstdint>

namespace tf::cpu {

// The widest value head gated_delta_step takes (its scratch lives on the stack); the model checks at load.
constexpr int64_t kMaxValueHeadDim = 1024;

// out[c] = silu(sum_j weight[c][j] * window[j][c]), j = 0 .. kernel-1 in order (window[kernel-1] is
// the token itself, window[0] the oldest); weight: [channels][kernel].
void causal_conv_silu(const float* const* window, const float* weight, int64_t channels, int64_t kernel,
                      float* out);

// x *= 1 / sqrt(sum(x^2) + 1e-6) (the FLA l2norm transformers uses), then x /= divisor.
void l2_normalize(float* x, int64_t n, float divisor);

// The decay and the write strength of one value head: g = -exp(a_log) * softplus(a + dt_bias),
// beta = sigmoid(b).
float delta_decay(float a, float a_log, float dt_bias);
float delta_beta(float b);

// One token of the gated delta rule for one value head, state [key_dim][value_dim] in place:
// S *= exp(g); d = (v - S^T k) * beta; S += k d^T; out = S^T q (out may be null).
void gated_delta_step(float* state, const float* q, const float* k, const float* v, float g, float beta,
                      int64_t key_dim, int64_t value_dim, float* out);

// x * sigmoid(x) and sigmoid(x), written as PyTorch computes them.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x);

}  // namespace tf::cpu
