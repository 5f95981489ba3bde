// The CPU backend's KV storage: f32 keys and values in host memory, addressed by slot.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/kv_storage.h"

namespace tf {

class HostKvStorage : public KvStorage {
 public:
  HostKvStorage(int64_t n_layers, int64_t kv_dim, int64_t n_slots);

  int64_t n_slots() const override { return n_slots_; }
  void copy_slot(int32_t from, int32_t to) override;
  float* keys(int64_t layer) { return keys_.data() + layer * layer_stride(); }      // [n_slots][kv_dim]
  float* values(int64_t layer) { return values_.data() + layer * layer_stride(); }  // [n_slots][kv_dim]

 private:
  int64_t layer_stride() const { return n_slots_ * kv_dim_; }

  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t n_slots_;
  std::vector<float> keys_;    // [n_layers][n_slots][kv_dim]
  std::vector<float> values_;  // [n_layers][n_slots][kv_dim]
};

}  // namespace tf
