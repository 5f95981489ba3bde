// The round cost fit, the choice of a round's rows, and acceptance by depth.
#include "speculation/round_shape.h"

namespace tf {

void RowCost::record_round(int64_t n_rows, double seconds) {
  const double x = double(n_rows), weight = n_rounds_ == 0 ? 1.0 : kSmoothing;
  mean_x_ += weight * (x - mean_x_);
  mean_y_ += weight * (seconds - mean_y_);
  mean_xx_ += weight * (x * x - mean_xx_);
  mean_xy_ += weight * (x * seconds - mean_xy_);
  ++n_rounds_;
  const double variance = mean_xx_ - mean_x_ * mean_x_;
  if (variance < 0.25) return;  // every recent round about the same size: no slope to read
  model_.seconds_per_row = std::max(0.0, (mean_xy_ - mean_x_ * mean_y_) / variance);
  model_.fixed_seconds = std::max(0.0, mean_y_ - model_.seconds_per_row * mean_x_);
}

int64_t best_node_count(const RoundCostModel& cost, const std::vector<double>& chances, int64_t n_roots,
                        int64_t n_other_rows) {
  const int64_t n = int64_t(chances.size());
  if (!cost.is_known() || n_roots <= 0) return n;
  double tokens = double(n_roots);
  int64_t best = 0;
  double best_rate = -1.0;
  for (int64_t k = 0;; ++k) {
    const double rate = tokens / cost.seconds(n_roots + n_other_rows + k);  // > 0: the cost is known
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
    if (k == n) break;
    tokens += chances[size_t(k)];
  }
  return best;
}

int64_t best_chain_window(const RoundCostModel& cost, const std::vector<double>& acceptance_by_depth,
                          int64_t most_rows) {
  std::vector<double> chances;
  double chance = 1.0;
  for (int64_t d = 1; d < most_rows && d <= int64_t(acceptance_by_depth.size()); ++d) {
    chance *= std::clamp(acceptance_by_depth[size_t(d - 1)], 0.0, 1.0);
    chances.push_back(chance);
  }
  return 1 + best_node_count(cost, chances, 1);
}

// A depth's chance: its evidence, with the depth above's chance as the prior.
double AcceptanceByDepth::chance_below(const Cell& cell, double chance_above) {
  return std::clamp((cell.accepted + kPriorWeight * chance_above) / (cell.reached + kPriorWeight), 0.0, 1.0);
}

double AcceptanceByDepth::conditional(ProposerKind kind, bool is_sibling, bool after_full, int32_t depth) const {
  const Column& column = cells_[size_t(kind)][column_of(is_sibling, after_full)];
  double chance = kFirstPrior;
  for (int32_t d = 1; d <= std::min(depth, kDepths); ++d) chance = chance_below(column[size_t(d - 1)], chance);
  return chance;
}

std::vector<uint8_t> AcceptanceByDepth::siblings(const DraftTree& tree) {
  std::vector<uint8_t> has_child(size_t(tree.size() + 1), 0);  // [0] for the root
  std::vector<uint8_t> is_sibling(size_t(tree.size()), 0);
  for (size_t node = 0; node < size_t(tree.size()); ++node) {
    uint8_t& parent_has_child = has_child[size_t(tree.parents[node] + 1)];
    is_sibling[node] = parent_has_child;
    parent_has_child = 1;
  }
  return is_sibling;
}

std::vector<double> AcceptanceByDepth::node_chances(const DraftTree& tree, bool after_full) const {
  // [kind][is_sibling][depth - 1], computed once a call: each depth's chance rests on the one above.
  std::array<std::array<std::array<double, kDepths>, 2>, kProposerKinds> table;
  for (size_t kind = 0; kind < table.size(); ++kind)
    for (size_t sibling = 0; sibling < 2; ++sibling) {
      const Column& column = cells_[kind][column_of(sibling != 0, after_full)];
      double chance = kFirstPrior;
      for (size_t d = 0; d < size_t(kDepths); ++d) {
        chance = chance_below(column[d], chance);
        table[kind][sibling][d] = chance;
      }
    }
  const std::vector<uint8_t> is_sibling = siblings(tree);
  std::vector<double> chances(size_t(tree.size()));
  for (size_t node = 0; node < chances.size(); ++node) {
    const int32_t parent = tree.parents[node];
    const size_t depth = size_t(std::min(tree.depths[node], kDepths));
    const double own = table[tree.sources[node] % kProposerKinds][is_sibling[node]][depth - 1];
    chances[node] = (parent < 0 ? 1.0 : chances[size_t(parent)]) * own;
  }
  return chances;
}

void AcceptanceByDepth::record(const DraftTree& tree, const std::vector<uint8_t>& is_accepted, bool after_full) {
  // Every round fades all evidence, renewed or not: a proposer or depth the shaping cut off drifts
  // back to its prior and is verified again (a probe) if the prior pays.
  for (auto& by_kind : cells_)
    for (Column& column : by_kind)
      for (Cell& cell : column) {
        cell.reached *= kDecay;
        cell.accepted *= kDecay;
      }
  const std::vector<uint8_t> is_sibling = siblings(tree);
  for (size_t node = 0; node < size_t(tree.size()); ++node) {
    const int32_t parent = tree.parents[node];
    if (parent >= 0 && !is_accepted[size_t(parent)]) continue;  // never had its chance
    const size_t depth = size_t(std::min(tree.depths[node], kDepths));
    Cell& cell = cells_[tree.sources[node] % kProposerKinds][column_of(is_sibling[node] != 0, after_full)][depth - 1];
    cell.reached += 1.0;
    cell.accepted += is_accepted[node] ? 1.0 : 0.0;
  }
}

}  // namespace tf
