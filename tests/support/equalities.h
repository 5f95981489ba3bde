// The equalities of speculation and batching as reusable checks, for any model on any backend:
// drafted equals undrafted, concurrent equals solo, replay at full acceptance equals plain decoding.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/backends.h"
#include "models/dflash_drafter.h"
#include "support/engine_runner.h"

namespace tf::test {

constexpr int kEqualityPrompts = 50;

inline std::vector<GenerationRequest> without_drafts(std::vector<GenerationRequest> requests) {
  for (auto& r : requests) set_drafts_off(r);
  return requests;
}

// Pairs of requests (one copy-friendly prompt, one random: see copy_friendly_requests) in turn ask
// for nothing more, penalties, logprobs, or both, so the rows the engine samples on the host
// (penalty counts advanced along an accepted draft, logprobs of every accepted row) are under the
// equalities too, greedy and sampled.
inline std::vector<GenerationRequest> with_penalties_and_logprobs(std::vector<GenerationRequest> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t variant = (i / 2) % 4;
    if (variant == 1 || variant == 3) {
      requests[i].sampling.presence_penalty = i % 3 == 0 ? -0.5f : 0.5f;
      requests[i].sampling.frequency_penalty = 0.25f;
    }
    if (variant == 2 || variant == 3) requests[i].n_top_logprobs = int32_t(i % 4);  // 0 to 3 alternatives
  }
  return requests;
}

inline uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Logprobs bitwise equal between two runs of the same requests, one per emitted token where asked
// for (that token's, then the n best), none where not.
inline void expect_same_logprobs(const EngineRun& a, const EngineRun& b,
                                 const std::vector<GenerationRequest>& requests, const char* what) {
  ASSERT_EQ(a.logprobs.size(), requests.size());
  ASSERT_EQ(b.logprobs.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const int32_t n_top = requests[i].n_top_logprobs;
    const auto& x = a.logprobs[i];
    const auto& y = b.logprobs[i];
    ASSERT_EQ(x.size(), n_top >= 0 ? a.replies[i].tokens.size() : 0u) << what << ", request " << i;
    ASSERT_EQ(y.size(), n_top >= 0 ? b.replies[i].tokens.size() : 0u) << what << ", request " << i;
    for (size_t j = 0; j < std::min(x.size(), y.size()); ++j) {
      const std::string where = std::string(what) + ", request " + std::to_string(i) + ", token " + std::to_string(j);
      EXPECT_EQ(x[j].token, a.replies[i].tokens[j]) << where;
      EXPECT_EQ(x[j].token, y[j].token) << where;
      EXPECT_EQ(float_bits(x[j].logprob), float_bits(y[j].logprob)) << where << ": " << x[j].logprob << " vs " << y[j].logprob;
      ASSERT_EQ(x[j].top.size(), size_t(n_top)) << where;
      ASSERT_EQ(y[j].top.size(), size_t(n_top)) << where;
      for (size_t k = 0; k < x[j].top.size(); ++k) {
        EXPECT_EQ(x[j].top[k].token, y[j].top[k].token) << where << ", alternative " << k;
        EXPECT_EQ(float_bits(x[j].top[k].logprob), float_bits(y[j].top[k].logprob)) << where << ", alternative " << k;
      }
    }
  }
}

// A run of several requests on one engine whose rounds really carried several lanes at once.
inline void expect_rounds_shared_by_lanes(const EngineStats& stats, const char* what) {
  EXPECT_GT(stats.rounds_with_several_lanes, 0) << what << ": no round carried two lanes";
  EXPECT_GE(stats.most_lanes_in_a_round, 2) << what;
}

inline EngineOptions random_windows(std::mt19937& rng, LanePolicy policy) {
  EngineOptions options;
  options.n_parallel = 8;
  options.n_ctx = 160;
  options.lane_window = 2 + int64_t(rng() % 15);
  options.lone_window = 2 + int64_t(rng() % 63);
  options.most_lone_window = options.lone_window + int64_t(rng() % 64);
  options.speculation.min_confident_match = 2 + int64_t(rng() % 24);
  options.prefill_chunk = 1 + int64_t(rng() % 40);
  options.lane_policy = policy;
  // Fixed windows, or measured ones shaped by the measured round cost or an assumed one from rows
  // nearly free (a GPU's) to a row costing a whole round's fixed cost (a CPU's).
  const uint32_t windows = rng() % 3;
  options.window_policy = windows == 0 ? WindowPolicy::fixed : WindowPolicy::measured;
  if (windows == 2) options.assumed_round_cost = {1e-3, 1e-3 * std::pow(10.0, -double(rng() % 6))};
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
  auto solo_run = run_engine(model, requests, solo_options, false);
  auto shared_run = run_engine(model, requests, shared_options, true);
  const auto& solo = solo_run.replies;
  const auto& shared = shared_run.replies;
  // Solo really was one lane a round, and together really shared rounds.
  EXPECT_EQ(solo_run.stats.rounds_with_several_lanes, 0);
  EXPECT_EQ(solo_run.stats.most_lanes_in_a_round, 1);
  expect_rounds_shared_by_lanes(shared_run.stats, "together");
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(solo[i].tokens, shared[i].tokens) << "request " << i;
    EXPECT_EQ(solo[i].final_update.token_sha, shared[i].final_update.token_sha);
    EXPECT_EQ(int64_t(solo[i].tokens.size()), requests[i].max_tokens);
    EXPECT_EQ(solo[i].final_update.finish_reason, FinishReason::length);
  }
}

// Asking for logprobs, or for penalties of zero, moves no request to another sampler: seeded
// sampled and greedy requests give the same token_sha with and without them, alone and among
// other lanes (drafting on, so verify rows are chosen too).
inline void expect_logprobs_change_no_token(std::shared_ptr<Model> model) {
  auto plain = random_requests(6, true, model->config().vocab_size, 21);
  auto greedy = random_requests(2, false, model->config().vocab_size, 22);
  plain.insert(plain.end(), greedy.begin(), greedy.end());
  auto with_logprobs = plain;
  for (size_t i = 0; i < with_logprobs.size(); ++i) with_logprobs[i].n_top_logprobs = int32_t(i % 3) * 2;
  auto zero_penalties = plain;
  for (auto& r : zero_penalties) {
    r.sampling.presence_penalty = 0.0f;
    r.sampling.frequency_penalty = -0.0f;
  }
  EngineOptions options;
  options.n_parallel = 8;
  options.n_ctx = 128;
  const auto alone = run_engine(model, plain, options, false);
  // Beside others: each variant shares its rounds with the plain requests.
  auto mixed = with_logprobs;
  mixed.insert(mixed.end(), plain.begin(), plain.end());
  mixed.insert(mixed.end(), zero_penalties.begin(), zero_penalties.end());
  options.n_parallel = int32_t(mixed.size());
  const auto together = run_engine(model, mixed, options, true);
  expect_rounds_shared_by_lanes(together.stats, "logprobs beside plain requests");
  const size_t n = plain.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string& sha = alone.replies[i].final_update.token_sha;
    EXPECT_EQ(together.replies[i].final_update.token_sha, sha) << "request " << i << " with logprobs";
    EXPECT_EQ(together.replies[n + i].final_update.token_sha, sha) << "request " << i << " beside others";
    EXPECT_EQ(together.replies[2 * n + i].final_update.token_sha, sha) << "request " << i << " with zero penalties";
    EXPECT_EQ(together.logprobs[i].size(), together.replies[i].tokens.size()) << "request " << i << " logprobs";
  }
}

// Long-copy and n-gram drafts over many prompts (some with penalties, some with logprobs), every
// lane policy, random windows, alone and together, against plain decoding alone: the same tokens
// and the same logprobs. Drafts must have been accepted, siblings among them (a row off its tree's
// main chain whose K/V moved from scratch to the lane), and the together runs must have shared rounds.
inline void expect_drafted_equals_undrafted(std::shared_ptr<Model> model, bool sampled) {
  std::mt19937 rng(sampled ? 11 : 12);
  auto requests = with_penalties_and_logprobs(
      copy_friendly_requests(kEqualityPrompts, sampled, model->config().vocab_size, rng()));
  EngineOptions plain_options;
  plain_options.n_ctx = 160;
  const EngineRun plain = run_engine(model, without_drafts(requests), plain_options, false);
  EXPECT_EQ(plain.stats.drafted_tokens, 0) << "drafts off must draft nothing";
  int64_t accepted = 0, sibling_accepts = 0;
  for (LanePolicy policy : {LanePolicy::automatic, LanePolicy::always_lanes, LanePolicy::always_lone}) {
    // Alone under fixed windows, so which siblings are verified does not follow the clock (measured
    // windows on a slow build may cut them all); together under any windows.
    EngineOptions solo_options = random_windows(rng, policy);
    solo_options.window_policy = WindowPolicy::fixed;
    const EngineRun drafted_solo = run_engine(model, requests, solo_options, false);
    expect_same_tokens(plain.replies, drafted_solo.replies, "solo");
    expect_same_logprobs(plain, drafted_solo, requests, "solo");
    const EngineRun drafted_together = run_engine(model, requests, random_windows(rng, policy), true);
    expect_same_tokens(plain.replies, drafted_together.replies, "together");
    expect_same_logprobs(plain, drafted_together, requests, "together");
    expect_rounds_shared_by_lanes(drafted_together.stats, "drafted together");
    for (const auto& r : drafted_together.replies) accepted += r.final_update.timings.draft_accepted_n;
    sibling_accepts += drafted_solo.stats.sibling_accepts + drafted_together.stats.sibling_accepts;
  }
  EXPECT_GT(accepted, 0) << "the test must exercise accepted drafts";
  // Greedy replies of these models repeat enough that the long-copy and n-gram chains part and the
  // one off the main chain is taken; sampled ones (temperature 0.7) do not, so there the block
  // drafter's root siblings (expect_drafter_keeps_equalities) carry the sampled case.
  if (!sampled) {
    EXPECT_GT(sibling_accepts, 0) << "the test must exercise accepted siblings (K/V copied from scratch)";
  }
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

// The block drafter among the proposers: the three equalities still hold bitwise (tokens, and
// logprobs where asked for; some requests with penalties), greedy and sampled, alone and together,
// the drafter itself put nodes in the trees, and siblings (rows off the main chain) were accepted
// (unless the drafter is a random one, whose siblings rarely are the target's choice).
inline void expect_drafter_keeps_equalities(std::shared_ptr<Model> model, const std::string& drafter_dir,
                                            bool expect_sibling_accepts = true) {
  auto drafter = load_drafter(drafter_dir, *model, 1);
  std::mt19937 rng(21);
  int64_t drafted = 0;
  for (bool sampled : {false, true}) {
    int64_t sibling_accepts = 0;
    auto requests = with_penalties_and_logprobs(
        copy_friendly_requests(kEqualityPrompts, sampled, model->config().vocab_size, rng()));
    EngineOptions plain_options;
    plain_options.n_ctx = 160;
    const EngineRun plain = run_engine(model, without_drafts(requests), plain_options, true);
    for (LanePolicy policy : {LanePolicy::automatic, LanePolicy::always_lanes}) {
      const EngineRun solo = run_engine(model, requests, random_windows(rng, policy), false, nullptr, drafter);
      expect_same_tokens(plain.replies, solo.replies, "drafter, solo");
      expect_same_logprobs(plain, solo, requests, "drafter, solo");
      const EngineRun together = run_engine(model, requests, random_windows(rng, policy), true, nullptr, drafter);
      expect_same_tokens(plain.replies, together.replies, "drafter, together");
      expect_same_logprobs(plain, together, requests, "drafter, together");
      for (const auto& r : together.replies) drafted += r.final_update.timings.draft_n;
      sibling_accepts += solo.stats.sibling_accepts + together.stats.sibling_accepts;
      // As the server runs: the drafter and n-gram gated by the clock, so which rounds draft varies.
      EngineOptions gated = random_windows(rng, policy);
      gated.speculation.gate_proposers = true;
      const EngineRun gated_run = run_engine(model, requests, gated, true, nullptr, drafter);
      expect_same_tokens(plain.replies, gated_run.replies, "drafter, gated");
      expect_same_logprobs(plain, gated_run, requests, "drafter, gated");
    }
    // The drafter's top-k at the first position are root siblings: some are the target's choice.
    if (expect_sibling_accepts) {
      EXPECT_GT(sibling_accepts, 0) << (sampled ? "sampled" : "greedy")
                                    << ": the test must exercise accepted siblings (K/V copied from scratch)";
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
