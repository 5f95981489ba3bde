// The engine thread: admission, rounds (prefill chunks, decode rows, draft trees), acceptance, emission.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "core/sha256.h"
#include "engine/lane.h"
#include "engine/stop_matcher.h"
#include "models/model.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"
#include "speculation/drafter_proposer.h"
#include "speculation/long_copy.h"
#include "speculation/ngram.h"
#include "speculation/replay.h"
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

// Where a lane's rows sit in this round's batch. A decoding lane's rows are its root (the last
// token) followed by its draft nodes in tree order.
struct LaneRows {
  Lane* lane;
  int64_t first_row;
  int64_t n_rows;
  bool is_decode;
};

// The proposers whose drafts measured costlier than they yield on some device: the block drafter
// (a forward of its whole block per use) and n-gram (many short guesses, a verified row each).
// Long copy drafts rarely and long; replay is a benchmark's forced acceptance.
bool is_gated(ProposerKind kind) { return kind == ProposerKind::drafter || kind == ProposerKind::ngram; }

}  // namespace

struct Engine::Impl {
  EngineOptions options;
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<DFlashDrafter> drafter;
  std::vector<int32_t> eos_ids;
  KvCache kv;

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<PendingRequest> pending;
  std::unordered_set<uint64_t> cancelled;
  uint64_t next_id = 1;
  bool stopping = false;
  EngineStats stats;  // guarded by mutex
  EngineHealth health;  // guarded by mutex

  std::vector<std::unique_ptr<Lane>> lanes;  // engine thread only
  int64_t n_waiting = 0;                     // queue depth seen at the last admission
  int32_t scratch_lane;                      // slots for draft rows off their lane's main chain
  Sampler sampler;
  std::vector<LogitRowPick> picks;            // [logit rows] who chooses the next token
  std::vector<int32_t> picked;                // [logit rows] the model's choice, or -1
  std::vector<float> logits;                  // [logit rows without a pick][vocab]
  std::vector<int64_t> logit_row_of;          // [batch rows] index among logit rows, or -1
  std::vector<int64_t> host_logits_row_of;    // [logit rows] row in `logits`, or -1 when picked
  std::vector<float> committed_taps;         // [n_tokens][tap width] gathered for one lane
  // Running average of one lane's share of a round's forward: what a round a lane saves is worth
  // (with many lanes the round happens anyway; the lane saves its share of it).
  double lane_round_seconds = 0.0;
  std::array<ProposerGate, kProposerKinds> gates;  // every lane's uses: where a new lane's gates start
  RowCost row_cost;                                // what a verified row adds to a round
  std::thread thread;

  // Lanes get their whole budget up front; scratch gets a round's worth of rows.
  Impl(const EngineOptions& opts, std::shared_ptr<Model> m, std::shared_ptr<const Tokenizer> t,
       std::shared_ptr<DFlashDrafter> d)
      : options(opts),
        model(std::move(m)),
        tokenizer(std::move(t)),
        drafter(std::move(d)),
        eos_ids(model->config().eos_token_ids),
        kv(make_kv_cache(*model, int64_t(opts.n_parallel) * kv_blocks_for(opts.n_ctx) + kv_blocks_for(opts.max_rows_per_round))) {
    scratch_lane = kv.lane_open();
    kv.lane_reserve(scratch_lane, opts.max_rows_per_round);
    if (drafter) {
      const auto& ids = drafter->config().target_layer_ids;
      model->set_tap_layers(std::vector<int>(ids.begin(), ids.end()));
    }
  }

  void run();
  void admit();
  bool take_cancellations();
  void round();
  int64_t window_for(const Lane& lane, int64_t n_decoding) const;
  void add_decode_rows(Lane& lane, int64_t max_rows, int64_t* n_scratch, Batch& batch);
  void accept(Lane& lane, const LaneRows& placed, const Batch& batch);
  int32_t choose(Lane& lane, int64_t logit_row, const float** row_logits);
  void on_token(Lane& lane, int32_t token, const float* lane_logits);
  void feed_drafter(Lane& lane, int64_t first_position, const std::vector<int64_t>& rows);
  void finish(Lane& lane, FinishReason reason, const std::string& error = {});
  bool send(Lane& lane, GenerationUpdate& update);
  bool is_eos(int32_t token) const {
    return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
  }
};

Engine::Engine(const EngineOptions& options, std::shared_ptr<Model> model,
               std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<DFlashDrafter> drafter)
    : options_(options) {
  if (options.n_parallel < 1) fail("--parallel must be at least 1");
  if (options.n_ctx < 2) fail("--ctx must be at least 2");
  if (options.n_ctx > model->config().max_position_embeddings)
    fail("--ctx " + std::to_string(options.n_ctx) + " exceeds the model's max_position_embeddings (" +
         std::to_string(model->config().max_position_embeddings) + ")");
  impl_ = std::make_unique<Impl>(options, std::move(model), std::move(tokenizer), std::move(drafter));
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
  auto invalid = [](std::string param, std::string message) {
    return SubmitResult{SubmitStatus::invalid, 0, std::move(message), std::move(param)};
  };
  if (request.prompt.empty()) return invalid("prompt", "the prompt is empty");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= config.vocab_size)
      return invalid("prompt", "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                   std::to_string(config.vocab_size - 1) + ")");
  if (request.replay_depth < 0) return invalid("replay.accept", "replay depth must be 0 (the window) or more");
  for (int32_t id : request.replay)
    if (id < 0 || id >= config.vocab_size)
      return invalid("replay.token_ids", "replay token id " + std::to_string(id) + " is outside the vocabulary");
  if (request.max_tokens < 1) return invalid("max_tokens", "max_tokens must be at least 1");
  int64_t total = int64_t(request.prompt.size()) + request.max_tokens;
  // Past the context the prompt is at fault when it alone leaves no room for a token, else max_tokens.
  if (total > options_.n_ctx)
    return {SubmitStatus::too_long, 0,
            "This model's maximum context length is " + std::to_string(options_.n_ctx) +
                " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                std::to_string(request.prompt.size()) + " in the prompt, " +
                std::to_string(request.max_tokens) + " for the completion).",
            int64_t(request.prompt.size()) >= options_.n_ctx ? "prompt" : "max_tokens"};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (int64_t(impl_->pending.size()) >= options_.max_queue)
    return {SubmitStatus::queue_full, 0, "the server is busy: the request queue is full", ""};
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

EngineHealth Engine::health() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->health;
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
    if (lane->request.use_draft) {
      auto allowed = [&](ProposerKind kind) { return (lane->request.proposers & proposer_bit(kind)) != 0; };
      if (!lane->request.replay.empty() && allowed(ProposerKind::replay))
        lane->proposers.push_back(std::make_unique<ReplayProposer>(
            lane->request.replay, lane->request.replay_depth > 0 ? lane->request.replay_depth : options.lone_window));
      if (allowed(ProposerKind::long_copy)) {
        LongCopyOptions copy;
        copy.min_confident_match = options.min_confident_match;
        lane->proposers.push_back(std::make_unique<LongCopyProposer>(copy));
      }
      if (drafter && allowed(ProposerKind::drafter)) {
        auto block_drafter = std::make_unique<DrafterProposer>(drafter, options.drafter_tree);
        lane->drafter = block_drafter.get();
        lane->proposers.push_back(std::move(block_drafter));
      }
      if (allowed(ProposerKind::ngram)) lane->proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{}));
      for (int kind = 0; kind < kProposerKinds; ++kind) lane->gates[size_t(kind)] = gates[size_t(kind)].for_new_lane();
    }
    lane->timings.prompt_n = lane->n_prompt;
    lane->admitted = Clock::now();
    stats.requests += 1;
    stats.prompt_tokens += lane->n_prompt;
    lanes.push_back(std::move(lane));
    pending.pop_front();
  }
  stats.queue_depth = int64_t(pending.size());
  n_waiting = stats.queue_depth;
}

int64_t Engine::Impl::window_for(const Lane& lane, int64_t n_decoding) const {
  const int64_t lone = std::clamp(lane.earned_window, options.lone_window,
                                  std::max(options.lone_window, options.most_lone_window));
  if (options.lane_policy == LanePolicy::always_lone) return lone;
  if (options.lane_policy == LanePolicy::always_lanes) return options.lane_window;
  // The lone driver: one greedy stream that nobody can join gets the wide, copy-heavy tree, wider
  // still while its whole window keeps being accepted. An
  // arrival hands it back to the shared window, unless every lane is taken: then it waits for this
  // reply to end anyway, and narrowing the window would only make that later.
  bool can_be_joined = n_waiting > 0 && int64_t(lanes.size()) < options.n_parallel;
  bool is_lone = n_decoding == 1 && lanes.size() == 1 && !can_be_joined && lane.request.sampling.is_greedy();
  if (is_lone) return lone;
  // On lanes, a lane that keeps having its whole window accepted (a long copy) earns a wider one, up
  // to the lone window and its fair share of the round's rows, so the lanes after it are not starved.
  const int64_t fair_share = options.max_rows_per_round / std::max<int64_t>(1, n_decoding);
  const int64_t most = std::max(options.lane_window, std::min(options.lone_window, fair_share));
  return std::clamp(lane.earned_window, options.lane_window, most);
}

// The root row (the lane's last token) and its draft tree. Nodes on the main chain (first child of
// a main node) write K/V straight to their lane's slots; siblings write to scratch slots and move
// only if accepted.
void Engine::Impl::add_decode_rows(Lane& lane, int64_t max_rows, int64_t* n_scratch, Batch& batch) {
  DraftTree& tree = lane.tree;
  tree.clear();
  lane.tree_depth = 0;
  // More drafts than the budget can emit would only cost rows.
  int64_t max_nodes = std::min(max_rows - 1, lane.budget_left() - 1);
  lane.use_seconds.fill(-1.0);
  if (max_nodes > 0 && !lane.proposers.empty()) {
    LaneHistory history = lane.history();
    for (auto& proposer : lane.proposers) {
      proposer->observe(history);
      if (tree.size() >= max_nodes) continue;
      const size_t kind = size_t(proposer->kind());
      if (!options.gate_proposers || !is_gated(proposer->kind())) {
        proposer->propose(history, max_nodes, &tree);
      } else if (!lane.gates[kind].should_run(lane_round_seconds)) {
        lane.gates[kind].record_skip();
      } else {
        // A use costs the proposer's own time and a verified row for every node it adds.
        const int64_t n_before = tree.size();
        const auto start = Lane::Clock::now();
        proposer->propose(history, max_nodes, &tree);
        lane.use_seconds[kind] = std::chrono::duration<double>(Lane::Clock::now() - start).count() +
                                 double(tree.size() - n_before) * row_cost.seconds_per_row();
      }
    }
  }
  const int64_t root_row = int64_t(batch.rows.size());
  const int32_t root_pos = int32_t(lane.n_cached);
  batch.rows.push_back({lane.tokens.back(), root_pos, lane.kv_lane, -1,
                        kv.slot(lane.kv_lane, root_pos), true});
  std::vector<int32_t> depth(size_t(tree.size()));
  std::vector<bool> is_main(size_t(tree.size()));
  std::vector<bool> has_child(size_t(tree.size()) + 1, false);  // [0] is the root
  for (int64_t i = 0; i < tree.size(); ++i) {
    int32_t parent = tree.parents[size_t(i)];
    depth[size_t(i)] = parent < 0 ? 1 : depth[size_t(parent)] + 1;
    bool parent_is_main = parent < 0 || is_main[size_t(parent)];
    is_main[size_t(i)] = parent_is_main && !has_child[size_t(parent + 1)];
    has_child[size_t(parent + 1)] = true;
    int32_t pos = root_pos + depth[size_t(i)];
    lane.tree_depth = std::max<int64_t>(lane.tree_depth, depth[size_t(i)]);
    int32_t slot = is_main[size_t(i)] ? kv.slot(lane.kv_lane, pos) : kv.slot(scratch_lane, (*n_scratch)++);
    batch.rows.push_back({tree.tokens[size_t(i)], pos, lane.kv_lane,
                          int32_t(parent < 0 ? root_row : root_row + 1 + parent), slot, true});
  }
}

void Engine::Impl::round() {
  Batch batch;
  std::vector<LaneRows> placed;
  int64_t budget = options.max_rows_per_round;
  int64_t n_scratch = 0;
  int64_t n_decoding = 0;
  for (auto& lane : lanes) n_decoding += !lane->is_finished && !lane->is_prefilling();
  // Decoding lanes first (their root and drafts), then prompt chunks with what is left of the
  // budget, so a long prompt never stalls the others.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& lane_ptr : lanes) {
      Lane& lane = *lane_ptr;
      if (lane.is_finished || lane.is_prefilling() != (pass == 1) || budget == 0) continue;
      int64_t first = int64_t(batch.rows.size());
      if (pass == 0) {
        lane.window = std::min(budget, window_for(lane, n_decoding));
        add_decode_rows(lane, lane.window, &n_scratch, batch);
      } else {
        int64_t n = std::min({int64_t(lane.tokens.size()) - lane.n_cached, budget, options.prefill_chunk});
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
      }
      int64_t n_rows = int64_t(batch.rows.size()) - first;
      placed.push_back({&lane, first, n_rows, pass == 0});
      budget -= n_rows;
    }
  }
  if (batch.rows.empty()) return;
  const int64_t n_vocab = model->config().vocab_size;
  logit_row_of.assign(batch.rows.size(), -1);
  picks.clear();
  for (const LaneRows& p : placed) {
    // The model chooses a lane's tokens itself unless the lane needs its logits here.
    const SamplingParams& sampling = p.lane->request.sampling;
    const bool is_pickable = sampling.presence_penalty == 0.0f && sampling.frequency_penalty == 0.0f &&
                             p.lane->request.n_top_logprobs < 0;
    for (int64_t r = p.first_row; r < p.first_row + p.n_rows; ++r) {
      const BatchRow& row = batch.rows[size_t(r)];
      if (!row.wants_logits) continue;
      logit_row_of[size_t(r)] = int64_t(picks.size());
      picks.push_back({is_pickable ? &sampling : nullptr, int64_t(row.pos) + 1});
    }
  }
  int64_t n_unpicked = 0;
  host_logits_row_of.assign(picks.size(), -1);
  for (size_t i = 0; i < picks.size(); ++i)
    if (picks[i].sampling == nullptr) host_logits_row_of[i] = n_unpicked++;
  picked.resize(picks.size());
  logits.resize(size_t(n_unpicked * n_vocab));
  const auto forward_start = Lane::Clock::now();
  model->forward_and_pick(batch, kv, picks, picked.data(), logits.data());
  const double forward_seconds = std::chrono::duration<double>(Lane::Clock::now() - forward_start).count();
  row_cost.record_round(int64_t(batch.rows.size()), forward_seconds);
  const double lane_share = forward_seconds / double(std::max<size_t>(1, placed.size()));
  lane_round_seconds =
      lane_round_seconds == 0.0 ? lane_share : lane_round_seconds + 0.25 * (lane_share - lane_round_seconds);
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.rounds += 1;
    stats.rows += int64_t(batch.rows.size());
    stats.rounds_with_several_lanes += placed.size() >= 2;
    stats.most_lanes_in_a_round = std::max(stats.most_lanes_in_a_round, int64_t(placed.size()));
  }
  for (const LaneRows& p : placed) {
    if (p.is_decode) {
      accept(*p.lane, p, batch);
      continue;
    }
    std::vector<int64_t> rows(size_t(p.n_rows));
    for (int64_t i = 0; i < p.n_rows; ++i) rows[size_t(i)] = p.first_row + i;
    feed_drafter(*p.lane, p.lane->n_cached, rows);
    p.lane->n_cached += p.n_rows;
    int64_t last = p.first_row + p.n_rows - 1;
    if (logit_row_of[size_t(last)] < 0) continue;  // more prompt to come
    p.lane->timings.rounds += 1;
    const float* lane_logits = nullptr;
    const int32_t token = choose(*p.lane, logit_row_of[size_t(last)], &lane_logits);
    on_token(*p.lane, token, lane_logits);
  }
}

// Walks the tree from the root: at each node the target's own choice (argmax, or the seeded
// sample at that position) picks the child; the walk stops where no child holds that token. Every
// emitted token is the target's choice, so drafts change speed, never tokens.
void Engine::Impl::accept(Lane& lane, const LaneRows& placed, const Batch& batch) {
  const DraftTree& tree = lane.tree;
  lane.timings.rounds += 1;
  // Counted before tokens are emitted: emitting the last one finishes the reply and reports them.
  lane.timings.draft_n += tree.size();
  int32_t node = -1;  // the root
  int64_t n_accepted = 0;
  std::vector<int64_t> committed_rows = {placed.first_row};
  std::vector<uint8_t> accepted_sources;
  int64_t n_sibling_accepts = 0;
  for (;;) {
    int64_t row = placed.first_row + 1 + node;
    const float* row_logits = nullptr;
    const int32_t token = choose(lane, logit_row_of[size_t(row)], &row_logits);
    int32_t child = -1;
    for (int64_t i = node + 1; i < tree.size() && child < 0; ++i)
      if (tree.parents[size_t(i)] == node && tree.tokens[size_t(i)] == token) child = int32_t(i);
    if (child >= 0) {
      const BatchRow& child_row = batch.rows[size_t(placed.first_row + 1 + child)];
      int32_t home = kv.slot(lane.kv_lane, child_row.pos);
      if (child_row.kv_slot != home) {
        kv.copy_slot(child_row.kv_slot, home);
        ++n_sibling_accepts;
      }
      lane.timings.draft_accepted_n += 1;
      accepted_sources.push_back(tree.sources[size_t(child)]);
      committed_rows.push_back(placed.first_row + 1 + child);
      ++n_accepted;
    }
    on_token(lane, token, row_logits);
    if (lane.is_finished || child < 0) break;
    node = child;
  }
  feed_drafter(lane, lane.n_cached, committed_rows);
  lane.n_cached += 1 + n_accepted;
  // Every drafted token of a chain that filled the window was right: the window, not the
  // proposers, was the limit, so the next round may use twice as many rows. Any miss earns it back.
  if (tree.size() > 0 && n_accepted == lane.tree_depth && tree.size() + 1 >= lane.window) {
    lane.earned_window = 2 * lane.window;
  } else if (n_accepted < lane.tree_depth) {
    lane.earned_window = 0;
  }
  for (size_t kind = 0; kind < size_t(kProposerKinds); ++kind) {
    if (lane.use_seconds[kind] < 0.0) continue;
    const int64_t n_kind_accepted = std::count(accepted_sources.begin(), accepted_sources.end(), uint8_t(kind));
    lane.gates[kind].record_use(lane.use_seconds[kind], n_kind_accepted, lane_round_seconds);
    gates[kind].record_use(lane.use_seconds[kind], n_kind_accepted, lane_round_seconds);
  }
  const int64_t max_depth = lane.tree_depth;
  std::lock_guard<std::mutex> lock(mutex);
  stats.drafted_tokens += tree.size();
  stats.accepted_tokens += n_accepted;
  stats.sibling_accepts += n_sibling_accepts;
  for (uint8_t source : tree.sources) stats.drafted_by_proposer[source % kProposerKinds] += 1;
  for (uint8_t source : accepted_sources) stats.accepted_by_proposer[source % kProposerKinds] += 1;
  for (int64_t d = 0; d < std::min<int64_t>(max_depth, kMaxTrackedDepth); ++d) {
    stats.drafted_at_depth[d] += 1;
    if (d < n_accepted) stats.accepted_at_depth[d] += 1;
  }
}

// Hands the block drafter the taps of the rows that just became the lane's history, in position
// order (the taps protocol in drafter_proposer.h).
void Engine::Impl::feed_drafter(Lane& lane, int64_t first_position, const std::vector<int64_t>& rows) {
  if (!lane.drafter || rows.empty()) return;
  const std::vector<float>& taps = model->taps();
  const size_t width = size_t(drafter->config().tap_width());
  committed_taps.resize(rows.size() * width);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(taps.data() + size_t(rows[i]) * width, width, committed_taps.data() + i * width);
  lane.drafter->observe_taps(first_position, committed_taps.data(), int64_t(rows.size()));
}

// The token after logit row `logit_row`: the model's pick, or the sampler's over the row's logits
// (then *row_logits points at them; they are null for a picked row).
int32_t Engine::Impl::choose(Lane& lane, int64_t logit_row, const float** row_logits) {
  const int64_t host_row = host_logits_row_of[size_t(logit_row)];
  if (host_row < 0) {
    *row_logits = nullptr;
    return picked[size_t(logit_row)];
  }
  const int64_t n_vocab = model->config().vocab_size;
  *row_logits = logits.data() + host_row * n_vocab;
  return sampler.sample(*row_logits, n_vocab, lane.request.sampling, int64_t(lane.tokens.size()), lane.counts);
}

void Engine::Impl::on_token(Lane& lane, int32_t token, const float* lane_logits) {
  auto now = Clock::now();
  if (lane.completion.empty()) {
    lane.first_token = now;
    lane.timings.prompt_ms = ms_between(lane.admitted, now);
  }
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
