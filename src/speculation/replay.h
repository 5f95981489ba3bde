// Replay proposer: proposes a known reply, so benchmarks and tests can force any acceptance.
#pragma once
#include <cstdint>
#include <vector>

#include "speculation/proposer.h"

namespace tf {

// Proposes the next `depth` tokens of `expected_reply` after the reply so far, as long as the reply
// so far is a prefix of it; once the reply departs from it, proposes nothing.
// A proposer serves one lane: the history must only grow between calls.
class ReplayProposer final : public Proposer {
 public:
  ReplayProposer(std::vector<int32_t> expected_reply, int64_t depth);

  ProposerKind kind() const override { return ProposerKind::replay; }
  void observe(const LaneHistory& history) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;

 private:
  void catch_up(const LaneHistory& history);

  std::vector<int32_t> expected_reply_;
  int64_t depth_;
  int64_t n_reply_checked_ = 0;  // reply tokens compared with the expected reply so far
  bool has_diverged_ = false;
  std::vector<int32_t> chain_;  // scratch for propose()
};

}  // namespace tf
