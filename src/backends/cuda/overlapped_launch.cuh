// Programmatic dependent launch (Hopper): a forward's kernels are launched so that each may start
// while the one before it is finishing. Every kernel launched through launch_overlapped calls
// wait_for_prior_kernel() before it reads anything an earlier kernel wrote and before it writes
// anything. Launched plainly the wait returns at once, so results never change.
// Overlap is opt-in per thread (OverlappedLaunchScope): the model asks for it on the forwards where
// it measured faster, unless its options turn overlap off (serve --cuda-overlap off).
#pragma once
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {

__device__ __forceinline__ void wait_for_prior_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next overlapped kernel be scheduled once every block of this one has called it.
__device__ __forceinline__ void let_next_kernel_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

inline bool& overlap_requested_on_this_thread() {
  thread_local bool requested = false;
  return requested;
}

// Launches through launch_overlapped on this thread overlap while this lives.
class OverlappedLaunchScope {
 public:
  explicit OverlappedLaunchScope(bool overlap) : previous_(overlap_requested_on_this_thread()) {
    overlap_requested_on_this_thread() = overlap;
  }
  ~OverlappedLaunchScope() { overlap_requested_on_this_thread() = previous_; }
  OverlappedLaunchScope(const OverlappedLaunchScope&) = delete;
  OverlappedLaunchScope& operator=(const OverlappedLaunchScope&) = delete;

 private:
  bool previous_;
};

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
  config.numAttrs = overlap_requested_on_this_thread() ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, static_cast<KernelParams>(args)...);
  if (status != cudaSuccess) fail_cuda(status, kernel_name, __FILE__, __LINE__);
}

}  // namespace tf::cuda
