// Drafter proposer: the DFlash block drafter's greedy block as a chain, and the top-k of its
// first position as root siblings, each cut where the drafter's own confidence runs out.
//
// How it is fed (the taps protocol):
//   1. At startup the model keeps the taps of the drafter's target layers for every row
//      (Speculation::tap_layers, Model::set_tap_layers).
//   2. After each round's commit the engine hands every proposer that wants_taps() the taps of the
//      rows whose K/V became the lane's history this round (Proposer::observe_taps). They are held
//      (PendingTaps) and appended in one batch when the proposer next drafts (each entry depends on
//      its own row alone, so the batching changes no entry); with gates on and its gate closed, it
//      retires from the lane once it would hold more than kMostHeldTaps.
//   A window bounds what catching up costs: when more than kMostHeldTaps taps are held as it
//   drafts (a long prompt, or a long run another proposer's drafts filled), the context restarts
//   with the newest kMostHeldTaps of them, and it never holds more than twice that. Positions
//   are counted from the window's start: attention with rotary positions depends only on the
//   distance between positions, so the window drafts as a context of just those tokens would.
//   3. The lane's last token (the target's own next token) has no taps yet: it is the block's
//      first token, and its taps arrive next round, when it has been forwarded as the root.
// When the context does not cover every position before the root (a prefix restored from a cache
// without taps), propose() adds nothing: speculation only ever costs speed, never tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/dflash_drafter.h"
#include "speculation/pending_taps.h"
#include "speculation/proposer.h"

namespace tf {

struct DrafterProposerOptions {
  int64_t n_root_candidates = 4;  // top-k at the first position: the chain's head plus k-1 siblings
  int64_t max_chain = 15;         // most chain nodes; the drafter proposes at most block_size - 1
  // Every verified row costs; a node is proposed only while the drafter's own probability of
  // the path to it (product of softmax probabilities along the chain) stays at or above this.
  // The chain's head is always proposed.
  float min_path_probability = 0.1f;
};

// A proposer serves one lane; the drafter (weights and scratch) is shared by every lane of the
// engine thread.
class DrafterProposer final : public Proposer {
 public:
  DrafterProposer(std::shared_ptr<DFlashDrafter> drafter, DrafterProposerOptions options = {});

  ProposerKind kind() const override { return ProposerKind::drafter; }
  bool is_gated() const override { return true; }  // a forward of its whole block per use
  // Tokens alone teach the drafter nothing; it learns through observe_taps.
  void observe(const LaneHistory& history) override;
  bool wants_taps() const override { return !is_retired_; }
  // taps: [n_tokens][drafter tap_width]; taps that start past what is held are ignored (the gap
  // cannot be filled).
  void observe_taps(int64_t first_position, const float* taps, int64_t n_tokens) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;
  int64_t n_taps_held() const override { return pending_.n_tokens_held(); }
  void retire() override;
  // Positions with taps (up to the last one): appended to the drafter's context, or held for it.
  int64_t n_context() const { return first_position_ + context_.size() + pending_.n_tokens_held(); }
  // The first lane position the drafter's context (or, while it is empty, the held taps) covers.
  int64_t first_position() const { return first_position_; }

 private:
  // The drafter's context seen in lane positions, for PendingTaps.
  struct LaneContext {
    DrafterProposer& proposer;
    int64_t size() const { return proposer.first_position_ + proposer.context_.size(); }
    void truncate(int64_t n);
  };
  // Restarts the context with the newest `n_kept` held taps.
  void keep_newest(int64_t n_kept);
  void append_held();

  std::shared_ptr<DFlashDrafter> drafter_;
  DrafterProposerOptions options_;
  DrafterContext context_;  // entry i is lane position first_position_ + i
  int64_t first_position_ = 0;
  PendingTaps pending_;
  bool is_retired_ = false;
};

}  // namespace tf
