// Owned, typed allocations: device memory (plain cudaMalloc: never managed memory), and pinned
// host memory for staging copies the GPU can run asynchronously.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {

struct DeviceMemory {
  static void* allocate(size_t n_bytes) {
    void* data = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&data, n_bytes));
    return data;
  }
  static void release(void* data) { cudaFree(data); }
};

struct PinnedHostMemory {
  static void* allocate(size_t n_bytes) {
    void* data = nullptr;
    TF_CUDA_CHECK(cudaMallocHost(&data, n_bytes));
    return data;
  }
  static void release(void* data) { cudaFreeHost(data); }
};

// n elements of T from one of CUDA's allocators; movable, not copyable.
template <class T, class Memory>
class OwnedAllocation {
 public:
  OwnedAllocation() = default;
  explicit OwnedAllocation(size_t n) : n_(n) {
    if (n > 0) data_ = static_cast<T*>(Memory::allocate(n * sizeof(T)));
  }
  ~OwnedAllocation() {
    if (data_) Memory::release(data_);  // no throw from a destructor; a failed free leaks nothing we can fix
  }
  OwnedAllocation(const OwnedAllocation&) = delete;
  OwnedAllocation& operator=(const OwnedAllocation&) = delete;
  OwnedAllocation(OwnedAllocation&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), n_(std::exchange(other.n_, 0)) {}
  OwnedAllocation& operator=(OwnedAllocation&& other) noexcept {
    if (this != &other) {
      if (data_) Memory::release(data_);
      data_ = std::exchange(other.data_, nullptr);
      n_ = std::exchange(other.n_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  size_t n_bytes() const { return n_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

template <class T>
using PinnedHostBuffer = OwnedAllocation<T, PinnedHostMemory>;

template <class T>
class DeviceBuffer : public OwnedAllocation<T, DeviceMemory> {
 public:
  using OwnedAllocation<T, DeviceMemory>::OwnedAllocation;
  using OwnedAllocation<T, DeviceMemory>::data;
  using OwnedAllocation<T, DeviceMemory>::size;
  using OwnedAllocation<T, DeviceMemory>::n_bytes;

  void copy_from_host(const T* host, size_t n) {
    TF_CUDA_REQUIRE(n <= size(), "copy_from_host larger than the buffer");
    TF_CUDA_CHECK(cudaMemcpy(data(), host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void copy_from_host(const std::vector<T>& host) { copy_from_host(host.data(), host.size()); }
  std::vector<T> to_host() const {
    std::vector<T> host(size());
    if (size() > 0) TF_CUDA_CHECK(cudaMemcpy(host.data(), data(), n_bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (tests poison outputs this way before a kernel writes them).
  void fill_bytes(int byte) {
    if (size() > 0) TF_CUDA_CHECK(cudaMemset(data(), byte, n_bytes()));
  }
};

// Room for n values in a device buffer and the pinned staging buffer its uploads go through, at
// least doubling; waits for `stream` first, since the staging buffer may still feed its last copy.
template <class T>
void grow_staged_upload(DeviceBuffer<T>& device, PinnedHostBuffer<T>& staging, int64_t n, cudaStream_t stream) {
  if (n <= int64_t(device.size())) return;
  const size_t capacity = size_t(std::max<int64_t>(n, 2 * int64_t(device.size())));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream));
  device = DeviceBuffer<T>(capacity);
  staging = PinnedHostBuffer<T>(capacity);
}

}  // namespace tf::cuda
