// Runs generation requests through a real Engine and collects the replies (tests only).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/reply_collector.h"
#include "models/model.h"

namespace tf::test {

using ::tf::Reply;
using ::tf::ReplyCollector;

// Speculation off for one request. The one place that names the engine's control for it, so a
// change of that control touches one line.
inline void set_drafts_off(GenerationRequest& request) { request.draft.proposers = kNoProposers; }

// What a run gives back: the replies in request order, each request's logprobs (every update's, in
// order; empty when not requested), and the engine's counters once it is idle.
struct EngineRun {
  std::vector<Reply> replies;
  std::vector<std::vector<TokenLogprobs>> logprobs;
  EngineStats stats;  // when each request ran on its own engine: summed (the most lanes: the largest)
};

// The counters of runs on several engines as one: totals add, the most lanes is the largest.
inline void add_stats(EngineStats& total, const EngineStats& s) {
  total.requests += s.requests;
  total.prompt_tokens += s.prompt_tokens;
  total.generated_tokens += s.generated_tokens;
  total.rounds += s.rounds;
  total.rows += s.rows;
  total.rounds_with_several_lanes += s.rounds_with_several_lanes;
  total.most_lanes_in_a_round = std::max(total.most_lanes_in_a_round, s.most_lanes_in_a_round);
  total.sibling_accepts += s.sibling_accepts;
  total.drafted_tokens += s.drafted_tokens;
  total.accepted_tokens += s.accepted_tokens;
  total.prompt_cache_hit_tokens += s.prompt_cache_hit_tokens;
  total.prompt_cache_miss_tokens += s.prompt_cache_miss_tokens;
  total.kv_evictions += s.kv_evictions;
  total.kv_blocks_in_use += s.kv_blocks_in_use;  // idle engines: what they still hold (nothing, if well)
  for (int d = 0; d < kMaxTrackedDepth; ++d) {
    total.drafted_at_depth[d] += s.drafted_at_depth[d];
    total.accepted_at_depth[d] += s.accepted_at_depth[d];
  }
  for (int k = 0; k < kProposerKinds; ++k) {
    total.drafted_by_proposer[k] += s.drafted_by_proposer[k];
    total.accepted_by_proposer[k] += s.accepted_by_proposer[k];
  }
}

// The engine's counters after the round that sent the last final update has ended: a round counts
// its accepts after emitting the tokens, so a reply can be whole before its last round is counted.
// The engine sets lanes_live at the end of each round's loop, after erasing finished lanes.
inline EngineStats settled_stats(const Engine& engine) {
  EngineStats stats = engine.stats();
  for (int i = 0; i < 1000 && (stats.lanes_live != 0 || stats.queue_depth != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stats = engine.stats();
  }
  EXPECT_EQ(stats.lanes_live, 0) << "the engine did not go idle";
  return stats;
}

// Submits every request at once to `engine` and waits for all replies; a rejected submit is a
// tf::Error with the engine's message (as run_to_completion).
// Every reply waits to hear its first update until all requests are queued: a short request could
// otherwise finish before a slow submitting thread (a loaded machine, a grammar to compile) queued
// the next one, and a run meant to share rounds would share none.
inline void submit_and_collect(Engine& engine, const std::vector<GenerationRequest>& requests, EngineRun* run) {
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  const size_t first = run->logprobs.size();
  run->logprobs.resize(first + requests.size());
  std::promise<void> queued;
  const std::shared_future<void> all_queued = queued.get_future().share();
  for (size_t i = 0; i < requests.size(); ++i) {
    collectors.push_back(std::make_unique<ReplyCollector>());
    auto* logprobs = &run->logprobs[first + i];
    UpdateSink collect = collectors.back()->sink();
    SubmitResult result = engine.submit(requests[i], [logprobs, collect, all_queued](const GenerationUpdate& u) {
      all_queued.wait();
      logprobs->insert(logprobs->end(), u.logprobs.begin(), u.logprobs.end());
      return collect(u);
    });
    if (result.status != SubmitStatus::accepted) {
      queued.set_value();
      fail(result.message);
    }
  }
  queued.set_value();
  for (auto& c : collectors) run->replies.push_back(c->wait());
  add_stats(run->stats, settled_stats(engine));
}

// Each request alone on a fresh engine (together = false), or all submitted at once to one engine.
inline EngineRun run_engine(std::shared_ptr<Model> model, const std::vector<GenerationRequest>& requests,
                            const EngineOptions& options, bool together,
                            std::shared_ptr<const Tokenizer> tokenizer = nullptr,
                            std::shared_ptr<DFlashDrafter> drafter = nullptr,
                            std::shared_ptr<MtpHead> mtp = nullptr) {
  EngineRun run;
  if (together) {
    Engine engine(options, model, tokenizer, drafter, mtp);
    submit_and_collect(engine, requests, &run);
    return run;
  }
  for (const auto& r : requests) {
    Engine engine(options, model, tokenizer, drafter, mtp);
    submit_and_collect(engine, {r}, &run);
  }
  return run;
}

inline std::vector<Reply> run_requests(std::shared_ptr<Model> model,
                                       const std::vector<GenerationRequest>& requests,
                                       const EngineOptions& options, bool together,
                                       std::shared_ptr<const Tokenizer> tokenizer = nullptr,
                                       std::shared_ptr<DFlashDrafter> drafter = nullptr) {
  return run_engine(model, requests, options, together, tokenizer, drafter).replies;
}

// Random prompts of random lengths; sampled requests use temperature 0.7, top-k 20, top-p 0.95.
inline std::vector<GenerationRequest> random_requests(int n, bool sampled, int64_t vocab, uint32_t seed,
                                                      int64_t max_prompt = 60, int64_t max_reply = 28) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    int64_t len = 3 + int64_t(rng() % uint32_t(max_prompt - 2));
    for (int64_t j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    r.max_tokens = 8 + int64_t(rng() % uint32_t(max_reply - 7));
    r.ignore_eos = true;
    if (sampled) {
      r.sampling.temperature = 0.7f;
      r.sampling.top_k = 20;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1000 + uint64_t(i);
    }
    requests.push_back(r);
  }
  return requests;
}

}  // namespace tf::test
