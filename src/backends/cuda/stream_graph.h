// An owned CUDA stream, and a sequence of work on it captured once and replayed as one CUDA graph:
// a replay costs one launch instead of hundreds, and the kernels run back to back on the GPU.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {

class CudaStream {
 public:
  // A blocking stream: work on the legacy default stream (KV slot copies) stays ordered with it.
  CudaStream() { TF_CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { TF_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class CapturedGraph {
 public:
  CapturedGraph() = default;
  // Records what work() enqueues on stream (nothing runs yet). Kernel arguments are captured by
  // value: the replay uses the same pointers and launch shapes, and reads whatever the device
  // memory holds at replay time.
  template <class Work>
  static CapturedGraph capture(cudaStream_t stream, Work&& work) {
    TF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      work();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);  // leave the stream usable; the first error is the one to report
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    TF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CapturedGraph captured;
    const cudaError_t status = cudaGraphInstantiate(&captured.exec_, graph, 0);
    cudaGraphDestroy(graph);
    TF_CUDA_CHECK(status);
    return captured;
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(CapturedGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CapturedGraph& operator=(CapturedGraph&& other) noexcept {
    if (this != &other) {
      if (exec_) cudaGraphExecDestroy(exec_);
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  void launch(cudaStream_t stream) const { TF_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace tf::cuda
