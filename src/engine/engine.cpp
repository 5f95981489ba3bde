#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/error.h"
#include "core/sha256.h"
#include "engine/batch.h"
#include "engine/kv_cache.h"
#include "engine/stop_matcher.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "stop";
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct PendingRequest {
  uint64_t id;
  GenerationRequest request;
  UpdateSink sink;
};

// One live stream: its tokens, its KV lane, and the state that turns tokens into sent text.
struct Lane {
  uint64_t id = 0;
  GenerationRequest request;
  UpdateSink sink;
  int32_t kv_lane = -1;
  std::vector<int32_t> tokens;  // prompt, then the reply
  int64_t n_prompt = 0;
  int64_t n_cached = 0;         // positions whose K/V are in the cache
  std::vector<int32_t> completion;
  TokenCounts counts;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop_matcher;
  ReplyTimings timings;
  Clock::time_point admitted;
  Clock::time_point first_token;
  bool is_finished = false;

  bool is_prefilling() const { return n_cached + 1 < int64_t(tokens.size()); }
};

// Where a lane's rows sit in this round's batch.
struct LaneRows {
  Lane* lane;
  int64_t n_rows;
  int64_t logits_row;  // index among logit rows, or -1
};

}  // namespace

struct Engine::Impl {
  EngineOptions options;
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> eos_ids;
  KvCache kv;

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<PendingRequest> pending;
  std::unordered_set<uint64_t> cancelled;
  uint64_t next_id = 1;
  bool stopping = false;
  EngineStats stats;  // guarded by mutex

  std::vector<std::unique_ptr<Lane>> lanes;  // engine thread only
  Sampler sampler;
  std::vector<float> logits;
  std::thread thread;

  Impl(const EngineOptions& opts, std::shared_ptr<Model> m, std::shared_ptr<const Tokenizer> t)
      : options(opts),
        model(std::move(m)),
        tokenizer(std::move(t)),
        eos_ids(model->config().eos_token_ids),
        kv(model->config().n_layers, model->config().kv_dim(),
           int64_t(opts.n_parallel) * kv_blocks_for(opts.n_ctx)) {}

  void run();
  void admit();
  bool take_cancellations();
  void round();
  void on_token(Lane& lane, int32_t token, const float* lane_logits);
  void finish(Lane& lane, FinishReason reason, const std::string& error = {});
  bool send(Lane& lane, GenerationUpdate& update);
  bool is_eos(int32_t token) const {
    return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
  }
};

Engine::Engine(const EngineOptions& options, std::shared_ptr<Model> model,
               std::shared_ptr<const Tokenizer> tokenizer)
    : options_(options) {
  if (options.n_parallel < 1) fail("--parallel must be at least 1");
  if (options.n_ctx < 2) fail("--ctx must be at least 2");
  if (options.n_ctx > model->config().max_position_embeddings)
    fail("--ctx " + std::to_string(options.n_ctx) + " exceeds the model's max_position_embeddings (" +
         std::to_string(model->config().max_position_embeddings) + ")");
  impl_ = std::make_unique<Impl>(options, std::move(model), std::move(tokenizer));
  impl_->thread = std::thread([this] { impl_->run(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

SubmitResult Engine::submit(GenerationRequest request, UpdateSink sink) {
  const ModelConfig& config = impl_->model->config();
  if (request.prompt.empty()) return {SubmitStatus::invalid, 0, "the prompt is empty"};
  for (int32_t id : request.prompt)
    if (id < 0 || id >= config.vocab_size)
      return {SubmitStatus::invalid, 0,
              "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(config.vocab_size - 1) + ")"};
  if (request.max_tokens < 1) return {SubmitStatus::invalid, 0, "max_tokens must be at least 1"};
  int64_t total = int64_t(request.prompt.size()) + request.max_tokens;
  if (total > options_.n_ctx)
    return {SubmitStatus::too_long, 0,
            "This model's maximum context length is " + std::to_string(options_.n_ctx) +
                " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                std::to_string(request.prompt.size()) + " in the prompt, " +
                std::to_string(request.max_tokens) + " for the completion)."};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (int64_t(impl_->pending.size()) >= options_.max_queue)
    return {SubmitStatus::queue_full, 0, "the server is busy: the request queue is full"};
  uint64_t id = impl_->next_id++;
  impl_->pending.push_back({id, std::move(request), std::move(sink)});
  impl_->stats.queue_depth = int64_t(impl_->pending.size());
  impl_->wake.notify_all();
  return {SubmitStatus::accepted, id, {}};
}

void Engine::cancel(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->cancelled.insert(request_id);
  impl_->wake.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

void Engine::Impl::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || !pending.empty() || !lanes.empty(); });
      if (stopping) break;
    }
    take_cancellations();
    admit();
    if (!lanes.empty()) {
      try {
        round();
      } catch (const std::exception& e) {
        // A failed forward ends the replies it carried, not the server.
        for (auto& lane : lanes) finish(*lane, FinishReason::error, e.what());
      }
    }
    lanes.erase(std::remove_if(lanes.begin(), lanes.end(), [](auto& l) { return l->is_finished; }),
                lanes.end());
    std::lock_guard<std::mutex> lock(mutex);
    stats.lanes_live = int64_t(lanes.size());
  }
  // Shutting down: everyone still waiting hears that their request ended.
  for (auto& lane : lanes) finish(*lane, FinishReason::cancelled);
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& p : pending) {
    GenerationUpdate update;
    update.is_final = true;
    update.finish_reason = FinishReason::cancelled;
    p.sink(update);
  }
  pending.clear();
}

bool Engine::Impl::take_cancellations() {
  std::unordered_set<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ids.swap(cancelled);
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const PendingRequest& p) { return ids.count(p.id) > 0; }),
                  pending.end());
    stats.queue_depth = int64_t(pending.size());
  }
  for (auto& lane : lanes)
    if (ids.count(lane->id)) finish(*lane, FinishReason::cancelled);
  return !ids.empty();
}

void Engine::Impl::admit() {
  std::lock_guard<std::mutex> lock(mutex);
  while (!pending.empty() && int64_t(lanes.size()) < options.n_parallel) {
    PendingRequest& next = pending.front();
    int64_t n_positions = int64_t(next.request.prompt.size()) + next.request.max_tokens;
    // The whole budget is reserved up front, so a live lane never runs out of KV mid-reply.
    if (kv.blocks_for(n_positions) > kv.n_free_blocks()) break;
    auto lane = std::make_unique<Lane>();
    lane->id = next.id;
    lane->request = std::move(next.request);
    lane->sink = std::move(next.sink);
    lane->kv_lane = kv.lane_open();
    kv.lane_reserve(lane->kv_lane, n_positions);
    lane->tokens = lane->request.prompt;
    lane->n_prompt = int64_t(lane->tokens.size());
    if (tokenizer) lane->decoder = std::make_unique<StreamDecoder>(*tokenizer);
    lane->stop_matcher = std::make_unique<StopMatcher>(lane->request.stop);
    lane->timings.prompt_n = lane->n_prompt;
    lane->admitted = Clock::now();
    stats.requests += 1;
    stats.prompt_tokens += lane->n_prompt;
    lanes.push_back(std::move(lane));
    pending.pop_front();
  }
  stats.queue_depth = int64_t(pending.size());
}

void Engine::Impl::round() {
  Batch batch;
  std::vector<LaneRows> placed;
  int64_t budget = options.max_rows_per_round;
  int64_t n_logit_rows = 0;
  // Decoding lanes first (one row each), then prompt chunks with what is left of the budget,
  // so a long prompt never stalls the others.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& lane_ptr : lanes) {
      Lane& lane = *lane_ptr;
      if (lane.is_finished || lane.is_prefilling() != (pass == 1) || budget == 0) continue;
      int64_t remaining = int64_t(lane.tokens.size()) - lane.n_cached;
      int64_t n = std::min({remaining, budget, pass == 1 ? options.prefill_chunk : int64_t(1)});
      int64_t first = int64_t(batch.rows.size());
      for (int64_t i = 0; i < n; ++i) {
        BatchRow row;
        row.pos = int32_t(lane.n_cached + i);
        row.token = lane.tokens[size_t(row.pos)];
        row.lane = lane.kv_lane;
        row.parent = i == 0 ? -1 : int32_t(first + i - 1);
        row.kv_slot = kv.slot(lane.kv_lane, row.pos);
        row.wants_logits = row.pos + 1 == int64_t(lane.tokens.size());
        batch.rows.push_back(row);
      }
      bool wants = batch.rows.back().wants_logits;
      placed.push_back({&lane, n, wants ? n_logit_rows++ : -1});
      budget -= n;
    }
  }
  if (batch.rows.empty()) return;
  const int64_t n_vocab = model->config().vocab_size;
  logits.resize(size_t(n_logit_rows * n_vocab));
  model->forward(batch, kv, logits.data());
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.rounds += 1;
    stats.rows += int64_t(batch.rows.size());
  }
  for (const LaneRows& p : placed) {
    p.lane->n_cached += p.n_rows;
    if (p.logits_row < 0) continue;
    const float* lane_logits = logits.data() + p.logits_row * n_vocab;
    int64_t position = int64_t(p.lane->tokens.size());
    int32_t token = sampler.sample(lane_logits, n_vocab, p.lane->request.sampling, position,
                                   p.lane->counts);
    on_token(*p.lane, token, lane_logits);
  }
}

void Engine::Impl::on_token(Lane& lane, int32_t token, const float* lane_logits) {
  auto now = Clock::now();
  if (lane.completion.empty()) {
    lane.first_token = now;
    lane.timings.prompt_ms = ms_between(lane.admitted, now);
  }
  lane.timings.rounds += 1;
  if (!lane.request.ignore_eos && is_eos(token)) {
    finish(lane, FinishReason::stop);
    return;
  }
  lane.tokens.push_back(token);
  lane.completion.push_back(token);
  lane.counts[token] += 1;
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.generated_tokens += 1;
  }
  GenerationUpdate update;
  update.tokens.push_back(token);
  if (lane.request.n_top_logprobs >= 0) {
    int64_t n_vocab = model->config().vocab_size;
    update.logprobs.push_back({token, Sampler::logprob_of(lane_logits, n_vocab, token),
                               Sampler::top_logprobs(lane_logits, n_vocab,
                                                     lane.request.n_top_logprobs)});
  }
  if (lane.decoder) update.text = lane.stop_matcher->push(lane.decoder->push(token));
  if (lane.stop_matcher->is_stopped()) {
    if (!send(lane, update)) return;
    finish(lane, FinishReason::stop);
    return;
  }
  if (int64_t(lane.completion.size()) >= lane.request.max_tokens) {
    if (!send(lane, update)) return;
    finish(lane, FinishReason::length);
    return;
  }
  send(lane, update);
}

bool Engine::Impl::send(Lane& lane, GenerationUpdate& update) {
  if (lane.sink(update)) return true;
  finish(lane, FinishReason::cancelled);
  return false;
}

void Engine::Impl::finish(Lane& lane, FinishReason reason, const std::string& error) {
  if (lane.is_finished) return;
  lane.is_finished = true;
  GenerationUpdate update;
  if (reason != FinishReason::cancelled && reason != FinishReason::error && lane.decoder &&
      !lane.stop_matcher->is_stopped())
    update.text = lane.stop_matcher->push(lane.decoder->flush()) + lane.stop_matcher->flush();
  update.is_final = true;
  update.finish_reason = reason;
  update.error = error;
  lane.timings.predicted_n = int64_t(lane.completion.size());
  if (!lane.completion.empty()) lane.timings.predicted_ms = ms_between(lane.first_token, Clock::now());
  update.timings = lane.timings;
  update.token_sha = token_sha(lane.completion);
  lane.sink(update);
  kv.lane_close(lane.kv_lane);
}

}  // namespace tf
