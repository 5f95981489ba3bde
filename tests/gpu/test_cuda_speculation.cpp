// The equalities end to end through the engine on the CUDA model: drafted equals undrafted (greedy
// and sampled, long-copy, n-gram, replay and block-drafter drafts), concurrent equals solo. Bitwise.
#include <gtest/gtest.h>

#include "models/model.h"
#include "support/equalities.h"
#include "support/fixtures.h"

namespace tf {
namespace {

struct Case {
  const char* model;
  bool sampled;
};

class CudaDraftedEqualsUndrafted : public ::testing::TestWithParam<Case> {};

TEST_P(CudaDraftedEqualsUndrafted, OverManyPromptsWindowsAndPolicies) {
  test::expect_drafted_equals_undrafted(test::load_fixture(GetParam().model, "cuda"), GetParam().sampled);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaDraftedEqualsUndrafted,
                         ::testing::Values(Case{"qwen3-tiny-a", false}, Case{"qwen3-tiny-a", true},
                                           Case{"qwen3-tiny-b", false}, Case{"qwen3-tiny-b", true},
                                           Case{"qwen3-tiny-c", false}, Case{"qwen3-tiny-c", true}));

TEST(CudaSpeculationTest, ReplayAtFullAcceptanceEqualsPlainDecoding) {
  test::expect_replay_equals_plain(test::load_fixture("qwen3-tiny-b", "cuda"), 3);
}

TEST(CudaSpeculationTest, ConcurrentEqualsSoloGreedy) {
  test::expect_concurrent_equals_solo(test::load_fixture("qwen3-tiny-b", "cuda"), false);
}

// The drafter runs on the GPU beside the GPU target (load_drafter on a CUDA model), fed its taps.
TEST(CudaSpeculationTest, DrafterOnKeepsEveryEquality) {
  test::expect_drafter_keeps_equalities(test::load_fixture("qwen3-tiny-a", "cuda"),
                                        test::source_path("tests/fixtures/drafter/tiny-a-drafter"));
}

// On the GPU every token is chosen there (penalties, argmax, the seeded draw); logprobs only copy
// the raw logits out, so asking for them changes no token.
TEST(CudaSpeculationTest, LogprobsChangeNoToken) {
  test::expect_logprobs_change_no_token(test::load_fixture("qwen3-tiny-b", "cuda"));
  test::expect_logprobs_change_no_token(test::load_fixture("models/tensorfold-code-target-mlx4", "cuda"));
}

TEST(CudaSpeculationTest, ConcurrentEqualsSoloSampled) {
  test::expect_concurrent_equals_solo(test::load_fixture("qwen3-tiny-b", "cuda"), true);
}

}  // namespace
}  // namespace tf
