// One live stream on the engine thread: its tokens, its KV lane, its proposers, and the state that
// turns tokens into text.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "sampling/sampler.h"
#include "speculation/drafter_proposer.h"
#include "speculation/proposer.h"
#include "speculation/proposer_gate.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct Lane {
  using Clock = std::chrono::steady_clock;

  uint64_t id = 0;
  GenerationRequest request;
  UpdateSink sink;
  int32_t kv_lane = -1;
  std::vector<int32_t> tokens;  // prompt, then the reply
  int64_t n_prompt = 0;
  int64_t n_cached = 0;         // positions whose K/V are committed in the cache
  std::vector<int32_t> completion;
  TokenCounts counts;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop_matcher;
  std::vector<std::unique_ptr<Proposer>> proposers;  // asked in order; earlier ones fill first
  DrafterProposer* drafter = nullptr;                // among `proposers`; fed taps after commits
  std::array<ProposerGate, kProposerKinds> gates;    // by ProposerKind; used for the gated kinds
  std::array<double, kProposerKinds> use_seconds{};  // this round's cost of each gated use; -1: no use
  DraftTree tree;                                    // this round's drafts below the root
  int64_t tree_depth = 0;                            // deepest node of this round's tree
  int64_t window = 0;                                // rows this round's tree could use, root included
  int64_t earned_window = 0;                         // window earned by full acceptance; 0: the shared one
  ReplyTimings timings;
  Clock::time_point admitted;
  Clock::time_point first_token;
  bool is_finished = false;

  bool is_prefilling() const { return n_cached + 1 < int64_t(tokens.size()); }
  int64_t budget_left() const { return request.max_tokens - int64_t(completion.size()); }
  LaneHistory history() const { return {tokens, n_prompt}; }
};

}  // namespace tf
