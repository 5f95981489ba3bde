// The CUDA backend's KV storage: bf16 in device memory, in the layout the attention kernel reads.
#pragma once
#include <cstdint>
#include <string>

#include "backends/cuda/device_buffer.cuh"
#include "runtime/kv_storage.h"

namespace tf::cuda {

class CudaKvStorage : public KvStorage {
 public:
  // Fails with the size it needs when the GPU has too little free memory.
  CudaKvStorage(int64_t n_layers, int64_t kv_dim, int64_t n_slots);

  int64_t n_slots() const override { return n_slots_; }
  void copy_slot(int32_t from, int32_t to) override;
  std::string format() const override;
  int64_t bytes_for(int64_t n_slots) const override;
  void read_slots(int32_t first, int64_t n, uint8_t* out) const override;
  void write_slots(int32_t first, int64_t n, const uint8_t* in) override;
  uint16_t* keys(int64_t layer) { return keys_.data() + layer * layer_stride(); }      // [n_slots][kv_dim]
  uint16_t* values(int64_t layer) { return values_.data() + layer * layer_stride(); }  // [n_slots][kv_dim]

 private:
  int64_t layer_stride() const { return n_slots_ * kv_dim_; }

  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t n_slots_;
  DeviceBuffer<uint16_t> keys_;    // [n_layers][n_slots][kv_dim] bf16
  DeviceBuffer<uint16_t> values_;  // [n_layers][n_slots][kv_dim] bf16
};

}  // namespace tf::cuda
