// Golden tests: logits and greedy tokens of tiny random Qwen3 checkpoints against transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/backends.h"
#include "models/model.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"

namespace tf {
namespace {

// The references run transformers in float32 on the bf16 weights; ours is float32 too, so the
// only differences are summation orders.
constexpr float kLogitTolerance = 1e-4f;

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

TEST_P(ParityTest, LogitsMatchTransformers) {
  std::string dir = test::fixture_model(GetParam());
  auto ref = test::read_json(dir + "/reference.json");
  auto model = load_model(dir, {});
  std::vector<int32_t> ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> logits = prefill_logits(*model, ids);
  const int64_t n_vocab = model->config().vocab_size;
  const auto& ref_logits = ref["logits"];
  ASSERT_EQ(ref_logits.size(), ids.size());
  float worst = 0;
  for (size_t p = 0; p < ids.size(); ++p)
    for (int64_t v = 0; v < n_vocab; ++v)
      worst = std::max(worst, std::fabs(logits[p * size_t(n_vocab) + size_t(v)] - ref_logits[p][size_t(v)].get<float>()));
  EXPECT_LT(worst, kLogitTolerance) << "largest logit difference over every position";
  std::vector<int32_t> ref_argmax = ref["argmax"].get<std::vector<int32_t>>();
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* row = logits.data() + p * size_t(n_vocab);
    int32_t best = int32_t(std::max_element(row, row + n_vocab) - row);
    EXPECT_FLOAT_EQ(row[best], row[ref_argmax[p]]) << "position " << p;
  }
}

TEST_P(ParityTest, GreedyTokensMatchTransformers) {
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
  auto model = load_model(dir, {});
  auto ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> logits = prefill_logits(*model, ids);
  const float* last = logits.data() + (ids.size() - 1) * size_t(model->config().vocab_size);
  auto top = ref["logits_last_top"].get<std::vector<int32_t>>();
  auto values = ref["logits_last_top_values"].get<std::vector<float>>();
  for (size_t i = 0; i < top.size(); ++i) EXPECT_NEAR(last[top[i]], values[i], kLogitTolerance);
  auto expected = ref["greedy_tokens"].get<std::vector<int32_t>>();
  auto margins = ref["greedy_top2_margins"].get<std::vector<float>>();
  auto got = greedy_generate(model, ids, int64_t(expected.size()));
  expect_greedy_tokens_match(got, expected, margins);
}

}  // namespace
}  // namespace tf
