// The CPU backend's KV storage: f32 keys and values in host memory, addressed by slot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kv_storage.h"

namespace tf {

class HostKvStorage : public KvStorage {
 public:
  HostKvStorage(int64_t n_layers, int64_t kv_dim, int64_t n_slots);

  int64_t n_slots() const override { return n_slots_; }
  void copy_slot(int32_t from, int32_t to) override;
  std::string format() const override;
  int64_t bytes_for(int64_t n_slots) const override;
  void read_slots(int32_t first, int64_t n, uint8_t* out) const override;
  void write_slots(int32_t first, int64_t n, const uint8_t* in) override;
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
