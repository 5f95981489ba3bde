// Where the KV cache's keys and values live: owned by the model's backend, addressed by slot.
// KvCache keeps the slot arithmetic (blocks, lanes); a backend's storage keeps the numbers in its
// own memory and type, so the engine never knows which device it runs on.
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual int64_t n_slots() const = 0;
  // Copies one slot's keys and values in every layer (a verified draft row moving from scratch
  // to its lane's position); the bits move unchanged.
  virtual void copy_slot(int32_t from, int32_t to) = 0;
};

// The CPU backend's storage: f32 in host memory.
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
