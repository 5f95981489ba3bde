// Long-copy proposer: finds where the history's end occurred before and proposes what followed.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "speculation/proposer.h"

namespace tf {

struct LongCopyOptions {
  int64_t min_confident_match = 24;  // a match this long proposes a long copy
  int64_t max_copy = 256;            // most tokens in one long copy
  int64_t min_short_match = 3;       // shorter matches propose nothing
  int64_t max_short_chain = 8;       // most tokens proposed after a short match
};

// Keeps a suffix automaton over the lane's tokens, extended as tokens arrive, so the longest suffix
// of the history that also ends at an earlier position is known after every token. Among several
// earlier occurrences the most recent wins: the newest copy of a repeated text (a file edited over
// several turns, a list being extended) is the one most likely to be continued.
// A proposer serves one lane: the history must only grow between calls.
class LongCopyProposer final : public Proposer {
 public:
  explicit LongCopyProposer(LongCopyOptions options = {});
  ~LongCopyProposer() override;

  ProposerKind kind() const override { return ProposerKind::long_copy; }
  void observe(const LaneHistory& history) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;

  // Length of the longest suffix of the observed history that also ends at an earlier position.
  int64_t last_match_length() const;
  // Index of the last token of that suffix's most recent earlier occurrence, or -1 without a match.
  int64_t last_match_end() const;

 private:
  struct Automaton;
  void catch_up(const LaneHistory& history);

  LongCopyOptions options_;
  std::unique_ptr<Automaton> automaton_;
  int64_t n_observed_ = 0;
  std::vector<int32_t> chain_;  // scratch for propose()
};

}  // namespace tf
