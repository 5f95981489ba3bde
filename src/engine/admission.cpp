// Admission and the window policy: which queued requests become lanes (each lane's whole KV budget
// is promised up front, so a live lane never runs out mid-reply; it draws the blocks as it grows),
// what a lane adopts from the prefix cache, and how many rows a lane's draft tree may use this round.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "engine/engine_impl.h"

namespace tf {

void Engine::Impl::admit() {
  std::unique_lock<std::mutex> lock(mutex);
  const size_t first_new = lanes.size();
  size_t index = 0;
  while (index < pending.size() && int64_t(lanes.size()) < options.n_parallel) {
    PendingRequest& next = pending[index];
    // Pinned to a busy slot: later requests pass it (no idle lanes), never into its slot (it comes first here).
    if (is_waiting_for_its_slot(next.request)) {
      ++index;
      continue;
    }
    const std::vector<int32_t>& prompt = next.request.prompt;
    const int64_t n_positions = int64_t(prompt.size()) + next.request.max_tokens;
    // The prompt's last position is always computed: its logits give the first token. A partly
    // filled block is recomputed too (only full blocks are keyed).
    // A recurrent model's lane resumes only where a checkpoint holds its state.
    const bool uses_cache = options.prompt_cache && next.request.cache_prompt;
    const BlockKey root = root_block_key(options.model_id, next.request.cache_salt);
    std::vector<BlockKey> keys;
    if (uses_cache) keys = block_keys(root, prompt, int64_t(prompt.size()) - 1, kv.block_size());
    int64_t n_adopt = kv.n_cached_prefix(keys);
    if (model->recurrent_state_bytes() > 0) n_adopt = checkpoints.resumable_prefix(keys, n_adopt);
    if (kv.admission_cost(keys, n_adopt, n_positions) > kv.n_free_blocks()) break;
    auto lane = std::make_unique<Lane>();
    lane->id = next.id;
    lane->request = std::move(next.request);
    lane->sink = std::move(next.sink);
    lane->kv_lane = kv.lane_open();
    kv.lane_adopt(lane->kv_lane, keys, n_adopt);
    if (!kv.lane_promise(lane->kv_lane, n_positions)) fail_internal("admission promised blocks the pool lacks");
    lane->tokens = lane->request.prompt;
    lane->n_prompt = int64_t(lane->tokens.size());
    lane->uses_prompt_cache = uses_cache;
    lane->n_keyed_blocks = n_adopt;
    lane->last_key = n_adopt > 0 ? keys[size_t(n_adopt - 1)] : root;
    lane->n_cached = n_adopt * kv.block_size();
    lane->timings.cache_n = lane->n_cached;
    lane->slot = take_slot(*lane);
    if (tokenizer) lane->decoder = std::make_unique<StreamDecoder>(*tokenizer, lane->request.skips_special_tokens);
    lane->stop_matcher = std::make_unique<StopMatcher>(lane->request.stop, lane->request.closing);
    lane->speculation = speculation.for_lane(lane->request.draft, options.lone_window);
    lane->constraint = make_constraint(lane->request);
    lane->timings.prompt_n = lane->n_prompt;
    lane->admitted = EngineClock::now();
    stats.requests += 1;
    stats.prompt_tokens += lane->n_prompt;
    stats.prompt_cache_hit_tokens += lane->n_cached;
    stats.prompt_cache_miss_tokens += lane->n_prompt - lane->n_cached;
    lanes.push_back(std::move(lane));
    pending.erase(pending.begin() + int64_t(index));
  }
  stats.queue_depth = int64_t(pending.size());
  stats.lanes_live = int64_t(lanes.size());  // with the queue, under one lock: submit's room counts both
  // Only requests that could take a free lane may join the lone stream (window_for).
  n_waiting = int64_t(std::count_if(pending.begin(), pending.end(),
                                    [&](const PendingRequest& p) { return !is_waiting_for_its_slot(p.request); }));
  record_pool_stats();
  lock.unlock();
  // A drafter's context from cached taps is compute, a recurrent state a copy: outside the lock
  // submit() and stats() take.
  for (size_t i = first_new; i < lanes.size(); ++i) {
    adopt_recurrent_state(*lanes[i]);
    adopt_taps(*lanes[i]);
  }
}

// A recurrent model's lane that adopted cached blocks starts from the state checkpointed at their
// end (admission adopted no further than a checkpoint).
void Engine::Impl::adopt_recurrent_state(Lane& lane) {
  if (lane.n_keyed_blocks == 0 || model->recurrent_state_bytes() == 0) return;
  const std::vector<uint8_t>* state = checkpoints.find(lane.last_key);
  if (!state) fail_internal("a lane adopted cached blocks past the last recurrent checkpoint");
  model->write_recurrent_state(kv, lane.kv_lane, lane.n_cached, state->data());
}

// A lane that adopted cached blocks hands its drafter their taps, so it drafts from the first
// round as a lane that computed them would. Blocks published without taps (a cache fed by a lane
// without a drafter), or with taps of other layers (a slot saved where another drafter ran), leave
// the drafter without that context: it then proposes nothing.
void Engine::Impl::adopt_taps(Lane& lane) {
  if (lane.n_keyed_blocks == 0 || !lane.speculation->wants_taps()) return;
  const size_t block_taps = speculation.tap_layers().size() * size_t(model->config().hidden_size) * size_t(kv.block_size());
  std::vector<float> taps;
  for (int64_t b = 0; b < lane.n_keyed_blocks; ++b) {
    const std::vector<float>& block = kv.block_extras(lane.kv_lane, b);
    if (block.size() != block_taps) return;
    taps.insert(taps.end(), block.begin(), block.end());
  }
  lane.speculation->observe_taps(0, taps.data(), lane.n_cached, round_costs());
}

// Publishes every block of the lane that is now full and committed, with its taps. A final EOS
// drafted and accepted has K/V but is not in the lane's tokens: its block is not published.
void Engine::Impl::publish_blocks(Lane& lane) {
  if (!lane.uses_prompt_cache) return;
  const int64_t block_size = kv.block_size();
  const int64_t n_known = std::min(lane.n_cached, int64_t(lane.tokens.size()));
  const int64_t n_full_blocks = n_known / block_size;
  while (lane.n_keyed_blocks < n_full_blocks) {
    const int64_t begin = lane.n_keyed_blocks * block_size;
    lane.last_key = next_block_key(lane.last_key, lane.tokens.data() + begin, block_size);
    std::vector<float> taps;
    const size_t block_taps = size_t(lane.tap_width * block_size);
    if (block_taps > 0 && lane.pending_taps.size() >= block_taps) {
      const auto end = lane.pending_taps.begin() + int64_t(block_taps);
      taps.assign(lane.pending_taps.begin(), end);
      lane.pending_taps.erase(lane.pending_taps.begin(), end);
    }
    kv.publish(lane.kv_lane, lane.n_keyed_blocks, lane.last_key, std::move(taps));
    checkpoint_block(lane, lane.n_keyed_blocks, lane.n_keyed_blocks + 1 == n_full_blocks);
    ++lane.n_keyed_blocks;
  }
}

// A lane whose last round failed may have no state to read; the cache only loses a resume point.
static void report_lost_checkpoint(int64_t block, const std::exception& error) {
  std::fprintf(stderr, "tensorfold: internal error: no recurrent checkpoint at block %lld: %s\n",
               static_cast<long long>(block), error.what());
}

// A recurrent model's state at the end of the block just published: a checkpoint every
// checkpoint_every blocks and at the prompt's last full block (a shared system prompt, the same
// prompt again); otherwise, for the last block a round publishes, kept by the model (on the GPU
// a device copy, not a read to the host) so that the block the lane ends on when it retires gets
// one (the next turn of a chat resumes there). The state is taken now, before the next forward
// folds later positions into it.
void Engine::Impl::checkpoint_block(Lane& lane, int64_t index, bool is_last_of_round) {
  if (model->recurrent_state_bytes() == 0) return;
  lane.has_kept_state = false;  // the lane's blocks moved past what it kept
  if (checkpoints.contains(lane.last_key)) return;
  const int64_t position = (index + 1) * kv.block_size();
  const int64_t prompt_blocks = (lane.n_prompt - 1) / kv.block_size();
  const bool is_checkpoint = (index + 1) % checkpoint_every == 0 || index + 1 == prompt_blocks;
  if (!is_checkpoint && !is_last_of_round) return;
  try {
    if (is_checkpoint) {
      std::vector<uint8_t> state(size_t(model->recurrent_state_bytes()));
      model->read_recurrent_state(kv, lane.kv_lane, position, state.data());
      checkpoints.put(lane.last_key, std::move(state));
    } else {
      model->keep_recurrent_state(kv, lane.kv_lane, position);
      lane.has_kept_state = true;
    }
  } catch (const std::exception& error) {
    report_lost_checkpoint(index, error);
  }
}

// The state the model kept for the lane's last published block becomes that block's checkpoint.
void Engine::Impl::checkpoint_kept_state(Lane& lane) {
  lane.has_kept_state = false;
  if (checkpoints.contains(lane.last_key)) return;
  std::vector<uint8_t> state(size_t(model->recurrent_state_bytes()));
  try {
    model->read_kept_recurrent_state(kv, lane.kv_lane, state.data());
  } catch (const std::exception& error) {
    report_lost_checkpoint(lane.n_keyed_blocks - 1, error);
    return;
  }
  checkpoints.put(lane.last_key, std::move(state));
}

// Under the mutex: the pool's figures for /metrics.
void Engine::Impl::record_pool_stats() {
  const KvPoolStats pool = kv.stats();
  const int64_t scratch = kv.blocks_for(kv.lane_capacity(scratch_lane));  // not the lanes' pool
  stats.kv_block_size = kv.block_size();
  stats.kv_blocks_total = pool.n_blocks - scratch;
  stats.kv_blocks_in_use = pool.in_use - scratch;
  stats.kv_blocks_cached = pool.cached;
  stats.kv_blocks_free = pool.free;
  stats.kv_evictions = pool.evictions;
  const RecurrentCheckpointStats states = checkpoints.stats();
  stats.recurrent_checkpoints = states.n_checkpoints;
  stats.recurrent_checkpoint_bytes = states.bytes;
  stats.recurrent_checkpoint_evictions = states.evictions;
}

// The most rows a lane's tree may use this round. Fixed windows use them all (the lone driver's and
// the lanes' windows, doubled by full acceptance); measured ones are the largest a round may shape
// (shape_trees keeps the rows that pay).
int64_t Engine::Impl::window_for(const Lane& lane, int64_t n_decoding) const {
  const bool is_measured = options.window_policy == WindowPolicy::measured;
  const int64_t most_lone = std::max(options.lone_window, options.most_lone_window);
  const int64_t lone = is_measured ? most_lone : std::clamp(lane.earned_window, options.lone_window, most_lone);
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
  if (is_measured) return std::max(options.lane_window, std::min(most_lone, fair_share));
  const int64_t most = std::max(options.lane_window, std::min(options.lone_window, fair_share));
  return std::clamp(lane.earned_window, options.lane_window, most);
}

}  // namespace tf
