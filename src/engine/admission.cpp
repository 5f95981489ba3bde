// Admission and the window policy: which queued requests become lanes (each lane's whole KV budget
// is reserved up front, so a live lane never runs out mid-reply), and how many rows a lane's draft
// tree may use this round.
#include <algorithm>

#include "engine/engine_impl.h"

namespace tf {

void Engine::Impl::admit() {
  std::lock_guard<std::mutex> lock(mutex);
  while (!pending.empty() && int64_t(lanes.size()) < options.n_parallel) {
    PendingRequest& next = pending.front();
    const int64_t n_positions = int64_t(next.request.prompt.size()) + next.request.max_tokens;
    if (kv.blocks_for(n_positions) > kv.n_free_blocks()) break;
    auto lane = std::make_unique<Lane>();
    lane->id = next.id;
    lane->request = std::move(next.request);
    lane->sink = std::move(next.sink);
    lane->kv_lane = kv.lane_open();
    kv.lane_reserve(lane->kv_lane, n_positions);
    lane->tokens = lane->request.prompt;
    lane->n_prompt = int64_t(lane->tokens.size());
    if (tokenizer) lane->decoder = std::make_unique<StreamDecoder>(*tokenizer);
    lane->stop_matcher = std::make_unique<StopMatcher>(lane->request.stop);
    lane->speculation = speculation.for_lane(lane->request.draft, options.lone_window);
    lane->constraint = make_constraint(lane->request);
    lane->timings.prompt_n = lane->n_prompt;
    lane->admitted = EngineClock::now();
    stats.requests += 1;
    stats.prompt_tokens += lane->n_prompt;
    lanes.push_back(std::move(lane));
    pending.pop_front();
  }
  stats.queue_depth = int64_t(pending.size());
  n_waiting = stats.queue_depth;
}

int64_t Engine::Impl::window_for(const Lane& lane, int64_t n_decoding) const {
  const int64_t lone = std::clamp(lane.earned_window, options.lone_window,
                                  std::max(options.lone_window, options.most_lone_window));
  if (options.lane_policy == LanePolicy::always_lone) return lone;
  if (options.lane_policy == LanePolicy::always_lanes) return options.lane_window;
  // The lone driver: one greedy stream that nobody can join gets the wide, copy-heavy tree, wider
  // still while its whole window keeps being accepted. An arrival hands it back to the shared
  // window, unless every lane is taken: then it waits for this reply to end anyway, and narrowing
  // the window would only make that later.
  const bool can_be_joined = n_waiting > 0 && int64_t(lanes.size()) < options.n_parallel;
  const bool is_lone = n_decoding == 1 && lanes.size() == 1 && !can_be_joined && lane.request.sampling.is_greedy();
  if (is_lone) return lone;
  // On lanes, a lane that keeps having its whole window accepted (a long copy) earns a wider one, up
  // to the lone window and its fair share of the round's rows, so the lanes after it are not starved.
  const int64_t fair_share = options.max_rows_per_round / std::max<int64_t>(1, n_decoding);
  const int64_t most = std::max(options.lane_window, std::min(options.lone_window, fair_share));
  return std::clamp(lane.earned_window, options.lane_window, most);
}

}  // namespace tf
