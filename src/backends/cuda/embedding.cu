// Embedding gather: one block per token, 16-byte copies.
#include "backends/cuda/embedding.cuh"

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

__global__ void embedding_kernel(const uint16_t* __restrict__ table, int n_vocab, int dim,
                                 const int32_t* __restrict__ ids, uint16_t* __restrict__ out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int32_t id = ids[blockIdx.x];
  const bool is_valid = id >= 0 && id < n_vocab;
  const uint4* source = reinterpret_cast<const uint4*>(table + int64_t(is_valid ? id : 0) * dim);
  uint4* target = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * dim);
  for (int piece = int(threadIdx.x); piece < dim / 8; piece += int(blockDim.x))
    target[piece] = is_valid ? source[piece] : make_uint4(0, 0, 0, 0);
}

}  // namespace

void embedding_bf16(const uint16_t* table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n,
                    uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_vocab > 0 && dim > 0 && dim % 8 == 0 && n >= 0, "embedding_bf16: dim must be a multiple of 8");
  TF_CUDA_REQUIRE(n_vocab < (int64_t(1) << 31) && dim < (int64_t(1) << 31) && n < (int64_t(1) << 31),
                  "embedding_bf16: shape too large");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(table) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
                  "embedding_bf16: table and out must be 16-byte aligned");
  if (n == 0) return;
  launch_overlapped("embedding_kernel", embedding_kernel, dim3(unsigned(n)), dim3(128), 0, stream, table, int(n_vocab),
                    int(dim), ids, out);
}

}  // namespace tf::cuda
