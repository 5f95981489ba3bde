// Per-lane recurrent state and per-slot row tags of a hybrid model on the CPU.
#include "backends/cpu/hybrid_state_storage.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tf {

HybridStateStorage::HybridStateStorage(const ModelConfig& config, int64_t n_slots)
    : HostKvStorage(config.hybrid.n_layers_of(LayerKind::full_attention), config.n_kv_heads, config.head_dim, n_slots),
      n_linear_layers_(config.hybrid.n_layers_of(LayerKind::linear_attention)),
      state_per_layer_(config.hybrid.linear_n_value_heads * config.hybrid.linear_key_head_dim *
                       config.hybrid.linear_value_head_dim),
      conv_per_layer_((config.hybrid.conv_kernel - 1) * config.hybrid.conv_dim()),
      tags_(n_slots) {}

void HybridStateStorage::copy_slot(int32_t from, int32_t to) {
  HostKvStorage::copy_slot(from, to);
  tags_.copy_slot(from, to);
}

LaneRecurrence& HybridStateStorage::lane(int32_t lane) {
  if (lane >= int32_t(lanes_.size())) {
    const size_t first_new = lanes_.size();
    lanes_.resize(size_t(lane) + 1);
    for (size_t i = first_new; i < lanes_.size(); ++i) reset_lane(int32_t(i));
  }
  return lanes_[size_t(lane)];
}

void HybridStateStorage::reset_lane(int32_t lane) {
  LaneRecurrence& state = lanes_[size_t(lane)];
  state.state.assign(size_t(n_linear_layers_ * state_per_layer_), 0.0f);
  state.conv.assign(size_t(n_linear_layers_ * conv_per_layer_), 0.0f);
  state.inputs.assign(size_t(n_linear_layers_), {});
}

void HybridStateStorage::read_lane(int32_t lane_id, uint8_t* out) {
  const LaneRecurrence& state = lane(lane_id);
  std::memcpy(out, state.state.data(), state.state.size() * sizeof(float));
  std::memcpy(out + state.state.size() * sizeof(float), state.conv.data(), state.conv.size() * sizeof(float));
}

void HybridStateStorage::keep_lane(int32_t lane_id) {
  if (lane_id >= int32_t(kept_.size())) kept_.resize(size_t(lane_id) + 1);
  const LaneRecurrence& state = lane(lane_id);
  kept_[size_t(lane_id)].resize((state.state.size() + state.conv.size()) * sizeof(float));
  read_lane(lane_id, kept_[size_t(lane_id)].data());
}

void HybridStateStorage::read_kept_lane(int32_t lane_id, uint8_t* out) const {
  if (lane_id >= int32_t(kept_.size()) || kept_[size_t(lane_id)].empty())
    fail_internal("lane " + std::to_string(lane_id) + " has kept no recurrent state");
  std::memcpy(out, kept_[size_t(lane_id)].data(), kept_[size_t(lane_id)].size());
}

void HybridStateStorage::write_lane(int32_t lane_id, int64_t position, const uint8_t* in) {
  lane(lane_id);
  reset_lane(lane_id);
  LaneRecurrence& state = lanes_[size_t(lane_id)];
  std::memcpy(state.state.data(), in, state.state.size() * sizeof(float));
  std::memcpy(state.conv.data(), in + state.state.size() * sizeof(float), state.conv.size() * sizeof(float));
  tags_.lane(lane_id) = {position, 0};
}

}  // namespace tf
