// The MTP head on CUDA: its drafts against the CPU head's to bf16 accuracy; its context bitwise the
// same however it was appended, drafted chains leaving no trace; the proposer drafting as a fresh
// one; the three equalities with MTP drafts (greedy and sampled, alone and among lanes, some
// accepted), from a quantized copy too and through the serving stack; and the errors when the model
// has no head to draft with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "app/serving_stack.h"
#include "backends/backends.h"
#include "models/mtp_head.h"
#include "support/cpu_numerics.h"
#include "support/equalities.h"
#include "support/expect_error.h"
#include "support/fixtures.h"
#include "support/mtp_fixture.h"
#include "support/mtp_runs.h"
#include "support/resumed.h"

namespace tf {
namespace {

// The CPU head these tests hold the GPU's to computes at f32 inputs.
const ::testing::Environment* const kF32Inputs = ::testing::AddGlobalTestEnvironment(new test::F32InputsThroughout);

using test::HybridWithMtp;

// bf16 weights, activations and K/V against the CPU's f32: a guess's probability may move by a few
// hundredths on these small random heads, and near ties may swap ranks.
constexpr float kMaxProbabilityDifference = 0.05f;
constexpr int64_t kTopRankSlack = 5;

// The GPU head's guesses after n entries and then after each step of a chain, against the CPU head's
// on the same taps (the CPU target's, so only the heads differ).
TEST(CudaMtpHead, GuessesMatchTheCpuHead) {
  HybridWithMtp cpu("qwen3.5-tiny-c", test::MtpWeights::random, 2, "cpu");
  HybridWithMtp gpu("qwen3.5-tiny-c", test::MtpWeights::random, 2, "cuda");
  const ModelConfig& c = cpu.model->config();
  std::mt19937 rng(3);
  const std::vector<int32_t> ids = test::random_ids(rng, 40, c.vocab_size);
  const std::vector<float> taps = test::target_taps(*cpu.model, *cpu.head, ids);
  float largest_difference = 0.0f;
  int64_t n_compared = 0;
  for (int64_t n : {1, 3, 8, 30}) {
    MtpContext on_cpu, on_gpu;
    cpu.head->append_context(on_cpu, taps.data(), ids.data() + 1, n);
    gpu.head->append_context(on_gpu, taps.data(), ids.data() + 1, n);
    ASSERT_TRUE(cpu.head->begin_chain(on_cpu));
    ASSERT_TRUE(gpu.head->begin_chain(on_gpu));
    for (int step = 0; step < 4; ++step) {
      const std::vector<TokenGuess> reference = cpu.head->chain_top(on_cpu, 64);
      const std::vector<TokenGuess> guesses = gpu.head->chain_top(on_gpu, 5);
      ASSERT_EQ(guesses.size(), 5u);
      for (const TokenGuess& guess : guesses) {
        const auto found = std::find_if(reference.begin(), reference.end(),
                                        [&](const TokenGuess& r) { return r.token == guess.token; });
        if (found == reference.end()) continue;  // below the CPU's top 64: negligible either way
        const float difference = std::fabs(found->probability - guess.probability);
        largest_difference = std::max(largest_difference, difference);
        EXPECT_LE(difference, kMaxProbabilityDifference) << "entries " << n << " step " << step << " token " << guess.token;
        ++n_compared;
      }
      const auto rank = std::find_if(reference.begin(), reference.end(),
                                     [&](const TokenGuess& r) { return r.token == guesses[0].token; }) - reference.begin();
      EXPECT_LT(rank, kTopRankSlack) << "the GPU's best guess is the CPU's number " << rank + 1;
      // Both chains go on with the CPU's choice.
      cpu.head->chain_step(on_cpu, reference[0].token);
      gpu.head->chain_step(on_gpu, reference[0].token);
    }
  }
  std::printf("%lld guesses compared, largest probability difference %.4f\n", (long long)n_compared, largest_difference);
}

// More guesses than the GPU's top-k kernel keeps come from the whole row, alike.
TEST(CudaMtpHead, ManyGuessesComeFromTheWholeRow) {
  HybridWithMtp gpu("qwen3.5-tiny-c", test::MtpWeights::random, 2, "cuda");
  std::mt19937 rng(4);
  const std::vector<int32_t> ids = test::random_ids(rng, 10, gpu.model->config().vocab_size);
  const std::vector<float> taps = test::target_taps(*gpu.model, *gpu.head, ids);
  MtpContext context;
  gpu.head->append_context(context, taps.data(), ids.data() + 1, 9);
  ASSERT_TRUE(gpu.head->begin_chain(context));
  const std::vector<TokenGuess> few = gpu.head->chain_top(context, 4), many = gpu.head->chain_top(context, 40);
  ASSERT_EQ(many.size(), 40u);
  for (size_t i = 0; i < few.size(); ++i) {
    EXPECT_EQ(few[i].token, many[i].token) << i;
    EXPECT_NEAR(few[i].probability, many[i].probability, 1e-6f) << i;
  }
  for (size_t i = 1; i < many.size(); ++i) EXPECT_GE(many[i - 1].probability, many[i].probability) << i;
}

TEST(CudaMtpHead, ContextIsChunkInvariantAndDraftedChainsLeaveNoTrace) {
  test::expect_context_chunk_invariant(HybridWithMtp("qwen3.5-tiny-c", test::MtpWeights::random, 4, "cuda"), 5);
}

TEST(CudaMtpProposer, DraftsAsAFreshProposerOnTheCommittedHistory) {
  test::expect_proposer_drafts_as_fresh(HybridWithMtp("qwen3.5-tiny-c", test::MtpWeights::random, 6, "cuda"), 7);
}

TEST(CudaMtpEngine, RandomHeadKeepsTheEqualities) {
  test::expect_mtp_keeps_equalities(HybridWithMtp("qwen3.5-tiny-c", test::MtpWeights::random, 8, "cuda"), false, 24);
}

TEST(CudaMtpEngine, EchoingHeadHasDraftsAcceptedAndKeepsTheEqualities) {
  test::expect_mtp_keeps_equalities(HybridWithMtp("qwen3.5-tiny-chat", test::MtpWeights::echo_hidden, 9, "cuda"), true,
                                    8);
}

TEST(CudaMtpEngine, ResumedLaneDraftsAsAFreshOne) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 10, "cuda");
  test::expect_resumed_lane_drafts_as_a_fresh_one(m.model, nullptr, m.head);
}

TEST(CudaMtpEngine, AQuantizedCopyDraftsWithItsQuantizedHead) {
  test::expect_quantized_copy_drafts_with_its_head("cuda");
}

// The composition root on the GPU: drafter "mtp" uploads the head with the model and drafts with it.
TEST(CudaMtpEngine, TheServingStackDraftsWithTheHeadForDrafterMtp) {
  test::TempDir dir;
  test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 15);
  ServingOptions options;
  options.model_dir = dir.path;
  options.drafter = "mtp";
  options.needs_tokenizer = false;
  options.load = test::test_load_options("cuda");
  options.engine = test::mtp_engine_options(64);
  auto stack = ServingStack::load(options);
  ReplyCollector collector;
  GenerationRequest request = test::random_requests(1, false, stack->facts().vocab_size, 16)[0];
  ASSERT_EQ(stack->engine()->submit(request, collector.sink()).status, SubmitStatus::accepted);
  collector.wait();
  EXPECT_GT(test::settled_stats(*stack->engine()).drafted_by_proposer[int(ProposerKind::mtp)], 0);
}

TEST(CudaMtpWeights, AModelWithoutItsHeadOnTheGpuSaysWhy) {
  test::expect_error_naming([] { test::load_fixture("qwen3.5-tiny-c", "cuda")->load_mtp_head(1); },
                            {test::fixture_model("qwen3.5-tiny-c"), "mtp.fc.weight"});
  test::TempDir dir;
  test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 17);
  test::expect_error_naming([&] { load_model(dir.path, test::test_load_options("cuda"))->load_mtp_head(1); },
                            {"--drafter mtp"});
}

}  // namespace
}  // namespace tf
