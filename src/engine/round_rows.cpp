// Row packing: a round's batch holds every decoding lane's root and draft tree first, then prompt
// chunks with what is left of the row budget (so a long prompt never stalls the others), and one
// pick per logit row saying how the model chooses its token.
#include <algorithm>

#include "engine/engine_impl.h"

namespace tf {

void Engine::Impl::pack_rows(RoundRows& rows) {
  rows.batch.rows.clear();
  rows.placed.clear();
  rows.n_scratch = 0;
  int64_t n_decoding = 0;
  for (auto& lane : lanes) n_decoding += !lane->is_finished && !lane->is_prefilling();
  // Every decoding lane drafts within its window and what the lanes before it left of the row
  // budget; measured windows then keep the rows that pay.
  int64_t budget = options.max_rows_per_round;
  std::vector<Lane*> decoding;
  const auto drafting_start = EngineClock::now();
  for (auto& lane : lanes) {
    if (lane->is_finished || lane->is_prefilling() || budget == 0) continue;
    lane->window = std::min(budget, window_for(*lane, n_decoding));
    draft_tree(*lane, lane->window);
    budget -= 1 + lane->tree.size();
    decoding.push_back(lane.get());
  }
  rows.drafting_seconds = std::chrono::duration<double>(EngineClock::now() - drafting_start).count();
  if (options.window_policy == WindowPolicy::measured) shape_trees(decoding, rows.drafting_seconds);
  auto place = [&](Lane& lane, bool is_decode) {
    const int64_t first = int64_t(rows.batch.rows.size());
    if (is_decode) {
      add_decode_rows(lane, rows);
    } else {
      add_prefill_rows(lane, options.max_rows_per_round - first, rows);
    }
    rows.placed.push_back({&lane, first, int64_t(rows.batch.rows.size()) - first, is_decode});
  };
  for (Lane* lane : decoding) place(*lane, true);
  for (auto& lane : lanes)
    if (!lane->is_finished && lane->is_prefilling() && int64_t(rows.batch.rows.size()) < options.max_rows_per_round)
      place(*lane, false);
  add_picks(rows);
}

// The lane's proposals below its root: at most the window's rows, and no more drafts than the
// reply's budget can emit (those would only cost rows).
void Engine::Impl::draft_tree(Lane& lane, int64_t max_rows) {
  const int64_t max_nodes = std::min(max_rows - 1, lane.budget_left() - 1);
  lane.speculation->draft(lane.history(), max_nodes, round_costs(), &lane.tree);
}

// Measured windows: of every node every lane drafted, the likeliest to be accepted, as many as
// maximise the round's expected tokens per second (best_node_count) under the round cost (assumed,
// or the fit of the rounds seen plus this round's drafting, already spent but part of the round). A node is never likelier than its parent, and among equals the
// parent comes first, so the kept nodes of each lane form a tree. A lane due a probe
// (LaneSpeculation::is_probe_due) keeps its whole tree, and so does a replay: it forces an
// acceptance length, which is what it measures.
void Engine::Impl::shape_trees(const std::vector<Lane*>& decoding, double drafting_seconds) {
  auto keeps_whole_tree = [](const Lane& lane) {
    return lane.speculation->is_probe_due() || !lane.request.draft.replay.empty();
  };
  struct Candidate {
    double chance;
    size_t lane;
    int32_t node;
  };
  std::vector<Candidate> candidates;
  int64_t n_whole_rows = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    const Lane& lane = *decoding[i];
    if (keeps_whole_tree(lane)) {
      n_whole_rows += lane.tree.size();
      continue;
    }
    const std::vector<double> chances = lane.speculation->node_chances(lane.tree);
    for (size_t node = 0; node < chances.size(); ++node) candidates.push_back({chances[node], i, int32_t(node)});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.chance > b.chance; });
  std::vector<double> chances(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) chances[i] = candidates[i].chance;
  RoundCostModel cost = row_cost.model();
  cost.fixed_seconds += drafting_seconds;
  if (options.assumed_round_cost.is_known()) cost = options.assumed_round_cost;
  const size_t n_kept = size_t(best_node_count(cost, chances, int64_t(decoding.size()), n_whole_rows));
  if (n_kept == candidates.size()) return;
  std::vector<std::vector<uint8_t>> keep(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i)
    keep[i].assign(size_t(decoding[i]->tree.size()), keeps_whole_tree(*decoding[i]) ? 1 : 0);
  for (size_t k = 0; k < n_kept; ++k) keep[candidates[k].lane][size_t(candidates[k].node)] = 1;
  for (size_t i = 0; i < decoding.size(); ++i) decoding[i]->tree.retain(keep[i]);
}

// The root row (the lane's last token) and its draft tree, pruned by the lane's grammar if it has
// one. Nodes on the main chain write K/V straight to their lane's slots; the others write to
// scratch slots and move only if accepted.
void Engine::Impl::add_decode_rows(Lane& lane, RoundRows& rows) {
  if (lane.constraint) lane.constraint->prune(&lane.tree);
  const DraftTree& tree = lane.tree;
  Batch& batch = rows.batch;
  const int64_t root_row = int64_t(batch.rows.size());
  const int32_t root_pos = int32_t(lane.n_cached);
  draw_blocks(lane, root_pos + tree.max_depth() + 1);
  batch.rows.push_back({lane.tokens.back(), root_pos, lane.kv_lane, -1, kv.slot(lane.kv_lane, root_pos), true});
  for (int32_t node = 0; node < tree.size(); ++node) {
    const int32_t parent = tree.parents[size_t(node)];
    const int32_t pos = root_pos + tree.depth(node);
    const int32_t slot =
        tree.is_main[size_t(node)] ? kv.slot(lane.kv_lane, pos) : kv.slot(scratch_lane, rows.n_scratch++);
    batch.rows.push_back({tree.tokens[size_t(node)], pos, lane.kv_lane,
                          int32_t(parent < 0 ? root_row : root_row + 1 + parent), slot, true});
  }
}

// Within the lane's promise (prompt + max_tokens, made at admission), so it cannot fail.
void Engine::Impl::draw_blocks(Lane& lane, int64_t n_positions) {
  if (!kv.lane_reserve(lane.kv_lane, n_positions))
    fail_internal("a lane outgrew the KV blocks admission promised it");
}

void Engine::Impl::add_prefill_rows(Lane& lane, int64_t max_rows, RoundRows& rows) {
  const int64_t first = int64_t(rows.batch.rows.size());
  const int64_t n = std::min({int64_t(lane.tokens.size()) - lane.n_cached, max_rows, options.prefill_chunk});
  draw_blocks(lane, lane.n_cached + n);
  for (int64_t i = 0; i < n; ++i) {
    BatchRow row;
    row.pos = int32_t(lane.n_cached + i);
    row.token = lane.tokens[size_t(row.pos)];
    row.lane = lane.kv_lane;
    row.parent = i == 0 ? -1 : int32_t(first + i - 1);
    row.kv_slot = kv.slot(lane.kv_lane, row.pos);
    row.wants_logits = row.pos + 1 == int64_t(lane.tokens.size());
    rows.batch.rows.push_back(row);
  }
}

// Every logit row's pick: the lane's parameters, the position its token will take, and for
// penalties the reply so far plus the row's own draft path (what it would follow if accepted).
void Engine::Impl::add_picks(RoundRows& rows) {
  const Batch& batch = rows.batch;
  rows.logit_row_of.assign(batch.rows.size(), -1);
  rows.picks.clear();
  rows.host_logits_row.clear();
  rows.penalty_paths.clear();
  rows.masks.clear();
  std::vector<std::pair<size_t, int64_t>> path_spans;  // [logit rows] offset and length in penalty_paths
  std::vector<int64_t> mask_offsets;                    // [logit rows] offset in masks, or -1
  int64_t n_copied = 0;
  for (const LaneRows& placed : rows.placed) {
    Lane& lane = *placed.lane;
    for (int64_t r = placed.first_row; r < placed.first_row + placed.n_rows; ++r) {
      const BatchRow& row = batch.rows[size_t(r)];
      if (!row.wants_logits) continue;
      const size_t path_begin = rows.penalty_paths.size();
      if (placed.is_decode && lane.has_penalties()) {
        for (int32_t node = int32_t(r - placed.first_row) - 1; node >= 0; node = lane.tree.parents[size_t(node)])
          rows.penalty_paths.push_back(lane.tree.tokens[size_t(node)]);
        std::reverse(rows.penalty_paths.begin() + int64_t(path_begin), rows.penalty_paths.end());
      }
      path_spans.push_back({path_begin, int64_t(rows.penalty_paths.size() - path_begin)});
      rows.logit_row_of[size_t(r)] = int64_t(rows.picks.size());
      const bool wants_logits = lane.request.n_top_logprobs >= 0;
      rows.host_logits_row.push_back(wants_logits ? n_copied++ : -1);
      rows.picks.push_back({&lane.request.sampling, int64_t(row.pos) + 1, PenaltyHistory{&lane.counts}, wants_logits, {}});
      mask_offsets.push_back(-1);
      if (lane.constraint) {
        // The row's token is the reply's token number completion + depth; its grammar state is the
        // one after the row's own draft path.
        const int32_t node = placed.is_decode ? int32_t(r - placed.first_row) - 1 : -1;
        const int64_t completion_index = int64_t(lane.completion.size()) + lane.tree.depth(node);
        LaneConstraint& constraint = *lane.constraint;
        const size_t offset = rows.masks.size();
        rows.masks.resize(offset + size_t(constraint.n_words()));
        if (constraint.row_mask(node, completion_index, rows.masks.data() + offset))
          mask_offsets.back() = int64_t(offset);
        else
          rows.masks.resize(offset);
        rows.picks.back().constraint.bias = constraint.bias();
        rows.picks.back().constraint.n_bias = constraint.n_bias();
      }
    }
  }
  // The paths and masks are complete: their pointers stay valid for the round.
  for (size_t i = 0; i < rows.picks.size(); ++i) {
    rows.picks[i].penalties.path = rows.penalty_paths.data() + path_spans[i].first;
    rows.picks[i].penalties.n_path = path_spans[i].second;
    if (mask_offsets[i] >= 0) rows.picks[i].constraint.allowed = rows.masks.data() + mask_offsets[i];
  }
}

}  // namespace tf
