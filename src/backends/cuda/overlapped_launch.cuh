// Programmatic dependent launch (Hopper): a forward's kernels are launched so that each may start
// while the one before it is finishing. A kernel launched this way calls wait_for_prior_kernel()
// before it reads anything an earlier kernel wrote and before it writes anything; before that it
// may only do work that depends on neither (the linear kernel prefetches its weights into L2).
// Launched plainly (kernel tests, TF_CUDA_PDL=0) the wait returns at once, so results never change.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {

__device__ __forceinline__ void wait_for_prior_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next overlapped kernel be scheduled once every block of this one has called it.
__device__ __forceinline__ void let_next_kernel_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

inline bool overlapped_launches_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TF_CUDA_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

template <class... KernelParams, class... Args>
void launch_overlapped(const char* kernel_name, void (*kernel)(KernelParams...), dim3 grid, dim3 block,
                       size_t shared_bytes, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlapped_launches_enabled() ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, static_cast<KernelParams>(args)...);
  if (status != cudaSuccess) fail_cuda(status, kernel_name, __FILE__, __LINE__);
}

}  // namespace tf::cuda
