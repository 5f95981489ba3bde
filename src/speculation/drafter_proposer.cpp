// Drafter proposer: one block forward per round, its argmax chain and first-position siblings.
#include "speculation/drafter_proposer.h"

#include <algorithm>
#include <cmath>

namespace tf {
namespace {

// The softmax of one logits row, normalised once, so each token's probability is one exp more.
class RowSoftmax {
 public:
  RowSoftmax(const float* logits, int64_t n) : logits_(logits), max_logit_(logits[0]) {
    for (int64_t i = 1; i < n; ++i) max_logit_ = std::max(max_logit_, logits[i]);
    for (int64_t i = 0; i < n; ++i) sum_ += std::exp(double(logits[i] - max_logit_));
  }
  float probability(int32_t token) const { return float(std::exp(double(logits_[token] - max_logit_)) / sum_); }

 private:
  const float* logits_;
  float max_logit_;
  double sum_ = 0.0;
};

}  // namespace

DrafterProposer::DrafterProposer(std::shared_ptr<DFlashDrafter> drafter, DrafterProposerOptions options)
    : drafter_(std::move(drafter)), options_(options) {}

void DrafterProposer::observe(const LaneHistory&) {}

void DrafterProposer::observe_taps(int64_t first_position, const float* taps, int64_t n_tokens) {
  // A gap (positions whose taps never came) cannot be filled: the lane drafts nothing more.
  if (first_position > context_.size()) return;
  context_.truncate(first_position);
  drafter_->append_context(context_, taps, n_tokens);
}

void DrafterProposer::propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  const int64_t position = int64_t(history.tokens.size()) - 1;
  if (position < 0 || tree->size() >= max_nodes || context_.size() < position) return;
  const int64_t n_vocab = drafter_->config().vocab_size;
  const int64_t n_chain = std::min(options_.max_chain, drafter_->n_block_logits());
  if (n_chain <= 0) return;
  logits_.resize(size_t(drafter_->n_block_logits() * n_vocab));
  drafter_->run_block(context_, history.tokens.back(), position);

  // Rows past the confident prefix are never computed (the LM head is most of the drafter's cost).
  std::vector<int32_t> chain;
  float path_probability = 1.0f;
  for (int64_t j = 0; j < n_chain; ++j) {
    float* row = logits_.data() + j * n_vocab;
    drafter_->block_logits(j, row);
    int32_t token = argmax_token(row, n_vocab);
    path_probability *= RowSoftmax(row, n_vocab).probability(token);
    if (j > 0 && path_probability < options_.min_path_probability) break;
    chain.push_back(token);
  }
  std::vector<int32_t> first = top_k_tokens(logits_.data(), n_vocab, options_.n_root_candidates);
  const RowSoftmax first_row(logits_.data(), n_vocab);
  auto unlikely = [&](int32_t token) { return first_row.probability(token) < options_.min_path_probability; };
  first.erase(std::remove_if(first.begin() + 1, first.end(), unlikely), first.end());
  // The chain's head first, then its siblings, then the rest of the chain: a tight window keeps
  // the likelier shallow guesses and drops the deep tail.
  const auto source = uint8_t(ProposerKind::drafter);
  tree->add_chain(-1, {chain[0]}, max_nodes, source);
  for (size_t i = 1; i < first.size(); ++i) tree->add_chain(-1, {first[i]}, max_nodes, source);
  tree->add_chain(-1, chain, max_nodes, source);
}

}  // namespace tf
