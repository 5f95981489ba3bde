// The composition root and the engine's answers to it: what ServingStack loads and reports, which
// parameter a rejection names, and /health's view of a failed round.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "app/serving_stack.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/reply_collector.h"
#include "support/expect_error.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

using namespace tf;

namespace {

ServingOptions fixture_options(const std::string& name) {
  ServingOptions options;
  options.model_dir = test::fixture_model(name);
  options.drafter = "none";
  options.engine = EngineOptions{};
  options.engine->n_parallel = 2;
  options.engine->n_ctx = 64;
  return options;
}

GenerationRequest request_of(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  return request;
}

// A real model whose forwards throw while `n_failures` is above zero: a round that fails, then
// rounds that succeed again.
class FailingModel : public Model {
 public:
  FailingModel(std::shared_ptr<Model> inner, bool is_internal) : inner_(std::move(inner)), is_internal_(is_internal) {}
  std::atomic<int> n_failures{0};

  const ModelConfig& config() const override { return inner_->config(); }
  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    if (n_failures > 0) {
      --n_failures;
      if (is_internal_) fail_internal("batch row 3 has an invalid parent");
      fail("the GPU ran out of memory");
    }
    inner_->forward(batch, kv, logits);
  }
  std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const override { return inner_->make_kv_storage(n_slots); }
  int64_t weight_bytes_per_step() const override { return inner_->weight_bytes_per_step(); }
  std::shared_ptr<DFlashDrafter> load_drafter(const std::string& dir, int n_threads) const override {
    return inner_->load_drafter(dir, n_threads);
  }

 private:
  std::shared_ptr<Model> inner_;
  bool is_internal_;
};

}  // namespace

TEST(ServingStack, LoadsTheModelAndReportsPlainFacts) {
  auto stack = ServingStack::load(fixture_options("qwen3-tiny-chat"));
  EXPECT_EQ(stack->facts().model_id, "qwen3-tiny-chat");
  EXPECT_EQ(stack->facts().drafter_dir, "");
  EXPECT_GT(stack->facts().vocab_size, 0);
  EXPECT_GT(stack->facts().context_length, 0);
  ASSERT_TRUE(stack->tokenizer());
  EXPECT_LE(stack->tokenizer()->n_tokens(), stack->facts().vocab_size);
  ASSERT_TRUE(stack->engine());
  EXPECT_EQ(stack->engine()->options().n_ctx, 64);

  // Another engine on the same weights gives the same greedy reply.
  EngineOptions solo;
  solo.n_parallel = 1;
  solo.n_ctx = 32;
  auto other = stack->make_engine(solo);
  const GenerationRequest request = request_of({1, 2, 3, 4}, 6);
  EXPECT_EQ(run_to_completion(*stack->engine(), {request})[0].tokens, run_to_completion(*other, {request})[0].tokens);
}

TEST(ServingStack, OptionsAreCheckedBeforeAnyLoad) {
  ServingOptions options = fixture_options("qwen3-tiny-chat");
  options.model_dir = "/no/such/model";
  EXPECT_THROW(read_model_facts(options), Error);
  options = fixture_options("qwen3-tiny-chat");
  options.drafter = "/no/such/drafter";
  EXPECT_THROW(read_model_facts(options), Error);
  options = fixture_options("qwen3-tiny-chat");
  options.synthetic = "qwen3-8b";
  options.drafter = test::fixture_model("qwen3-tiny-chat");  // a synthetic model takes no drafter
  EXPECT_THROW(read_model_facts(options), Error);
  options.drafter = "mtp";  // nor an MTP head
  EXPECT_THROW(read_model_facts(options), Error);
  options.drafter = "auto";
  EXPECT_EQ(read_model_facts(options).model_id, "qwen3-8b");
  EXPECT_EQ(read_model_facts(options).drafter_dir, "");
}

// --drafter mtp on a checkpoint without an MTP head: an error naming its directory and the tensor.
TEST(ServingStack, MtpOnAHeadlessCheckpointNamesTheDirectoryAndTensor) {
  ServingOptions options = fixture_options("qwen3.5-tiny-c");
  options.needs_tokenizer = false;
  options.drafter = "mtp";
  EXPECT_TRUE(read_model_facts(options).uses_mtp);
  test::expect_error_naming([&] { ServingStack::load(options); },
                            {test::fixture_model("qwen3.5-tiny-c"), "mtp.fc.weight"});
}

// The server turns `param` into the error's "param" ("prompt" is "messages" for a chat).
TEST(ServingStack, RejectionsNameTheParameter) {
  auto stack = ServingStack::load(fixture_options("qwen3-tiny-chat"));
  Engine& engine = *stack->engine();
  const int32_t outside = int32_t(stack->facts().vocab_size);
  auto param_of = [&](GenerationRequest request) {
    const SubmitResult result = engine.submit(std::move(request), [](const GenerationUpdate&) { return true; });
    EXPECT_NE(result.status, SubmitStatus::accepted);
    return result.param;
  };
  EXPECT_EQ(param_of(request_of({}, 4)), "prompt");
  EXPECT_EQ(param_of(request_of({1, outside}, 4)), "prompt");
  EXPECT_EQ(param_of(request_of({1, 2}, 0)), "max_tokens");
  EXPECT_EQ(param_of(request_of({1, 2}, 63)), "max_tokens");  // 2 + 63 > n_ctx 64
  EXPECT_EQ(param_of(request_of(std::vector<int32_t>(64, 1), 1)), "prompt");
  GenerationRequest replay = request_of({1, 2}, 4);
  replay.draft.replay = {3, outside};
  EXPECT_EQ(param_of(replay), "replay.token_ids");
  replay.draft.replay = {3};
  replay.draft.replay_depth = -1;
  EXPECT_EQ(param_of(replay), "replay.accept");
}

// A failed round ends the replies it carried with an error, /health turns failed, and the next
// round that succeeds turns it ok; a bug's text stays in the log.
TEST(ServingStack, HealthFailsWithARoundAndRecoversWithTheNext) {
  for (bool is_internal : {false, true}) {
    auto model = std::make_shared<FailingModel>(test::load_fixture("qwen3-tiny-chat", "cpu"), is_internal);
    EngineOptions options;
    options.n_parallel = 1;
    options.n_ctx = 32;
    Engine engine(options, model, nullptr);
    EXPECT_TRUE(engine.health().is_ok);

    model->n_failures = 1;
    const Reply failed = run_to_completion(engine, {request_of({1, 2, 3}, 4)})[0];
    EXPECT_EQ(failed.final_update.finish_reason, FinishReason::error);
    const EngineHealth broken = engine.health();
    EXPECT_FALSE(broken.is_ok);
    if (is_internal) {
      EXPECT_EQ(failed.final_update.error.find("invalid parent"), std::string::npos) << failed.final_update.error;
      EXPECT_EQ(broken.message.find("invalid parent"), std::string::npos) << broken.message;
      EXPECT_NE(broken.message.find("internal error"), std::string::npos) << broken.message;
    } else {
      EXPECT_EQ(failed.final_update.error, "the GPU ran out of memory");
      EXPECT_NE(broken.message.find("the GPU ran out of memory"), std::string::npos) << broken.message;
    }

    const Reply recovered = run_to_completion(engine, {request_of({1, 2, 3}, 4)})[0];
    EXPECT_EQ(recovered.final_update.finish_reason, FinishReason::length);
    EXPECT_EQ(recovered.tokens.size(), 4u);
    // The round's replies go out inside it; health turns ok as the round returns.
    for (int i = 0; i < 200 && !engine.health().is_ok; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(engine.health().is_ok);
  }
}
