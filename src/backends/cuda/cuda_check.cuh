// Error checking for CUDA calls and kernel launches: every failure names the call and the place.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace tf::cuda {

[[noreturn]] inline void fail_cuda(cudaError_t status, const char* what, const char* file, int line) {
  fail(std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
       cudaGetErrorString(status));
}

}  // namespace tf::cuda

// Checks the status of a runtime call.
#define TF_CUDA_CHECK(call)                                                         \
  do {                                                                              \
    const cudaError_t tf_status_ = (call);                                          \
    if (tf_status_ != cudaSuccess) ::tf::cuda::fail_cuda(tf_status_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks that the launch just made was accepted (a bad configuration shows up here, not later).
#define TF_CUDA_CHECK_LAUNCH(kernel_name)                                                        \
  do {                                                                                           \
    const cudaError_t tf_status_ = cudaGetLastError();                                           \
    if (tf_status_ != cudaSuccess) ::tf::cuda::fail_cuda(tf_status_, kernel_name, __FILE__, __LINE__); \
  } while (0)

// Shape checks in launchers: a wrong shape is a programming error named in words.
#define TF_CUDA_REQUIRE(condition, message)                                \
  do {                                                                     \
    if (!(condition)) ::tf::fail(std::string("CUDA kernel: ") + (message)); \
  } while (0)
