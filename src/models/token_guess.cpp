#include "models/token_guess.h"

#include <algorithm>
#include <cmath>

#include "models/dflash_drafter.h"

namespace tf {

std::vector<TokenGuess> likeliest_tokens(const float* logits, int64_t n_vocab, int64_t k, SumOfExps sum_of_exps) {
  const std::vector<int32_t> top = top_k_tokens(logits, n_vocab, std::max<int64_t>(k, 1));
  if (top.empty()) return {};
  // The softmax normalised once, so each token's probability is one exp more.
  const float max_logit = logits[top[0]];
  double sum = 0.0;
  if (sum_of_exps) {
    sum = sum_of_exps(logits, n_vocab, max_logit);
  } else {
    for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  }
  std::vector<TokenGuess> guesses;
  for (int64_t i = 0; i < k && i < int64_t(top.size()); ++i)
    guesses.push_back({top[size_t(i)], float(std::exp(double(logits[top[size_t(i)]] - max_logit)) / sum)});
  return guesses;
}

}  // namespace tf
