// Tensor-core linear layer for bf16 weights: weights streamed once with 16-byte loads, one fixed
// K order for every M (see linear_bf16.cuh).
#include "backends/cuda/linear_bf16.cuh"

#include <cuda_bf16.h>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;           // warps per block; warp w owns the K blocks j with j % 8 == w
constexpr int kThreads = kWarps * 32;
constexpr int kBlockK = 32;         // inputs per K block: two mma k16 steps
constexpr int kMmaRows = 16;
constexpr int kMmaCols = 8;

// Weights are read once per call: keep them out of L1 so the activations stay there.
__device__ __forceinline__ uint4 load_streaming(const uint16_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One block: kMmaRows*kRowTiles rows by kMmaCols*kColTiles columns, all K, 8 warps splitting K.
// Lane (g = lane/4, q = lane%4) reads inputs 8q..8q+7 of a K block with one 16-byte load, for a
// weight row (column g of an n8 tile) and for activation rows g and g+8. The mma's logical k order
// is a fixed permutation of those physical inputs, the same for x and W, so the dot product is
// unchanged and the permutation is the same for every call: step s takes physical 8q+4s..8q+4s+3
// as logical (2q, 2q+1, 2q+8, 2q+9).
// kUpperRows = false: rows 8..15 of each 16-row tile are known empty (M <= 8), so they are never
// loaded and their registers go to a deeper unroll.
template <int kRowTiles, int kColTiles, int kUnroll, bool kUpperRows, bool kF32Out>
__global__ void __launch_bounds__(kThreads) linear_bf16_kernel(const uint16_t* __restrict__ x, int n_rows,
                                                               const uint16_t* __restrict__ w, int n_out,
                                                               int n_in, void* __restrict__ y) {
  __shared__ float4 partials[kWarps][kRowTiles][kColTiles][32];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int row0 = int(blockIdx.x) * kMmaRows * kRowTiles;
  const int col0 = int(blockIdx.y) * kMmaCols * kColTiles;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;

  const uint16_t* w_row[kColTiles];
  bool w_ok[kColTiles];
#pragma unroll
  for (int c = 0; c < kColTiles; ++c) {
    const int col = col0 + c * kMmaCols + g;
    w_ok[c] = col < n_out;
    w_row[c] = w + int64_t(w_ok[c] ? col : 0) * n_in + 8 * q;
  }
  const uint16_t* x_row[kRowTiles][2];
  bool x_ok[kRowTiles][2];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + r * kMmaRows + g + 8 * h;
      x_ok[r][h] = row < n_rows;
      x_row[r][h] = x + int64_t(x_ok[r][h] ? row : 0) * n_in + 8 * q;
    }

  float acc[kRowTiles][kColTiles][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int j = warp; j < n_blocks_k; j += kWarps * kUnroll) {
    uint4 wv[kUnroll][kColTiles];
    uint4 xv[kUnroll][kRowTiles][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (j + kWarps * u) * kBlockK;
      // Only the last K block can be partial; n_in % 8 == 0 keeps each 16-byte piece whole.
      const bool k_ok = k + 8 * q < n_in;
#pragma unroll
      for (int c = 0; c < kColTiles; ++c) wv[u][c] = k_ok && w_ok[c] ? load_streaming(w_row[c] + k) : zero;
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          xv[u][r][h] = k_ok && x_ok[r][h] && (h == 0 || kUpperRows) ? __ldg(reinterpret_cast<const uint4*>(x_row[r][h] + k)) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      // Skipped, not zero-padded: an element's chain of mma steps is the same for every kUnroll.
      if (j + kWarps * u >= n_blocks_k) break;
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
          for (int c = 0; c < kColTiles; ++c)
            mma_bf16(acc[r][c], word(xv[u][r][0], 2 * s), word(xv[u][r][1], 2 * s),
                     word(xv[u][r][0], 2 * s + 1), word(xv[u][r][1], 2 * s + 1), word(wv[u][c], 2 * s),
                     word(wv[u][c], 2 * s + 1));
    }
  }

#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int c = 0; c < kColTiles; ++c)
      partials[warp][r][c][lane] = make_float4(acc[r][c][0], acc[r][c][1], acc[r][c][2], acc[r][c][3]);
  __syncthreads();

  // The 8 warp partials of each element, added in warp order.
  constexpr int n_elements = kRowTiles * kColTiles * 32 * 4;
  for (int index = int(threadIdx.x); index < n_elements; index += kThreads) {
    const int e = index % 4, owner = (index / 4) % 32, c = (index / 128) % kColTiles, r = index / (128 * kColTiles);
    float sum = reinterpret_cast<const float*>(&partials[0][r][c][owner])[e];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) sum = sum + reinterpret_cast<const float*>(&partials[v][r][c][owner])[e];
    const int row = row0 + r * kMmaRows + owner / 4 + 8 * (e / 2);
    const int col = col0 + c * kMmaCols + 2 * (owner % 4) + e % 2;
    if (row >= n_rows || col >= n_out) continue;
    if constexpr (kF32Out) {
      static_cast<float*>(y)[int64_t(row) * n_out + col] = sum;
    } else {
      static_cast<uint16_t*>(y)[int64_t(row) * n_out + col] = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    }
  }
}

template <int kRowTiles, int kColTiles, int kUnroll, bool kUpperRows>
void launch(const uint16_t* x, int64_t n_rows, const uint16_t* w, int64_t n_out, int64_t n_in, void* y,
            LinearOutput output, cudaStream_t stream) {
  // Row tiles vary fastest, so the blocks that share a weight slice run together and share it in L2.
  const dim3 grid(unsigned((n_rows + kMmaRows * kRowTiles - 1) / (kMmaRows * kRowTiles)),
                  unsigned((n_out + kMmaCols * kColTiles - 1) / (kMmaCols * kColTiles)));
  if (output == LinearOutput::f32) {
    linear_bf16_kernel<kRowTiles, kColTiles, kUnroll, kUpperRows, true>
        <<<grid, kThreads, 0, stream>>>(x, int(n_rows), w, int(n_out), int(n_in), y);
  } else {
    linear_bf16_kernel<kRowTiles, kColTiles, kUnroll, kUpperRows, false>
        <<<grid, kThreads, 0, stream>>>(x, int(n_rows), w, int(n_out), int(n_in), y);
  }
  TF_CUDA_CHECK_LAUNCH("linear_bf16_kernel");
}

}  // namespace

void linear_bf16(const uint16_t* x, int64_t n_rows, const uint16_t* w, int64_t n_cols_out,
                 int64_t n_cols_in, void* y, LinearOutput output, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_cols_out > 0 && n_cols_in > 0, "linear_bf16: empty shape");
  TF_CUDA_REQUIRE(n_cols_in % 8 == 0, "linear_bf16: n_cols_in must be a multiple of 8");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0,
                  "linear_bf16: x and w must be 16-byte aligned");
  TF_CUDA_REQUIRE(n_rows < (int64_t(1) << 31) && n_cols_out < (int64_t(1) << 31) && n_cols_in < (int64_t(1) << 31),
                  "linear_bf16: dimension too large");
  TF_CUDA_REQUIRE(n_cols_out <= int64_t(65535) * kMmaCols, "linear_bf16: too many output columns");
  if (n_rows == 0) return;
  // The tile shape only changes how many rows and columns share a weight or activation load;
  // every element's K order is the same in all four (tests compare them bit for bit).
  if (n_rows <= 8) {
    launch<1, 1, 8, false>(x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
  } else if (n_rows <= 16) {
    launch<1, 1, 4, true>(x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
  } else if (n_rows <= 32) {
    launch<2, 1, 2, true>(x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
  } else {
    launch<4, 2, 1, true>(x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
  }
}

}  // namespace tf::cuda
