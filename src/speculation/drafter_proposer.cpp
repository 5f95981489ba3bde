// Drafter proposer: one block forward per round, its argmax chain and first-position siblings.
#include "speculation/drafter_proposer.h"

#include <algorithm>
#include <cmath>

namespace tf {

DrafterProposer::DrafterProposer(std::shared_ptr<DFlashDrafter> drafter, DrafterProposerOptions options)
    : drafter_(std::move(drafter)), options_(options), pending_(drafter_->config().tap_width()) {}

void DrafterProposer::observe(const LaneHistory&) {}

void DrafterProposer::LaneContext::truncate(int64_t n) {
  if (n > proposer.first_position_) {
    proposer.context_.truncate(n - proposer.first_position_);
    return;
  }
  proposer.context_.truncate(0);  // the window starts again at n
  proposer.first_position_ = n;
}

void DrafterProposer::observe_taps(int64_t first_position, const float* taps, int64_t n_tokens) {
  LaneContext lane_context{*this};
  pending_.observe(lane_context, first_position, taps, n_tokens);
  if (pending_.n_tokens_held() > 2 * kMostHeldTaps) keep_newest(kMostHeldTaps);
}

void DrafterProposer::retire() {
  is_retired_ = true;
  context_ = DrafterContext();
  first_position_ = 0;
  pending_.clear();
}

void DrafterProposer::keep_newest(int64_t n_kept) {
  const int64_t n_dropped = pending_.n_tokens_held() - n_kept;
  if (n_dropped <= 0) return;
  first_position_ += context_.size() + n_dropped;
  context_.truncate(0);
  pending_.drop_first(n_dropped);
}

void DrafterProposer::append_held() {
  if (pending_.n_tokens_held() == 0) return;
  drafter_->append_context(context_, pending_.data(), pending_.n_tokens_held());
  pending_.drop_first(pending_.n_tokens_held());
}

void DrafterProposer::propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  const int64_t position = int64_t(history.tokens.size()) - 1;
  if (is_retired_ || position < 0 || tree->size() >= max_nodes || n_context() < position) return;
  if (pending_.n_tokens_held() > kMostHeldTaps) keep_newest(kMostHeldTaps);
  append_held();
  const int64_t n_chain = std::min(options_.max_chain, drafter_->n_block_logits());
  if (n_chain <= 0) return;
  drafter_->run_block(context_, history.tokens.back(), position - first_position_);

  // Rows past the confident prefix are never read (on the CPU their LM head is never computed).
  std::vector<DFlashDrafter::Guess> first = drafter_->block_top(0, options_.n_root_candidates);
  std::vector<int32_t> chain = {first[0].token};
  float path_probability = first[0].probability;
  for (int64_t j = 1; j < n_chain; ++j) {
    const DFlashDrafter::Guess best = drafter_->block_top(j, 1)[0];
    path_probability *= best.probability;
    if (path_probability < options_.min_path_probability) break;
    chain.push_back(best.token);
  }
  // The chain's head first, then its likely siblings, then the rest of the chain: a tight window
  // keeps the likelier shallow guesses and drops the deep tail.
  const auto source = uint8_t(ProposerKind::drafter);
  tree->add_chain(-1, {chain[0]}, max_nodes, source);
  for (size_t i = 1; i < first.size(); ++i)
    if (first[i].probability >= options_.min_path_probability) tree->add_chain(-1, {first[i].token}, max_nodes, source);
  tree->add_chain(-1, chain, max_nodes, source);
}

}  // namespace tf
