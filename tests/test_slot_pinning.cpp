// A request pinned to a slot (llama.cpp's id_slot): it runs in that slot, waits in the queue while
// the slot is busy (later requests pass it into other slots), and its tokens are those it would have
// had unpinned (drafted = undrafted, concurrent = solo, resumed = fresh).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backends.h"
#include "engine/engine.h"
#include "support/engine_runner.h"
#include "support/equalities.h"
#include "support/fixtures.h"

namespace tf {
namespace {

using test::Reply;
using test::ReplyCollector;

GenerationRequest long_request(int32_t slot) {
  GenerationRequest r;
  r.prompt = {5, 6, 7, 8};
  r.max_tokens = 200;
  r.ignore_eos = true;
  r.slot = slot;
  test::set_drafts_off(r);  // one token a round, so the other requests' rounds can be counted on
  return r;
}

GenerationRequest short_request(int32_t slot, int32_t first_token) {
  GenerationRequest r;
  r.prompt = {first_token, 2, 3};
  r.max_tokens = 4;
  r.ignore_eos = true;
  r.slot = slot;
  return r;
}

// The order in which replies begin and end, across the engine thread's updates.
struct EventLog {
  std::atomic<int64_t> next{0};
  int64_t take() { return next++; }
};

// A collector that notes when its reply started and ended.
struct TimedCollector {
  ReplyCollector collector;
  int64_t first_event = -1;
  int64_t final_event = -1;
  UpdateSink sink(EventLog& log) {
    return [this, &log, inner = collector.sink()](const GenerationUpdate& u) {
      if (first_event < 0 && !u.tokens.empty()) first_event = log.take();
      if (u.is_final) final_event = log.take();
      return inner(u);
    };
  }
};

// Pinned requests, several to one slot, with drafts and beside each other, give the tokens each gives
// unpinned alone without drafts; each runs in its slot, which is then what a save of it holds.
TEST(SlotPinning, PinnedRepliesEqualUnpinnedSoloReplies) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  for (bool sampled : {false, true}) {
    const auto requests = test::copy_friendly_requests(9, sampled, model->config().vocab_size, sampled ? 41 : 42);
    EngineOptions solo_options;
    solo_options.n_parallel = 1;
    solo_options.n_ctx = 160;
    const test::EngineRun plain = test::run_engine(model, test::without_drafts(requests), solo_options, false);
    auto pinned = requests;
    for (size_t i = 0; i < pinned.size(); ++i) pinned[i].slot = int32_t(i % 3);
    EngineOptions options;
    options.n_parallel = 3;
    options.n_ctx = 160;
    const test::EngineRun drafted = test::run_engine(model, pinned, options, true);
    const test::EngineRun undrafted = test::run_engine(model, test::without_drafts(pinned), options, true);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(drafted.replies[i].tokens, plain.replies[i].tokens) << "request " << i << " sampled " << sampled;
      EXPECT_EQ(drafted.replies[i].final_update.token_sha, plain.replies[i].final_update.token_sha) << i;
      EXPECT_EQ(undrafted.replies[i].final_update.token_sha, plain.replies[i].final_update.token_sha) << i;
    }
    EXPECT_GT(drafted.stats.accepted_tokens, 0) << "no draft was accepted: drafted = undrafted was not tested";
  }
}

// A request pinned to slot 1 runs there, and its slot's save, erase and restore give back a cached
// prompt and the same reply (llama.cpp's flow: id_slot, then /slots/1?action=save).
TEST(SlotPinning, APinnedReplyIsWhatItsSlotSavesAndRestores) {
  auto model = load_model(test::fixture_model("qwen3-tiny-b"), {});
  EngineOptions options;
  options.n_parallel = 3;
  options.n_ctx = 160;
  Engine engine(options, model, nullptr);
  auto request = test::copy_friendly_requests(1, true, model->config().vocab_size, 43)[0];
  request.prompt.resize(std::max<size_t>(request.prompt.size(), 40), 9);  // two full blocks at least
  request.slot = 1;
  const Reply first = run_to_completion(engine, {request})[0];
  const std::vector<SlotInfo> slots = engine.slots();
  EXPECT_EQ(slots[0].request_id, 0u) << "slot 0 was never used";
  EXPECT_EQ(slots[1].request_id, 1u);
  EXPECT_GT(slots[1].n_tokens, int64_t(request.prompt.size())) << "the slot holds the request's prompt and reply";
  EXPECT_LE(slots[1].n_tokens, int64_t(request.prompt.size() + first.tokens.size()));
  EXPECT_EQ(slots[2].request_id, 0u);
  SlotSnapshot saved = engine.save_slot(1);
  EXPECT_GE(saved.n_blocks, 2);
  EXPECT_THROW(engine.save_slot(0), Error) << "slot 0 holds nothing";
  EXPECT_GT(engine.erase_slot(1), 0);
  EXPECT_GE(engine.restore_slot(1, std::move(saved)), 32);
  const Reply again = run_to_completion(engine, {request})[0];
  EXPECT_GE(again.final_update.timings.cache_n, 32) << "the restored blocks were adopted";
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.final_update.token_sha, first.final_update.token_sha);
  EXPECT_EQ(engine.slots()[1].request_id, 2u);
}

// A request pinned to a busy slot waits for it; a later request passes it into a free slot; one
// cancelled while it waits hears so at once, and it runs in its slot once the slot is free.
TEST(SlotPinning, APinnedRequestWaitsForItsBusySlotWhileLaterOnesPass) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 2;
  options.n_ctx = 256;
  Engine engine(options, model, nullptr);
  EventLog log;
  TimedCollector running, waiting, passing, cancelled;
  // The running reply holds the engine thread twice: at its first token until the others are queued,
  // and at its 50th until the test has looked (the passing reply needs a handful of rounds).
  std::promise<void> started, queued, at_fifty, looked;
  std::shared_future<void> all_queued = queued.get_future().share(), all_looked = looked.get_future().share();
  int64_t n_tokens = 0;
  UpdateSink running_sink = [&, inner = running.sink(log)](const GenerationUpdate& u) {
    const int64_t before = n_tokens;
    n_tokens += int64_t(u.tokens.size());
    if (before == 0 && n_tokens > 0) {
      started.set_value();
      all_queued.wait();
    }
    if (before < 50 && n_tokens >= 50) {
      at_fifty.set_value();
      all_looked.wait();
    }
    return inner(u);
  };
  const uint64_t running_id = engine.submit(long_request(0), running_sink).request_id;
  started.get_future().wait();
  const uint64_t waiting_id = engine.submit(short_request(0, 11), waiting.sink(log)).request_id;
  const uint64_t cancelled_id = engine.submit(short_request(0, 12), cancelled.sink(log)).request_id;
  const uint64_t passing_id = engine.submit(short_request(GenerationRequest::kAnySlot, 13), passing.sink(log)).request_id;
  queued.set_value();
  const Reply passed = passing.collector.wait();
  at_fifty.get_future().wait();
  EXPECT_EQ(passed.tokens.size(), 4u);
  std::vector<SlotInfo> slots = engine.slots();
  EXPECT_TRUE(slots[0].is_processing);
  EXPECT_EQ(slots[0].request_id, running_id);
  EXPECT_EQ(slots[1].request_id, passing_id) << "the later request took the free slot";
  EXPECT_EQ(engine.stats().queue_depth, 2) << "both pinned requests wait";
  EXPECT_EQ(slots[0].n_waiting, 2) << "both wait for slot 0";
  EXPECT_EQ(slots[1].n_waiting, 0);
  EXPECT_EQ(waiting.first_event, -1) << "the pinned request ran while its slot was busy";
  engine.cancel(cancelled_id);
  looked.set_value();
  const Reply cancelled_reply = cancelled.collector.wait();
  EXPECT_EQ(cancelled_reply.final_update.finish_reason, FinishReason::cancelled);
  EXPECT_TRUE(cancelled_reply.tokens.empty());
  const Reply waited = waiting.collector.wait();
  EXPECT_EQ(running.collector.wait().tokens.size(), 200u);
  EXPECT_EQ(waited.tokens.size(), 4u);
  EXPECT_LT(cancelled.final_event, running.final_event) << "a cancelled waiter is dropped at once";
  EXPECT_GT(waiting.first_event, running.final_event) << "the pinned request ran after its slot's request";
  EXPECT_EQ(engine.slots()[0].request_id, waiting_id);
  EXPECT_EQ(engine.slots()[0].n_waiting, 0);
  EXPECT_EQ(engine.slots()[1].request_id, passing_id);
  // Its reply is the one it gives unpinned, alone.
  const Reply alone = run_to_completion(engine, {short_request(GenerationRequest::kAnySlot, 11)})[0];
  EXPECT_EQ(waited.final_update.token_sha, alone.final_update.token_sha);
}

// An unpinned request leaves alone an idle slot that a queued request is pinned to, where another
// slot is free; a request that could never run (no such slot) is refused naming id_slot.
TEST(SlotPinning, AnUnpinnedRequestLeavesAPinnedSlotToItsRequest) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 3;
  options.n_ctx = 256;
  Engine engine(options, model, nullptr);
  for (int32_t slot : {-2, 3, 100}) {
    const SubmitResult refused = engine.submit(short_request(slot, 1), [](const GenerationUpdate&) { return true; });
    EXPECT_EQ(refused.status, SubmitStatus::invalid) << slot;
    EXPECT_EQ(refused.param, "id_slot") << slot;
  }
  EventLog log;
  TimedCollector running, unpinned, pinned;
  std::promise<void> started, queued;
  std::shared_future<void> all_queued = queued.get_future().share();
  bool is_first = true;
  UpdateSink running_sink = [&, inner = running.sink(log)](const GenerationUpdate& u) {
    if (is_first && !u.tokens.empty()) {
      is_first = false;
      started.set_value();
      all_queued.wait();
    }
    return inner(u);
  };
  const uint64_t running_id = engine.submit(long_request(GenerationRequest::kAnySlot), running_sink).request_id;
  started.get_future().wait();
  const uint64_t unpinned_id = engine.submit(short_request(GenerationRequest::kAnySlot, 21), unpinned.sink(log)).request_id;
  const uint64_t pinned_id = engine.submit(short_request(1, 22), pinned.sink(log)).request_id;
  queued.set_value();
  pinned.collector.wait();
  unpinned.collector.wait();
  running.collector.wait();
  EXPECT_LT(pinned.final_event, running.final_event) << "the pinned request waited for a slot that was free";
  const std::vector<SlotInfo> slots = engine.slots();
  EXPECT_EQ(slots[0].request_id, running_id);
  EXPECT_EQ(slots[1].request_id, pinned_id);
  EXPECT_EQ(slots[2].request_id, unpinned_id) << "the unpinned request took the slot the pinned one waited for";
}

// The queue stays bounded: a request pinned to a busy slot gets no share of the free lanes' room
// (it will not leave the queue for them), so at most --max-queue requests wait.
TEST(SlotPinning, PinnedWaitersCountAgainstTheQueue) {
  auto model = load_model(test::fixture_model("qwen3-tiny-a"), {});
  EngineOptions options;
  options.n_parallel = 2;
  options.n_ctx = 256;
  options.max_queue = 1;
  Engine engine(options, model, nullptr);
  std::promise<void> started, checked;
  std::shared_future<void> all_checked = checked.get_future().share();
  ReplyCollector running;
  bool is_first = true;
  UpdateSink running_sink = [&, inner = running.sink()](const GenerationUpdate& u) {
    if (is_first && !u.tokens.empty()) {
      is_first = false;
      started.set_value();
      all_checked.wait();
    }
    return inner(u);
  };
  ASSERT_EQ(engine.submit(long_request(0), running_sink).status, SubmitStatus::accepted);
  started.get_future().wait();
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  auto submit = [&](GenerationRequest r) {
    collectors.push_back(std::make_unique<ReplyCollector>());
    const SubmitStatus status = engine.submit(std::move(r), collectors.back()->sink()).status;
    if (status != SubmitStatus::accepted) collectors.pop_back();
    return status;
  };
  EXPECT_EQ(submit(short_request(0, 31)), SubmitStatus::accepted) << "one waits within --max-queue";
  EXPECT_EQ(submit(short_request(0, 32)), SubmitStatus::queue_full) << "a second would exceed it";
  EXPECT_EQ(submit(short_request(1, 33)), SubmitStatus::accepted) << "the free slot's lane takes it";
  EXPECT_EQ(submit(short_request(GenerationRequest::kAnySlot, 34)), SubmitStatus::queue_full)
      << "no lane is left for it, and the queue is full";
  checked.set_value();
  EXPECT_EQ(running.wait().tokens.size(), 200u);
  for (auto& c : collectors) EXPECT_EQ(c->wait().tokens.size(), 4u);
}

}  // namespace
}  // namespace tf
