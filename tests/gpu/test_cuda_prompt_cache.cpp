// Resumed = fresh on CUDA: the prefix cache's replies equal cold prefills bitwise (the checks the
// CPU suite runs, tests/support/resumed.h), and a saved slot's bf16 K/V comes back unchanged.
#include <gtest/gtest.h>

#include "support/fixtures.h"
#include "support/resumed.h"

namespace tf {
namespace {

std::shared_ptr<Model> tiny_b() { return test::load_fixture("qwen3-tiny-b", "cuda"); }

TEST(CudaPromptCache, ResumedEqualsFreshGreedy) { test::expect_resumed_equals_fresh(tiny_b(), false, false, 1); }
TEST(CudaPromptCache, ResumedEqualsFreshSampled) { test::expect_resumed_equals_fresh(tiny_b(), true, false, 2); }
TEST(CudaPromptCache, ResumedEqualsFreshDrafted) {
  test::expect_resumed_equals_fresh(tiny_b(), false, true, 3);
  test::expect_resumed_equals_fresh(tiny_b(), true, true, 4);
}
TEST(CudaPromptCache, MultiTurnEqualsCold) { test::expect_multi_turn_equals_cold(tiny_b()); }
TEST(CudaPromptCache, EvictionUnderPressureNeverTouchesALiveLane) {
  test::expect_eviction_never_touches_a_live_lane(tiny_b());
}
TEST(CudaPromptCache, ResumedLaneDraftsAsAFreshOne) {
  test::expect_resumed_lane_drafts_as_a_fresh_one(test::load_fixture("qwen3-tiny-a", "cuda"),
                                                  test::source_path("tests/fixtures/drafter/tiny-a-drafter"));
}
TEST(CudaPromptCache, RestoredSlotContinuesExactly) {
  test::expect_restored_slot_continues_exactly(tiny_b(), "/tmp/cuda-restored-slot-test.tfslot");
  test::expect_restored_slot_continues_exactly(test::load_fixture("models/tensorfold-code-target-mlx4", "cuda"),
                                               "/tmp/cuda-restored-slot-mlx4.tfslot");
}

}  // namespace
}  // namespace tf
