// What every backend of a Qwen3.5-class hybrid shares about its lanes' recurrent state: which pass
// row wrote each K/V slot, how far each lane's state has folded, how one forward's rows group into
// lane passes (the committed rows each lane replays first, each row's convolution window), and the
// state's byte layout for checkpoints and saved slots.
//
// A forward pass never changes a lane's state. It keeps each of its rows' DeltaNet inputs (the
// pre-convolution q/k/v channels and what g and beta come from) and tags each row's K/V slot with
// the row; the engine moves accepted rows' slots home with copy_slot, which moves the tags too. The
// next pass of the lane finds its committed positions through those tags and replays them into the
// state with the same per-token kernels first, so the state is exactly what plain decoding would
// have reached and rejected rows leave no trace.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"

namespace tf {

// Which pass row wrote a slot: its pass, its lane and its index among that lane's rows of the pass.
struct SlotOrigin {
  uint64_t pass = 0;  // 0: none
  int32_t lane = -1;
  int32_t row = -1;
};

// How far a lane's state has folded, and the pass whose row inputs the backend keeps for it.
struct LaneProgress {
  int64_t position = 0;  // positions folded into the state and conv history
  uint64_t pass = 0;     // the lane's last pass (0: none)
};

// Slot tags and lane progress, kept beside a backend's K/V storage (copy_slot moves a slot's tag).
class HybridLaneTags {
 public:
  explicit HybridLaneTags(int64_t n_slots) : origins_(size_t(n_slots)) {}
  SlotOrigin& origin(int32_t slot) { return origins_[size_t(slot)]; }
  void copy_slot(int32_t from, int32_t to) { origins_[size_t(to)] = origins_[size_t(from)]; }
  // Made at position 0 on first use.
  LaneProgress& lane(int32_t lane);
  int64_t n_lanes() const { return int64_t(lanes_.size()); }

 private:
  std::vector<SlotOrigin> origins_;  // [n_slots]
  std::vector<LaneProgress> lanes_;
};

// One lane's rows in a forward and the committed positions its state must replay first.
struct HybridLanePass {
  int32_t lane = -1;
  int32_t root_row = -1;        // its row whose parent is committed
  std::vector<int32_t> rows;    // batch rows, in batch order
  std::vector<int32_t> replay;  // rows of the lane's previous pass to fold in, in position order
};

// The grouping of one forward's rows. Each lane has one root row (its first), the others descend
// from it inside the batch (chains, trees).
struct HybridPassPlan {
  std::vector<HybridLanePass> lanes;
  std::vector<int32_t> pass_of_row;   // [n_rows] index into lanes
  std::vector<int32_t> last_child;    // [n_rows] the last row whose parent it is, or -1
  // [n_rows][conv_history], entry back - 1 for back = 1 .. conv_history: the row `back` steps up its
  // ancestry (>= 0), or -1 - j for entry j of its lane's conv history after the replay (oldest 0).
  std::vector<int32_t> conv_sources;
  uint64_t pass_id = 0;
};

// The rows of the lane's last pass that hold its committed positions from its state's to `to`, in
// position order. Fails (internal) when a position holds no inputs of that pass.
std::vector<int32_t> committed_rows(const KvCache& kv, HybridLaneTags& tags, int32_t lane, int64_t to);

// Plans a forward as pass `pass_id`: groups the rows by lane, resets a lane whose root is at
// position 0 (reset_lane is called with its id; its progress goes back to 0 here), finds each
// lane's replay, tags every row's slot with the pass and moves each lane's progress to the pass.
// Checks that each lane has one root and that no state has passed its root row.
void plan_hybrid_pass(const Batch& batch, const KvCache& kv, HybridLaneTags& tags, int64_t conv_history,
                      uint64_t pass_id, const std::function<void(int32_t)>& reset_lane, HybridPassPlan* plan);
// After the forward: each lane's state has folded every position before its root row.
void finish_hybrid_pass(const Batch& batch, const HybridPassPlan& plan, HybridLaneTags& tags);

// A lane's state as bytes (the prefix cache's checkpoints, saved slots), in every backend: f32, every
// DeltaNet layer's state [value heads][key dim][value dim], then every layer's conv history
// [conv_kernel - 1][conv_dim], oldest first.
int64_t hybrid_state_floats(const ModelConfig& config);  // the state part
int64_t hybrid_conv_floats(const ModelConfig& config);   // the conv history part
int64_t hybrid_lane_bytes(const ModelConfig& config);
std::string hybrid_lane_format(const ModelConfig& config);

}  // namespace tf
