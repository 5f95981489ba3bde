// Speculative rounds are exact: drafted equals undrafted, concurrent equals solo, replay at full
// acceptance equals plain decoding, wrong drafts change nothing, and tree masks isolate siblings.
// Bitwise, over many prompts with random lengths, windows and trees.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/backends.h"
#include "backends/cpu/qwen3_cpu_model.h"
#include "models/dflash_drafter.h"
#include "runtime/kv_cache.h"
#include "support/engine_runner.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using test::copy_friendly_requests;
using test::expect_same_tokens;
using test::random_requests;
using test::random_windows;
using test::run_requests;
using test::without_drafts;

constexpr int kPrompts = test::kEqualityPrompts;

struct Case {
  const char* model;
  bool sampled;
};

class DraftedEqualsUndrafted : public ::testing::TestWithParam<Case> {};

TEST_P(DraftedEqualsUndrafted, OverManyPromptsWindowsAndPolicies) {
  const Case c = GetParam();
  test::expect_drafted_equals_undrafted(load_model(test::fixture_model(c.model), {}), c.sampled);
}

INSTANTIATE_TEST_SUITE_P(Models, DraftedEqualsUndrafted,
                         ::testing::Values(Case{"qwen3-tiny-a", false}, Case{"qwen3-tiny-a", true},
                                           Case{"qwen3-tiny-b", false}, Case{"qwen3-tiny-b", true},
                                           Case{"qwen3-tiny-c", false}, Case{"qwen3-tiny-c", true}));

// The block drafter (DFlash, conditioned on taps of verified tokens) among the proposers.
TEST(SpeculationTest, DrafterOnKeepsEveryEquality) {
  test::expect_drafter_keeps_equalities(load_model(test::fixture_model("qwen3-tiny-a"), {}),
                                        test::source_path("tests/fixtures/drafter/tiny-a-drafter"));
}

TEST(SpeculationTest, ReplayAtFullAcceptanceEqualsPlainDecoding) {
  test::expect_replay_equals_plain(load_model(test::fixture_model("qwen3-tiny-b"), {}), 3);
}

// Makes each request replay its plain reply, `depth` tokens a round, with no other proposer.
void replay_plain_replies(std::vector<GenerationRequest>& requests, const std::vector<Reply>& plain,
                          int64_t depth) {
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].draft.replay = plain[i].tokens;
    requests[i].draft.replay_depth = depth;
    requests[i].draft.proposers = proposer_bit(ProposerKind::replay);
  }
}

// Rounds of a reply of n tokens when every round accepts `depth` drafts: the prompt's last round
// gives the first token, then each round adds depth + 1 (fewer only where the budget ends).
int64_t rounds_at_depth(int64_t n_tokens, int64_t depth) { return 1 + (n_tokens - 1 + depth) / (depth + 1); }

// The same when the window starts at `window` rows and doubles, up to `most`, after every round that
// filled it: each round holds min(window - 1, depth, what the budget leaves) drafts.
int64_t rounds_with_earned_windows(int64_t n_tokens, int64_t depth, int64_t window, int64_t most) {
  int64_t rounds = 1, emitted = 1;
  while (emitted < n_tokens) {
    const int64_t drafts = std::min({window - 1, depth, n_tokens - emitted - 1});
    emitted += drafts + 1;
    rounds += 1;
    if (drafts + 1 >= window) window = std::min(2 * window, most);
  }
  return rounds;
}

// n random prompts whose replies ignore EOS and run to max_tokens.
std::vector<GenerationRequest> requests_to_budget(const Model& model, int n, uint32_t seed, int64_t max_tokens) {
  auto requests = random_requests(n, false, model.config().vocab_size, seed, 30, 60);
  for (auto& request : requests) {
    request.ignore_eos = true;
    request.max_tokens = max_tokens;
  }
  return requests;
}

// A forced acceptance length: the replay alone, drafting L tokens a round of the plain reply, makes
// every decode round but the last accept exactly L and emit L + 1 tokens; the tokens stay plain.
TEST(SpeculationTest, ReplayDepthForcesTheAcceptanceLength) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  auto requests = random_requests(6, false, model->config().vocab_size, 11, 40, 48);
  EngineOptions options;
  options.n_ctx = 160;
  for (auto& request : requests) request.ignore_eos = true;
  const auto plain = run_requests(model, test::without_drafts(requests), options, true);
  for (int64_t depth : {1, 4, 16}) {
    replay_plain_replies(requests, plain, depth);
    const auto replayed = run_requests(model, requests, options, false);  // alone: the lone window
    test::expect_same_tokens(plain, replayed, "forced acceptance");
    for (const Reply& reply : replayed) {
      const ReplyTimings& t = reply.final_update.timings;
      EXPECT_EQ(t.rounds, rounds_at_depth(t.predicted_n, depth))
          << "depth " << depth << ", " << t.predicted_n << " tokens";
      EXPECT_EQ(t.draft_accepted_n, t.predicted_n - t.rounds) << "depth " << depth;
    }
  }
}

// Fixed windows. Requests queued behind the only lane cannot share its rounds, so that lane keeps the lone window:
// a forced acceptance longer than the shared window is reached by every reply, queued or not.
TEST(SpeculationTest, QueuedRequestsWithNoFreeLaneKeepTheLoneWindow) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  auto requests = requests_to_budget(*model, 3, 12, 60);
  EngineOptions options;
  options.n_ctx = 160;
  options.n_parallel = 1;
  options.window_policy = WindowPolicy::fixed;
  const auto plain = run_requests(model, test::without_drafts(requests), options, true);
  const int64_t depth = options.lane_window + 8;
  ASSERT_LT(depth, options.lone_window);
  replay_plain_replies(requests, plain, depth);
  const auto replayed = run_requests(model, requests, options, true);
  test::expect_same_tokens(plain, replayed, "queued, lone window");
  for (const Reply& reply : replayed) {
    const ReplyTimings& t = reply.final_update.timings;
    EXPECT_EQ(t.rounds, rounds_at_depth(t.predicted_n, depth)) << t.predicted_n << " tokens";
  }
}

// Fixed windows: two lanes copying at full acceptance each start with the shared window, doubles it after every
// round whose full window was accepted, up to the lone window; the tokens stay those of plain decoding.
TEST(SpeculationTest, LanesEarnWiderWindowsByFullAcceptance) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  // equal budgets: both lanes decode in step and end in the same round
  auto requests = requests_to_budget(*model, 2, 13, 150);
  EngineOptions options;
  options.n_ctx = 200;
  options.n_parallel = 2;
  options.window_policy = WindowPolicy::fixed;
  const auto plain = run_requests(model, test::without_drafts(requests), options, true);
  const int64_t depth = 40;
  replay_plain_replies(requests, plain, depth);
  const auto earned = run_requests(model, requests, options, true);
  test::expect_same_tokens(plain, earned, "earned windows");
  EngineOptions fixed = options;
  fixed.lane_policy = LanePolicy::always_lanes;
  const auto shared = run_requests(model, requests, fixed, true);
  test::expect_same_tokens(plain, shared, "shared windows");
  for (size_t i = 0; i < requests.size(); ++i) {
    // windows of 16, 32, 64, 64, ... rows
    const int64_t rounds =
        rounds_with_earned_windows(requests[i].max_tokens, depth, options.lane_window, options.lone_window);
    EXPECT_EQ(earned[i].final_update.timings.rounds, rounds) << "request " << i;
    EXPECT_LT(earned[i].final_update.timings.rounds, shared[i].final_update.timings.rounds) << "request " << i;
  }
}

// Fixed windows: the lone stream copying at full acceptance doubles its window after every round whose whole
// window was accepted, from the lone window up to the most it may earn; the tokens stay plain ones.
TEST(SpeculationTest, TheLoneStreamEarnsWiderWindowsByFullAcceptance) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  auto requests = requests_to_budget(*model, 1, 14, 500);
  EngineOptions options;
  options.n_ctx = 600;
  options.window_policy = WindowPolicy::fixed;
  const auto plain = run_requests(model, test::without_drafts(requests), options, false);
  const int64_t depth = 400;
  replay_plain_replies(requests, plain, depth);
  const auto earned = run_requests(model, requests, options, false);
  test::expect_same_tokens(plain, earned, "earned lone windows");
  // windows of 64, 128, 256, 256 rows
  const int64_t rounds =
      rounds_with_earned_windows(requests[0].max_tokens, depth, options.lone_window, options.most_lone_window);
  EXPECT_EQ(rounds, 5);
  EXPECT_EQ(earned[0].final_update.timings.rounds, rounds);
}

// Measured windows: the same requests shaped under round costs from rows nearly free (wide trees) to
// a row costing a whole round (narrow ones), and under fixed windows, verify different rows and give
// the same tokens and logprobs, bitwise, as plain decoding, alone and together.
TEST(SpeculationTest, WindowChoicesChangeRowsNeverTokens) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  for (bool sampled : {false, true}) {
    auto requests = test::with_penalties_and_logprobs(
        copy_friendly_requests(24, sampled, model->config().vocab_size, sampled ? 31 : 32));
    EngineOptions options;
    options.n_ctx = 160;
    options.n_parallel = 8;
    options.speculation.min_confident_match = 4;  // long copies: trees wide enough to cut
    const test::EngineRun plain = test::run_engine(model, without_drafts(requests), options, true);
    struct Shape {
      const char* name;
      WindowPolicy policy;
      RoundCostModel cost;
    };
    const std::vector<Shape> shapes = {{"fixed", WindowPolicy::fixed, {}},
                                       {"rows nearly free", WindowPolicy::measured, {1e-2, 1e-9}},
                                       {"rows dear", WindowPolicy::measured, {1e-3, 1e-3}},
                                       {"rows dearer", WindowPolicy::measured, {1e-3, 2e-3}},
                                       {"measured cost", WindowPolicy::measured, {}}};
    std::vector<int64_t> drafted;
    for (const Shape& shape : shapes) {
      options.window_policy = shape.policy;
      options.assumed_round_cost = shape.cost;
      for (bool together : {false, true}) {
        const test::EngineRun run = test::run_engine(model, requests, options, together);
        const std::string what = std::string(shape.name) + (together ? ", together" : ", solo");
        expect_same_tokens(plain.replies, run.replies, what.c_str());
        test::expect_same_logprobs(plain, run, requests, what.c_str());
        if (!together) drafted.push_back(run.stats.drafted_tokens);
      }
    }
    // The choices really differed: dear rows verify fewer drafts than nearly free ones, dearer fewer
    // still (but some: a draft likely enough pays for its row).
    EXPECT_LT(drafted[2], drafted[1]) << (sampled ? "sampled" : "greedy");
    EXPECT_LT(drafted[3], drafted[2]) << (sampled ? "sampled" : "greedy");
    EXPECT_GT(drafted[3], 0) << (sampled ? "sampled" : "greedy");
  }
}

TEST(SpeculationTest, AlwaysWrongDraftsStillGiveCorrectTokens) {
  auto model = load_model(test::fixture_model("qwen3-tiny-c"), {});
  std::mt19937 rng(4);
  const int64_t vocab = model->config().vocab_size;
  auto requests = random_requests(kPrompts, true, vocab, rng(), 40, 32);
  EngineOptions options;
  options.n_ctx = 160;
  auto plain = run_requests(model, without_drafts(requests), options, true);
  for (size_t i = 0; i < requests.size(); ++i)
    for (int32_t t : plain[i].tokens) requests[i].draft.replay.push_back((t + 1 + int32_t(rng() % 7)) % int32_t(vocab));
  auto wrong = run_requests(model, requests, random_windows(rng, LanePolicy::always_lone), true);
  expect_same_tokens(plain, wrong, "wrong drafts");
}

// A row's logits do not change when unrelated sibling branches join its tree.
TEST(SpeculationTest, TreeMaskIsolatesSiblings) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  const ModelConfig& c = model->config();
  const int64_t vocab = c.vocab_size;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    KvCache kv = make_kv_cache(*model, 64);
    int32_t lane = kv.lane_open();
    kv.lane_reserve(lane, 200);
    int32_t scratch = kv.lane_open();
    kv.lane_reserve(scratch, 200);
    int64_t n_prompt = 5 + int64_t(rng() % 70);
    Batch prefill;
    for (int64_t i = 0; i < n_prompt; ++i)
      prefill.rows.push_back({int32_t(rng() % vocab), int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, i), false});
    model->forward(prefill, kv, nullptr);
    // A chain of 4 below the root, alone.
    std::vector<int32_t> chain;
    for (int i = 0; i < 5; ++i) chain.push_back(int32_t(rng() % vocab));
    auto build = [&](int n_siblings) {
      Batch b;
      int32_t next_scratch = 0;
      for (int i = 0; i < 5; ++i)
        b.rows.push_back({chain[size_t(i)], int32_t(n_prompt + i), lane, i == 0 ? -1 : int32_t(b.rows.size() - 1),
                          kv.slot(lane, n_prompt + i), true});
      for (int s = 0; s < n_siblings; ++s) {  // a branch hanging off a random chain node
        int32_t parent = int32_t(rng() % 4);
        int32_t depth = 1 + int32_t(rng() % 3);
        for (int d = 0; d < depth; ++d) {
          int32_t pos = b.rows[size_t(parent)].pos + 1;
          b.rows.push_back({int32_t(rng() % vocab), pos, lane, parent, kv.slot(scratch, next_scratch++), true});
          parent = int32_t(b.rows.size() - 1);
        }
      }
      std::vector<float> logits(b.rows.size() * size_t(vocab));
      model->forward(b, kv, logits.data());
      logits.resize(5 * size_t(vocab));  // the chain's rows come first
      return logits;
    };
    auto alone = build(0);
    auto crowded = build(1 + int(rng() % 12));
    EXPECT_EQ(0, std::memcmp(alone.data(), crowded.data(), alone.size() * sizeof(float))) << trial;
  }
}

// Budgets, EOS and stop strings land on the same token with and without drafts, also when the
// stop falls inside an accepted run.
TEST(SpeculationTest, BudgetsEosAndStopsLandOnTheSameToken) {
  std::string dir = test::source_path("tests/fixtures/models/qwen3-tiny-chat");
  auto model = load_model(dir, {});
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  std::mt19937 rng(6);
  std::vector<GenerationRequest> requests;
  const char* prompts[] = {"def f(x):\n    return x\n\ndef f(x):\n", "hello hello hello hello", "a b c a b c a b"};
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r;
    r.prompt = tokenizer->encode(prompts[i % 3]);
    r.max_tokens = 5 + int64_t(rng() % 40);
    r.ignore_eos = i % 2 == 0;
    r.sampling.temperature = i % 4 < 2 ? 0.0f : 0.7f;
    r.sampling.seed = uint64_t(i);
    requests.push_back(r);
  }
  EngineOptions options;
  options.n_ctx = 200;
  auto plain = run_requests(model, without_drafts(requests), options, true, tokenizer);
  // Stop strings taken from the middle of each plain reply; replaying the plain reply makes the
  // stop fall inside an accepted run.
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string& text = plain[i].text;
    if (text.size() > 6) requests[i].stop = {text.substr(text.size() / 2, 2)};
    if (i % 3 == 0) requests[i].draft.replay = plain[i].tokens;
  }
  auto plain_stopped = run_requests(model, without_drafts(requests), options, true, tokenizer);
  for (LanePolicy policy : {LanePolicy::automatic, LanePolicy::always_lone}) {
    auto drafted = run_requests(model, requests, random_windows(rng, policy), true, tokenizer);
    expect_same_tokens(plain_stopped, drafted, "stops");
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(plain_stopped[i].text, drafted[i].text);
  }
}

// A stop string that completes inside a round of accepted drafts ends the reply on the same token
// as plain decoding, with the same text and bitwise the same logprobs: the drafts verified after it
// never reach the reply.
TEST(SpeculationTest, AStopInsideARoundKeepsTextAndLogprobs) {
  std::string dir = test::source_path("tests/fixtures/models/qwen3-tiny-chat");
  auto model = load_model(dir, {});
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  const char* prompts[] = {"def f(x):\n    return x\n\ndef f(x):\n", "hello hello hello hello", "a b c a b c a b"};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 9; ++i) {
    GenerationRequest r;
    r.prompt = tokenizer->encode(prompts[i % 3]);
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.7f;
    r.sampling.seed = uint64_t(i);
    r.n_top_logprobs = i % 3;
    requests.push_back(r);
  }
  EngineOptions options;
  options.n_ctx = 200;
  const std::vector<Reply> full = run_requests(model, without_drafts(requests), options, true, tokenizer);
  // Stops from different places of each reply; each round accepts `depth` drafts of the full reply.
  constexpr int64_t depth = 8;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string& text = full[i].text;
    size_t cut = text.size() * (i + 2) / 12;
    while (cut > 0 && (text[cut] & 0xC0) == 0x80) --cut;
    ASSERT_GT(text.size(), cut + 3) << "request " << i;
    requests[i].stop = {text.substr(cut, 3)};
  }
  replay_plain_replies(requests, full, depth);
  const test::EngineRun plain = test::run_engine(model, without_drafts(requests), options, true, tokenizer);
  const test::EngineRun drafted = test::run_engine(model, requests, options, false, tokenizer);  // the lone window
  expect_same_tokens(plain.replies, drafted.replies, "stop inside a round");
  test::expect_same_logprobs(plain, drafted, requests, "stop inside a round");
  int64_t n_stopped_mid_round = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Reply& reply = drafted.replies[i];
    EXPECT_EQ(reply.text, plain.replies[i].text) << "request " << i;
    EXPECT_EQ(reply.text, full[i].text.substr(0, full[i].text.find(requests[i].stop[0]))) << "request " << i;
    EXPECT_EQ(reply.final_update.finish_reason, FinishReason::stop) << "request " << i;
    EXPECT_EQ(drafted.logprobs[i].size(), reply.tokens.size()) << "request " << i;
    // The prompt's round gives the first token, each later one depth + 1: a count off that grid
    // ended mid-round, with drafts verified after the stop.
    const int64_t n_tokens = int64_t(reply.tokens.size());
    EXPECT_LT(n_tokens, int64_t(full[i].tokens.size())) << "request " << i;
    if ((n_tokens - 1) % (depth + 1) != 0) ++n_stopped_mid_round;
  }
  EXPECT_GT(n_stopped_mid_round, 0) << "the test must stop inside a round";
}

}  // namespace
}  // namespace tf
