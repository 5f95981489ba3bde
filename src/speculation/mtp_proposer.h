// MTP proposer: the checkpoint's own next-token head (models/mtp_head.h) drafts a chain, one
// step per token, from the target's hidden state of the last committed position before the root.
//
// How it is fed: like the block drafter, through the taps of committed rows (the target's last layer,
// Speculation::tap_layers). An entry at position t needs token t+1 too, which is committed one
// position later, so taps wait here until propose() sees the history that holds it. With the root at
// position P, the entries 0..P-1 are then complete, and entry P-1's output predicts token P+1.
// The chain's own steps live in the head's scratch room and never become entries: committed entries
// come only from the target's taps of committed rows, so a rejected draft leaves nothing behind.
// When taps are missing for a position (a prefix restored without them), propose() adds nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/mtp_head.h"
#include "speculation/pending_taps.h"
#include "speculation/proposer.h"

namespace tf {

struct MtpProposerOptions {
  int64_t max_chain = 4;  // most chained tokens a round
  // A node is proposed only while the head's own probability of the path to it stays at or above
  // this; the chain's head is always proposed.
  float min_path_probability = 0.1f;
};

class MtpProposer final : public Proposer {
 public:
  MtpProposer(std::shared_ptr<MtpHead> head, MtpProposerOptions options = {});

  ProposerKind kind() const override { return ProposerKind::mtp; }
  bool is_gated() const override { return true; }  // a forward of the MTP layer per chained token
  void observe(const LaneHistory& history) override;
  bool wants_taps() const override { return !is_retired_; }
  // taps: [n_tokens][head tap_width]; taps that start past what is held are ignored (a gap).
  void observe_taps(int64_t first_position, const float* taps, int64_t n_tokens) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;
  int64_t n_taps_held() const override { return pending_.n_tokens_held(); }
  void retire() override;
  int64_t n_context() const { return context_.size(); }

 private:
  std::shared_ptr<MtpHead> head_;
  MtpProposerOptions options_;
  MtpContext context_;
  PendingTaps pending_;  // taps of positions context_.size() ..., not yet entries
  bool is_retired_ = false;
};

}  // namespace tf
