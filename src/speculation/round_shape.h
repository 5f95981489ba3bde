// How many rows a round verifies: each draft node's chance of being accepted (from each proposer's
// measured acceptance by depth) weighed against what a row adds to the round's time (the fitted
// round cost), so a round verifies the rows whose expected tokens pay for them: narrow where a row
// costs about a prefill token (a CPU), wide where rows are nearly free (a GPU). Only speed depends
// on it: which rows are verified never changes a token.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "speculation/draft_tree.h"
#include "speculation/proposer.h"

namespace tf {

// The cost of a round as a function of its rows: fixed + n x per row (seconds).
struct RoundCostModel {
  double fixed_seconds = 0.0;
  double seconds_per_row = 0.0;

  double seconds(int64_t n_rows) const { return fixed_seconds + seconds_per_row * double(n_rows); }
  bool is_known() const { return fixed_seconds > 0.0 || seconds_per_row > 0.0; }
};

// The round cost from the rounds seen: a least-squares line through (rows, seconds), each average
// exponentially weighted so it follows the machine's load. Unknown (zero) until the rounds have
// varied in size; when they stop varying (shaped rounds settle on one size) the last line read
// holds, since a line through one point is no line.
class RowCost {
 public:
  static constexpr double kSmoothing = 0.05;

  void record_round(int64_t n_rows, double seconds);
  double seconds_per_row() const { return model_.seconds_per_row; }
  const RoundCostModel& model() const { return model_; }

 private:
  double mean_x_ = 0.0, mean_y_ = 0.0, mean_xx_ = 0.0, mean_xy_ = 0.0;
  int64_t n_rounds_ = 0;
  RoundCostModel model_;
};

// Given n_roots rows that are verified anyway (each emits one token), n_other_rows more (prompt
// chunks), and draft nodes whose chances of acceptance are `chances` (best first), how many of the
// nodes to verify: the count k that maximises expected tokens per second,
//   (n_roots + chances[0] + ... + chances[k-1]) / cost(n_roots + n_other_rows + k).
// The fewest rows among equal rates; an unknown cost takes every node.
int64_t best_node_count(const RoundCostModel& cost, const std::vector<double>& chances, int64_t n_roots,
                        int64_t n_other_rows = 0);

// One lane drafting a single chain whose draft at depth d (1-based) is accepted, once its parent
// is, with chance acceptance_by_depth[d - 1]: the window (root + drafts, at most most_rows) that
// maximises E[accepted + 1] / cost(window).
int64_t best_chain_window(const RoundCostModel& cost, const std::vector<double>& acceptance_by_depth,
                          int64_t most_rows);

// How often each proposer's draft at depth d is accepted once its parent is: per proposer kind, for
// a parent's first child and for its later siblings apart (a drafter's second guess is accepted far
// less often than its first), and apart again after a round that accepted its whole tree's depth
// (a long copy runs on: its next chain is right far more often than a fresh guess), exponentially
// weighted. A depth not seen yet reads as the one above it, so a window can grow past what was
// ever verified; evidence fades round by round, so a depth or a proposer once cut off is tried again.
class AcceptanceByDepth {
 public:
  static constexpr int kDepths = 64;  // deeper nodes share the last depth's figures
  // A proposer's depth-1 chance before any evidence: hopeful, so a new lane verifies drafts and
  // learns, where a row costs no more than about a round's fixed cost.
  static constexpr double kFirstPrior = 0.7;
  static constexpr double kPriorWeight = 2.0;  // how many nodes' evidence the prior counts for
  static constexpr double kDecay = 0.97;       // weight old evidence keeps per recorded round

  // Chance a node is accepted once its parent is; after_full: the lane's last round accepted its
  // tree's whole depth.
  double conditional(ProposerKind kind, bool is_sibling, bool after_full, int32_t depth) const;
  // [n_nodes] chance each node is on the accepted path: its parent's chance times its own.
  std::vector<double> node_chances(const DraftTree& tree, bool after_full) const;
  // After a round: [n_nodes] whether each node of the verified tree was accepted.
  void record(const DraftTree& tree, const std::vector<uint8_t>& is_accepted, bool after_full);

 private:
  struct Cell {
    double reached = 0.0;   // weighted nodes whose parent was accepted
    double accepted = 0.0;  // ...and that were accepted themselves
  };
  using Column = std::array<Cell, kDepths>;
  static constexpr size_t kColumns = 4;  // is_sibling + 2 x after_full
  // [kind][column][depth - 1]
  std::array<std::array<Column, kColumns>, kProposerKinds> cells_{};
  static double chance_below(const Cell& cell, double chance_above);
  static size_t column_of(bool is_sibling, bool after_full) { return size_t(is_sibling) + 2 * size_t(after_full); }
  // [n_nodes] whether each node is a later sibling (not its parent's first child)
  static std::vector<uint8_t> siblings(const DraftTree& tree);
};

}  // namespace tf
