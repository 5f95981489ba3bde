#include "backends/cpu/host_kv_storage.h"

#include <algorithm>
#include <cstring>

namespace tf {

HostKvStorage::HostKvStorage(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, int64_t n_slots)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      kv_dim_(n_kv_heads * head_dim),
      n_slots_(n_slots),
      keys_(size_t(n_layers * n_slots * kv_dim_), 0.0f),
      values_(size_t(n_layers * n_slots * kv_dim_), 0.0f) {}

void HostKvStorage::gather(const std::vector<float>& cache, int64_t layer, int64_t slot, void* row) const {
  const float* base = cache.data() + layer * layer_stride();
  const cpu::KvLayout l = layout();
  const size_t head_bytes = size_t(head_dim_) * sizeof(float);
  for (int64_t head = 0; head < n_kv_heads_; ++head)
    std::memcpy(static_cast<uint8_t*>(row) + size_t(head) * head_bytes, base + slot * l.slot_stride + head * l.head_stride,
                head_bytes);
}

void HostKvStorage::scatter(std::vector<float>& cache, int64_t layer, int64_t slot, const void* row) {
  float* base = cache.data() + layer * layer_stride();
  const cpu::KvLayout l = layout();
  const size_t head_bytes = size_t(head_dim_) * sizeof(float);
  for (int64_t head = 0; head < n_kv_heads_; ++head)
    std::memcpy(base + slot * l.slot_stride + head * l.head_stride,
                static_cast<const uint8_t*>(row) + size_t(head) * head_bytes, head_bytes);
}

void HostKvStorage::store(int64_t layer, int64_t slot, const float* k, const float* v) {
  scatter(keys_, layer, slot, k);
  scatter(values_, layer, slot, v);
}

void HostKvStorage::copy_slot(int32_t from, int32_t to) {
  const cpu::KvLayout l = layout();
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (std::vector<float>* cache : {&keys_, &values_})
      for (int64_t head = 0; head < n_kv_heads_; ++head) {
        float* base = cache->data() + layer * layer_stride() + head * l.head_stride;
        std::copy_n(base + from * l.slot_stride, head_dim_, base + to * l.slot_stride);
      }
}

std::string HostKvStorage::format() const {
  return "f32 " + std::to_string(n_layers_) + "x" + std::to_string(kv_dim_);
}

int64_t HostKvStorage::bytes_for(int64_t n_slots) const {
  return 2 * n_layers_ * n_slots * kv_dim_ * int64_t(sizeof(float));
}

// Layer by layer: the keys of the n slots, then their values, each slot's kv_dim floats in a row.
void HostKvStorage::read_slots(int32_t first, int64_t n, uint8_t* out) const {
  const size_t row_bytes = size_t(kv_dim_) * sizeof(float);
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (const std::vector<float>* cache : {&keys_, &values_})
      for (int64_t i = 0; i < n; ++i, out += row_bytes) gather(*cache, layer, first + i, out);
}

void HostKvStorage::write_slots(int32_t first, int64_t n, const uint8_t* in) {
  const size_t row_bytes = size_t(kv_dim_) * sizeof(float);
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (std::vector<float>* cache : {&keys_, &values_})
      for (int64_t i = 0; i < n; ++i, in += row_bytes) scatter(*cache, layer, first + i, in);
}

}  // namespace tf
