// RMSNorm: one warp per row, the sum of squares in a fixed lane layout and butterfly order.
#include "backends/cuda/rms_norm.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

// Lane l owns the 8-element pieces l, l+32, l+64, ...; the butterfly gives every lane the same sum
// (IEEE addition commutes), and none of it depends on other rows.
__global__ void rms_norm_kernel(const uint16_t* x, int n_rows, int dim, const uint16_t* __restrict__ gain,
                                float eps, uint16_t* y) {
  const int row = int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / 32;
  const int lane = int(threadIdx.x) % 32;
  if (row >= n_rows) return;
  const uint16_t* x_row = x + int64_t(row) * dim;
  uint16_t* y_row = y + int64_t(row) * dim;
  const int n_pieces = dim / 8;
  float sum_of_squares = 0.0f;
  for (int piece = lane; piece < n_pieces; piece += 32) {
    float v[8];
    unpack_bf16x8(*reinterpret_cast<const uint4*>(x_row + 8 * piece), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_of_squares = __fadd_rn(sum_of_squares, __fmul_rn(v[i], v[i]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    sum_of_squares = sum_of_squares + __shfl_xor_sync(0xffffffffu, sum_of_squares, offset);
  const float inverse_rms = 1.0f / sqrtf(sum_of_squares / float(dim) + eps);
  for (int piece = lane; piece < n_pieces; piece += 32) {
    float v[8], gains[8];
    unpack_bf16x8(*reinterpret_cast<const uint4*>(x_row + 8 * piece), v);
    unpack_bf16x8(*reinterpret_cast<const uint4*>(gain + 8 * piece), gains);
    // Hugging Face order: normalize first, then multiply by the gain.
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(__fmul_rn(v[i], inverse_rms), gains[i]);
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
  rms_norm_kernel<<<n_blocks, kRowsPerBlock * 32, 0, stream>>>(x, int(n_rows), int(dim), gain, eps, y);
  TF_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

}  // namespace tf::cuda
