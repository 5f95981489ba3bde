// The engine thread: owns the model, the KV cache and every lane, and runs rounds.
// Everything else talks to it through submit()/cancel() (a queue) and reads stats().
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/request.h"
#include "speculation/proposer.h"
#include "speculation/speculation.h"

namespace tf {

class Model;
class Tokenizer;
class DFlashDrafter;
class MtpHead;

// Which window a lane's draft tree gets (--lanes, TF_LANES): the lone driver's wide, copy-heavy tree
// for a lone greedy stream, or the shared lanes' window.
enum class LanePolicy { automatic, always_lanes, always_lone };

// How many of those rows a round verifies (--windows, TF_WINDOWS): measured, the rows whose expected
// accepted tokens per second pay for them (the fitted round cost against each proposer's acceptance
// by depth), at most the lane policy's window; or fixed, the window itself, doubled by full acceptance.
enum class WindowPolicy { measured, fixed };

struct EngineOptions {
  int32_t n_parallel = 4;          // most lanes live at once
  int64_t n_ctx = 4096;            // most positions (prompt + completion) of one lane
  // Positions the KV pool holds for all lanes together (0: n_parallel * n_ctx). Lanes draw
  // blocks as they grow; a lane is admitted only when its whole budget can be promised.
  int64_t kv_pool_tokens = 0;
  double kv_pool_fraction = 0.0;   // or this fraction of the GPU's free memory (0: by tokens)
  bool prompt_cache = true;        // the automatic prefix cache (requests may still opt out)
  // A recurrent model's (a hybrid's) state checkpoints, which let its lanes resume a cached prefix:
  // their total bytes (-1: as many as the KV pool's) and how often a prompt keeps one, in blocks
  // (0: as often as costs no more memory than the K/V of those blocks). A prompt's last full block
  // and a reply's last full block always keep one.
  int64_t recurrent_cache_bytes = -1;
  int64_t recurrent_checkpoint_blocks = 0;
  std::string model_id;            // names the model in prefix-cache keys and saved slots
  // The backend's arithmetic (the CPU kernels' instruction path): saved K/V comes back only into
  // an engine of the same, since another path computes other bits.
  std::string numerics;
  int32_t max_queue = 64;          // most requests waiting for a lane
  int64_t prefill_chunk = 256;     // most prompt rows of one lane per round
  int64_t max_rows_per_round = 512;
  int64_t lane_window = 16;        // rows (root + drafts) of one lane per round on lanes, to start with
  int64_t lone_window = 64;        // the same for the lone driver; the most a lane on lanes can earn
  int64_t most_lone_window = 256;  // the most the lone driver earns, doubling after each round whose
                                   // whole window was accepted (a long copy)
  LanePolicy lane_policy = LanePolicy::automatic;
  // Fixed by default: measured shaping was not faster on CPU renames (bench/receipts/cpu-round-shaping.md)
  // and is unmeasured on a GPU.
  WindowPolicy window_policy = WindowPolicy::fixed;
  // Tests and benchmarks: measured windows shaped as if a round cost this, not what was measured
  // (unknown, all zero: the measured fit).
  RoundCostModel assumed_round_cost;
  SpeculationSettings speculation;  // which proposer shapes, and whether gated ones must pay
};

constexpr int kMaxTrackedDepth = 64;

// Counters for /metrics; monotonic totals unless named otherwise.
struct EngineStats {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t rounds = 0;
  int64_t rows = 0;  // summed over rounds: rows / rounds = rows per round
  int64_t rounds_with_several_lanes = 0;  // rounds whose forward carried rows of two or more lanes
  int64_t most_lanes_in_a_round = 0;      // the most lanes one forward has carried
  int64_t sibling_accepts = 0;            // accepted draft rows off the main chain (K/V moved from scratch)
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  // Acceptance per depth: rounds whose tree reached depth d+1, and rounds that accepted it.
  int64_t drafted_at_depth[kMaxTrackedDepth] = {};
  int64_t accepted_at_depth[kMaxTrackedDepth] = {};
  // Drafted and accepted tokens by the proposer that put them in the tree (ProposerKind order).
  int64_t drafted_by_proposer[kProposerKinds] = {};
  int64_t accepted_by_proposer[kProposerKinds] = {};
  // The prefix cache: prompt tokens served from it, and prompt tokens computed.
  int64_t prompt_cache_hit_tokens = 0;
  int64_t prompt_cache_miss_tokens = 0;
  // The KV pool in blocks of kv_block_size positions, now (evictions: since start).
  int64_t kv_block_size = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_in_use = 0;
  int64_t kv_blocks_cached = 0;
  int64_t kv_blocks_free = 0;
  int64_t kv_evictions = 0;
  // A recurrent model's state checkpoints (now; evictions since start).
  int64_t recurrent_checkpoints = 0;
  int64_t recurrent_checkpoint_bytes = 0;
  int64_t recurrent_checkpoint_evictions = 0;
  int64_t queue_depth = 0;  // now
  int64_t lanes_live = 0;   // now
};

// One of the n_parallel places a request runs in. After its request a slot remembers the tokens
// whose K/V it committed (prompt and reply), so they can be saved; the prefix cache keeps the
// blocks themselves, for any request that starts with those tokens.
struct SlotInfo {
  int32_t id = 0;
  bool is_processing = false;
  uint64_t request_id = 0;    // the request running or last run (0: none yet)
  int64_t n_prompt = 0;       // its prompt tokens
  int64_t n_prompt_cached = 0;  // ...of which the prefix cache served
  int64_t n_tokens = 0;       // idle: the remembered sequence (save writes it); processing: committed so far
  ReplyTimings timings;       // idle: the last finished request's; processing: the running one's so far
  int64_t n_waiting = 0;      // queued requests pinned to this slot (GenerationRequest::slot)
};

// A recurrent model's state at the end of block n_blocks - 1 of a slot's tokens.
struct SlotRecurrentState {
  int64_t n_blocks = 0;
  std::vector<uint8_t> bytes;  // [Model::recurrent_state_bytes()]
};

// A slot's sequence with the K/V of its longest cached prefix of full blocks, in the storage's own
// form: what a saved-slot file holds (engine/slot_file.h).
struct SlotSnapshot {
  std::vector<int32_t> tokens;
  int64_t n_prompt = 0;        // tokens[0, n_prompt) were its last request's prompt, the rest its reply
  std::string cache_salt;
  std::string kv_format;       // KvStorage::format() of the storage it came from, and the numerics
  int64_t block_size = 0;
  int64_t n_blocks = 0;        // blocks 0..n_blocks-1 of tokens have K/V below
  std::vector<uint8_t> kv;     // [n_blocks][KvStorage::bytes_for(block_size)]
  int64_t tap_width = 0;       // 0: no drafter taps saved
  std::vector<float> taps;     // [n_blocks * block_size][tap_width]
  // A recurrent model's states (Model::recurrent_state_format), n_blocks ascending: at the last
  // checkpoint inside the prompt before its last token (the same prompt again resumes there) and at
  // block n_blocks - 1 (the next turn resumes there). Blocks past the last state are of no use to
  // such a model, so none are saved.
  std::string recurrent_format;
  std::vector<SlotRecurrentState> recurrent;
};

enum class SubmitStatus { accepted, queue_full, too_long, invalid };

struct SubmitResult {
  SubmitStatus status;
  uint64_t request_id = 0;
  std::string message;  // for rejected requests, a sentence for the client
  // For rejected requests, the request field at fault: "prompt" (the prompt's tokens or length),
  // "max_tokens", "replay.token_ids", "replay.accept", "id_slot"; empty when no field is (a full queue).
  std::string param = {};
};

// Whether the last round ran: after a round throws, every reply it carried ends with an error and
// health turns failed; the next round that succeeds turns it ok again.
struct EngineHealth {
  bool is_ok = true;
  std::string message;  // when failed: what went wrong, a sentence for the operator
};

class Engine {
 public:
  // With a drafter (the block drafter or the model's MTP head, one at most), the model keeps taps of
  // the layers it reads, and drafted requests get it among their proposers (speculation/speculation.h
  // makes each lane's set).
  Engine(const EngineOptions& options, std::shared_ptr<Model> model,
         std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<DFlashDrafter> drafter = nullptr,
         std::shared_ptr<MtpHead> mtp = nullptr);
  ~Engine();  // stops the thread; pending requests finish with `cancelled`
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (prompt + max_tokens within n_ctx, tokens in vocab, the slot) and queues the request.
  // A request pinned to a slot (GenerationRequest::slot) runs there, after whatever runs there now;
  // requests queued behind it may start in other slots meanwhile.
  SubmitResult submit(GenerationRequest request, UpdateSink sink);
  struct Submission {
    GenerationRequest request;
    UpdateSink sink;
  };
  // The choices of one request: all queued (one accepted result each, in order) or none (one
  // result: the first refusal, or a full queue; `n` when the group could never fit).
  std::vector<SubmitResult> submit_together(std::vector<Submission> group);
  void cancel(uint64_t request_id);
  EngineStats stats() const;
  EngineHealth health() const;

  // Saved slots. These run on the engine thread between rounds and wait for it; each throws
  // tf::Error for an unknown slot or one that is processing a request.
  std::vector<SlotInfo> slots() const;
  SlotSnapshot save_slot(int32_t id);
  // Puts the snapshot's blocks into the prefix cache (as far as the pool has room) and makes it the
  // slot's sequence; K/V of another storage form is not used (those positions are prefilled
  // again when asked for). Returns the positions whose K/V were restored.
  int64_t restore_slot(int32_t id, SlotSnapshot snapshot);
  // Forgets the slot's sequence and drops its blocks from the prefix cache; returns its tokens.
  int64_t erase_slot(int32_t id);
  const EngineOptions& options() const { return options_; }

 private:
  // The request's own checks (accepted: it may be queued).
  SubmitResult check(const GenerationRequest& request) const;
  struct Impl;
  EngineOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf
