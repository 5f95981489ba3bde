// Proposers put candidate continuations on the table for one lane; the engine verifies them.
// A proposer proposes; acceptance lives in the engine alone, so a wrong proposal costs speed only.
#pragma once
#include <cstdint>
#include <vector>

#include "speculation/draft_tree.h"

namespace tf {

// A lane's tokens so far: the prompt, then the reply. The last token is the tree's root: it is
// verified this round and every proposed node continues it.
struct LaneHistory {
  const std::vector<int32_t>& tokens;
  int64_t n_prompt;
};

enum class ProposerKind : uint8_t { long_copy = 0, ngram = 1, replay = 2, drafter = 3, mtp = 4 };
constexpr int kProposerKinds = 5;
const char* proposer_kind_name(ProposerKind kind);

// Which proposers a request may use, bit k for ProposerKind k; none turns speculation off (the
// "draft": false extension), and benchmarks isolate one at a time.
using ProposerSet = uint8_t;
constexpr ProposerSet proposer_bit(ProposerKind kind) { return ProposerSet(1u << uint8_t(kind)); }
constexpr ProposerSet kNoProposers = 0;
constexpr ProposerSet kAllProposers = ProposerSet((1u << kProposerKinds) - 1);

// Most taps a proposer holds without catching up on them: past this, one whose gate is open appends
// them to its context, and one whose gate is closed retires from the lane (LaneSpeculation::observe_taps).
constexpr int64_t kMostHeldTaps = 256;

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual ProposerKind kind() const = 0;
  // Whether drafting costs enough (its own forward, many short guesses) that it should draft only
  // while its accepted tokens pay for it (ProposerGate).
  virtual bool is_gated() const { return false; }
  // Called after tokens were appended to the history (prompt first, then accepted tokens), so
  // incremental structures can catch up; history.tokens only ever grows between calls.
  virtual void observe(const LaneHistory& history) = 0;
  // Proposers that learn from the target's hidden states want the taps of committed rows.
  virtual bool wants_taps() const { return false; }
  // taps: [n_tokens][tap width] of the rows committed at first_position ... (prefill chunks, the
  // tree root and the accepted draft rows), in position order; entries at positions >= first_position
  // replace what an earlier call said (a lane rolled back needs no separate call).
  virtual void observe_taps(int64_t /*first_position*/, const float* /*taps*/, int64_t /*n_tokens*/) {}
  // Taps handed over but not yet part of the proposer's context (what it must catch up on to draft).
  virtual int64_t n_taps_held() const { return 0; }
  // Stops for the rest of the lane: drops its context and held taps, wants no more, proposes nothing.
  virtual void retire() {}
  // Adds at most max_nodes - tree.size() nodes to the tree.
  virtual void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) = 0;
};

}  // namespace tf
