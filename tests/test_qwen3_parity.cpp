// Golden tests: logits and greedy tokens of tiny random Qwen3 checkpoints against transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backends/backends.h"
#include "backends/cpu/kernels/simd.h"
#include "models/model.h"
#include "support/cpu_numerics.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"

namespace tf {
namespace {

// The references run transformers in float32 on the bf16 weights; ours is float32 too, so the
// only differences are summation orders.
constexpr float kLogitTolerance = 1e-4f;
float largest_magnitude(const std::vector<float>& values) {
  float largest = 0;
  for (float v : values) largest = std::max(largest, std::fabs(v));
  return largest;
}

// The greedy comparison must cover at least this many steps.
constexpr size_t kMinGreedySteps = 8;

using test::greedy_generate;
using test::prefill_logits;

// Our greedy tokens against the reference's, step by step, up to the first step whose reference
// top-2 margin is too thin to call (past it the two may legitimately part). At least
// kMinGreedySteps steps must be compared, so a fixture of thin margins cannot pass by comparing none.
void expect_greedy_tokens_match(const std::vector<int32_t>& got, const std::vector<int32_t>& expected,
                                const std::vector<float>& margins) {
  ASSERT_GE(expected.size(), kMinGreedySteps) << "the fixture's reference has too few greedy tokens";
  ASSERT_EQ(margins.size(), expected.size());
  ASSERT_EQ(got.size(), expected.size());
  size_t compared = 0;
  for (; compared < expected.size() && margins[compared] >= 10 * kLogitTolerance; ++compared)
    EXPECT_EQ(got[compared], expected[compared]) << "step " << compared;
  EXPECT_GE(compared, kMinGreedySteps) << "the reference margin at step " << compared << " ("
                                       << (compared < margins.size() ? margins[compared] : 0.0f)
                                       << ") is too thin to compare";
}

class ParityTest : public ::testing::TestWithParam<std::string> {};

// At each numerics the machine has; the argmax of every position at f32 inputs (at bf16 inputs the
// tolerance bounds which near-ties may swap).
TEST_P(ParityTest, LogitsMatchTransformers) {
  std::string dir = test::fixture_model(GetParam());
  auto ref = test::read_json(dir + "/reference.json");
  for (const test::CpuNumerics& numerics : test::cpu_numerics_here()) {
    SCOPED_TRACE(numerics.name);
    test::CpuNumericsScope scope(numerics);
    auto model = load_model(dir, {});
    std::vector<int32_t> ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<float> logits = prefill_logits(*model, ids);
    const int64_t n_vocab = model->config().vocab_size;
    const auto& ref_logits = ref["logits"];
    ASSERT_EQ(ref_logits.size(), ids.size());
    float worst = 0, largest = 0;
    for (size_t p = 0; p < ids.size(); ++p)
      for (int64_t v = 0; v < n_vocab; ++v) {
        const float expected = ref_logits[p][size_t(v)].get<float>();
        worst = std::max(worst, std::fabs(logits[p * size_t(n_vocab) + size_t(v)] - expected));
        largest = std::max(largest, std::fabs(expected));
      }
    EXPECT_LT(worst, test::logit_tolerance(numerics, kLogitTolerance, largest))
        << "largest logit difference over every position";
    std::printf("%s, %s: largest logit difference %.3g\n", GetParam().c_str(), numerics.name.c_str(), worst);
    if (numerics.has_bf16_inputs) continue;
    std::vector<int32_t> ref_argmax = ref["argmax"].get<std::vector<int32_t>>();
    for (size_t p = 0; p < ids.size(); ++p) {
      const float* row = logits.data() + p * size_t(n_vocab);
      int32_t best = int32_t(std::max_element(row, row + n_vocab) - row);
      EXPECT_FLOAT_EQ(row[best], row[ref_argmax[p]]) << "position " << p;
    }
  }
}

// At f32 inputs, whose tolerance makes the margins worth comparing.
TEST_P(ParityTest, GreedyTokensMatchTransformers) {
  test::CpuNumericsScope scope(test::f32_inputs());
  std::string dir = test::fixture_model(GetParam());
  auto ref = test::read_json(dir + "/reference.json");
  auto model = load_model(dir, {});
  auto expected = ref["greedy_tokens"].get<std::vector<int32_t>>();
  auto margins = ref["greedy_top2_margins"].get<std::vector<float>>();
  auto got = greedy_generate(model, ref["prompt_ids"].get<std::vector<int32_t>>(), int64_t(expected.size()));
  expect_greedy_tokens_match(got, expected, margins);
}

INSTANTIATE_TEST_SUITE_P(TinyQwen3, ParityTest,
                         ::testing::Values("qwen3-tiny-a", "qwen3-tiny-b", "qwen3-tiny-c"));

TEST(ParityTest, DefaultChatModelTopLogitsMatch) {
  std::string dir = test::source_path("tests/fixtures/models/qwen3-tiny-chat");
  auto ref = test::read_json(dir + "/reference.json");
  auto ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  for (const test::CpuNumerics& numerics : test::cpu_numerics_here()) {
    SCOPED_TRACE(numerics.name);
    test::CpuNumericsScope scope(numerics);
    auto model = load_model(dir, {});
    std::vector<float> logits = prefill_logits(*model, ids);
    const float* last = logits.data() + (ids.size() - 1) * size_t(model->config().vocab_size);
    auto top = ref["logits_last_top"].get<std::vector<int32_t>>();
    auto values = ref["logits_last_top_values"].get<std::vector<float>>();
    const float tolerance = test::logit_tolerance(numerics, kLogitTolerance, largest_magnitude(values));
    for (size_t i = 0; i < top.size(); ++i) EXPECT_NEAR(last[top[i]], values[i], tolerance);
  }
  test::CpuNumericsScope scope(test::f32_inputs());
  auto model = load_model(dir, {});
  auto expected = ref["greedy_tokens"].get<std::vector<int32_t>>();
  auto margins = ref["greedy_top2_margins"].get<std::vector<float>>();
  auto got = greedy_generate(model, ids, int64_t(expected.size()));
  expect_greedy_tokens_match(got, expected, margins);
}

// --bf16-dot off: loading with it turns the process to f32 inputs (their exact bits), and the
// numerics reported for such a load say so.
TEST(CpuNumerics, ALoadWithoutTheBf16DotComputesAtF32Inputs) {
  if (!cpu::simd_level_supported(cpu::SimdLevel::avx512_bf16)) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  test::CpuNumericsScope restored({"bf16 inputs", true});
  ModelLoadOptions off;
  off.cpu_bf16_dot = false;
  EXPECT_NE(device_numerics(ModelLoadOptions{}).find("bf16-rounded inputs"), std::string::npos);
  EXPECT_EQ(device_numerics(off).find("bf16"), std::string::npos) << device_numerics(off);
  const std::string dir = test::fixture_model("qwen3-tiny-a");
  const auto ids = test::read_json(dir + "/reference.json")["prompt_ids"].get<std::vector<int32_t>>();
  auto model = load_model(dir, off);
  EXPECT_EQ(cpu::simd_level(), cpu::SimdLevel::avx512);
  const std::vector<float> without = prefill_logits(*model, ids);
  cpu::set_simd_level_for_testing(cpu::SimdLevel::avx512_bf16);
  const std::vector<float> with = prefill_logits(*model, ids);
  cpu::set_simd_level_for_testing(cpu::SimdLevel::avx512);
  const std::vector<float> again = prefill_logits(*model, ids);
  EXPECT_EQ(without, again);
  EXPECT_NE(without, with) << "bf16-rounded inputs give other bits";
}

}  // namespace
}  // namespace tf
