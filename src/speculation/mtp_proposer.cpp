// MTP proposer: entries from committed taps, then a chain of the head's own guesses.
#include "speculation/mtp_proposer.h"

#include <algorithm>

namespace tf {

MtpProposer::MtpProposer(std::shared_ptr<MtpHead> head, MtpProposerOptions options)
    : head_(std::move(head)), options_(options), pending_(head_->tap_width()) {}

void MtpProposer::observe(const LaneHistory&) {}

void MtpProposer::observe_taps(int64_t first_position, const float* taps, int64_t n_tokens) {
  pending_.observe(context_, first_position, taps, n_tokens);
}

void MtpProposer::retire() {
  is_retired_ = true;
  context_ = MtpContext();
  pending_.clear();
}

void MtpProposer::propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  const int64_t root = int64_t(history.tokens.size()) - 1;
  if (is_retired_ || root < 1 || tree->size() >= max_nodes || options_.max_chain <= 0) return;
  // Entries up to root - 1: each takes the taps of its position and the token after it.
  const int64_t n_new = root - context_.size();
  if (n_new < 0 || pending_.n_tokens_held() < n_new) return;
  if (n_new > 0) {
    head_->append_context(context_, pending_.data(), history.tokens.data() + context_.size() + 1, n_new);
    pending_.drop_first(n_new);
  }
  if (!head_->begin_chain(context_)) return;

  std::vector<int32_t> chain;
  float path_probability = 1.0f;
  const int64_t n_chain = std::min(options_.max_chain, max_nodes - tree->size());
  for (int64_t j = 0; j < n_chain; ++j) {
    if (j > 0) head_->chain_step(context_, chain.back());
    const TokenGuess best = head_->chain_top(context_, 1)[0];
    path_probability *= best.probability;
    if (j > 0 && path_probability < options_.min_path_probability) break;
    chain.push_back(best.token);
  }
  tree->add_chain(-1, chain, max_nodes, uint8_t(ProposerKind::mtp));
}

}  // namespace tf
