// RMSNorm, with or without the residual add before it: one block per row. Every thread stages a
// part of the row in shared memory at once, so a row costs one memory round trip however few rows
// there are; warp 0 then takes the sum of squares from there in warp_inverse_rms's lane layout.
#include "backends/cuda/rms_norm.cuh"

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/row_math.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDim = 16384;  // the staged row: 32 KiB of shared memory

// normed[row] = rms_norm(x[row] (+ residual[row])); with a residual the sum also goes to sum_out.
// x and sum_out may alias (in-place add), as may x and normed: the row is read in full first.
__global__ void __launch_bounds__(kThreads)
    rms_norm_rows_kernel(const uint16_t* x, const uint16_t* __restrict__ residual, uint16_t* sum_out, int dim,
                         const uint16_t* __restrict__ gain, float eps, uint16_t* normed) {
  __shared__ uint4 staged[kMaxDim / 8];
  __shared__ float inverse_rms;
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t row_start = int64_t(blockIdx.x) * dim;
  const int n_pieces = dim / 8;
  for (int piece = int(threadIdx.x); piece < n_pieces; piece += kThreads) {
    uint4 value = reinterpret_cast<const uint4*>(x + row_start)[piece];
    if (residual != nullptr) {
      float h[8], r[8];
      unpack_bf16x8(value, h);
      unpack_bf16x8(reinterpret_cast<const uint4*>(residual + row_start)[piece], r);
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = __fadd_rn(h[i], r[i]);
      value = pack_bf16x8(h);
      reinterpret_cast<uint4*>(sum_out + row_start)[piece] = value;
    }
    staged[piece] = value;
  }
  __syncthreads();
  const uint16_t* row = reinterpret_cast<const uint16_t*>(staged);
  if (threadIdx.x < 32) {
    const float value = warp_inverse_rms(row, dim, eps, int(threadIdx.x));
    if (threadIdx.x == 0) inverse_rms = value;
  }
  __syncthreads();
  for (int piece = int(threadIdx.x); piece < n_pieces; piece += kThreads) {
    float v[8];
    normalized_piece(row, gain, inverse_rms, piece, v);
    reinterpret_cast<uint4*>(normed + row_start)[piece] = pack_bf16x8(v);
  }
}

void launch_rows(const char* caller, const uint16_t* x, const uint16_t* residual, uint16_t* sum_out, int64_t n_rows,
                 int64_t dim, const uint16_t* gain, float eps, uint16_t* normed, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31) && dim > 0 && dim % 8 == 0 && dim <= kMaxDim,
                  std::string(caller) + ": dim must be a positive multiple of 8 up to 16384");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(residual) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(gain) % 16 == 0 && reinterpret_cast<uintptr_t>(normed) % 16 == 0,
                  std::string(caller) + ": buffers must be 16-byte aligned");
  if (n_rows == 0) return;
  launch_overlapped("rms_norm_rows_kernel", rms_norm_rows_kernel, dim3(unsigned(n_rows)), dim3(kThreads), 0, stream, x,
                    residual, sum_out, int(dim), gain, eps, normed);
}

}  // namespace

void rms_norm_bf16(const uint16_t* x, int64_t n_rows, int64_t dim, const uint16_t* gain, float eps,
                   uint16_t* y, cudaStream_t stream) {
  launch_rows("rms_norm_bf16", x, nullptr, nullptr, n_rows, dim, gain, eps, y, stream);
}

void add_rms_norm_bf16(uint16_t* hidden, const uint16_t* residual, int64_t n_rows, int64_t dim, const uint16_t* gain,
                       float eps, uint16_t* normed, cudaStream_t stream) {
  launch_rows("add_rms_norm_bf16", hidden, residual, hidden, n_rows, dim, gain, eps, normed, stream);
}

}  // namespace tf::cuda
