// A lane's token constraints during a reply: the grammar state after the accepted tokens, each
// draft node's state (forked per branch), and the allowed-token mask of every verify row.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "grammar/grammar_matcher.h"
#include "speculation/draft_tree.h"

namespace tf {

class Tokenizer;

// The bytes a grammar sees for each id of the model's vocabulary: a token's raw bytes, none for
// special tokens (a grammar never emits them) and for ids past the tokenizer's.
std::shared_ptr<const TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer, int64_t n_vocab);

// What can never run, as (parameter, message): token ids outside the vocabulary, min_tokens above
// max_tokens, a grammar without a tokenizer or with ignore_eos (a finished grammar must end).
std::optional<std::pair<std::string, std::string>> check_constraints(const GenerationRequest& request, int64_t n_vocab,
                                                                     bool has_tokenizer);

class LaneConstraint {
 public:
  LaneConstraint(const TokenConstraints& constraints, std::shared_ptr<const TokenVocabulary> vocabulary,
                 std::vector<int32_t> end_ids, int64_t n_vocab);

  // Drops the nodes whose token the grammar refuses after their path (the target can never choose
  // them there, so they could never be accepted) and keeps each remaining node's state.
  void prune(DraftTree* tree);
  // Whether the row below `node` (-1: the root) choosing the reply's token number `completion_index`
  // needs a mask; if so, writes it (n_words words).
  bool row_mask(int32_t node, int64_t completion_index, uint32_t* mask);
  const std::pair<int32_t, float>* bias() const { return bias_.data(); }
  int64_t n_bias() const { return int64_t(bias_.size()); }
  int64_t n_words() const { return (n_vocab_ + 31) / 32; }
  // The reply's state moves on along an accepted token (never a draft's).
  void accept(int32_t token);
  bool is_stop_token(int32_t token) const;
  // Set when the grammar could not be followed (too ambiguous); the lane ends with this error.
  const std::optional<std::string>& failure() const { return failure_; }

 private:
  const GrammarState& state_of(int32_t node) const { return node < 0 ? state_ : node_states_[size_t(node)]; }

  std::optional<GrammarMatcher> matcher_;  // with a grammar only
  GrammarState state_;                     // after the accepted tokens
  std::vector<GrammarState> node_states_;  // [tree nodes] after the node's path
  std::vector<std::pair<int32_t, float>> bias_;
  int64_t min_tokens_ = 0;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> end_ids_;  // EOS and stop ids: allowed once the grammar may end
  int64_t n_vocab_;
  std::optional<std::string> failure_;
};

}  // namespace tf
