// The CPU backend's KV storage: keys and values in host memory, addressed by slot: bf16 where the
// machine's attention rounds them to bf16 as it reads them (the same bits, half the bytes), else f32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "runtime/kv_storage.h"

namespace tf {

class HostKvStorage : public KvStorage {
 public:
  // The element type follows the machine's attention at construction (cpu::attention_takes_bf16_dot).
  HostKvStorage(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, int64_t n_slots);

  int64_t n_slots() const override { return n_slots_; }
  void copy_slot(int32_t from, int32_t to) override;
  std::string format() const override;
  int64_t bytes_for(int64_t n_slots) const override;
  // Slots serialize as [slot][kv_dim] per layer, whatever the layout in memory.
  void read_slots(int32_t first, int64_t n, uint8_t* out) const override;
  void write_slots(int32_t first, int64_t n, const uint8_t* in) override;
  // A layer's keys and values, each [n_kv_heads][n_slots][head_dim] (head-major).
  cpu::KvSlice slice(int64_t layer);
  // Writes one position's keys and values, each [n_kv_heads][head_dim], to slot of layer.
  void store(int64_t layer, int64_t slot, const float* k, const float* v);

 private:
  cpu::KvLayout layout() const { return cpu::KvLayout::head_major(n_slots_, head_dim_); }
  int64_t layer_bytes() const { return n_slots_ * kv_dim_ * element_bytes_; }
  // Copies the kv_dim elements of slot between the cache and a flat row (any alignment), one
  // direction or the other.
  void gather(const std::vector<uint8_t>& cache, int64_t layer, int64_t slot, void* row) const;
  void scatter(std::vector<uint8_t>& cache, int64_t layer, int64_t slot, const void* row);

  int64_t n_layers_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t kv_dim_;
  int64_t n_slots_;
  bool is_bf16_;
  int64_t element_bytes_;
  std::vector<uint8_t> keys_;    // [n_layers][n_kv_heads][n_slots][head_dim] elements
  std::vector<uint8_t> values_;  // [n_layers][n_kv_heads][n_slots][head_dim] elements
};

}  // namespace tf
