// The equalities of speculation and batching as reusable checks, for any model on any backend:
// drafted equals undrafted, concurrent equals solo, replay at full acceptance equals plain decoding.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/backends.h"
#include "models/dflash_drafter.h"
#include "support/engine_runner.h"

namespace tf::test {

constexpr int kEqualityPrompts = 50;

inline std::vector<GenerationRequest> without_drafts(std::vector<GenerationRequest> requests) {
  for (auto& r : requests) r.draft.proposers = kNoProposers;
  return requests;
}

inline EngineOptions random_windows(std::mt19937& rng, LanePolicy policy) {
  EngineOptions options;
  options.n_parallel = 8;
  options.n_ctx = 160;
  options.lane_window = 2 + int64_t(rng() % 15);
  options.lone_window = 2 + int64_t(rng() % 63);
  options.most_lone_window = options.lone_window + int64_t(rng() % 64);
  options.min_confident_match = 2 + int64_t(rng() % 24);
  options.prefill_chunk = 1 + int64_t(rng() % 40);
  options.lane_policy = policy;
  return options;
}

inline void expect_same_tokens(const std::vector<Reply>& a, const std::vector<Reply>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << ", request " << i;
    EXPECT_EQ(a[i].final_update.token_sha, b[i].final_update.token_sha);
    EXPECT_EQ(a[i].final_update.finish_reason, b[i].final_update.finish_reason);
  }
}

// Prompts made of repeated spans so long-copy and n-gram drafts are often right, plus random ones.
inline std::vector<GenerationRequest> copy_friendly_requests(int n, bool sampled, int64_t vocab, uint32_t seed) {
  auto requests = random_requests(n, sampled, vocab, seed, 40, 40);
  std::mt19937 rng(seed + 1);
  for (size_t i = 0; i < requests.size(); i += 2) {
    auto& prompt = requests[i].prompt;
    std::vector<int32_t> span(prompt.begin(), prompt.begin() + long(std::min<size_t>(prompt.size(), 12)));
    for (int rep = 0; rep < 3; ++rep) prompt.insert(prompt.end(), span.begin(), span.end());
  }
  return requests;
}

// Eight requests alone (one lane) and together (eight lanes, prompt chunks mixed with decoding).
inline void expect_concurrent_equals_solo(std::shared_ptr<Model> model, bool sampled) {
  auto requests = random_requests(8, sampled, model->config().vocab_size, sampled ? 5 : 6);
  EngineOptions solo_options;
  solo_options.n_parallel = 1;
  solo_options.n_ctx = 128;
  EngineOptions shared_options;
  shared_options.n_parallel = 8;
  shared_options.n_ctx = 128;
  shared_options.prefill_chunk = 7;  // many rounds mix prompt chunks with other lanes' decoding
  auto solo = run_requests(model, requests, solo_options, false);
  auto shared = run_requests(model, requests, shared_options, true);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(solo[i].tokens, shared[i].tokens) << "request " << i;
    EXPECT_EQ(solo[i].final_update.token_sha, shared[i].final_update.token_sha);
    EXPECT_EQ(int64_t(solo[i].tokens.size()), requests[i].max_tokens);
    EXPECT_EQ(solo[i].final_update.finish_reason, FinishReason::length);
  }
}

// Long-copy and n-gram drafts over many prompts, every lane policy, random windows, alone and
// together, against plain decoding alone.
inline void expect_drafted_equals_undrafted(std::shared_ptr<Model> model, bool sampled) {
  std::mt19937 rng(sampled ? 11 : 12);
  auto requests = copy_friendly_requests(kEqualityPrompts, sampled, model->config().vocab_size, rng());
  EngineOptions plain_options;
  plain_options.n_ctx = 160;
  auto plain = run_requests(model, without_drafts(requests), plain_options, false);
  int64_t accepted = 0;
  for (LanePolicy policy : {LanePolicy::automatic, LanePolicy::always_lanes, LanePolicy::always_lone}) {
    auto drafted_solo = run_requests(model, requests, random_windows(rng, policy), false);
    expect_same_tokens(plain, drafted_solo, "solo");
    auto drafted_together = run_requests(model, requests, random_windows(rng, policy), true);
    expect_same_tokens(plain, drafted_together, "together");
    for (const auto& r : drafted_together) accepted += r.final_update.timings.draft_accepted_n;
  }
  EXPECT_GT(accepted, 0) << "the test must exercise accepted drafts";
}

// Replaying each plain reply as the draft: every draft is right, rounds shrink, tokens stay.
inline void expect_replay_equals_plain(std::shared_ptr<Model> model, uint32_t seed) {
  std::mt19937 rng(seed);
  for (bool sampled : {false, true}) {
    auto requests = random_requests(kEqualityPrompts, sampled, model->config().vocab_size, rng(), 40, 48);
    EngineOptions options;
    options.n_ctx = 160;
    auto plain = run_requests(model, without_drafts(requests), options, true);
    for (size_t i = 0; i < requests.size(); ++i) requests[i].draft.replay = plain[i].tokens;
    auto replayed = run_requests(model, requests, random_windows(rng, LanePolicy::automatic), true);
    expect_same_tokens(plain, replayed, "replay");
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReplyTimings& t = replayed[i].final_update.timings;
      EXPECT_GT(t.draft_accepted_n, 0) << "request " << i << " drafted " << t.draft_n << " rounds " << t.rounds
                                       << " n " << t.predicted_n;
      EXPECT_LT(t.rounds, t.predicted_n) << "request " << i;
    }
  }
}

// The block drafter among the proposers: the three equalities still hold bitwise, greedy and
// sampled, alone and together, and the drafter itself put nodes in the trees.
inline void expect_drafter_keeps_equalities(std::shared_ptr<Model> model, const std::string& drafter_dir) {
  auto drafter = load_drafter(drafter_dir, *model, 1);
  std::mt19937 rng(21);
  int64_t drafted = 0;
  for (bool sampled : {false, true}) {
    auto requests = copy_friendly_requests(kEqualityPrompts, sampled, model->config().vocab_size, rng());
    EngineOptions plain_options;
    plain_options.n_ctx = 160;
    auto plain = run_requests(model, without_drafts(requests), plain_options, true);
    for (LanePolicy policy : {LanePolicy::automatic, LanePolicy::always_lanes}) {
      auto solo = run_requests(model, requests, random_windows(rng, policy), false, nullptr, drafter);
      expect_same_tokens(plain, solo, "drafter, solo");
      auto together = run_requests(model, requests, random_windows(rng, policy), true, nullptr, drafter);
      expect_same_tokens(plain, together, "drafter, together");
      for (const auto& r : together) drafted += r.final_update.timings.draft_n;
      // As the server runs: the drafter and n-gram gated by the clock, so which rounds draft varies.
      EngineOptions gated = random_windows(rng, policy);
      gated.gate_proposers = true;
      expect_same_tokens(plain, run_requests(model, requests, gated, true, nullptr, drafter), "drafter, gated");
    }
  }
  EXPECT_GT(drafted, 0);
  EngineOptions options;
  options.n_ctx = 160;
  Engine engine(options, model, nullptr, drafter);
  ReplyCollector collector;
  auto request = random_requests(1, false, model->config().vocab_size, 99)[0];
  ASSERT_EQ(engine.submit(request, collector.sink()).status, SubmitStatus::accepted);
  collector.wait();
  EXPECT_GT(engine.stats().drafted_by_proposer[int(ProposerKind::drafter)], 0);
}

}  // namespace tf::test
