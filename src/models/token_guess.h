// A drafter's guess at a token: what a proposer reads of a drafter's logits row.
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

struct TokenGuess {
  int32_t token;
  float probability;  // softmax probability under the drafter's logits
};

// sum of exp(logits[i] - shift) over the row: a backend may pass its vector exp.
using SumOfExps = double (*)(const float* logits, int64_t n_vocab, float shift);

// The k likeliest tokens of a logits row, best first (ties to the lower id), with their softmax
// probabilities (only a proposer's confidence: speed depends on them, never a token).
std::vector<TokenGuess> likeliest_tokens(const float* logits, int64_t n_vocab, int64_t k,
                                         SumOfExps sum_of_exps = nullptr);

}  // namespace tf
