// The CUDA model against the CPU model on the fixture checkpoints. The GPU keeps activations and the
// KV cache in bf16 (8 mantissa bits: each rounding is off by up to 2^-9 relative) where the CPU keeps
// f32, so logits agree to bf16 accuracy, not bitwise: the tolerances below are a few times the error
// of a handful of roundings per layer on logits of magnitude ~1. Greedy tokens must agree wherever
// the CPU's top-2 margin is wider than twice the largest logit difference allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backends/backends.h"
#include "gpu_test.h"
#include "models/model.h"
#include "support/cpu_numerics.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

// The CPU model these tests hold the GPU to computes at f32 inputs, as when their tolerances were set.
const ::testing::Environment* const kF32Inputs = ::testing::AddGlobalTestEnvironment(new test::F32InputsThroughout);

using gpu_test::relative_error;
using gpu_test::top2_margin;

constexpr double kMaxRelativeError = 2e-2;  // ||gpu - cpu|| / ||cpu|| over every logit
constexpr float kMaxLogitDifference = 0.1f;  // largest |gpu - cpu| of any logit
constexpr int64_t kGreedySteps = 32;

float max_difference(const std::vector<float>& got, const std::vector<float>& want) {
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}

class CudaParityTest : public ::testing::TestWithParam<std::string> {};

// Teacher-forced: both models read the prompt plus the CPU's greedy reply in one forward.
TEST_P(CudaParityTest, LogitsMatchTheCpuModel) {
  auto ref = test::read_json(test::fixture_model(GetParam()) + "/reference.json");
  auto cpu = test::load_fixture(GetParam(), "cpu");
  auto gpu = test::load_fixture(GetParam(), "cuda");
  std::vector<int32_t> ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> reply = test::greedy_generate(cpu, ids, kGreedySteps);
  ids.insert(ids.end(), reply.begin(), reply.end());
  std::vector<float> want = test::prefill_logits(*cpu, ids);
  std::vector<float> got = test::prefill_logits(*gpu, ids);
  ASSERT_EQ(got.size(), want.size());
  const double error = relative_error(got, want);
  const float worst = max_difference(got, want);
  std::printf("%s: relative error %.3e, largest logit difference %.3e\n", GetParam().c_str(), error, worst);
  EXPECT_LT(error, kMaxRelativeError);
  EXPECT_LT(worst, kMaxLogitDifference);
  const int64_t n_vocab = cpu->config().vocab_size;
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* want_row = want.data() + p * size_t(n_vocab);
    const float* got_row = got.data() + p * size_t(n_vocab);
    if (top2_margin(want_row, n_vocab) < 2 * kMaxLogitDifference) continue;
    EXPECT_EQ(std::max_element(got_row, got_row + n_vocab) - got_row,
              std::max_element(want_row, want_row + n_vocab) - want_row)
        << "position " << p;
  }
}

// Free-running through the engine: equal tokens up to the first step too close to call.
TEST_P(CudaParityTest, GreedyTokensMatchTheCpuModel) {
  auto ref = test::read_json(test::fixture_model(GetParam()) + "/reference.json");
  auto cpu = test::load_fixture(GetParam(), "cpu");
  auto gpu = test::load_fixture(GetParam(), "cuda");
  const std::vector<int32_t> prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> want = test::greedy_generate(cpu, prompt, kGreedySteps);
  std::vector<int32_t> got = test::greedy_generate(gpu, prompt, kGreedySteps);
  ASSERT_EQ(got.size(), want.size());
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), want.begin(), want.end());
  std::vector<float> cpu_logits = test::prefill_logits(*cpu, ids);
  const int64_t n_vocab = cpu->config().vocab_size;
  size_t n_compared = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float* row = cpu_logits.data() + (prompt.size() - 1 + i) * size_t(n_vocab);
    if (top2_margin(row, n_vocab) < 2 * kMaxLogitDifference) break;
    EXPECT_EQ(got[i], want[i]) << "step " << i;
    ++n_compared;
  }
  std::printf("%s: %zu of %lld greedy steps compared\n", GetParam().c_str(), n_compared, (long long)kGreedySteps);
}

// Hidden-state taps for the drafter: the same rows as the CPU's, to bf16 accuracy.
TEST_P(CudaParityTest, TapsMatchTheCpuModel) {
  auto cpu = test::load_fixture(GetParam(), "cpu");
  auto gpu = test::load_fixture(GetParam(), "cuda");
  const int last = int(cpu->config().n_layers) - 1;
  cpu->set_tap_layers({last, 0});
  gpu->set_tap_layers({last, 0});
  std::mt19937 rng(17);
  auto ids = test::random_ids(rng, 40, cpu->config().vocab_size);
  test::prefill_logits(*cpu, ids);
  test::prefill_logits(*gpu, ids);
  ASSERT_EQ(gpu->taps().size(), cpu->taps().size());
  EXPECT_LT(relative_error(gpu->taps(), cpu->taps()), kMaxRelativeError);
}

INSTANTIATE_TEST_SUITE_P(TinyQwen3, CudaParityTest, ::testing::Values("qwen3-tiny-a", "qwen3-tiny-b", "qwen3-tiny-c"));

// The random fixtures have top-2 margins too thin to call most greedy steps; the trained code
// model's 4-bit copy has real margins (both backends compute with the same quantized weights), so
// free-running greedy replies to code prompts are compared token for token, each up to its first
// step too close to call.
TEST(CudaParityTrainedModel, GreedyRepliesMatchTheCpuModel) {
  const std::string dir = test::source_path("models/tensorfold-code-target-mlx4");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is not here";
  auto cpu = load_model(dir, {});
  auto gpu = load_model(dir, test::test_load_options("cuda"));
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  const char* prompts[] = {"import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"Parse the arguments and run.\"\"\"\n",
                           "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
                           "def read_json(path):\n    with open(path) as f:\n",
                           "# Copyright 2024\nfrom typing import List\n\n\ndef flatten(items: List[list]) -> list:\n"};
  const int64_t n_vocab = cpu->config().vocab_size;
  size_t n_compared = 0;
  for (const char* text : prompts) {
    const std::vector<int32_t> prompt = tokenizer->encode(text);
    std::vector<int32_t> want = test::greedy_generate(cpu, prompt, 48);
    std::vector<int32_t> got = test::greedy_generate(gpu, prompt, 48);
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), want.begin(), want.end());
    std::vector<float> cpu_logits = test::prefill_logits(*cpu, ids);
    for (size_t i = 0; i < want.size(); ++i) {
      const float* row = cpu_logits.data() + (prompt.size() - 1 + i) * size_t(n_vocab);
      if (top2_margin(row, n_vocab) < 2 * kMaxLogitDifference) break;
      EXPECT_EQ(got[i], want[i]) << text << " step " << i;
      ++n_compared;
    }
  }
  std::printf("tensorfold-code-target-mlx4: %zu of %zu greedy steps compared\n", n_compared, 4 * size_t(48));
  EXPECT_GE(n_compared, size_t(24)) << "too few steps were clear enough to compare";
}

}  // namespace
}  // namespace tf
