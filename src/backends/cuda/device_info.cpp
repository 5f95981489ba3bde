

#include "backends/cuda/device_info.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backends/cuda/device_buffer.cuh"

namespace tf::cuda {

void require_hopper_gpu() {
  int n_devices = 0;
  if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0)
    fail("--device cuda: no CUDA GPU is visible to this process");
  cudaDeviceProp properties{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  if (properties.major != 9)
    fail(std::string("--device cuda: this build's kernels are for Hopper (sm_90a); GPU 0 is ") + properties.name +
         " (sm_" + std::to_string(properties.major) + std::to_string(properties.minor) + ")");
}

std::string gpu_description() {
  cudaDeviceProp properties{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  return std::string(properties.name) + ", " + std::to_string(properties.totalGlobalMem >> 30) + " GiB";
}

double measure_copy_bandwidth_gbs() {
  const size_t n_bytes = size_t(2) << 30;  // 2 GiB each way
  DeviceBuffer<uint8_t> from(n_bytes), to(n_bytes);
  from.fill_bytes(1);
  std::vector<double> rates;
  for (int rep = 0; rep < 6; ++rep) {
    auto start = std::chrono::steady_clock::now();
    TF_CUDA_CHECK(cudaMemcpy(to.data(), from.data(), n_bytes, cudaMemcpyDeviceToDevice));
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) rates.push_back(2.0 * double(n_bytes) / seconds / 1e9);  // the first copy warms up
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace tf::cuda
