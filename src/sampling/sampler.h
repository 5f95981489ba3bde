// Turning logits into a token: greedy, or seeded sampling with the usual logit processors.
// A sampled token depends only on its logits, its parameters and its position in the sequence:
// randomness comes from a counter-based generator keyed by (seed, position), ties break by id.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>
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

// The reply before a logit row, as penalties see it: the tokens generated before this round, then
// the draft tokens on the path from the round's root down to the row (if the row is chosen, they
// were accepted before it). Every backend applies penalties from penalty_counts() of it.
struct PenaltyHistory {
  const TokenCounts* counts = nullptr;  // null: nothing generated yet
  const int32_t* path = nullptr;        // [n_path] root's child first
  int64_t n_path = 0;
};

// (token, count) of every token the history holds, ascending by token, so the order in which
// penalties are applied is fixed by the history alone.
void penalty_counts(const PenaltyHistory& history, std::vector<std::pair<int32_t, int32_t>>* out);

// What a request forces on a row before the usual processing: logit_bias added to the raw logits,
// then every token outside `allowed` (a grammar's mask, min_tokens) set to -inf. An empty
// constraint leaves the row exactly as it was; every backend applies the same two steps.
struct LogitConstraint {
  const std::pair<int32_t, float>* bias = nullptr;  // [n_bias] ascending by token, each once
  int64_t n_bias = 0;
  const uint32_t* allowed = nullptr;  // [ceil(n_vocab / 32)] bit t % 32 of word t / 32: t may be chosen; null: all
  bool is_empty() const { return n_bias == 0 && allowed == nullptr; }
};

inline bool is_allowed(const uint32_t* allowed, int64_t token) {
  return allowed == nullptr || ((allowed[token >> 5] >> (token & 31)) & 1u) != 0;
}

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// The one function that decides a token on the host: every caller that turns a logit row into a
// token goes through it (the CUDA backend's kernels are its twin on the GPU).
class Sampler {
 public:
  // Picks the token at sequence position `position` (the index the token will have).
  // Reuses internal scratch buffers; one Sampler per thread.
  int32_t sample(const float* logits, int64_t n_vocab, const SamplingParams& params,
                 int64_t position, const PenaltyHistory& history = {}, const LogitConstraint& constraint = {});
  int32_t sample(const float* logits, int64_t n_vocab, const SamplingParams& params,
                 int64_t position, const TokenCounts& counts) {
    return sample(logits, n_vocab, params, position, PenaltyHistory{&counts});
  }

  // log-softmax of the raw logits (before processing) for `token` and the n best, best first,
  // ties by id.
  static float logprob_of(const float* logits, int64_t n_vocab, int32_t token);
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t n_vocab, int n);

 private:
  std::vector<float> processed_;
  std::vector<int32_t> order_;
  std::vector<uint32_t> masses_;  // [n_vocab] each candidate's integer mass, 0 elsewhere
  std::vector<std::pair<int32_t, int32_t>> penalties_;
};

// argmax with ties broken toward the lower id.
int32_t argmax(const float* logits, int64_t n);
// logits += bias, then -inf outside `allowed`: the constraint's two steps, in place (the host twin
// of the CUDA constraint kernel).
void apply_logit_constraint(float* logits, int64_t n_vocab, const LogitConstraint& constraint);

}  // namespace tf
