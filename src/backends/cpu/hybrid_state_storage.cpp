// Per-lane recurrent state and per-slot row tags of a hybrid model on the CPU.
#include "backends/cpu/hybrid_state_storage.h"

#include <algorithm>

namespace tf {

HybridStateStorage::HybridStateStorage(const ModelConfig& config, int64_t n_slots)
    : HostKvStorage(config.hybrid.n_layers_of(LayerKind::full_attention), config.kv_dim(), n_slots),
      n_linear_layers_(config.hybrid.n_layers_of(LayerKind::linear_attention)),
      state_per_layer_(config.hybrid.linear_n_value_heads * config.hybrid.linear_key_head_dim *
                       config.hybrid.linear_value_head_dim),
      conv_per_layer_((config.hybrid.conv_kernel - 1) * config.hybrid.conv_dim()),
      origins_(size_t(n_slots)) {}

void HybridStateStorage::copy_slot(int32_t from, int32_t to) {
  HostKvStorage::copy_slot(from, to);
  origins_[size_t(to)] = origins_[size_t(from)];
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
  state.position = 0;
  state.pass = 0;
  state.state.assign(size_t(n_linear_layers_ * state_per_layer_), 0.0f);
  state.conv.assign(size_t(n_linear_layers_ * conv_per_layer_), 0.0f);
  state.inputs.assign(size_t(n_linear_layers_), {});
}

}  // namespace tf
