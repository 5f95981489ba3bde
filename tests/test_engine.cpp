// The engine loop: concurrent equals solo (bitwise tokens), chunked prefill, budgets, stops,
// cancellation and admission control.
#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "backends/backends.h"
#include "engine/engine.h"
#include "models/model.h"
#include "support/engine_runner.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using test::Reply;
using test::ReplyCollector;
using test::random_requests;

std::vector<Reply> run_all(std::shared_ptr<Model> model, const std::vector<GenerationRequest>& requests,
                           EngineOptions options, bool together) {
  return test::run_requests(model, requests, options, together);
}

class ConcurrentEqualsSolo : public ::testing::TestWithParam<bool> {};

TEST_P(ConcurrentEqualsSolo, TokensAreBitwiseEqual) {
  test::expect_concurrent_equals_solo(load_model(test::fixture_model("qwen3-tiny-b"), {}), GetParam());
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, ConcurrentEqualsSolo, ::testing::Values(false, true));

// The same prompt under two seeds: sampled (temperature 0.7), the replies differ; greedy
// (temperature 0, the same top-k and top-p otherwise), they are the same tokens.
TEST(EngineTest, SeedChangesSampledReplyButNotGreedy) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  auto requests = random_requests(1, true, model->config().vocab_size, 9);
  requests.push_back(requests[0]);
  requests[1].sampling.seed += 1;
  for (int i = 0; i < 2; ++i) {
    requests.push_back(requests[size_t(i)]);
    requests.back().sampling.temperature = 0.0f;
  }
  ASSERT_NE(requests[2].sampling.seed, requests[3].sampling.seed);
  EngineOptions options;
  options.n_ctx = 128;
  auto replies = run_all(model, requests, options, true);
  for (const Reply& reply : replies) EXPECT_EQ(int64_t(reply.tokens.size()), requests[0].max_tokens);
  EXPECT_NE(replies[0].tokens, replies[1].tokens) << "sampled: the seed must change the reply";
  EXPECT_EQ(replies[2].tokens, replies[3].tokens) << "greedy: the seed must not change the reply";
  EXPECT_EQ(replies[2].final_update.token_sha, replies[3].final_update.token_sha);
  EXPECT_NE(replies[0].tokens, replies[2].tokens) << "sampling at 0.7 should differ from greedy somewhere";
}

TEST(EngineTest, LogprobsChangeNoToken) {
  test::expect_logprobs_change_no_token(load_model(test::fixture_model("qwen3-tiny-b"), {}));
}

// Provenance (how each token reached the reply) adds up and changes nothing: one entry per token,
// the drafted entries are exactly the accepted drafts, each round ends with one target token, and
// the tokens are those of the same requests without it.
TEST(EngineTest, ProvenanceAddsUpAndChangesNoToken) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  auto plain = test::copy_friendly_requests(8, false, model->config().vocab_size, 31);
  auto sampled = test::copy_friendly_requests(4, true, model->config().vocab_size, 32);
  plain.insert(plain.end(), sampled.begin(), sampled.end());
  auto traced = plain;
  for (auto& r : traced) r.wants_provenance = true;
  EngineOptions options;
  options.n_parallel = 4;
  options.n_ctx = 256;
  const auto without = test::run_engine(model, plain, options, true);
  std::vector<std::vector<TokenProvenance>> provenance(traced.size());
  Engine engine(options, model, nullptr);
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  for (size_t i = 0; i < traced.size(); ++i) {
    collectors.push_back(std::make_unique<ReplyCollector>());
    UpdateSink collect = collectors.back()->sink();
    auto* entries = &provenance[i];
    ASSERT_EQ(engine.submit(traced[i], [entries, collect](const GenerationUpdate& u) {
                entries->insert(entries->end(), u.provenance.begin(), u.provenance.end());
                return collect(u);
              }).status,
              SubmitStatus::accepted);
  }
  int64_t n_drafted = 0;
  for (size_t i = 0; i < traced.size(); ++i) {
    const Reply reply = collectors[i]->wait();
    EXPECT_EQ(reply.tokens, without.replies[i].tokens) << "request " << i;
    ASSERT_EQ(provenance[i].size(), reply.tokens.size()) << "request " << i;
    const ReplyTimings& timings = reply.final_update.timings;
    int64_t n_target = 0, n_request_drafted = 0, previous_round = 0;
    for (const TokenProvenance& p : provenance[i]) {
      EXPECT_GE(p.round, std::max<int64_t>(1, previous_round)) << "request " << i;
      previous_round = p.round;
      n_target += p.source == TokenProvenance::kTarget;
      n_request_drafted += p.source != TokenProvenance::kTarget;
      if (p.source != TokenProvenance::kTarget) {
        EXPECT_LT(p.source, kProposerKinds);
      }
    }
    EXPECT_EQ(n_request_drafted, timings.draft_accepted_n) << "request " << i;
    // Every round adds the target's own token after its accepted drafts, but the last may end
    // at the budget on a drafted token.
    EXPECT_LE(n_target, timings.rounds) << "request " << i;
    EXPECT_GE(n_target, timings.rounds - 1) << "request " << i;
    n_drafted += n_request_drafted;
  }
  EXPECT_GT(n_drafted, 0) << "no draft was accepted: the test would not see a drafted entry";
}

TEST(EngineTest, AdmissionControl) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = 64;
  options.max_queue = 1;
  Engine engine(options, model, nullptr);
  GenerationRequest too_long;
  too_long.prompt.assign(60, 1);
  too_long.max_tokens = 10;
  auto result = engine.submit(too_long, [](const GenerationUpdate&) { return true; });
  EXPECT_EQ(result.status, SubmitStatus::too_long);
  EXPECT_NE(result.message.find("maximum context length is 64"), std::string::npos) << result.message;

  GenerationRequest bad_token;
  bad_token.prompt = {1, 2, int32_t(model->config().vocab_size)};
  EXPECT_EQ(engine.submit(bad_token, [](const GenerationUpdate&) { return true; }).status,
            SubmitStatus::invalid);
  GenerationRequest empty;
  EXPECT_EQ(engine.submit(empty, [](const GenerationUpdate&) { return true; }).status, SubmitStatus::invalid);
}

TEST(EngineTest, QueueFullIsRefusedAndEveryoneElseIsServed) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = 256;
  options.max_queue = 2;
  Engine engine(options, model, nullptr);
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 200;
  r.ignore_eos = true;
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    collectors.push_back(std::make_unique<ReplyCollector>());
    auto result = engine.submit(r, collectors.back()->sink());
    if (result.status == SubmitStatus::queue_full) {
      ++refused;
      collectors.pop_back();
    }
  }
  EXPECT_GT(refused, 0);
  for (auto& c : collectors) EXPECT_EQ(c->wait().tokens.size(), 200u);
}

TEST(EngineTest, CancelledLaneIsFreedAndNextRequestServed) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = 256;
  Engine engine(options, model, nullptr);
  // The pool's figures are there before any request (/metrics read zeros until the first one).
  EXPECT_GT(engine.stats().kv_block_size, 0);
  EXPECT_GT(engine.stats().kv_blocks_total, 0);
  EXPECT_EQ(engine.stats().kv_blocks_free, engine.stats().kv_blocks_total);
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.max_tokens = 200;
  r.ignore_eos = true;
  ReplyCollector gone;
  gone.cancel_after = 3;
  ASSERT_EQ(engine.submit(r, gone.sink()).status, SubmitStatus::accepted);
  ReplyCollector next;
  r.max_tokens = 5;
  ASSERT_EQ(engine.submit(r, next.sink()).status, SubmitStatus::accepted);
  Reply cancelled = gone.wait();
  EXPECT_EQ(cancelled.final_update.finish_reason, FinishReason::cancelled);
  EXPECT_EQ(cancelled.tokens.size(), 3u);
  EXPECT_EQ(next.wait().tokens.size(), 5u);
  // The lane count is updated at the end of the round that sent the final update.
  for (int i = 0; i < 200 && engine.stats().lanes_live != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().lanes_live, 0);
}

// Engine::cancel (the server's answer to a client that left, and its shutdown) ends a live lane and a
// request still queued for a lane alike: each hears a final `cancelled` update, and the lane is free.
TEST(EngineTest, CancelEndsLiveAndQueuedRequestsWithAFinalUpdate) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = 256;
  Engine engine(options, model, nullptr);
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.max_tokens = 200;
  r.ignore_eos = true;
  ReplyCollector live, queued;
  // The live reply's first update holds the engine thread until both cancels are in, so a fast machine
  // cannot finish both replies before the test cancels them.
  std::promise<void> started, cancels_sent;
  std::shared_future<void> cancels_in = cancels_sent.get_future().share();
  bool first = true;
  UpdateSink live_sink = [&, inner = live.sink()](const GenerationUpdate& u) {
    if (first && !u.is_final) {
      first = false;
      started.set_value();
      cancels_in.wait();
    }
    return inner(u);
  };
  const uint64_t live_id = engine.submit(r, live_sink).request_id;
  const uint64_t queued_id = engine.submit(r, queued.sink()).request_id;
  started.get_future().wait();
  engine.cancel(queued_id);
  engine.cancel(live_id);
  cancels_sent.set_value();
  const Reply queued_reply = queued.wait();
  const Reply live_reply = live.wait();
  EXPECT_EQ(queued_reply.final_update.finish_reason, FinishReason::cancelled);
  EXPECT_TRUE(queued_reply.tokens.empty());
  EXPECT_EQ(live_reply.final_update.finish_reason, FinishReason::cancelled);
  EXPECT_LT(live_reply.tokens.size(), 200u);
  for (int i = 0; i < 200 && (engine.stats().lanes_live != 0 || engine.stats().queue_depth != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().lanes_live, 0);
  EXPECT_EQ(engine.stats().queue_depth, 0);
}

TEST(EngineTest, StopStringEndsTheReplyAndItsTextIsNeverSent) {
  std::string dir = test::source_path("tests/fixtures/models/qwen3-tiny-chat");
  auto model = load_model(dir, {});
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  EngineOptions options;
  options.n_ctx = 256;
  GenerationRequest r;
  r.prompt = tokenizer->encode("def rename(old, new):\n    return");
  r.max_tokens = 40;
  r.ignore_eos = true;
  Reply full;
  {
    Engine engine(options, model, tokenizer);
    ReplyCollector c;
    engine.submit(r, c.sink());
    full = c.wait();
  }
  ASSERT_GT(full.text.size(), 8u);
  // A stop string that starts in the middle of the reply, probably across a token boundary.
  size_t cut = full.text.size() / 2;
  while (cut > 0 && (full.text[cut] & 0xC0) == 0x80) --cut;
  r.stop = {full.text.substr(cut, 3), "never-appears"};
  Engine engine(options, model, tokenizer);
  ReplyCollector c;
  engine.submit(r, c.sink());
  Reply stopped = c.wait();
  EXPECT_EQ(stopped.final_update.finish_reason, FinishReason::stop);
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(r.stop[0])));
  EXPECT_LT(stopped.tokens.size(), full.tokens.size());
  EXPECT_EQ(std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + long(stopped.tokens.size())),
            stopped.tokens);
}

// Special tokens (<|box_start|>, <|vision_start|>: forced in among ordinary tokens by a mild bias and
// a frequency penalty) add no text unless the request shows them; the tokens are the same either
// way, drafted or not.
TEST(EngineTest, SkippedSpecialTokensAddNoText) {
  std::string dir = test::source_path("tests/fixtures/models/qwen3-tiny-chat");
  auto model = load_model(dir, {});
  auto tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  EngineOptions options;
  options.n_ctx = 256;
  GenerationRequest skipping;
  skipping.prompt = tokenizer->encode("The sea is");
  skipping.max_tokens = 16;
  skipping.sampling.frequency_penalty = 1.0f;
  skipping.constraints.logit_bias = {{tokenizer->token_id("<|box_start|>"), 2.5f},
                                     {tokenizer->token_id("<|vision_start|>"), 2.5f}};
  GenerationRequest showing = skipping;
  showing.skips_special_tokens = false;
  std::vector<GenerationRequest> requests = {skipping, showing, skipping, showing};
  for (size_t i = 2; i < requests.size(); ++i) test::set_drafts_off(requests[i]);
  Engine engine(options, model, tokenizer);
  const std::vector<Reply> replies = run_to_completion(engine, requests);

  const std::vector<int32_t>& tokens = replies[0].tokens;
  std::vector<int32_t> ordinary_tokens;
  for (int32_t token : tokens)
    if (!tokenizer->is_special(token)) ordinary_tokens.push_back(token);
  ASSERT_GT(ordinary_tokens.size(), 0u);
  ASSERT_LT(ordinary_tokens.size(), tokens.size());
  EXPECT_EQ(replies[0].text, tokenizer->decode(ordinary_tokens));
  EXPECT_EQ(replies[1].text, tokenizer->decode(tokens));
  for (size_t i = 1; i < replies.size(); ++i) EXPECT_EQ(replies[i].tokens, tokens) << i;
  EXPECT_EQ(replies[2].text, replies[0].text);
  EXPECT_EQ(replies[3].text, replies[1].text);
}

}  // namespace
}  // namespace tf
