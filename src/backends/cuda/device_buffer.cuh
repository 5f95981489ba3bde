// An owned, typed device allocation (plain cudaMalloc: never managed memory).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) TF_CUDA_CHECK(cudaMalloc(&data_, n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // no throw from a destructor; a failed free leaks nothing we can fix
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), n_(std::exchange(other.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (data_) cudaFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      n_ = std::exchange(other.n_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  size_t n_bytes() const { return n_ * sizeof(T); }

  void copy_from_host(const T* host, size_t n) {
    TF_CUDA_REQUIRE(n <= n_, "copy_from_host larger than the buffer");
    TF_CUDA_CHECK(cudaMemcpy(data_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void copy_from_host(const std::vector<T>& host) { copy_from_host(host.data(), host.size()); }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    if (n_ > 0) TF_CUDA_CHECK(cudaMemcpy(host.data(), data_, n_bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (tests poison outputs this way before a kernel writes them).
  void fill_bytes(int byte) {
    if (n_ > 0) TF_CUDA_CHECK(cudaMemset(data_, byte, n_bytes()));
  }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace tf::cuda
