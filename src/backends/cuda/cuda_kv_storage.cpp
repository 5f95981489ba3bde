

#include "backends/cuda/cuda_kv_storage.h"

#include <string>

namespace tf::cuda {
namespace {

DeviceBuffer<uint16_t> allocate_zeroed(size_t n) {
  DeviceBuffer<uint16_t> buffer(n);
  buffer.fill_bytes(0);
  return buffer;
}

size_t checked_cache_elements(int64_t n_layers, int64_t kv_dim, int64_t n_slots) {
  const size_t n = size_t(n_layers * n_slots * kv_dim);
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t needed = 2 * n * sizeof(uint16_t);  // keys and values
  if (needed > free_bytes)
    fail("the KV cache needs " + std::to_string(needed >> 20) + " MiB of GPU memory for " + std::to_string(n_slots) +
         " positions, but only " + std::to_string(free_bytes >> 20) + " MiB are free; lower --parallel or --ctx");
  return n;
}

}  // namespace

CudaKvStorage::CudaKvStorage(int64_t n_layers, int64_t kv_dim, int64_t n_slots)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      n_slots_(n_slots),
      keys_(allocate_zeroed(checked_cache_elements(n_layers, kv_dim, n_slots))),
      values_(allocate_zeroed(size_t(n_layers * n_slots * kv_dim))) {}

void CudaKvStorage::copy_slot(int32_t from, int32_t to) {
  // One strided copy per tensor moves the slot in every layer: rows of kv_dim, one per layer.
  const size_t pitch = size_t(layer_stride()) * sizeof(uint16_t), width = size_t(kv_dim_) * sizeof(uint16_t);
  TF_CUDA_CHECK(cudaMemcpy2DAsync(keys_.data() + int64_t(to) * kv_dim_, pitch, keys_.data() + int64_t(from) * kv_dim_,
                                  pitch, width, size_t(n_layers_), cudaMemcpyDeviceToDevice));
  TF_CUDA_CHECK(cudaMemcpy2DAsync(values_.data() + int64_t(to) * kv_dim_, pitch,
                                  values_.data() + int64_t(from) * kv_dim_, pitch, width, size_t(n_layers_),
                                  cudaMemcpyDeviceToDevice));
}

std::string CudaKvStorage::format() const {
  return "bf16 " + std::to_string(n_layers_) + "x" + std::to_string(kv_dim_);
}

int64_t CudaKvStorage::bytes_for(int64_t n_slots) const {
  return 2 * n_layers_ * n_slots * kv_dim_ * int64_t(sizeof(uint16_t));
}

// Layer by layer: the keys of the n slots, then their values (the host storage's order).
void CudaKvStorage::read_slots(int32_t first, int64_t n, uint8_t* out) const {
  TF_CUDA_CHECK(cudaDeviceSynchronize());  // pending rounds may still write these slots
  const size_t span = size_t(n * kv_dim_) * sizeof(uint16_t);
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    const int64_t offset = layer * layer_stride() + int64_t(first) * kv_dim_;
    TF_CUDA_CHECK(cudaMemcpy(out, keys_.data() + offset, span, cudaMemcpyDeviceToHost));
    TF_CUDA_CHECK(cudaMemcpy(out + span, values_.data() + offset, span, cudaMemcpyDeviceToHost));
    out += 2 * span;
  }
}

void CudaKvStorage::write_slots(int32_t first, int64_t n, const uint8_t* in) {
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t span = size_t(n * kv_dim_) * sizeof(uint16_t);
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    const int64_t offset = layer * layer_stride() + int64_t(first) * kv_dim_;
    TF_CUDA_CHECK(cudaMemcpy(keys_.data() + offset, in, span, cudaMemcpyHostToDevice));
    TF_CUDA_CHECK(cudaMemcpy(values_.data() + offset, in + span, span, cudaMemcpyHostToDevice));
    in += 2 * span;
  }
}

}  // namespace tf::cuda
