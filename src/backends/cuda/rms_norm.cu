// RMSNorm: one warp per row, the sum of squares in a fixed lane layout and butterfly order.
#include "backends/cuda/rms_norm.cuh"

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/row_math.cuh"

namespace tf::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

__global__ void rms_norm_kernel(const uint16_t* x, int n_rows, int dim, const uint16_t* __restrict__ gain,
                                float eps, uint16_t* y) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int row = int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / 32;
  const int lane = int(threadIdx.x) % 32;
  if (row >= n_rows) return;
  const uint16_t* x_row = x + int64_t(row) * dim;
  uint16_t* y_row = y + int64_t(row) * dim;
  const float inverse_rms = warp_inverse_rms(x_row, dim, eps, lane);
  for (int piece = lane; piece < dim / 8; piece += 32) {
    float v[8];
    normalized_piece(x_row, gain, inverse_rms, piece, v);
    *reinterpret_cast<uint4*>(y_row + 8 * piece) = pack_bf16x8(v);
  }
}

}  // namespace

void rms_norm_bf16(const uint16_t* x, int64_t n_rows, int64_t dim, const uint16_t* gain, float eps,
                   uint16_t* y, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && dim > 0 && dim % 8 == 0, "rms_norm_bf16: dim must be a positive multiple of 8");
  TF_CUDA_REQUIRE(n_rows < (int64_t(1) << 31) && dim < (int64_t(1) << 31), "rms_norm_bf16: shape too large");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(gain) % 16 == 0,
                  "rms_norm_bf16: x, y and gain must be 16-byte aligned");
  if (n_rows == 0) return;
  const unsigned n_blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
  launch_overlapped("rms_norm_kernel", rms_norm_kernel, dim3(n_blocks), dim3(kRowsPerBlock * 32), 0, stream, x,
                    int(n_rows), int(dim), gain, eps, y);
}

}  // namespace tf::cuda
