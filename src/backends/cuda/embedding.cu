// Embedding gather: one block per token, eight inputs (16 output bytes) per thread step.
#include "backends/cuda/embedding.cuh"

#include <type_traits>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/weight_rows.cuh"

namespace tf::cuda {
namespace {

template <class Rows>
__global__ void embedding_kernel(Rows table, int n_vocab, int dim, const int32_t* __restrict__ ids,
                                 uint16_t* __restrict__ out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int32_t id = ids[blockIdx.x];
  const bool is_valid = id >= 0 && id < n_vocab;
  uint4* target = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * dim);
  // Piece p is inputs 8p..8p+7: lane p % 4's share of K block p / 4, read as the linear kernel does.
  for (int piece = int(threadIdx.x); piece < dim / 8; piece += int(blockDim.x)) {
    const int block = piece / 4;
    const typename Rows::Cursor row = table.at(is_valid ? id : 0, 8 * (piece % 4), block % 8);
    target[piece] = is_valid ? Rows::expand(table.fetch(row, block), (block / 8) % Rows::kBlocksPerFetch)
                             : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

void embedding(const LinearWeights& table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n, uint16_t* out,
               cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_vocab > 0 && dim > 0 && dim % 8 == 0 && n >= 0, "embedding: dim must be a multiple of 8");
  TF_CUDA_REQUIRE(n_vocab < (int64_t(1) << 31) && dim < (int64_t(1) << 31) && n < (int64_t(1) << 31),
                  "embedding: shape too large");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(out) % 16 == 0, "embedding: out must be 16-byte aligned");
  if (table.bits == 0) {
    TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(table.bf16) % 16 == 0, "embedding: the table must be 16-byte aligned");
  } else {
    TF_CUDA_REQUIRE((table.bits == 4 || table.bits == 8) && table.group_size >= 32 && dim % table.group_size == 0,
                    "embedding: quantized rows must be 4- or 8-bit, in groups of at least 32 that divide dim");
  }
  if (n == 0) return;
  with_rows(table, int(dim), [&](const auto& rows) {
    launch_overlapped("embedding_kernel", embedding_kernel<std::decay_t<decltype(rows)>>, dim3(unsigned(n)), dim3(128),
                      0, stream, rows, int(n_vocab), int(dim), ids, out);
  });
}

void embedding_bf16(const uint16_t* table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n,
                    uint16_t* out, cudaStream_t stream) {
  LinearWeights weights;
  weights.bf16 = table;
  embedding(weights, n_vocab, dim, ids, n, out, stream);
}

}  // namespace tf::cuda
