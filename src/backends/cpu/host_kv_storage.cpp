#include "backends/cpu/host_kv_storage.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/attention_bf16_dot.h"

namespace tf {

HostKvStorage::HostKvStorage(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, int64_t n_slots)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      kv_dim_(n_kv_heads * head_dim),
      n_slots_(n_slots),
      is_bf16_(cpu::attention_takes_bf16_dot(head_dim)),
      element_bytes_(is_bf16_ ? 2 : 4),
      keys_(size_t(n_layers * layer_bytes()), 0),
      values_(size_t(n_layers * layer_bytes()), 0) {}

void HostKvStorage::gather(const std::vector<uint8_t>& cache, int64_t layer, int64_t slot, void* row) const {
  const uint8_t* base = cache.data() + layer * layer_bytes();
  const cpu::KvLayout l = layout();
  const size_t head_bytes = size_t(head_dim_ * element_bytes_);
  for (int64_t head = 0; head < n_kv_heads_; ++head)
    std::memcpy(static_cast<uint8_t*>(row) + size_t(head) * head_bytes,
                base + (slot * l.slot_stride + head * l.head_stride) * element_bytes_, head_bytes);
}

void HostKvStorage::scatter(std::vector<uint8_t>& cache, int64_t layer, int64_t slot, const void* row) {
  uint8_t* base = cache.data() + layer * layer_bytes();
  const cpu::KvLayout l = layout();
  const size_t head_bytes = size_t(head_dim_ * element_bytes_);
  for (int64_t head = 0; head < n_kv_heads_; ++head)
    std::memcpy(base + (slot * l.slot_stride + head * l.head_stride) * element_bytes_,
                static_cast<const uint8_t*>(row) + size_t(head) * head_bytes, head_bytes);
}

cpu::KvSlice HostKvStorage::slice(int64_t layer) {
  return {keys_.data() + layer * layer_bytes(), values_.data() + layer * layer_bytes(), layout(), is_bf16_};
}

void HostKvStorage::store(int64_t layer, int64_t slot, const float* k, const float* v) {
  slice(layer).store(slot, k, v, n_kv_heads_, head_dim_);
}

void HostKvStorage::copy_slot(int32_t from, int32_t to) {
  std::vector<uint8_t> row(size_t(kv_dim_ * element_bytes_));
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (std::vector<uint8_t>* cache : {&keys_, &values_}) {
      gather(*cache, layer, from, row.data());
      scatter(*cache, layer, to, row.data());
    }
}

std::string HostKvStorage::format() const {
  return std::string(is_bf16_ ? "bf16 " : "f32 ") + std::to_string(n_layers_) + "x" + std::to_string(kv_dim_);
}

int64_t HostKvStorage::bytes_for(int64_t n_slots) const { return 2 * n_layers_ * n_slots * kv_dim_ * element_bytes_; }

// Layer by layer: the keys of the n slots, then their values, each slot's kv_dim elements in a row.
void HostKvStorage::read_slots(int32_t first, int64_t n, uint8_t* out) const {
  const size_t row_bytes = size_t(kv_dim_ * element_bytes_);
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (const std::vector<uint8_t>* cache : {&keys_, &values_})
      for (int64_t i = 0; i < n; ++i, out += row_bytes) gather(*cache, layer, first + i, out);
}

void HostKvStorage::write_slots(int32_t first, int64_t n, const uint8_t* in) {
  const size_t row_bytes = size_t(kv_dim_ * element_bytes_);
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (std::vector<uint8_t>* cache : {&keys_, &values_})
      for (int64_t i = 0; i < n; ++i, in += row_bytes) scatter(*cache, layer, first + i, in);
}

}  // namespace tf
