// The equalities end to end through the engine on the CUDA model: drafted equals undrafted (greedy
// and sampled, long-copy, n-gram, replay and block-drafter drafts), concurrent equals solo. Bitwise.
#include <gtest/gtest.h>

#include "models/model.h"
#include "server/json_schema_grammar.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

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

// The CPU test's twin (tests/test_structured_output.cpp) on the GPU pick path: each verify row's
// allowed mask and logit_bias go up with the round and are applied by one kernel before penalties
// and the draw, so a JSON-schema reply and a biased one are the same drafted or not, alone or among
// other lanes, greedy and sampled.
TEST(CudaSpeculationTest, TokenConstraintsKeepTheEqualities) {
  const std::string dir = test::fixture_model("models/tensorfold-code-target-mlx4");
  auto model = test::load_fixture("models/tensorfold-code-target-mlx4", "cuda");
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  const nlohmann::json schema = {{"type", "object"},
                                 {"properties", {{"name", {{"type", "string"}, {"maxLength", 20}}},
                                                 {"kind", {{"enum", {"function", "class"}}}},
                                                 {"lines", {{"type", "integer"}}}}},
                                 {"required", {"kind", "name", "lines"}}};
  auto grammar = Grammar::parse(server::json_schema_gbnf(schema, "schema"));
  const std::string example = R"({"kind": "function", "lines": 12, "name": "binary_search"})";
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.prompt = tokenizer->encode("JSON: " + example + "\nJSON: " + example + "\ndef f" + std::to_string(i) + "():\n");
    r.max_tokens = 48;
    if (i < 4) r.constraints.grammar = grammar;
    else r.constraints.logit_bias = {{r.prompt[2], 3.0f}, {r.prompt[3], -50.0f}};
    if (i % 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = uint64_t(90 + i);
    }
    if (i == 2) r.draft.copy_source = tokenizer->encode(example);
    requests.push_back(r);
  }
  EngineOptions options;
  options.n_parallel = 6;
  options.n_ctx = 256;
  options.speculation.min_confident_match = 4;
  const auto plain = test::run_engine(model, test::without_drafts(requests), options, false, tokenizer);
  const auto alone = test::run_engine(model, requests, options, false, tokenizer);
  const auto together = test::run_engine(model, requests, options, true, tokenizer);
  test::expect_same_tokens(plain.replies, alone.replies, "drafted alone");
  test::expect_same_tokens(plain.replies, together.replies, "drafted together");
  test::expect_rounds_shared_by_lanes(together.stats, "constrained lanes together");
  for (size_t i = 0; i < 4; ++i) {
    if (plain.replies[i].final_update.finish_reason == FinishReason::stop) {
      EXPECT_NO_THROW(nlohmann::json::parse(tokenizer->decode(plain.replies[i].tokens))) << "request " << i;
    }
  }
}

}  // namespace
}  // namespace tf
