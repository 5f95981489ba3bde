// Resumed = fresh checks shared by the CPU and GPU suites: a reply whose prompt prefix came from the
// prefix cache (or a restored slot) equals the reply of a cold prefill, bitwise.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "backends/backends.h"
#include "engine/engine.h"
#include "engine/slot_file.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "support/engine_runner.h"
#include "support/equalities.h"

namespace tf::test {

inline GenerationRequest cold(GenerationRequest r) {
  r.cache_prompt = false;
  return r;
}

// A request that shares the first n_shared prompt tokens with `r` and then goes elsewhere: run
// first, it leaves r's prefix in the cache.
inline GenerationRequest primer_for(const GenerationRequest& r, int64_t n_shared, std::mt19937& rng, int64_t vocab) {
  GenerationRequest primer = r;
  primer.prompt.resize(size_t(n_shared));
  for (int i = 0; i < 5; ++i) primer.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
  primer.max_tokens = 4;
  return primer;
}

// What a cached prefix of n_shared tokens serves at least: its full blocks, and for a recurrent
// model (a hybrid) only up to the last checkpoint among them, every `checkpoint_blocks` blocks.
inline int64_t expected_cache_n(int64_t n_shared, int64_t n_prompt, int64_t checkpoint_blocks = 1) {
  const int64_t step = kKvBlockSize * checkpoint_blocks;
  return (std::min(n_shared, n_prompt - 1) / step) * step;
}

// Random prompts split at random points (inside blocks and on their edges): primed, then run
// again together; each reply equals its cold reply, and the cache served what it should.
// checkpoint_blocks: a recurrent model's checkpoint interval (EngineOptions::recurrent_checkpoint_blocks).
inline void expect_resumed_equals_fresh(std::shared_ptr<Model> model, bool sampled, bool drafted, uint32_t seed,
                                        int64_t checkpoint_blocks = 1) {
  std::mt19937 rng(seed);
  const int64_t vocab = model->config().vocab_size;
  auto requests = copy_friendly_requests(12, sampled, vocab, rng());
  for (auto& r : requests) {  // long enough for several blocks
    while (r.prompt.size() < 70) r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    if (!drafted) set_drafts_off(r);
  }
  std::vector<GenerationRequest> primers;
  std::vector<int64_t> shared;
  for (size_t i = 0; i < requests.size(); ++i) {
    const int64_t n = int64_t(requests[i].prompt.size());
    const int64_t split = i % 3 == 0 ? 16 * (1 + int64_t(rng() % uint32_t(n / 16))) : int64_t(rng() % uint32_t(n + 1));
    shared.push_back(std::min(split, n));
    primers.push_back(primer_for(requests[i], shared.back(), rng, vocab));
  }
  std::vector<GenerationRequest> cold_requests;
  for (const auto& r : requests) cold_requests.push_back(cold(r));
  EngineOptions options = random_windows(rng, LanePolicy::automatic);
  options.n_ctx = 160;
  options.recurrent_checkpoint_blocks = checkpoint_blocks;
  // Room for every checkpoint the primers leave: what is served must not hang on the default budget
  // (the K/V pool's bytes, half as many on a bf16 GPU); eviction has its own test.
  options.recurrent_cache_bytes = int64_t(256) << 20;
  const int64_t granularity = model->recurrent_state_bytes() > 0 ? checkpoint_blocks : 1;
  const EngineRun fresh = run_engine(model, cold_requests, options, true);
  for (const auto& r : fresh.replies) EXPECT_EQ(r.final_update.timings.cache_n, 0);

  Engine engine(options, model, nullptr);
  EngineRun primed;
  submit_and_collect(engine, primers, &primed);
  EngineRun resumed;
  submit_and_collect(engine, requests, &resumed);
  expect_same_tokens(fresh.replies, resumed.replies, "resumed");
  for (size_t i = 0; i < requests.size(); ++i) {
    // At least the primed prefix; more where another request of this batch published it first.
    const int64_t served = resumed.replies[i].final_update.timings.cache_n;
    EXPECT_GE(served, expected_cache_n(shared[i], int64_t(requests[i].prompt.size()), granularity))
        << "request " << i;
    EXPECT_EQ(served % kKvBlockSize, 0);
    EXPECT_LT(served, int64_t(requests[i].prompt.size()));
  }
  EXPECT_GT(resumed.stats.prompt_cache_hit_tokens, 0);
}

// A conversation: each turn's prompt is the previous prompt, its reply and a new message. The reply
// was published as it was generated, so the next turn adopts it too.
inline void expect_multi_turn_equals_cold(std::shared_ptr<Model> model) {
  const int64_t vocab = model->config().vocab_size;
  std::mt19937 rng(7);
  for (bool sampled : {false, true}) {
    EngineOptions options;
    options.n_ctx = 400;
    Engine engine(options, model, nullptr);
    GenerationRequest turn = random_requests(1, sampled, vocab, rng(), 30, 30)[0];
    turn.max_tokens = 40;
    for (int t = 0; t < 5; ++t) {
      const EngineRun cold_run = run_engine(model, {cold(turn)}, options, false);
      EngineRun warm;
      submit_and_collect(engine, {turn}, &warm);
      expect_same_tokens(cold_run.replies, warm.replies, "multi-turn");
      const int64_t served = warm.replies[0].final_update.timings.cache_n;
      if (t > 0) {
        EXPECT_GE(served, int64_t(turn.prompt.size()) - 1 - 16 - 6) << "turn " << t;
      }
      // The next turn: this prompt, this reply, a short new message.
      turn.prompt.insert(turn.prompt.end(), warm.replies[0].tokens.begin(), warm.replies[0].tokens.end());
      for (int i = 0; i < 6; ++i) turn.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
      turn.sampling.seed += 1;
    }
  }
}

inline void expect_salts_and_opt_out_apart(std::shared_ptr<Model> model) {
  auto request = random_requests(1, false, model->config().vocab_size, 11, 60, 10)[0];
  request.prompt.resize(50, 7);
  EngineOptions options;
  options.n_ctx = 128;
  Engine engine(options, model, nullptr);
  auto cache_n = [&](const GenerationRequest& r) {
    EngineRun run;
    submit_and_collect(engine, {r}, &run);
    return run.replies[0].final_update.timings.cache_n;
  };
  EXPECT_EQ(cache_n(cold(request)), 0);
  EXPECT_EQ(cache_n(request), 0) << "the cold request fed nothing";
  EXPECT_EQ(cache_n(request), 48);
  EXPECT_EQ(cache_n(cold(request)), 0) << "opted out, it reads nothing";
  GenerationRequest other_tenant = request;
  other_tenant.cache_salt = "tenant-b";
  EXPECT_EQ(cache_n(other_tenant), 0);
  EXPECT_EQ(cache_n(other_tenant), 48);

  EngineOptions off = options;
  off.prompt_cache = false;
  Engine uncached(off, model, nullptr);
  for (int i = 0; i < 2; ++i) {
    EngineRun run;
    submit_and_collect(uncached, {request}, &run);
    EXPECT_EQ(run.replies[0].final_update.timings.cache_n, 0);
  }
}

// A small pool: many distinct prefixes are cached while lanes run, so blocks are evicted under
// pressure; every reply still equals its cold reply, and no live lane loses a block.
inline void expect_eviction_never_touches_a_live_lane(std::shared_ptr<Model> model) {
  const int64_t vocab = model->config().vocab_size;
  EngineOptions options;
  options.n_parallel = 4;
  options.n_ctx = 128;
  options.kv_pool_tokens = 4 * 128;
  std::vector<GenerationRequest> requests;
  for (uint32_t i = 0; i < 24; ++i) {
    auto batch = random_requests(1, i % 2 == 1, vocab, 100 + i, 90, 30);
    batch[0].prompt.resize(90, int32_t(i));
    requests.push_back(batch[0]);
    if (i % 3 == 2) {  // a repeat of an earlier prompt, which may or may not still be cached
      requests.push_back(requests[requests.size() - 2]);
    }
  }
  std::vector<GenerationRequest> cold_requests;
  for (const auto& r : requests) cold_requests.push_back(cold(r));
  const EngineRun fresh = run_engine(model, cold_requests, options, true);
  const EngineRun warm = run_engine(model, requests, options, true);
  expect_same_tokens(fresh.replies, warm.replies, "under eviction");
  EXPECT_GT(warm.stats.kv_evictions, 0) << "the test must evict";
  EXPECT_EQ(warm.stats.kv_blocks_in_use, 0) << "idle: nothing held";
}

// With the block drafter: a resumed lane gets the drafter's context from the cached blocks' taps,
// so it drafts exactly as the fresh lane did (same rounds, same drafts), not just the same tokens.
// `mtp`: the model's MTP head instead of a block drafter (its context comes from the same taps).
inline void expect_resumed_lane_drafts_as_a_fresh_one(std::shared_ptr<Model> model, std::shared_ptr<DFlashDrafter> drafter,
                                                      std::shared_ptr<MtpHead> mtp = nullptr) {
  auto requests = copy_friendly_requests(6, false, model->config().vocab_size, 5);
  for (auto& r : requests) r.prompt.resize(std::max<size_t>(r.prompt.size(), 40), 3);
  EngineOptions options;
  options.n_ctx = 160;
  options.n_parallel = 1;
  // Fixed windows: measured ones follow the clock and what the engine's earlier lanes accepted.
  options.window_policy = WindowPolicy::fixed;
  for (const auto& request : requests) {
    const EngineRun fresh = run_engine(model, {cold(request)}, options, false, nullptr, drafter, mtp);
    Engine engine(options, model, nullptr, drafter, mtp);
    EngineRun first, again;
    submit_and_collect(engine, {request}, &first);
    submit_and_collect(engine, {request}, &again);
    expect_same_tokens(fresh.replies, again.replies, "drafter, resumed");
    const ReplyTimings& a = fresh.replies[0].final_update.timings;
    const ReplyTimings& b = again.replies[0].final_update.timings;
    EXPECT_GT(b.cache_n, 0);
    EXPECT_EQ(a.rounds, b.rounds);
    EXPECT_EQ(a.draft_n, b.draft_n);
    EXPECT_EQ(a.draft_accepted_n, b.draft_accepted_n);
    EXPECT_GT(a.draft_n, 0) << "the test must exercise drafts";
  }
}

inline void expect_resumed_lane_drafts_as_a_fresh_one(std::shared_ptr<Model> model, const std::string& drafter_dir) {
  expect_resumed_lane_drafts_as_a_fresh_one(model, load_drafter(drafter_dir, *model, 1));
}

// The engine the saved-slot checks run: two slots, room for a prompt, its reply and a next turn.
inline EngineOptions slot_test_options() {
  EngineOptions options;
  options.n_ctx = 300;
  options.n_parallel = 2;
  options.model_id = "fixture";
  return options;
}

// A slot saved to a file, restored into a fresh engine, continues exactly: the next turn equals the
// same conversation on a cold engine, and its prefix came from the restored blocks.
inline void expect_restored_slot_continues_exactly(std::shared_ptr<Model> model, const std::string& file) {
  const int64_t vocab = model->config().vocab_size;
  for (bool sampled : {false, true}) {
    const EngineOptions options = slot_test_options();
    GenerationRequest first = random_requests(1, sampled, vocab, 77, 60, 10)[0];
    first.prompt.resize(60, 5);
    first.max_tokens = 30;
    ModelIdentity identity{"fixture", {{"config.json", "0123"}}};
    {
      Engine engine(options, model, nullptr);
      EngineRun run;
      submit_and_collect(engine, {first}, &run);
      first.prompt.insert(first.prompt.end(), run.replies[0].tokens.begin(), run.replies[0].tokens.end());
      const SlotSnapshot saved = engine.save_slot(0);
      EXPECT_GE(saved.n_blocks, 5);
      write_slot_file(file, saved, identity);
    }
    GenerationRequest next = first;
    for (int i = 0; i < 7; ++i) next.prompt.push_back(int32_t(3 + i));
    next.sampling.seed += 1;
    const EngineRun fresh = run_engine(model, {cold(next)}, options, false);
    Engine restored(options, model, nullptr);
    const int64_t n_restored = restored.restore_slot(1, read_slot_file(file, identity));
    EXPECT_GE(n_restored, 80);
    EngineRun resumed;
    submit_and_collect(restored, {next}, &resumed);
    expect_same_tokens(fresh.replies, resumed.replies, "restored slot");
    EXPECT_EQ(resumed.replies[0].final_update.timings.cache_n, n_restored);
    // Saved by a process of other numerics (another CPU instruction path, --bf16-dot off): its K/V
    // are not this process's bits, so nothing is restored and the prompt is prefilled again.
    EngineOptions elsewhere = options;
    elsewhere.numerics = "another instruction path";
    Engine other(elsewhere, model, nullptr);
    EXPECT_EQ(other.restore_slot(1, read_slot_file(file, identity)), 0);
    EngineRun prefilled;
    submit_and_collect(other, {next}, &prefilled);
    expect_same_tokens(fresh.replies, prefilled.replies, "a slot of other numerics, prefilled again");
    EXPECT_EQ(prefilled.replies[0].final_update.timings.cache_n, 0);
    std::remove(file.c_str());
  }
}

// The same prompt sent again (a retry, a regenerate, an agent loop) after its request: from the live
// cache, and after its slot was saved and restored into a fresh engine. The reply equals a cold one
// (tokens and logprobs) and the prompt's full blocks before its last token are served, as they are
// for a dense model. The prompt is a whole number of blocks, so neither the state at its end nor the
// reply's last one (the slot's last checkpoint) can serve it: a hybrid needs the one a block before.
// checkpoint_blocks: EngineOptions::recurrent_checkpoint_blocks (0: automatic).
inline void expect_restored_slot_serves_its_prompt_again(std::shared_ptr<Model> model, const std::string& file,
                                                         int64_t checkpoint_blocks = 0) {
  const int64_t vocab = model->config().vocab_size;
  for (bool sampled : {false, true}) {
    EngineOptions options = slot_test_options();
    options.recurrent_checkpoint_blocks = checkpoint_blocks;
    GenerationRequest request = random_requests(1, sampled, vocab, 91, 64, 10)[0];
    request.prompt.resize(4 * kKvBlockSize, 5);
    request.max_tokens = 30;
    request.n_top_logprobs = 3;
    const int64_t n_served = expected_cache_n(int64_t(request.prompt.size()), int64_t(request.prompt.size()));
    ModelIdentity identity{"fixture", {{"config.json", "0123"}}};
    const EngineRun fresh = run_engine(model, {cold(request)}, options, false);
    {
      Engine engine(options, model, nullptr);
      EngineRun first;
      submit_and_collect(engine, {request}, &first);
      expect_same_tokens(fresh.replies, first.replies, "first");
      const SlotSnapshot saved = engine.save_slot(0);
      EXPECT_GE(saved.n_blocks, 5);
      write_slot_file(file, saved, identity);
      EngineRun live;
      submit_and_collect(engine, {request}, &live);
      expect_same_tokens(fresh.replies, live.replies, "the same prompt again, live cache");
      expect_same_logprobs(fresh, live, {request}, "the same prompt again, live cache");
      EXPECT_EQ(live.replies[0].final_update.timings.cache_n, n_served) << "live cache";
    }
    Engine restored(options, model, nullptr);
    EXPECT_GE(restored.restore_slot(1, read_slot_file(file, identity)), 5 * kKvBlockSize);
    EngineRun again;
    submit_and_collect(restored, {request}, &again);
    expect_same_tokens(fresh.replies, again.replies, "the same prompt again, restored slot");
    expect_same_logprobs(fresh, again, {request}, "the same prompt again, restored slot");
    EXPECT_EQ(again.replies[0].final_update.timings.cache_n, n_served) << "restored slot";
    std::remove(file.c_str());
  }
}

}  // namespace tf::test
