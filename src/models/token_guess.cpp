#include "models/token_guess.h"

#include <algorithm>
#include <cmath>

#include "models/dflash_drafter.h"

namespace tf {

std::vector<TokenGuess> likeliest_tokens(const float* logits, int64_t n_vocab, int64_t k) {
  // The softmax normalised once, so each token's probability is one exp more.
  const float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  std::vector<TokenGuess> guesses;
  for (int32_t token : top_k_tokens(logits, n_vocab, k))
    guesses.push_back({token, float(std::exp(double(logits[token] - max_logit)) / sum)});
  return guesses;
}

}  // namespace tf
