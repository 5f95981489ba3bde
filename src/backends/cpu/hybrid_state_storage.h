// The CPU storage of a Qwen3.5-class hybrid: K/V of the attention layers by slot (HostKvStorage),
// and per lane the Gated DeltaNet layers' recurrent and convolution state.
//
// A forward pass never changes a lane's state. It keeps each of its rows' DeltaNet inputs (the
// pre-convolution q/k/v channels, g and beta) and tags each row's K/V slot with the row; the engine
// moves accepted rows' slots home with copy_slot, which moves the tags too. The next pass of the
// lane finds its committed positions through those tags and replays them into the state with the
// same per-token kernels first, so the state is exactly what plain decoding would have reached
// and rejected rows leave no trace.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/host_kv_storage.h"
#include "loader/model_config.h"

namespace tf {

// Which pass row wrote a slot: its pass, its lane and its index among that lane's rows of the pass.
struct SlotOrigin {
  uint64_t pass = 0;  // 0: none
  int32_t lane = -1;
  int32_t row = -1;
};

struct LaneRecurrence {
  int64_t position = 0;  // positions folded into `state` and `conv`
  uint64_t pass = 0;     // the lane's last pass, whose rows `inputs` holds (0: none)
  std::vector<float> state;  // [n_linear_layers][n_value_heads][key_head_dim][value_head_dim]
  std::vector<float> conv;   // [n_linear_layers][conv_kernel - 1][conv_dim]: pre-conv inputs, oldest first
  std::vector<std::vector<float>> inputs;  // [n_linear_layers][rows of the last pass][conv_dim + 2 * n_value_heads]
};

class HybridStateStorage : public HostKvStorage {
 public:
  HybridStateStorage(const ModelConfig& config, int64_t n_slots);

  void copy_slot(int32_t from, int32_t to) override;
  SlotOrigin& origin(int32_t slot) { return origins_[size_t(slot)]; }
  // The lane's state, made (empty, at position 0) on first use.
  LaneRecurrence& lane(int32_t lane);
  // Clears a lane's state back to position 0 (a lane id reused by a new sequence).
  void reset_lane(int32_t lane);

  // A lane's state and conv history as bytes (the prefix cache's checkpoints, saved slots): f32,
  // every layer's state, then every layer's conv history.
  static int64_t lane_bytes(const ModelConfig& config);
  static std::string lane_format(const ModelConfig& config);
  void read_lane(int32_t lane, uint8_t* out);
  // Sets the lane's state to `in` at `position`, with no pass to replay after it.
  void write_lane(int32_t lane, int64_t position, const uint8_t* in);

  int64_t state_floats_per_layer() const { return state_per_layer_; }
  int64_t conv_floats_per_layer() const { return conv_per_layer_; }

 private:
  int64_t n_linear_layers_;
  int64_t state_per_layer_;
  int64_t conv_per_layer_;
  std::vector<SlotOrigin> origins_;  // [n_slots]
  std::vector<LaneRecurrence> lanes_;
};

}  // namespace tf
