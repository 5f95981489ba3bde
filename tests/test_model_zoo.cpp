// The shipped models (models/tensorfold-code-*): they load as what the engine serves by default,
// the 4-bit copy loads, the drafter fits its target, and with the trained drafter on, replies are
// bitwise those of "draft": false, alone or together, greedy or sampled.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "models/dflash_drafter.h"
#include "models/model.h"
#include "support/engine_runner.h"
#include "support/fixtures.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using test::run_requests;

const std::string kTarget = test::source_path("models/tensorfold-code-target");
const std::string kTarget4 = test::source_path("models/tensorfold-code-target-mlx4");
const std::string kDrafter = test::source_path("models/tensorfold-code-drafter");

struct Zoo {
  std::shared_ptr<Model> target = load_model(kTarget, {});
  std::shared_ptr<const Tokenizer> tokenizer = Tokenizer::from_file(kTarget + "/tokenizer.json");
  std::shared_ptr<DFlashDrafter> drafter = load_drafter(kDrafter, *target, 0);
};

Zoo& zoo() {
  static Zoo loaded;
  return loaded;
}

// The first held-out rename case, small enough for a quick test: the whole file comes back.
struct HeldOutRename {
  std::string user;
  std::string answer;
};
HeldOutRename smallest_held_out_rename() {
  std::ifstream in(test::source_path("bench/inputs/heldout-eval.jsonl"));
  HeldOutRename best;
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] != "rename") continue;
    std::string answer = record["answer"];
    if (best.answer.empty() || answer.size() < best.answer.size()) best = {record["prompt"], answer};
  }
  return best;
}

TEST(ModelZooTest, ShippedModelsLoadWithTheirDeclaredShapes) {
  const ModelConfig& c = zoo().target->config();
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.hidden_size, 512);
  EXPECT_EQ(c.vocab_size, 15360);
  EXPECT_EQ(zoo().drafter->config().block_size, 16);
  auto quantized = load_model(kTarget4, {});
  EXPECT_EQ(quantized->config().vocab_size, 15360);
  EXPECT_LT(quantized->weight_bytes_per_step(), zoo().target->weight_bytes_per_step() / 2);
}

// Greedy, the 4-bit copy and the bf16 target agree on the first tokens of a held-out code prompt:
// quantization moves logits, not (for a prompt this plain) the argmax.
TEST(ModelZooTest, FourBitCopyAgreesOnAPlainPrompt) {
  auto quantized = load_model(kTarget4, {});
  GenerationRequest r;
  r.prompt = zoo().tokenizer->encode("import os\nimport sys\n\n\ndef main():\n");
  r.max_tokens = 4;
  test::set_drafts_off(r);
  EngineOptions options;
  auto full = run_requests(zoo().target, {r}, options, true, zoo().tokenizer);
  auto four = run_requests(quantized, {r}, options, true, zoo().tokenizer);
  EXPECT_EQ(full[0].tokens.front(), four[0].tokens.front());
}

// The trained drafter joins long-copy and n-gram; every reply equals its draft-off reply and its
// solo reply, greedy and sampled, and the held-out rename drafts many tokens per round.
TEST(ModelZooTest, TrainedDrafterKeepsTheThreeEqualities) {
  HeldOutRename rename = smallest_held_out_rename();
  ASSERT_FALSE(rename.answer.empty());
  std::vector<GenerationRequest> requests;
  const std::string code = "def binary_search(items, target):\n    \"\"\"Return the index of target in the sorted list.\"\"\"\n";
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    // The embedded model's template is plain ChatML.
    r.prompt = i == 0 ? zoo().tokenizer->encode(ChatTemplate(ChatTemplateFamily::chatml)
                                                    .render({{"user", rename.user, std::nullopt, {}}}, ChatOptions{}).text)
                      : zoo().tokenizer->encode(code);
    r.max_tokens = i == 0 ? int64_t(zoo().tokenizer->encode(rename.answer).size()) + 8 : 24;
    r.sampling.temperature = i >= 2 ? 0.8f : 0.0f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = uint64_t(40 + i);
    requests.push_back(r);
  }
  EngineOptions options;
  options.n_ctx = 2048;
  auto drafted_together = run_requests(zoo().target, requests, options, true, zoo().tokenizer, zoo().drafter);
  auto drafted_alone = run_requests(zoo().target, requests, options, false, zoo().tokenizer, zoo().drafter);
  for (auto& r : requests) r.draft.proposers = kNoProposers;
  auto plain = run_requests(zoo().target, requests, options, false, zoo().tokenizer, zoo().drafter);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(drafted_together[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(drafted_alone[i].tokens, plain[i].tokens) << "request " << i;
  }
  const ReplyTimings& t = drafted_alone[0].final_update.timings;
  EXPECT_GT(t.tokens_per_round(), 8.0) << "a whole-file rename should copy long runs per round";
}

}  // namespace
}  // namespace tf
