// Acceptance and commit: each decoding lane walks its tree with the target's own choices, the
// accepted path's K/V becomes the lane's history, and proposers learn what was committed.
#include <algorithm>

#include "engine/engine_impl.h"

namespace tf {

// Walks the tree from the root: at each node the target's own choice (argmax, or the seeded
// sample at that position) picks the child; the walk stops where no child holds that token. Every
// emitted token is the target's choice, so drafts change speed, never tokens.
void Engine::Impl::accept(Lane& lane, const LaneRows& placed) {
  if (lane.constraint && lane.constraint->failure()) {
    finish_with_constraint_failure(lane);
    return;
  }
  const DraftTree& tree = lane.tree;
  const Batch& batch = round_rows.batch;
  lane.timings.rounds += 1;
  // Counted before tokens are emitted: emitting the last one finishes the reply and reports them.
  lane.timings.draft_n += tree.size();
  int32_t node = -1;  // the root
  int64_t n_accepted = 0;
  int64_t n_sibling_accepts = 0;
  std::vector<int64_t> committed_rows = {placed.first_row};
  std::vector<int32_t> accepted_nodes;
  for (;;) {
    const int64_t row = placed.first_row + 1 + node;
    const float* row_logits = nullptr;
    const int32_t token = chosen(round_rows.logit_row_of[size_t(row)], &row_logits);
    const int32_t child = tree.child_with_token(node, token);
    if (child >= 0) {
      const BatchRow& child_row = batch.rows[size_t(placed.first_row + 1 + child)];
      const int32_t home = kv.slot(lane.kv_lane, child_row.pos);
      if (child_row.kv_slot != home) {  // off the main chain: its K/V waits in scratch
        kv.copy_slot(child_row.kv_slot, home);
        ++n_sibling_accepts;
      }
      lane.timings.draft_accepted_n += 1;
      accepted_nodes.push_back(child);
      committed_rows.push_back(placed.first_row + 1 + child);
      ++n_accepted;
    }
    on_token(lane, token, row_logits, child >= 0 ? int8_t(tree.sources[size_t(child)]) : TokenProvenance::kTarget);
    if (lane.is_finished || child < 0) break;
    node = child;
  }
  feed_taps(lane, lane.n_cached, committed_rows);
  lane.n_cached += 1 + n_accepted;
  publish_blocks(lane);
  // Every drafted token of a chain that filled the window was right: the window, not the
  // proposers, was the limit, so the next round may use twice as many rows. Any miss earns it back.
  if (tree.size() > 0 && n_accepted == tree.max_depth() && tree.size() + 1 >= lane.window) {
    lane.earned_window = 2 * lane.window;
  } else if (n_accepted < tree.max_depth()) {
    lane.earned_window = 0;
  }
  lane.speculation->record_accepted(tree, accepted_nodes, round_costs());
  std::lock_guard<std::mutex> lock(mutex);
  stats.drafted_tokens += tree.size();
  stats.accepted_tokens += n_accepted;
  stats.sibling_accepts += n_sibling_accepts;
  for (uint8_t source : tree.sources) stats.drafted_by_proposer[source % kProposerKinds] += 1;
  for (int32_t accepted : accepted_nodes) stats.accepted_by_proposer[tree.sources[size_t(accepted)] % kProposerKinds] += 1;
  for (int64_t d = 0; d < std::min<int64_t>(tree.max_depth(), kMaxTrackedDepth); ++d) {
    stats.drafted_at_depth[d] += 1;
    if (d < n_accepted) stats.accepted_at_depth[d] += 1;
  }
}

// A prompt chunk's K/V is the lane's history as soon as it is written; the chunk that ends the
// prompt also gives the reply's first token.
void Engine::Impl::commit_prefill(Lane& lane, const LaneRows& placed) {
  std::vector<int64_t> rows(size_t(placed.n_rows));
  for (int64_t i = 0; i < placed.n_rows; ++i) rows[size_t(i)] = placed.first_row + i;
  feed_taps(lane, lane.n_cached, rows);
  lane.n_cached += placed.n_rows;
  publish_blocks(lane);
  const int64_t logit_row = round_rows.logit_row_of[size_t(placed.first_row + placed.n_rows - 1)];
  if (logit_row < 0) return;  // more prompt to come
  if (lane.constraint && lane.constraint->failure()) {
    finish_with_constraint_failure(lane);
    return;
  }
  lane.timings.rounds += 1;
  const float* row_logits = nullptr;
  const int32_t token = chosen(logit_row, &row_logits);
  on_token(lane, token, row_logits);
}

// Hands the lane's proposers that want them the taps of the rows that just became its history,
// in position order (Proposer::observe_taps).
void Engine::Impl::feed_taps(Lane& lane, int64_t first_position, const std::vector<int64_t>& rows) {
  const std::vector<float>& taps = model->taps();
  // A lane whose proposers retired still publishes its taps with its blocks: a later request that
  // reuses the prefix may draft.
  const bool to_proposers = lane.speculation->wants_taps();
  if (rows.empty() || taps.empty() || !(to_proposers || lane.uses_prompt_cache)) return;
  const size_t width = taps.size() / round_rows.batch.rows.size();
  committed_taps.resize(rows.size() * width);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(taps.data() + size_t(rows[i]) * width, width, committed_taps.data() + i * width);
  if (to_proposers)
    lane.speculation->observe_taps(first_position, committed_taps.data(), int64_t(rows.size()), round_costs());
  lane.tap_width = int64_t(width);
  if (lane.uses_prompt_cache) lane.pending_taps.insert(lane.pending_taps.end(), committed_taps.begin(), committed_taps.end());
}

}  // namespace tf
