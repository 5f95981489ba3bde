// The engine thread: the queue the rest of the program talks through, and the loop that admits
// requests, runs rounds and retires finished lanes (engine_impl.h lists the other seams' files).
#include "engine/engine.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/engine_impl.h"
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

// The pool lanes share (and the prefix cache keeps what they leave), plus a round's worth of
// scratch rows. Sized once: by tokens, by a fraction of the GPU's free memory, or as many lanes of
// the longest context as may run at once.
static int64_t kv_pool_blocks(const EngineOptions& opts, const Model& model) {
  int64_t tokens = opts.kv_pool_tokens;
  if (opts.kv_pool_fraction > 0.0) {
    const int64_t free_bytes = model.free_kv_memory_bytes();
    if (free_bytes <= 0) fail("--kv-pool-fraction sizes the KV pool on a GPU; on this device use --kv-pool-tokens");
    const int64_t per_position = model.make_kv_storage(kKvBlockSize)->bytes_for(1);
    tokens = int64_t(opts.kv_pool_fraction * double(free_bytes)) / per_position;
    if (tokens < opts.n_ctx)
      fail("--kv-pool-fraction " + std::to_string(opts.kv_pool_fraction) + " of the GPU's free memory holds " +
           std::to_string(tokens) + " positions, fewer than one request of --ctx " + std::to_string(opts.n_ctx));
  }
  const int64_t pool = tokens > 0 ? kv_blocks_for(tokens) : int64_t(opts.n_parallel) * kv_blocks_for(opts.n_ctx);
  return pool + kv_blocks_for(opts.max_rows_per_round);
}

// The pool, or, where the machine cannot hold it, an error naming its size and the flags that set it.
static KvCache make_engine_kv_cache(const EngineOptions& opts, Model& model) {
  const int64_t blocks = kv_pool_blocks(opts, model);
  try {
    return make_kv_cache(model, blocks);
  } catch (const std::bad_alloc&) {
    const int64_t positions = blocks * kKvBlockSize;
    const double gib = double(model.make_kv_storage(kKvBlockSize)->bytes_for(1)) * double(positions) / double(1 << 30);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f", gib);
    fail("the KV pool of " + std::to_string(positions) + " positions (" + size +
         " GiB: --parallel x --ctx, or --kv-pool-tokens) could not be allocated; lower --parallel, --ctx or "
         "--kv-pool-tokens");
  }
}

// A checkpoint of a recurrent model's state every so many blocks: by default as often as its
// bytes stay within the K/V bytes of the blocks it covers (a tiny model every block; a 27B hybrid,
// whose state outweighs a thousand positions of K/V, about every 75).
static int64_t checkpoint_interval(const EngineOptions& opts, const Model& model, const KvCache& kv) {
  if (opts.recurrent_checkpoint_blocks > 0) return opts.recurrent_checkpoint_blocks;
  const int64_t block_bytes = std::max<int64_t>(1, kv.storage().bytes_for(kv.block_size()));
  return std::max<int64_t>(1, (model.recurrent_state_bytes() + block_bytes - 1) / block_bytes);
}

Engine::Impl::Impl(const EngineOptions& opts, std::shared_ptr<Model> m, std::shared_ptr<const Tokenizer> t,
                   SpeculationOptions speculation_options)
    : options(opts),
      model(std::move(m)),
      tokenizer(std::move(t)),
      eos_ids(model->config().eos_token_ids),
      kv(make_engine_kv_cache(opts, *model)),
      checkpoints(opts.recurrent_cache_bytes >= 0 ? opts.recurrent_cache_bytes : kv.storage().bytes_for(kv.storage().n_slots())),
      checkpoint_every(checkpoint_interval(opts, *model, kv)),
      speculation(std::move(speculation_options)),
      slot_records(size_t(opts.n_parallel)) {
  for (size_t i = 0; i < slot_records.size(); ++i) slot_records[i].info.id = int32_t(i);
  scratch_lane = kv.lane_open();
  kv.lane_reserve(scratch_lane, opts.max_rows_per_round);
  model->set_tap_layers(speculation.tap_layers());
  record_pool_stats();  // /metrics shows the pool from the start, not zeros until the first request
}

Engine::Engine(const EngineOptions& options, std::shared_ptr<Model> model,
               std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<DFlashDrafter> drafter,
               std::shared_ptr<MtpHead> mtp)
    : options_(options) {
  if (options.n_parallel < 1) fail("--parallel must be at least 1");
  if (options.n_ctx < 2) fail("--ctx must be at least 2");
  if (options.kv_pool_tokens < 0) fail("--kv-pool-tokens must be 0 (parallel x ctx) or more");
  if (!(options.kv_pool_fraction >= 0.0 && options.kv_pool_fraction < 1.0))
    fail("--kv-pool-fraction must be at least 0 and below 1");
  if (options.kv_pool_fraction > 0.0 && options.kv_pool_tokens > 0)
    fail("give --kv-pool-tokens or --kv-pool-fraction, not both");
  if (options.kv_pool_tokens > 0 && options.kv_pool_tokens < options.n_ctx)
    fail("--kv-pool-tokens " + std::to_string(options.kv_pool_tokens) + " cannot hold one request's context of " +
         std::to_string(options.n_ctx) + " positions");
  if (options.recurrent_cache_bytes < -1) fail("--recurrent-cache-mib must be 0 or more");
  if (options.recurrent_checkpoint_blocks < 0) fail("--recurrent-checkpoint-blocks must be 0 (automatic) or more");
  if (options.n_ctx > model->config().max_position_embeddings)
    fail("--ctx " + std::to_string(options.n_ctx) + " exceeds the model's max_position_embeddings (" +
         std::to_string(model->config().max_position_embeddings) + ")");
  SpeculationOptions speculation{std::move(drafter), options.speculation, std::move(mtp)};
  impl_ = std::make_unique<Impl>(options, std::move(model), std::move(tokenizer), std::move(speculation));
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
  std::vector<Submission> group;
  group.push_back({std::move(request), std::move(sink)});
  return submit_together(std::move(group)).front();
}

std::vector<SubmitResult> Engine::submit_together(std::vector<Submission> group) {
  for (const Submission& submission : group)
    if (SubmitResult refused = check(submission.request); refused.status != SubmitStatus::accepted)
      return {refused};
  const int64_t n = int64_t(group.size());
  // Waiting room: the queue, plus the lanes free as the engine last said (their requests leave the
  // queue within a round). A group that could not fit even in an idle server is the request's fault.
  if (n > int64_t(options_.max_queue) + options_.n_parallel)
    return {{SubmitStatus::invalid, 0,
             "this server holds at most " + std::to_string(int64_t(options_.max_queue) + options_.n_parallel) +
                 " requests at once (--parallel + --max-queue); this request needs " + std::to_string(n),
             "n"}};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // Requests pinned to a slot that is busy, or that an earlier queued request is pinned to, stay
  // queued however many lanes are free: only the others can leave the queue for those lanes.
  std::vector<bool> is_taken(size_t(options_.n_parallel), false);
  for (const auto& record : impl_->slot_records) is_taken[size_t(record.info.id)] = record.info.is_processing;
  int64_t n_staying = 0;
  auto count_staying = [&](const GenerationRequest& request) {
    if (request.slot == GenerationRequest::kAnySlot) return;
    n_staying += is_taken[size_t(request.slot)];
    is_taken[size_t(request.slot)] = true;
  };
  for (const PendingRequest& waiting : impl_->pending) count_staying(waiting.request);
  for (const Submission& submission : group) count_staying(submission.request);
  const int64_t n_queued = int64_t(impl_->pending.size()) + n;
  const int64_t free_lanes = std::max<int64_t>(0, options_.n_parallel - impl_->stats.lanes_live);
  if (n_queued > int64_t(options_.max_queue) + std::min(free_lanes, n_queued - n_staying))
    return {{SubmitStatus::queue_full, 0, "the server is busy: the request queue is full", ""}};
  std::vector<SubmitResult> results;
  for (Submission& submission : group) {
    const uint64_t id = impl_->next_id++;
    impl_->pending.push_back({id, std::move(submission.request), std::move(submission.sink)});
    results.push_back({SubmitStatus::accepted, id, {}});
  }
  impl_->stats.queue_depth = int64_t(impl_->pending.size());
  impl_->wake.notify_all();
  return results;
}

SubmitResult Engine::check(const GenerationRequest& request) const {
  const ModelConfig& config = impl_->model->config();
  auto invalid = [](std::string param, std::string message) {
    return SubmitResult{SubmitStatus::invalid, 0, std::move(message), std::move(param)};
  };
  if (request.prompt.empty()) return invalid("prompt", "the prompt is empty");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= config.vocab_size)
      return invalid("prompt", "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                   std::to_string(config.vocab_size - 1) + ")");
  if (request.draft.replay_depth < 0) return invalid("replay.accept", "replay depth must be 0 (the window) or more");
  for (int32_t id : request.draft.replay)
    if (id < 0 || id >= config.vocab_size)
      return invalid("replay.token_ids", "replay token id " + std::to_string(id) + " is outside the vocabulary");
  if (request.max_tokens < 1) return invalid("max_tokens", "max_tokens must be at least 1");
  if (request.slot < GenerationRequest::kAnySlot || request.slot >= options_.n_parallel)
    return invalid("id_slot", "there is no slot " + std::to_string(request.slot) + " (slots are 0.." +
                                  std::to_string(options_.n_parallel - 1) + "; -1 is any free slot)");
  if (auto refused = check_constraints(request, config.vocab_size, impl_->tokenizer != nullptr))
    return invalid(refused->first, refused->second);
  int64_t total = int64_t(request.prompt.size()) + request.max_tokens;
  // Past the context the prompt is at fault when it alone leaves no room for a token, else max_tokens.
  if (total > options_.n_ctx)
    return {SubmitStatus::too_long, 0,
            "This model's maximum context length is " + std::to_string(options_.n_ctx) +
                " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                std::to_string(request.prompt.size()) + " in the prompt, " +
                std::to_string(request.max_tokens) + " for the completion).",
            int64_t(request.prompt.size()) >= options_.n_ctx ? "prompt" : "max_tokens"};
  return {SubmitStatus::accepted, 0, {}};
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

EngineHealth Engine::health() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->health;
}

void Engine::Impl::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || !pending.empty() || !lanes.empty() || !tasks.empty(); });
      if (stopping) break;
    }
    run_tasks();
    if (take_cancellations()) retire_finished();
    admit();
    if (!lanes.empty()) {
      try {
        round();
        std::lock_guard<std::mutex> lock(mutex);
        health = EngineHealth{};
      } catch (const std::exception& e) {
        // A failed forward ends the replies it carried, not the server; health says so until a round
        // succeeds. Only a user-facing tf::Error's text reaches clients; a bug's goes to the log.
        const bool is_user_facing = dynamic_cast<const Error*>(&e) != nullptr;
        if (!is_user_facing) std::fprintf(stderr, "tensorfold: internal error in an engine round: %s\n", e.what());
        const std::string message =
            is_user_facing ? e.what() : "an internal error in the engine (the server log has the details)";
        {
          std::lock_guard<std::mutex> lock(mutex);  // before the replies end: whoever hears of it sees it
          health = EngineHealth{false, "a round failed: " + message};
        }
        for (auto& lane : lanes) finish(*lane, FinishReason::error, message);
      }
    }
    retire_finished();
    std::lock_guard<std::mutex> lock(mutex);
    stats.lanes_live = int64_t(lanes.size());
    record_pool_stats();
    for (const auto& lane : lanes) {  // /slots shows a running request's progress, not its predecessor's
      if (lane->slot < 0) continue;
      SlotInfo& info = slot_records.at(size_t(lane->slot)).info;
      info.n_tokens = std::min(lane->n_cached, int64_t(lane->tokens.size()));
      info.timings = lane->timings;
    }
  }
  // Shutting down: everyone still waiting hears that their request ended.
  for (auto& lane : lanes) finish(*lane, FinishReason::cancelled);
  std::deque<std::function<void()>> left;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& p : pending) {
      GenerationUpdate update;
      update.is_final = true;
      update.finish_reason = FinishReason::cancelled;
      p.sink(update);
    }
    pending.clear();
    left.swap(tasks);
  }
  for (auto& task : left) task();  // each sees the engine stopping and fails its caller
}

bool Engine::Impl::take_cancellations() {
  std::unordered_set<uint64_t> ids;
  std::vector<UpdateSink> queued_sinks;  // cancelled while waiting for a lane: they hear it too
  {
    std::lock_guard<std::mutex> lock(mutex);
    ids.swap(cancelled);
    for (PendingRequest& p : pending)
      if (ids.count(p.id)) queued_sinks.push_back(std::move(p.sink));
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const PendingRequest& p) { return ids.count(p.id) > 0; }),
                  pending.end());
    stats.queue_depth = int64_t(pending.size());
  }
  for (UpdateSink& sink : queued_sinks) {
    GenerationUpdate update;
    update.is_final = true;
    update.finish_reason = FinishReason::cancelled;
    sink(update);
  }
  for (auto& lane : lanes)
    if (ids.count(lane->id)) finish(*lane, FinishReason::cancelled);
  return !ids.empty();
}

// One round: pack every lane's rows, one forward that also chooses every logit row's token, then
// each lane accepts (decoding) or commits its chunk (prefilling).
void Engine::Impl::round() {
  const auto round_start = EngineClock::now();
  RoundRows& rows = round_rows;
  pack_rows(rows);
  if (rows.batch.rows.empty()) return;
  picked.resize(rows.picks.size());
  const int64_t n_vocab = model->config().vocab_size;
  const int64_t n_copied = int64_t(std::count_if(rows.picks.begin(), rows.picks.end(),
                                                 [](const LogitRowPick& p) { return p.wants_logits; }));
  logits.resize(size_t(n_copied * n_vocab));
  model->forward_and_pick(rows.batch, kv, rows.picks, picked.data(), logits.data());
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.rounds += 1;
    stats.rows += int64_t(rows.batch.rows.size());
    stats.rounds_with_several_lanes += rows.placed.size() >= 2;
    stats.most_lanes_in_a_round = std::max(stats.most_lanes_in_a_round, int64_t(rows.placed.size()));
  }
  for (const LaneRows& placed : rows.placed) {
    if (placed.is_decode) {
      accept(*placed.lane, placed);
    } else {
      commit_prefill(*placed.lane, placed);
    }
  }
  // Prompt rows ask for no logits and cost less than verified rows, so rounds with prompt chunks
  // would bend the line; they also say nothing of what a decoding lane's round costs.
  if (!std::all_of(rows.placed.begin(), rows.placed.end(), [](const LaneRows& p) { return p.is_decode; })) return;
  const double round_seconds =
      std::chrono::duration<double>(EngineClock::now() - round_start).count() - rows.drafting_seconds;
  row_cost.record_round(int64_t(rows.batch.rows.size()), round_seconds);
  const int64_t n_lanes = std::max<int64_t>(1, int64_t(rows.placed.size()));
  const double plain_share =
      (row_cost.model().is_known() ? row_cost.model().seconds(n_lanes) : round_seconds) / double(n_lanes);
  plain_round_seconds =
      plain_round_seconds == 0.0 ? plain_share : plain_round_seconds + 0.25 * (plain_share - plain_round_seconds);
}

int32_t Engine::Impl::chosen(int64_t logit_row, const float** row_logits) const {
  const int64_t host_row = round_rows.host_logits_row[size_t(logit_row)];
  *row_logits = host_row < 0 ? nullptr : logits.data() + host_row * model->config().vocab_size;
  return picked[size_t(logit_row)];
}

}  // namespace tf
