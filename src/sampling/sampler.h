// Turning logits into a token: greedy, or seeded sampling with the usual logit processors.
// A sampled token depends only on its logits, its parameters and its position in the sequence:
// randomness comes from a counter-based generator keyed by (seed, position), ties break by id.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sampling/philox.h"

namespace tf {

struct SamplingParams {
  float temperature = 0.0f;  // 0 means greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // 0 means off
  float top_p = 1.0f;        // 1 means off
  float min_p = 0.0f;        // 0 means off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;

  bool is_greedy() const { return temperature <= 0.0f; }
};

// How often each token occurred in the reply so far (penalties count generated tokens only,
// as OpenAI does).
using TokenCounts = std::unordered_map<int32_t, int32_t>;

struct TokenLogprob {
  int32_t token;
  float logprob;
};

class Sampler {
 public:
  // Picks the token at sequence position `position` (the index the token will have).
  // Reuses internal scratch buffers; one Sampler per thread.
  int32_t sample(const float* logits, int64_t n_vocab, const SamplingParams& params,
                 int64_t position, const TokenCounts& counts);

  // log-softmax of the raw logits (before processing) for `token` and the n best, best first,
  // ties by id.
  static float logprob_of(const float* logits, int64_t n_vocab, int32_t token);
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t n_vocab, int n);

 private:
  std::vector<float> processed_;
  std::vector<int32_t> order_;
};

// argmax with ties broken toward the lower id.
int32_t argmax(const float* logits, int64_t n);

}  // namespace tf
