

#include "backends/cpu/host_kv_storage.h"

#include <algorithm>

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

}  // namespace tf
