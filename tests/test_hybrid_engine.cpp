// The engine's three equalities on Qwen3.5-class hybrids (Gated DeltaNet + gated attention) on the
// CPU: drafted = undrafted with long copy and n-gram (accepted siblings included), concurrent = solo,
// and replay at full acceptance = plain decoding. The model-level state checks are in test_hybrid.cpp.
#include <gtest/gtest.h>

#include "backends/backends.h"
#include "support/equalities.h"
#include "support/fixtures.h"

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

}  // namespace
}  // namespace tf
