// Replay of an expected reply, checked against the actual reply token by token.
#include "speculation/replay.h"

#include <algorithm>
#include <utility>

namespace tf {

ReplayProposer::ReplayProposer(std::vector<int32_t> expected_reply, int64_t depth)
    : expected_reply_(std::move(expected_reply)), depth_(depth) {}

void ReplayProposer::catch_up(const LaneHistory& history) {
  int64_t n_reply = int64_t(history.tokens.size()) - history.n_prompt;
  if (n_reply < n_reply_checked_) {  // a different history: start over
    n_reply_checked_ = 0;
    has_diverged_ = false;
  }
  // Only the new reply tokens are compared, so a long reply costs O(1) per token.
  for (; n_reply_checked_ < n_reply && !has_diverged_; ++n_reply_checked_) {
    int32_t actual = history.tokens[size_t(history.n_prompt + n_reply_checked_)];
    has_diverged_ = n_reply_checked_ >= int64_t(expected_reply_.size()) ||
                    expected_reply_[size_t(n_reply_checked_)] != actual;
  }
}

void ReplayProposer::observe(const LaneHistory& history) { catch_up(history); }

void ReplayProposer::propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  catch_up(history);
  if (has_diverged_) return;
  int64_t n_reply = int64_t(history.tokens.size()) - history.n_prompt;
  int64_t n_left = int64_t(expected_reply_.size()) - n_reply;
  int64_t n_chain = std::min({depth_, n_left, max_nodes - tree->size()});
  if (n_chain <= 0) return;
  auto first = expected_reply_.begin() + n_reply;
  chain_.assign(first, first + n_chain);
  tree->add_chain(-1, chain_, max_nodes, uint8_t(ProposerKind::replay));
}

}  // namespace tf
