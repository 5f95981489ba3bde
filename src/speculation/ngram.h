// N-gram proposer: the fallback that chains the most recent continuation of the last few tokens.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "speculation/proposer.h"

namespace tf {

struct NgramOptions {
  int n = 3;              // longest n-gram: contexts of n-1 tokens down to 1
  int64_t max_chain = 8;  // most tokens proposed per round
};

// For every context length from n-1 down to 1, remembers the token that most recently followed
// each context; a proposal extends the history greedily, asking the longest context that is known.
// A proposer serves one lane: the history must only grow between calls.
class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(NgramOptions options = {});

  ProposerKind kind() const override { return ProposerKind::ngram; }
  bool is_gated() const override { return true; }  // many short guesses, a verified row each
  void observe(const LaneHistory& history) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;

 private:
  void catch_up(const LaneHistory& history);
  // The token that most recently followed the longest known context ending at context.back().
  bool predict_next(const std::vector<int32_t>& context, int32_t* next) const;

  NgramOptions options_;
  // Keyed by a hash of (context length, context tokens); a collision only costs a wrong guess.
  std::unordered_map<uint64_t, int32_t> next_token_;
  int64_t n_observed_ = 0;
  std::vector<int32_t> extended_;  // scratch for propose(): the history's tail plus the chain
};

}  // namespace tf
