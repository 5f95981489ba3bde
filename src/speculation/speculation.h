// Speculation behind one interface: which proposers draft for a lane, whether a gated one drafts
// this round, and what each learns once a round is committed. The engine asks for a lane's drafts
// and reports what was accepted; it names no proposer.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "speculation/draft_tree.h"
#include "speculation/drafter_proposer.h"
#include "speculation/mtp_proposer.h"
#include "speculation/proposer.h"
#include "speculation/proposer_gate.h"
#include "speculation/round_shape.h"

namespace tf {

class DFlashDrafter;
class MtpHead;

// The engine's speculation settings, fixed at start (EngineOptions::speculation).
struct SpeculationSettings {
  DrafterProposerOptions drafter_tree;  // the block drafter's tree shape (spec-eval can vary it)
  MtpProposerOptions mtp_chain;         // the MTP head's chain length and cut
  int64_t min_confident_match = 24;     // long-copy match length that proposes long copy rows
  // Let gated proposers (Proposer::is_gated) draft only while their accepted tokens pay for their
  // time and rows (ProposerGate). The server turns it on; off, they draft every round, so
  // acceptance does not depend on the clock (measurements and tests).
  bool gate_proposers = false;
};

struct SpeculationOptions {
  std::shared_ptr<DFlashDrafter> drafter;  // the block drafter; null: none
  SpeculationSettings settings;
  std::shared_ptr<MtpHead> mtp;            // the checkpoint's MTP head; null: none (one of the two at most)
};

// What one request asks of speculation.
struct DraftRequest {
  ProposerSet proposers = kAllProposers;  // kNoProposers: speculation off
  // Benchmarks and tests: a reply the replay proposer drafts, to force any acceptance length.
  std::vector<int32_t> replay;
  int64_t replay_depth = 0;  // replay tokens drafted a round; 0: the lane's window
  // Predicted Outputs: text the reply is expected to copy (a rewrite's old file); long copy reads
  // it as if it came before the prompt.
  std::vector<int32_t> copy_source;
};

// What the engine measured of its rounds: what a lane's share of a round without drafts costs (what
// each accepted draft token saves) and what one more verified row adds to a round.
struct RoundCosts {
  double plain_round_seconds = 0.0;
  double seconds_per_row = 0.0;
};

class LaneSpeculation;

// One per engine: makes each lane's proposer set and keeps every lane's gate history and
// acceptance by depth, so a new lane starts from what the others have seen.
class Speculation {
 public:
  explicit Speculation(SpeculationOptions options);

  // Target layers whose hidden states the proposers need as taps (the drafter's or the MTP head's);
  // empty if none.
  std::vector<int> tap_layers() const;
  // The lane's proposers, asked in order (earlier ones fill the window first).
  std::unique_ptr<LaneSpeculation> for_lane(const DraftRequest& request, int64_t window);
  // Every kProbeLaneEvery-th lane probes its closed gates at once (ProposerGate::for_probe_lane)
  // instead of waiting out the engine's interval, so a proposer the engine found not to pay (and
  // which then retires early from lanes) is measured again.
  static constexpr int64_t kProbeLaneEvery = 8;

 private:
  friend class LaneSpeculation;
  SpeculationOptions options_;
  std::array<ProposerGate, kProposerKinds> gates_;  // every lane's uses, by ProposerKind
  // The lane whose uses warm each gate up; null: none yet. Lanes that start together would
  // otherwise each pay a warm-up (and its context's catch-up) for one verdict.
  std::array<const LaneSpeculation*, kProposerKinds> warming_lanes_{};
  AcceptanceByDepth acceptance_;                    // every lane's rounds: where a new lane starts
  int64_t n_lanes_ = 0;
};

// One lane's proposers and gates.
class LaneSpeculation {
 public:
  LaneSpeculation(Speculation& owner, std::vector<std::unique_ptr<Proposer>> proposers);
  ~LaneSpeculation();
  LaneSpeculation(const LaneSpeculation&) = delete;
  LaneSpeculation& operator=(const LaneSpeculation&) = delete;

  bool is_off() const { return proposers_.empty(); }
  // Clears the tree and fills it with at most max_nodes nodes continuing history.tokens.back().
  void draft(const LaneHistory& history, int64_t max_nodes, const RoundCosts& costs, DraftTree* tree);
  // Whether any proposer wants the taps of committed rows (the engine gathers them only then).
  bool wants_taps() const;
  // taps: [n_tokens][tap width] of the rows committed this round at first_position ..., in order.
  // With gates on, a proposer whose gate is closed retires from the lane rather than hold more than
  // kMostHeldTaps taps it has not caught up on: its context would cost a forward over every token
  // the lane commits (its prompt first) for drafts that do not pay.
  void observe_taps(int64_t first_position, const float* taps, int64_t n_tokens, const RoundCosts& costs);
  // Rounds between probes: a lane's first decoding round and every kRoundsBetweenProbes-th after it
  // verify the whole drafted tree, so a proposer or a depth that shaping cut off (or never tried:
  // its prior too low to pay where rows are dear) is measured again.
  static constexpr int64_t kRoundsBetweenProbes = 16;
  bool is_probe_due() const { return rounds_to_probe_ == 0; }
  // [n_nodes] each node's chance of being accepted, from the proposers' acceptance by depth.
  std::vector<double> node_chances(const DraftTree& tree) const { return acceptance_.node_chances(tree, after_full_); }
  // After the round's acceptance: the verified tree and its accepted nodes (root first), for the
  // gates and the acceptance by depth.
  void record_accepted(const DraftTree& tree, const std::vector<int32_t>& accepted_nodes, const RoundCosts& costs);

 private:
  // While the engine's gate for `kind` warms up, one lane drafts for it and the others wait for
  // its verdict (then take the engine's averages).
  bool waits_for_warm_up(size_t kind) const;

  Speculation& owner_;
  std::vector<std::unique_ptr<Proposer>> proposers_;
  std::array<ProposerGate, kProposerKinds> gates_;  // by ProposerKind; used for the gated kinds
  std::array<double, kProposerKinds> use_seconds_{};  // this round's cost of each gated use; -1: no use
  AcceptanceByDepth acceptance_;
  bool after_full_ = false;      // the last round accepted its tree's whole depth
  int64_t rounds_to_probe_ = 0;  // decoding rounds until the next probe
};

}  // namespace tf
