// The engine thread's state, shared by the files that implement one seam each:
//   engine.cpp     the public API, the queue and the loop: admit, round, retire
//   admission.cpp  which queued requests become lanes, and each lane's window (the lane policy)
//   round_rows.cpp a round's rows: each decoding lane's root and draft tree (shaped by what a row
//                  costs), then prompt chunks, and who chooses each logit row's token
//   acceptance.cpp walking each tree with the target's choices, committing K/V and taps
//   output.cpp     turning accepted tokens into updates, finishing replies
//   slots.cpp      the slots requests run in, and saving and restoring their sequences
// Everything here runs on the engine thread, except what `mutex` guards.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "engine/lane.h"
#include "models/model.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"
#include "runtime/recurrent_checkpoints.h"
#include "speculation/proposer_gate.h"
#include "speculation/round_shape.h"
#include "speculation/speculation.h"

namespace tf {

using EngineClock = std::chrono::steady_clock;

inline double ms_between(EngineClock::time_point a, EngineClock::time_point b) {
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

// One round's rows and the choices the model makes for them.
struct RoundRows {
  Batch batch;
  std::vector<LaneRows> placed;
  std::vector<LogitRowPick> picks;       // [logit rows] who chooses the next token
  std::vector<int64_t> logit_row_of;     // [batch rows] index among logit rows, or -1
  std::vector<int64_t> host_logits_row;  // [logit rows] row in the round's logits copy, or -1
  std::vector<int32_t> penalty_paths;    // the draft paths penalties see (LogitRowPick::penalties)
  std::vector<uint32_t> masks;           // [constrained logit rows][vocab words] (LogitConstraint::allowed)
  int64_t n_scratch = 0;                 // scratch slots given to draft rows off the main chain
  double drafting_seconds = 0.0;         // the proposers' own time this round (paid before shaping)
};

struct Engine::Impl {
  EngineOptions options;
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> eos_ids;
  std::shared_ptr<const TokenVocabulary> grammar_tokens;  // made at the first grammar request
  KvCache kv;
  RecurrentCheckpoints checkpoints;  // used by a model with recurrent state only
  int64_t checkpoint_every = 0;      // blocks between a prompt's checkpoints
  Speculation speculation;

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<PendingRequest> pending;
  std::unordered_set<uint64_t> cancelled;
  // Work other threads hand the engine thread (saving and restoring slots), run between rounds.
  std::deque<std::function<void()>> tasks;
  // What each slot remembers; guarded by mutex (slots() reads it from other threads).
  struct SlotRecord {
    SlotInfo info;
    std::vector<int32_t> tokens;  // idle: the sequence whose K/V its last request committed
    int64_t n_prompt = 0;         // of tokens, its last request's prompt
    std::string cache_salt;
  };
  std::vector<SlotRecord> slot_records;
  uint64_t next_id = 1;
  bool stopping = false;
  EngineStats stats;    // guarded by mutex
  EngineHealth health;  // guarded by mutex

  std::vector<std::unique_ptr<Lane>> lanes;  // engine thread only
  int64_t n_waiting = 0;                     // queued at the last admission, less those waiting for their slot
  int32_t scratch_lane;                      // slots for draft rows off their lane's main chain
  RoundRows round_rows;                      // this round's
  std::vector<int32_t> picked;               // [logit rows] the model's choice
  std::vector<float> logits;                 // [logit rows that want them][vocab]
  std::vector<float> committed_taps;         // [n_tokens][tap width] gathered for one lane
  // Running average of one lane's share of a round without drafts (one row a lane, from row_cost):
  // what an accepted draft token saves. The round's own time would overstate it by the drafts' rows
  // and the proposers' time (with many lanes the round happens anyway; the lane saves its share).
  double plain_round_seconds = 0.0;
  // Rounds of draft trees alone: their seconds less the proposers' own time (forward, acceptance,
  // bookkeeping) against their rows. The slope is what one more verified row costs; drafting time
  // is left out because it does not grow with the rows it yields, and rounds that draft more also
  // verify more, so it would read as a dearer row.
  RowCost row_cost;
  std::thread thread;

  Impl(const EngineOptions& options, std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer,
       SpeculationOptions speculation_options);

  // engine.cpp
  void run();
  bool take_cancellations();
  void round();
  RoundCosts round_costs() const { return {plain_round_seconds, row_cost.seconds_per_row()}; }
  // admission.cpp
  void admit();
  int64_t window_for(const Lane& lane, int64_t n_decoding) const;
  void adopt_taps(Lane& lane);
  void adopt_recurrent_state(Lane& lane);
  void publish_blocks(Lane& lane);
  void checkpoint_block(Lane& lane, int64_t index, bool is_last_of_round);
  void checkpoint_kept_state(Lane& lane);  // a retiring lane's kept state, under its last block
  void record_pool_stats();  // under mutex
  // round_rows.cpp
  void pack_rows(RoundRows& rows);
  void draft_tree(Lane& lane, int64_t max_rows);
  void shape_trees(const std::vector<Lane*>& decoding, double drafting_seconds);  // this round's proposers' time
  void add_decode_rows(Lane& lane, RoundRows& rows);
  void add_prefill_rows(Lane& lane, int64_t max_rows, RoundRows& rows);
  void draw_blocks(Lane& lane, int64_t n_positions);
  void add_picks(RoundRows& rows);
  // lane_constraint.cpp
  std::unique_ptr<LaneConstraint> make_constraint(const GenerationRequest& request);
  // acceptance.cpp
  void accept(Lane& lane, const LaneRows& placed);
  void commit_prefill(Lane& lane, const LaneRows& placed);
  void feed_taps(Lane& lane, int64_t first_position, const std::vector<int64_t>& rows);
  // slots.cpp
  int32_t take_slot(const Lane& lane);  // under mutex, while the lane's request is still pending
  bool is_waiting_for_its_slot(const GenerationRequest& request) const;  // under mutex: pinned to a busy slot
  SlotRecord& idle_slot(int32_t id);    // under mutex; fails for an unknown or busy slot
  void run_tasks();
  std::string kv_form() const;  // the storage's form and the numerics that computed it
  void leave_slot(const Lane& lane);
  // Runs `work` on the engine thread and waits for it; its exception is rethrown here.
  template <class Result>
  Result on_engine_thread(std::function<Result()> work);
  // output.cpp
  void on_token(Lane& lane, int32_t token, const float* row_logits, int8_t source = TokenProvenance::kTarget);
  void finish(Lane& lane, FinishReason reason, const std::string& error = {});
  // Ends the lane with its constraint's failure: the request's fault, not the engine's.
  void finish_with_constraint_failure(Lane& lane);
  void retire_finished();  // closes finished lanes' KV and drops them
  bool send(Lane& lane, GenerationUpdate& update);
  bool is_eos(int32_t token) const;
  // The model's choice after logit row `logit_row`, and its raw logits when the lane asked for
  // them (nullptr otherwise).
  int32_t chosen(int64_t logit_row, const float** row_logits) const;
};

}  // namespace tf
