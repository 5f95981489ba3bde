// The proposer set of a lane, gating, and the hand-over of what a round committed.
#include "speculation/speculation.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "models/dflash_drafter.h"
#include "models/mtp_head.h"
#include "speculation/long_copy.h"
#include "speculation/ngram.h"
#include "speculation/replay.h"

namespace tf {

Speculation::Speculation(SpeculationOptions options) : options_(std::move(options)) {
  // Each reads its own layers' taps as the whole tap row, so one of them at a time.
  if (options_.drafter && options_.mtp) fail("the block drafter and the MTP head cannot draft together; choose one");
}

std::vector<int> Speculation::tap_layers() const {
  if (options_.mtp) return {options_.mtp->tap_layer()};
  if (!options_.drafter) return {};
  const auto& ids = options_.drafter->config().target_layer_ids;
  return std::vector<int>(ids.begin(), ids.end());
}

std::unique_ptr<LaneSpeculation> Speculation::for_lane(const DraftRequest& request, int64_t window) {
  auto allowed = [&](ProposerKind kind) { return (request.proposers & proposer_bit(kind)) != 0; };
  std::vector<std::unique_ptr<Proposer>> proposers;
  if (!request.replay.empty() && allowed(ProposerKind::replay))
    proposers.push_back(
        std::make_unique<ReplayProposer>(request.replay, request.replay_depth > 0 ? request.replay_depth : window));
  if (allowed(ProposerKind::long_copy)) {
    LongCopyOptions copy;
    copy.min_confident_match = options_.settings.min_confident_match;
    proposers.push_back(std::make_unique<LongCopyProposer>(copy, request.copy_source));
  }
  if (options_.drafter && allowed(ProposerKind::drafter))
    proposers.push_back(std::make_unique<DrafterProposer>(options_.drafter, options_.settings.drafter_tree));
  if (options_.mtp && allowed(ProposerKind::mtp))
    proposers.push_back(std::make_unique<MtpProposer>(options_.mtp, options_.settings.mtp_chain));
  if (allowed(ProposerKind::ngram)) proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{}));
  return std::make_unique<LaneSpeculation>(*this, std::move(proposers));
}

LaneSpeculation::LaneSpeculation(Speculation& owner, std::vector<std::unique_ptr<Proposer>> proposers)
    : owner_(owner), proposers_(std::move(proposers)), acceptance_(owner.acceptance_) {
  const bool is_probe_lane = ++owner_.n_lanes_ % Speculation::kProbeLaneEvery == 0;
  for (size_t kind = 0; kind < gates_.size(); ++kind)
    gates_[kind] = is_probe_lane ? owner_.gates_[kind].for_probe_lane() : owner_.gates_[kind].for_new_lane();
}

LaneSpeculation::~LaneSpeculation() {
  for (const LaneSpeculation*& lane : owner_.warming_lanes_)
    if (lane == this) lane = nullptr;
}

bool LaneSpeculation::waits_for_warm_up(size_t kind) const {
  const LaneSpeculation* warming = owner_.warming_lanes_[kind];
  return warming != nullptr && warming != this && owner_.gates_[kind].is_warming_up();
}

void LaneSpeculation::draft(const LaneHistory& history, int64_t max_nodes, const RoundCosts& costs,
                            DraftTree* tree) {
  using Clock = std::chrono::steady_clock;
  tree->clear();
  use_seconds_.fill(-1.0);
  std::array<bool, kProposerKinds> drafted{};  // gated kinds that added nodes this round
  const size_t n_asked = max_nodes > 0 ? proposers_.size() : 0;  // a round with no room asks none
  for (size_t p = 0; p < n_asked; ++p) {
    Proposer* proposer = proposers_[p].get();
    proposer->observe(history);
    if (tree->size() >= max_nodes) continue;
    const size_t kind = size_t(proposer->kind());
    // Lanes that started together warm up together: once the engine's uses are enough to trust,
    // a lane still in its own warm-up takes the engine's averages, as a lane starting now would.
    if (gates_[kind].is_warming_up() && !owner_.gates_[kind].is_warming_up())
      gates_[kind] = owner_.gates_[kind].for_new_lane();
    if (!owner_.options_.settings.gate_proposers || !proposer->is_gated()) {
      proposer->propose(history, max_nodes, tree);
    } else if (waits_for_warm_up(kind)) {
      continue;
    } else if (!gates_[kind].should_run(costs.plain_round_seconds)) {
      gates_[kind].record_skip();
    } else {
      // A use costs the proposer's own time, and a verified row for every node of it the round
      // verifies (added in record_accepted: shaping or a grammar may cut some).
      const auto start = Clock::now();
      const int64_t n_before = tree->size();
      proposer->propose(history, max_nodes, tree);
      use_seconds_[kind] = std::chrono::duration<double>(Clock::now() - start).count();
      drafted[kind] = tree->size() > n_before;
      // The first lane whose proposer drafts in the engine's warm-up warms it up alone.
      if (drafted[kind] && owner_.gates_[kind].is_warming_up() && owner_.warming_lanes_[kind] == nullptr)
        owner_.warming_lanes_[kind] = this;
    }
  }
  // A lane keeps the warm-up only while it drafts every round: one whose drafts stop (another
  // proposer filled its window, or its context lacks taps) lets the next lane that drafts take it.
  for (size_t kind = 0; kind < drafted.size(); ++kind)
    if (owner_.warming_lanes_[kind] == this && !drafted[kind]) owner_.warming_lanes_[kind] = nullptr;
}

bool LaneSpeculation::wants_taps() const {
  return std::any_of(proposers_.begin(), proposers_.end(), [](const auto& p) { return p->wants_taps(); });
}

void LaneSpeculation::observe_taps(int64_t first_position, const float* taps, int64_t n_tokens,
                                   const RoundCosts& costs) {
  for (auto& proposer : proposers_) {
    if (!proposer->wants_taps()) continue;
    const bool is_gated = owner_.options_.settings.gate_proposers && proposer->is_gated();
    if (is_gated && gates_[size_t(proposer->kind())].is_closed(costs.plain_round_seconds) &&
        proposer->n_taps_held() + n_tokens > kMostHeldTaps) {
      proposer->retire();
      continue;
    }
    proposer->observe_taps(first_position, taps, n_tokens);
  }
}

void LaneSpeculation::record_accepted(const DraftTree& tree, const std::vector<int32_t>& accepted_nodes,
                                      const RoundCosts& costs) {
  std::vector<uint8_t> is_accepted(size_t(tree.size()), 0);
  std::array<int64_t, kProposerKinds> n_accepted_by_kind{}, n_verified_by_kind{};
  for (uint8_t source : tree.sources) n_verified_by_kind[source % kProposerKinds] += 1;
  for (int32_t node : accepted_nodes) {
    is_accepted[size_t(node)] = 1;
    n_accepted_by_kind[tree.sources[size_t(node)] % kProposerKinds] += 1;
  }
  if (!is_off()) {
    acceptance_.record(tree, is_accepted, after_full_);
    owner_.acceptance_.record(tree, is_accepted, after_full_);
    after_full_ = tree.size() > 0 && int64_t(accepted_nodes.size()) == tree.max_depth();
    rounds_to_probe_ = rounds_to_probe_ == 0 ? kRoundsBetweenProbes - 1 : rounds_to_probe_ - 1;
  }
  for (size_t kind = 0; kind < size_t(kProposerKinds); ++kind) {
    if (use_seconds_[kind] < 0.0) continue;
    const double seconds = use_seconds_[kind] + double(n_verified_by_kind[kind]) * costs.seconds_per_row;
    gates_[kind].record_use(seconds, n_accepted_by_kind[kind], costs.plain_round_seconds);
    owner_.gates_[kind].record_use(seconds, n_accepted_by_kind[kind], costs.plain_round_seconds);
  }
}

}  // namespace tf
