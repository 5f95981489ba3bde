// Drafter proposer: one block forward per round, its argmax chain and first-position siblings.
#include "speculation/drafter_proposer.h"

#include <algorithm>

namespace tf {

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
  drafter_->propose_block(context_, history.tokens.back(), position, logits_.data());

  std::vector<int32_t> chain(static_cast<size_t>(n_chain));
  for (int64_t j = 0; j < n_chain; ++j)
    chain[size_t(j)] = argmax_token(logits_.data() + j * n_vocab, n_vocab);
  const std::vector<int32_t> first = top_k_tokens(logits_.data(), n_vocab, options_.n_root_candidates);
  // The chain's head first, then its siblings, then the rest of the chain: a tight window keeps
  // the likelier shallow guesses and drops the deep tail.
  const auto source = uint8_t(ProposerKind::drafter);
  tree->add_chain(-1, {chain[0]}, max_nodes, source);
  for (size_t i = 1; i < first.size(); ++i) tree->add_chain(-1, {first[i]}, max_nodes, source);
  tree->add_chain(-1, chain, max_nodes, source);
}

}  // namespace tf
