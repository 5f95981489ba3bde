// The engine's three equalities on Qwen3.5-class hybrids (Gated DeltaNet + gated attention) on the
// CPU: drafted = undrafted with long copy, n-gram and the block drafter (accepted siblings included),
// concurrent = solo, and replay at full acceptance = plain decoding. The model-level state checks are
// in test_hybrid.cpp; the prefix cache's on hybrids in test_prompt_cache.cpp.
#include <gtest/gtest.h>

#include "backends/backends.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "support/random_drafter.h"
#include "support/resumed.h"

namespace tf {
namespace {

struct EngineCase {
  const char* model;
  bool sampled;
};

class HybridDraftedEqualsUndrafted : public ::testing::TestWithParam<EngineCase> {};

// Long copy and n-gram drafts (copy-friendly prompts), random windows and lane policies, the lone
// driver's wide copy windows included. The chat-sized fixture repeats itself under greedy decoding,
// so drafts are accepted, siblings among them; the smaller fixtures' replies rarely repeat enough.
TEST_P(HybridDraftedEqualsUndrafted, OverManyPromptsWindowsAndPolicies) {
  test::expect_drafted_equals_undrafted(test::load_fixture(GetParam().model, "cpu"), GetParam().sampled);
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, HybridDraftedEqualsUndrafted,
                         ::testing::Values(EngineCase{"qwen3.5-tiny-chat", false}, EngineCase{"qwen3.5-tiny-chat", true}));

class HybridConcurrentEqualsSolo : public ::testing::TestWithParam<bool> {};

TEST_P(HybridConcurrentEqualsSolo, TokensAreBitwiseEqual) {
  test::expect_concurrent_equals_solo(test::load_fixture("qwen3.5-tiny-b", "cpu"), GetParam());
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, HybridConcurrentEqualsSolo, ::testing::Values(false, true));

TEST(HybridEngine, ReplayAtFullAcceptanceEqualsPlainDecoding) {
  test::expect_replay_equals_plain(test::load_fixture("qwen3.5-tiny-c", "cpu"), 5);
}

// The block drafter beside a hybrid, fed the hybrid's taps: a random drafter fitting the fixture
// (its drafts only need to be drafts; the accepted siblings a hybrid's state must survive are
// HybridDraftedEqualsUndrafted's, from long copy and n-gram).
TEST(HybridEngine, BlockDrafterKeepsTheEqualities) {
  test::TempDir dir;
  auto model = test::load_fixture("qwen3.5-tiny-c", "cpu");
  test::write_random_drafter(dir.path, model->config(), 5);
  test::expect_drafter_keeps_equalities(model, dir.path, false);
}

// A hybrid lane resumed from the prefix cache gets its drafter's context from the cached blocks' taps
// and its recurrent state from a checkpoint: it drafts exactly as the fresh lane did.
TEST(HybridEngine, ResumedLaneDraftsAsAFreshOne) {
  test::TempDir dir;
  auto model = test::load_fixture("qwen3.5-tiny-c", "cpu");
  test::write_random_drafter(dir.path, model->config(), 6);
  test::expect_resumed_lane_drafts_as_a_fresh_one(model, dir.path);
}

}  // namespace
}  // namespace tf
