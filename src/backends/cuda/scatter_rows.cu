// Row scatter: one block per row, 16-byte copies (the twin of the embedding gather).
#include "backends/cuda/scatter_rows.cuh"

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

__global__ void scatter_rows_kernel(const uint16_t* __restrict__ rows, int64_t row_stride, int dim,
                                    const int32_t* __restrict__ slots, uint16_t* __restrict__ table) {
  const uint4* source = reinterpret_cast<const uint4*>(rows + int64_t(blockIdx.x) * row_stride);
  uint4* target = reinterpret_cast<uint4*>(table + int64_t(slots[blockIdx.x]) * dim);
  for (int piece = int(threadIdx.x); piece < dim / 8; piece += int(blockDim.x)) target[piece] = source[piece];
}

}  // namespace

void scatter_rows_bf16(const uint16_t* rows, int64_t row_stride, int64_t n_rows, int64_t dim,
                       const int32_t* slots, uint16_t* table, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31) && dim > 0 && dim % 8 == 0 && dim < (int64_t(1) << 31) &&
                      row_stride >= dim && row_stride % 8 == 0,
                  "scatter_rows_bf16: dim and row_stride must be multiples of 8, row_stride >= dim");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(rows) % 16 == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0,
                  "scatter_rows_bf16: rows and table must be 16-byte aligned");
  if (n_rows == 0) return;
  scatter_rows_kernel<<<unsigned(n_rows), 128, 0, stream>>>(rows, row_stride, int(dim), slots, table);
  TF_CUDA_CHECK_LAUNCH("scatter_rows_kernel");
}

}  // namespace tf::cuda
