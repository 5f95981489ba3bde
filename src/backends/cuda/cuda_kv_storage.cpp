

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

}  // namespace tf::cuda
