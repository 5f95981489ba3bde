

#include "backends/cpu/host_kv_storage.h"

#include <algorithm>
#include <cstring>

namespace tf {

HostKvStorage::HostKvStorage(int64_t n_layers, int64_t kv_dim, int64_t n_slots)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      n_slots_(n_slots),
      keys_(size_t(n_layers * n_slots * kv_dim), 0.0f),
      values_(size_t(n_layers * n_slots * kv_dim), 0.0f) {}

void HostKvStorage::copy_slot(int32_t from, int32_t to) {
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    std::copy_n(keys(layer) + from * kv_dim_, kv_dim_, keys(layer) + to * kv_dim_);
    std::copy_n(values(layer) + from * kv_dim_, kv_dim_, values(layer) + to * kv_dim_);
  }
}

std::string HostKvStorage::format() const {
  return "f32 " + std::to_string(n_layers_) + "x" + std::to_string(kv_dim_);
}

int64_t HostKvStorage::bytes_for(int64_t n_slots) const {
  return 2 * n_layers_ * n_slots * kv_dim_ * int64_t(sizeof(float));
}

// Layer by layer: the keys of the n slots, then their values.
void HostKvStorage::read_slots(int32_t first, int64_t n, uint8_t* out) const {
  const size_t span = size_t(n * kv_dim_) * sizeof(float);
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    const int64_t offset = layer * layer_stride() + int64_t(first) * kv_dim_;
    std::memcpy(out, keys_.data() + offset, span);
    std::memcpy(out + span, values_.data() + offset, span);
    out += 2 * span;
  }
}

void HostKvStorage::write_slots(int32_t first, int64_t n, const uint8_t* in) {
  const size_t span = size_t(n * kv_dim_) * sizeof(float);
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    const int64_t offset = layer * layer_stride() + int64_t(first) * kv_dim_;
    std::memcpy(keys_.data() + offset, in, span);
    std::memcpy(values_.data() + offset, in + span, span);
    in += 2 * span;
  }
}

}  // namespace tf
