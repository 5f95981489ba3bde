// One live stream on the engine thread: its tokens, its KV lane, its speculation, and the state
// that turns tokens into text.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/lane_constraint.h"
#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "runtime/kv_cache.h"
#include "sampling/sampler.h"
#include "speculation/draft_tree.h"
#include "speculation/speculation.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct Lane {
  using Clock = std::chrono::steady_clock;

  uint64_t id = 0;
  GenerationRequest request;
  UpdateSink sink;
  int32_t kv_lane = -1;
  int32_t slot = -1;            // the slot it runs in (Engine::slots)
  std::vector<int32_t> tokens;  // prompt, then the reply
  int64_t n_prompt = 0;
  int64_t n_cached = 0;         // positions whose K/V are committed in the cache
  // The prefix cache (when the request uses it): blocks 0..n_keyed_blocks-1 are published or
  // adopted, the last under last_key; pending_taps holds the committed taps of the block being
  // filled, published with it so a lane adopting it drafts as this one would.
  bool uses_prompt_cache = false;
  int64_t n_keyed_blocks = 0;
  BlockKey last_key;
  std::vector<float> pending_taps;
  int64_t tap_width = 0;
  // A recurrent model's state at the end of the lane's last published block (last_key) is kept by
  // the model (Model::keep_recurrent_state) until the lane retires, when it becomes a checkpoint:
  // the next turn of a chat resumes there.
  bool has_kept_state = false;
  std::vector<int32_t> completion;
  TokenCounts counts;           // of the completion's tokens, for penalties
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop_matcher;
  std::unique_ptr<LaneSpeculation> speculation;
  std::unique_ptr<LaneConstraint> constraint;  // null: the request constrains nothing
  DraftTree tree;             // this round's drafts below the root
  int64_t window = 0;         // rows this round's tree could use, root included
  int64_t earned_window = 0;  // window earned by full acceptance; 0: the shared one
  ReplyTimings timings;
  Clock::time_point admitted;
  Clock::time_point first_token;
  bool is_finished = false;
  bool is_constraint_failure = false;  // finished by its own constraint failing (the request's fault)

  bool is_prefilling() const { return n_cached + 1 < int64_t(tokens.size()); }
  int64_t budget_left() const { return request.max_tokens - int64_t(completion.size()); }
  bool has_penalties() const {
    return request.sampling.presence_penalty != 0.0f || request.sampling.frequency_penalty != 0.0f;
  }
  LaneHistory history() const { return {tokens, n_prompt}; }
};

}  // namespace tf
