// The block drafter on the GPU against the CPU drafter (which test_drafter checks against the
// PyTorch reference): bf16 activations and context where the CPU keeps f32, so block logits agree
// to bf16 accuracy, as the CUDA model's do (test_cuda_model_parity). Its context is batch
// invariant bitwise: fed whole, token by token, or rolled back and refilled, it drafts the same bits.
// (test_cuda_speculation runs it through the engine: the three equalities with it on.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backends/backends.h"
#include "gpu_test.h"
#include "models/dflash_drafter.h"
#include "models/model.h"
#include "support/cpu_numerics.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"

namespace tf {
namespace {

// The CPU model these tests hold the GPU to computes at f32 inputs, as when their tolerances were set.
const ::testing::Environment* const kF32Inputs = ::testing::AddGlobalTestEnvironment(new test::F32InputsThroughout);

using gpu_test::relative_error;

constexpr double kMaxRelativeError = 2e-2;   // ||gpu - cpu|| / ||cpu|| over every block logit
constexpr float kMaxLogitDifference = 0.15f;  // largest |gpu - cpu| of any block logit

const char* kTarget = "qwen3-tiny-a";
const char* kDrafter = "tests/fixtures/drafter/tiny-a-drafter";

// The taps of every position of `ids` from one prefill on `model`.
std::vector<float> taps_of(Model& model, const DFlashDrafter& drafter, const std::vector<int32_t>& ids) {
  const auto& layers = drafter.config().target_layer_ids;
  model.set_tap_layers({layers.begin(), layers.end()});
  test::prefill_logits(model, ids);
  return model.taps();
}

std::vector<float> block_of(DFlashDrafter& drafter, DrafterContext& context, int32_t last_token, int64_t position) {
  std::vector<float> logits(size_t(drafter.n_block_logits() * drafter.config().vocab_size));
  drafter.propose_block(context, last_token, position, logits.data());
  return logits;
}

TEST(CudaDrafter, BlockLogitsMatchTheCpuDrafter) {
  auto cpu = test::load_fixture(kTarget, "cpu");
  auto gpu = test::load_fixture(kTarget, "cuda");
  auto cpu_drafter = load_drafter(test::source_path(kDrafter), *cpu, 2);
  auto gpu_drafter = load_drafter(test::source_path(kDrafter), *gpu, 2);
  std::mt19937 rng(5);
  const int64_t n_vocab = cpu->config().vocab_size;
  for (int64_t n : {1, 9, 40, 130}) {  // contexts of one to three attention chunks
    std::vector<int32_t> ids = test::random_ids(rng, n + 1, n_vocab);
    // Both drafters read the CPU target's taps, so only the drafters differ.
    std::vector<float> taps = taps_of(*cpu, *cpu_drafter, ids);
    DrafterContext cpu_context, gpu_context;
    cpu_drafter->append_context(cpu_context, taps.data(), n);
    gpu_drafter->append_context(gpu_context, taps.data(), n);
    std::vector<float> want = block_of(*cpu_drafter, cpu_context, ids.back(), n);
    std::vector<float> got = block_of(*gpu_drafter, gpu_context, ids.back(), n);
    const double error = relative_error(got, want);
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    std::printf("context %lld: relative error %.3e, largest logit difference %.3e\n", (long long)n, error, worst);
    EXPECT_LT(error, kMaxRelativeError) << "context " << n;
    EXPECT_LT(worst, kMaxLogitDifference) << "context " << n;
    for (int64_t j = 0; j < gpu_drafter->n_block_logits(); ++j) {
      // The GPU's top-k and softmax equal the host's over the same logits (the sum's order aside).
      const auto on_gpu = gpu_drafter->block_top(j, 4), on_host = gpu_drafter->DFlashDrafter::block_top(j, 4);
      ASSERT_EQ(on_gpu.size(), on_host.size());
      for (size_t i = 0; i < on_gpu.size(); ++i) {
        EXPECT_EQ(on_gpu[i].token, on_host[i].token) << "context " << n << " row " << j << " rank " << i;
        EXPECT_NEAR(on_gpu[i].probability, on_host[i].probability, 1e-4f * on_host[i].probability + 1e-7f);
      }
      const float* want_row = want.data() + j * n_vocab;
      const int32_t best = argmax_token(want_row, n_vocab);
      const std::vector<int32_t> top2 = top_k_tokens(want_row, n_vocab, 2);
      if (want_row[top2[0]] - want_row[top2[1]] < 2 * kMaxLogitDifference) continue;
      EXPECT_EQ(argmax_token(got.data() + j * n_vocab, n_vocab), best) << "context " << n << " row " << j;
    }
  }
}

TEST(CudaDrafter, ContextAndBlockAreBatchInvariant) {
  auto gpu = test::load_fixture(kTarget, "cuda");
  auto drafter = load_drafter(test::source_path(kDrafter), *gpu, 1);
  std::mt19937 rng(6);
  const int64_t n_vocab = gpu->config().vocab_size, width = drafter->config().tap_width();
  std::vector<int32_t> ids = test::random_ids(rng, 70, n_vocab), other_ids = test::random_ids(rng, 30, n_vocab);
  std::vector<float> taps = taps_of(*gpu, *drafter, ids), other_taps = taps_of(*gpu, *drafter, other_ids);
  const int64_t p = int64_t(ids.size()) - 1;

  DrafterContext whole;
  drafter->append_context(whole, taps.data(), p);
  const std::vector<float> expected = block_of(*drafter, whole, ids.back(), p);
  for (float x : expected) ASSERT_TRUE(std::isfinite(x));

  // Token by token, with another lane drafting in between (the context grows through several sizes).
  DrafterContext single, other;
  for (int64_t t = 0; t < p; ++t) {
    drafter->append_context(single, taps.data() + t * width, 1);
    if (t < 29) drafter->append_context(other, other_taps.data() + t * width, 1);
    if (t == 29) block_of(*drafter, other, other_ids.back(), 29);
  }
  EXPECT_EQ(block_of(*drafter, single, ids.back(), p), expected) << "token-by-token context";

  // Rejected entries replaced: foreign taps past p - 5, a block over them, truncate, the real ones.
  DrafterContext rolled;
  drafter->append_context(rolled, taps.data(), p - 5);
  drafter->append_context(rolled, other_taps.data(), 9);
  block_of(*drafter, rolled, other_ids[3], p - 5);
  rolled.truncate(p - 5);
  drafter->append_context(rolled, taps.data() + (p - 5) * width, 5);
  EXPECT_EQ(block_of(*drafter, rolled, ids.back(), p), expected) << "after a truncation";
}

}  // namespace
}  // namespace tf
