// The CPU storage of a Qwen3.5-class hybrid: K/V of the attention layers by slot (HostKvStorage),
// and per lane the Gated DeltaNet layers' recurrent and convolution state.
//
// hybrid_lanes.h says how accepted rows reach a lane's state (the tags, the replay).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/host_kv_storage.h"
#include "loader/model_config.h"
#include "models/hybrid_lanes.h"

namespace tf {

struct LaneRecurrence {
  std::vector<float> state;  // [n_linear_layers][n_value_heads][key_head_dim][value_head_dim]
  std::vector<float> conv;   // [n_linear_layers][conv_kernel - 1][conv_dim]: pre-conv inputs, oldest first
  // [n_linear_layers][rows of the lane's last pass (its LaneProgress::pass)][conv_dim + 2 * n_value_heads]
  std::vector<std::vector<float>> inputs;
};

class HybridStateStorage : public HostKvStorage {
 public:
  HybridStateStorage(const ModelConfig& config, int64_t n_slots);

  void copy_slot(int32_t from, int32_t to) override;
  HybridLaneTags& tags() { return tags_; }
  // The lane's state, made (empty, at position 0) on first use.
  LaneRecurrence& lane(int32_t lane);
  // Clears a lane's state (not its progress) back to zero (a lane id reused by a new sequence).
  void reset_lane(int32_t lane);

  // A lane's state and conv history as bytes, laid out as hybrid_lane_format says.
  void read_lane(int32_t lane, uint8_t* out);
  // A copy of what read_lane gives now, kept aside in place of the lane's last one.
  void keep_lane(int32_t lane);
  // The copy keep_lane kept last.
  void read_kept_lane(int32_t lane, uint8_t* out) const;
  // Sets the lane's state to `in` at `position`, with no pass to replay after it.
  void write_lane(int32_t lane, int64_t position, const uint8_t* in);

  int64_t state_floats_per_layer() const { return state_per_layer_; }
  int64_t conv_floats_per_layer() const { return conv_per_layer_; }

 private:
  int64_t n_linear_layers_;
  int64_t state_per_layer_;
  int64_t conv_per_layer_;
  HybridLaneTags tags_;
  std::vector<LaneRecurrence> lanes_;
  std::vector<std::vector<uint8_t>> kept_;  // per lane: keep_lane's copy
};

}  // namespace tf
