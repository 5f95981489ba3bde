// Tensor-core linear layer for bf16 or MLX-quantized weights: weights streamed once, quantized ones
// dequantized in registers, one fixed K order for every M (see linear.cuh).
#include "backends/cuda/linear.cuh"

#include <algorithm>
#include <atomic>
#include <string_view>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "backends/cuda/affine_layout.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/linear_configs.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/row_math.cuh"
#include "backends/cuda/tma.cuh"
#include "backends/cuda/weight_rows.cuh"
#include "backends/cuda/wgmma.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;           // warps per column group; warp w owns the K blocks j with j % 8 == w
constexpr int kBlockK = 32;         // inputs per K block: two mma k16 steps
constexpr int kMmaRows = 16;
constexpr int kMmaCols = 8;

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The two mma k16 steps of one K block for every row and column tile: the one place an element's
// chain grows, so both kernels below give it the same operations in the same order.
template <int kRowTiles, int kColTiles>
__device__ __forceinline__ void multiply_k_block(float (&acc)[kRowTiles][kColTiles][4], const uint4 (&xv)[kRowTiles][2],
                                                 const uint4 (&wv)[kColTiles]) {
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int c = 0; c < kColTiles; ++c)
        mma_bf16(acc[r][c], word(xv[r][0], 2 * s), word(xv[r][1], 2 * s), word(xv[r][0], 2 * s + 1),
                 word(xv[r][1], 2 * s + 1), word(wv[c], 2 * s), word(wv[c], 2 * s + 1));
}

// An element's warp partials added in warp order: its one reduction order.
template <int kColGroups, int kColTiles>
__device__ __forceinline__ float warp_sum(const float4 (&partials)[kColGroups][kWarps][kColTiles][32], int group, int c,
                                          int owner, int e) {
  float sum = reinterpret_cast<const float*>(&partials[group][0][c][owner])[e];
#pragma unroll
  for (int v = 1; v < kWarps; ++v) sum = sum + reinterpret_cast<const float*>(&partials[group][v][c][owner])[e];
  return sum;
}

// Stores the sums of columns col (even) and col + 1 of a row: as f32, as bf16, or (SwiGLU) both
// rounded to bf16 as the plain bf16 output would store them, then silu(gate) * up to column col / 2.
// `second` is unused when col + 1 is past n_out. kWide: a pair whose address allows it goes as one
// store of 8 (f32) or 4 (bf16) bytes, the same values.
template <LinearOutput kOutput, bool kWide = false>
__device__ __forceinline__ void store_pair(void* y, int row, int col, int n_out, float first, float second) {
  const bool has_second = col + 1 < n_out;
  if constexpr (kOutput == LinearOutput::f32) {
    float* out = static_cast<float*>(y) + int64_t(row) * n_out + col;
    if (kWide && has_second && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
      *reinterpret_cast<float2*>(out) = make_float2(first, second);
      return;
    }
    out[0] = first;
    if (has_second) out[1] = second;
  } else if constexpr (kOutput == LinearOutput::bf16) {
    uint16_t* out = static_cast<uint16_t*>(y) + int64_t(row) * n_out + col;
    if (kWide && has_second && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
      *reinterpret_cast<uint32_t*>(out) = uint32_t(f32_to_bf16_bits(first)) | uint32_t(f32_to_bf16_bits(second)) << 16;
      return;
    }
    out[0] = f32_to_bf16_bits(first);
    if (has_second) out[1] = f32_to_bf16_bits(second);
  } else {
    const float gate = bf16_bits_to_f32(f32_to_bf16_bits(first)), up = bf16_bits_to_f32(f32_to_bf16_bits(second));
    static_cast<uint16_t*>(y)[int64_t(row) * (n_out / 2) + col / 2] = f32_to_bf16_bits(swiglu_of(gate, up));
  }
}

// Row tile by row tile (so shared memory holds one tile's partials): the 8 warp partials of each
// element, added in warp order, then stored. Every thread of the block calls it. An element pair
// (columns 2c, 2c+1 of a row) is one step: swiglu_bf16 rounds both sums to bf16, as the plain bf16
// output would store them, then writes silu(gate) * up to column c.
template <int kRowTiles, int kColTiles, int kColGroups, LinearOutput kOutput>
__device__ void store_warp_sums(const float (&acc)[kRowTiles][kColTiles][4],
                                float4 (&partials)[kColGroups][kWarps][kColTiles][32], int row0, int block_col0,
                                int n_rows, int n_out, void* y) {
  constexpr int kThreads = kWarps * 32 * kColGroups;
  const int warp = int(threadIdx.x) / 32 % kWarps, group = int(threadIdx.x) / (32 * kWarps), lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
    if (r > 0) __syncthreads();  // the previous tile's partials have all been read
#pragma unroll
    for (int c = 0; c < kColTiles; ++c)
      partials[group][warp][c][lane] = make_float4(acc[r][c][0], acc[r][c][1], acc[r][c][2], acc[r][c][3]);
    __syncthreads();
    constexpr int n_pairs = kColGroups * kColTiles * 32 * 2;
    for (int index = int(threadIdx.x); index < n_pairs; index += kThreads) {
      const int half = index % 2, owner = (index / 2) % 32, c = (index / 64) % kColTiles, owner_group = index / (64 * kColTiles);
      const int row = row0 + r * kMmaRows + owner / 4 + 8 * half;
      const int col = block_col0 + (owner_group * kColTiles + c) * kMmaCols + 2 * (owner % 4);  // even
      if (row >= n_rows || col >= n_out) continue;
      const float first = warp_sum(partials, owner_group, c, owner, 2 * half);
      const float second = warp_sum(partials, owner_group, c, owner, 2 * half + 1);
      store_pair<kOutput>(y, row, col, n_out, first, second);
    }
  }
}

// One block: kMmaRows*kRowTiles rows by kMmaCols*kColTiles*kColGroups columns, all K. Each column
// group is 8 warps splitting K over its own kColTiles n8 tiles; the groups share the activation
// loads through L1. Lane (g = lane/4, q = lane%4) reads inputs 8q..8q+7 of a K block with one
// 16-byte load, for a weight row (column g of an n8 tile) and for activation rows g and g+8. The
// mma's logical k order is a fixed permutation of those physical inputs, the same for x and W, so
// the dot product is unchanged and the permutation is the same for every call: step s takes
// physical 8q+4s..8q+4s+3 as logical (2q, 2q+1, 2q+8, 2q+9).
// An element's operations depend only on K: its warp chain (blocks j, j+8, ... in order) and the
// sum of the 8 warp partials in warp order. The tile shape only decides which elements share a load.
// kUpperRows = false: rows 8..15 of each 16-row tile are known empty (M <= 8), so they are never
// loaded and their registers go to a deeper unroll.
// Rows (weight_rows.cuh) reads the weights: a fetch is issued for every unrolled K block before
// any is expanded to bf16 and multiplied, so the loads are all in flight together.
template <int kRowTiles, int kColTiles, int kColGroups, int kUnroll, bool kUpperRows, LinearOutput kOutput, class Rows>
__global__ void __launch_bounds__(kWarps * 32 * kColGroups)
    linear_kernel(const uint16_t* __restrict__ x, int n_rows, Rows w, int n_out, int n_in, void* __restrict__ y) {
  // One row tile's warp partials at a time: [group][warp][col tile][lane] x 4 accumulators.
  __shared__ float4 partials[kColGroups][kWarps][kColTiles][32];
  const int warp = int(threadIdx.x) / 32 % kWarps, group = int(threadIdx.x) / (32 * kWarps), lane = int(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int row0 = int(blockIdx.x) * kMmaRows * kRowTiles;
  const int block_col0 = int(blockIdx.y) * kMmaCols * kColTiles * kColGroups;
  const int col0 = block_col0 + group * kMmaCols * kColTiles;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;

  typename Rows::Cursor w_row[kColTiles];
  bool w_ok[kColTiles];
#pragma unroll
  for (int c = 0; c < kColTiles; ++c) {
    const int col = col0 + c * kMmaCols + g;
    w_ok[c] = col < n_out;
    w_row[c] = w.at(w_ok[c] ? col : 0, 8 * q, warp);
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

  wait_for_prior_kernel();
  let_next_kernel_start();

  float acc[kRowTiles][kColTiles][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // A fetch brings kFetch of the warp's K blocks (4 for quantized rows); one step of the loop takes
  // kSpan blocks: every weight fetch first, then the activations kUnroll blocks at a time.
  constexpr int kFetch = Rows::kBlocksPerFetch;
  constexpr int kSpan = kUnroll > kFetch ? kUnroll : kFetch;
  static_assert(kSpan % kFetch == 0 && kSpan % kUnroll == 0, "linear: the unroll must divide the fetch span");
  using Fetched = typename Rows::Fetched;
  const auto fetch = [&](Fetched(&into)[kColTiles], int b) {
    // A column past n_out reads row 0's weights: its sums are never stored.
#pragma unroll
    for (int c = 0; c < kColTiles; ++c) into[c] = w.in_row(w_row[c], b) ? w.fetch(w_row[c], b) : Fetched{};
  };
  for (int j = warp; j < n_blocks_k; j += kWarps * kSpan) {
    Fetched wv[kSpan / kFetch][kColTiles];
    // bf16 fetches go next to each block's activations below, the order this kernel was tuned in.
    if constexpr (kFetch > 1) {
#pragma unroll
      for (int f = 0; f < kSpan / kFetch; ++f) fetch(wv[f], j + kWarps * kFetch * f);
    }
#pragma unroll
    for (int u0 = 0; u0 < kSpan; u0 += kUnroll) {
      uint4 xv[kUnroll][kRowTiles][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if constexpr (kFetch == 1) fetch(wv[u0 + u], j + kWarps * (u0 + u));
        const int k = (j + kWarps * (u0 + u)) * kBlockK;
        // Only the last K block can be partial; n_in % 8 == 0 keeps each 16-byte piece whole.
        const bool k_ok = k + 8 * q < n_in;
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            xv[u][r][h] = k_ok && x_ok[r][h] && (h == 0 || kUpperRows) ? __ldg(reinterpret_cast<const uint4*>(x_row[r][h] + k)) : zero;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        // Skipped, not zero-padded: an element's chain of mma steps is the same for every kUnroll.
        if (j + kWarps * (u0 + u) >= n_blocks_k) break;
        uint4 w_bf16[kColTiles];
#pragma unroll
        for (int c = 0; c < kColTiles; ++c) w_bf16[c] = Rows::expand(wv[(u0 + u) / kFetch][c], (u0 + u) % kFetch);
        multiply_k_block(acc, xv[u], w_bf16);
      }
    }
  }

  store_warp_sums<kRowTiles, kColTiles, kColGroups, kOutput>(acc, partials, row0, block_col0, n_rows, n_out, y);
}

// The swapped kernels' ending: element (row 8r + t, block column 16c + e) sits in lane (e % 8) * 4 +
// t / 2, entry (e / 8) * 2 + t % 2 of each warp's tile (c, r); its 8 warp partials are added in warp
// order, as warp_sum adds them, and stored in column pairs. Every thread of the block calls it.
constexpr int kSwappedTileCols = 16, kSwappedTileRows = 8;
template <int kColTiles, int kRowTiles, LinearOutput kOutput>
__device__ void store_swapped_sums(const float (&acc)[kColTiles][kRowTiles][4],
                                   float4 (&partials)[kWarps][kColTiles][kRowTiles][32], int row0, int block_col0,
                                   int n_rows, int n_out, void* y) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int c = 0; c < kColTiles; ++c)
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
      partials[warp][c][r][lane] = make_float4(acc[c][r][0], acc[c][r][1], acc[c][r][2], acc[c][r][3]);
  __syncthreads();
  const auto sum_of = [&](int block_row, int block_col) {
    const int r = block_row / kSwappedTileRows, t = block_row % kSwappedTileRows;
    const int c = block_col / kSwappedTileCols, e = block_col % kSwappedTileCols;
    const int owner = (e % 8) * 4 + t / 2, entry = (e / 8) * 2 + t % 2;
    float sum = reinterpret_cast<const float*>(&partials[0][c][r][owner])[entry];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) sum = sum + reinterpret_cast<const float*>(&partials[v][c][r][owner])[entry];
    return sum;
  };
  constexpr int kBlockRows = kSwappedTileRows * kRowTiles;
  constexpr int n_pairs = kBlockRows * kColTiles * kSwappedTileCols / 2;  // rows x column pairs of the block
  for (int index = int(threadIdx.x); index < n_pairs; index += kWarps * 32) {
    const int block_row = index % kBlockRows, block_col = 2 * (index / kBlockRows);
    const int row = row0 + block_row, col = block_col0 + block_col;
    if (row >= n_rows || col >= n_out) continue;
    const float first = sum_of(block_row, block_col);
    const float second = col + 1 < n_out ? sum_of(block_row, block_col + 1) : 0.0f;
    store_pair<kOutput>(y, row, col, n_out, first, second);
  }
}

// The swapped kernel: the register kernel's element chains with the operands of each mma swapped,
// 16 weight rows as A and 8 activation rows as B, so the loaded activations are the B fragment as
// they come (no register moves, no padding rows at decode), and a block's kRowTiles tiles of 8 rows
// share each dequantized weight (verify rounds dequantize once, not once per 16 rows). An element's
// k16 steps and warp sum are the register kernel's, with the same products in the same k slots, and
// the tensor core's sum does not depend on which operand holds them: the test checks the bits.
template <int kColTiles, int kRowTiles, int kUnroll, LinearOutput kOutput, class Rows>
__global__ void __launch_bounds__(kWarps * 32)
    linear_swapped_kernel(const uint16_t* __restrict__ x, int n_rows, Rows w, int n_out, int n_in, void* __restrict__ y) {
  __shared__ float4 partials[kWarps][kColTiles][kRowTiles][32];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int row0 = int(blockIdx.x) * kSwappedTileRows * kRowTiles;
  const int block_col0 = int(blockIdx.y) * kSwappedTileCols * kColTiles;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;
  typename Rows::Cursor w_row[kColTiles][2];  // weight rows g and g + 8 of each 16-column tile
#pragma unroll
  for (int c = 0; c < kColTiles; ++c)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = block_col0 + c * kSwappedTileCols + g + 8 * h;
      w_row[c][h] = w.at(col < n_out ? col : 0, 8 * q, warp);  // a column past n_out is never stored
    }
  const uint16_t* x_row[kRowTiles];
  bool x_ok[kRowTiles];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
    const int row = row0 + r * kSwappedTileRows + g;
    x_ok[r] = row < n_rows;
    x_row[r] = x + int64_t(x_ok[r] ? row : 0) * n_in + 8 * q;
  }

  wait_for_prior_kernel();
  let_next_kernel_start();

  float acc[kColTiles][kRowTiles][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  constexpr int kFetch = Rows::kBlocksPerFetch;
  constexpr int kSpan = kUnroll > kFetch ? kUnroll : kFetch;
  static_assert(kSpan % kFetch == 0 && kSpan % kUnroll == 0, "linear: the unroll must divide the fetch span");
  using Fetched = typename Rows::Fetched;
  const auto fetch = [&](Fetched(&into)[kColTiles][2], int b) {
#pragma unroll
    for (int c = 0; c < kColTiles; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) into[c][h] = w.in_row(w_row[c][h], b) ? w.fetch(w_row[c][h], b) : Fetched{};
  };
  for (int j = warp; j < n_blocks_k; j += kWarps * kSpan) {
    Fetched wv[kSpan / kFetch][kColTiles][2];
    if constexpr (kFetch > 1) {
#pragma unroll
      for (int f = 0; f < kSpan / kFetch; ++f) fetch(wv[f], j + kWarps * kFetch * f);
    }
#pragma unroll
    for (int u0 = 0; u0 < kSpan; u0 += kUnroll) {
      uint4 xv[kUnroll][kRowTiles];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if constexpr (kFetch == 1) fetch(wv[u0 + u], j + kWarps * (u0 + u));
        const int k = (j + kWarps * (u0 + u)) * kBlockK;
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
          xv[u][r] = k + 8 * q < n_in && x_ok[r] ? __ldg(reinterpret_cast<const uint4*>(x_row[r] + k)) : zero;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + kWarps * (u0 + u) >= n_blocks_k) break;  // skipped, as the register kernel skips it
#pragma unroll
        for (int c = 0; c < kColTiles; ++c) {
          const uint4 low = Rows::expand(wv[(u0 + u) / kFetch][c][0], (u0 + u) % kFetch);
          const uint4 high = Rows::expand(wv[(u0 + u) / kFetch][c][1], (u0 + u) % kFetch);
#pragma unroll
          for (int step = 0; step < 2; ++step)
#pragma unroll
            for (int r = 0; r < kRowTiles; ++r)
              mma_bf16(acc[c][r], word(low, 2 * step), word(high, 2 * step), word(low, 2 * step + 1),
                       word(high, 2 * step + 1), word(xv[u][r], 2 * step), word(xv[u][r], 2 * step + 1));
        }
      }
    }
  }

  store_swapped_sums<kColTiles, kRowTiles, kOutput>(acc, partials, row0, block_col0, n_rows, n_out, y);
}

// The streamed kernel, for decode: the swapped kernel's element chains (one 16-column tile, 8-row
// tiles) with the block's 16 weight rows brought into shared memory by bulk copies, 1,024 inputs
// of each row a stage (an MLX quad: 4 K blocks of each warp's chain), kStages stages in flight. So a
// block has that much of K on its way without holding it in registers (deeper register fetches cost
// occupancy and were slower), and the first stages are asked for before the wait on the kernel
// before: weights never depend on it. Each warp reads its words (and scale entries) from the stage
// where the swapped kernel's fetch reads them from memory, and multiplies them in the same order.
// On bf16 rows it makes a decode step faster (its copies start while the norms and attention run);
// on MLX rows the stage's 32 small copies make it slower than the swapped kernel. Every thread
// arrives on a slot's `empty` barrier after its own reads (not lane 0 for its warp after a
// __syncwarp), so racecheck can see that each read comes before the copy that refills the slot.
constexpr int kStreamedInputs = 1024;  // inputs of a row in one stage
// A row's part of a stage: its bytes, the padding that puts the 8 rows a warp reads at once on
// different banks, and the room for its scale/bias entries (32 at most a quad, padded likewise).
template <class Rows>
struct StreamedRow;
template <>
struct StreamedRow<Bf16Rows> {
  static constexpr int kWordsBytes = 2 * kStreamedInputs, kWordsStride = kWordsBytes + 64, kEntriesStride = 0;
};
template <int kBits>
struct StreamedRow<AffineRows<kBits>> {
  static constexpr int kWordsBytes = AffineRows<kBits>::kQuadWords * 4;
  static constexpr int kWordsStride = kWordsBytes + (kBits == 4 ? 64 : 16), kEntriesStride = 32 * 4 + 16;
};
template <class Rows>
struct StreamedShape : StreamedRow<Rows> {
  static constexpr bool kIsBf16 = std::is_same_v<Rows, Bf16Rows>;
  static constexpr int kRows = kSwappedTileCols;  // weight rows of a block
  static constexpr int kStageBytes = kRows * (StreamedRow<Rows>::kWordsStride + StreamedRow<Rows>::kEntriesStride);
};

template <int kStages, class Rows>
constexpr size_t streamed_shared_bytes() {
  return size_t(kStages) * StreamedShape<Rows>::kStageBytes + 2 * kStages * sizeof(uint64_t);
}

template <int kStages, LinearOutput kOutput, class Rows>
__global__ void __launch_bounds__(kWarps * 32)
    linear_streamed_kernel(const uint16_t* __restrict__ x, int n_rows, Rows w, int n_out, int n_in, void* __restrict__ y) {
  using Shape = StreamedShape<Rows>;
  extern __shared__ __align__(128) unsigned char streamed_shared[];
  __shared__ float4 partials[kWarps][1][1][32];
  uint64_t* full = reinterpret_cast<uint64_t*>(streamed_shared + kStages * Shape::kStageBytes);
  uint64_t* empty = full + kStages;
  const auto words_of = [&](int slot, int row) { return streamed_shared + slot * Shape::kStageBytes + row * Shape::kWordsStride; };
  const auto entries_of = [&](int slot, int row) {
    return streamed_shared + slot * Shape::kStageBytes + Shape::kRows * Shape::kWordsStride + row * Shape::kEntriesStride;
  };
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int row0 = int(blockIdx.x) * kSwappedTileRows, block_col0 = int(blockIdx.y) * kSwappedTileCols;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;
  const int n_stages = (n_in + kStreamedInputs - 1) / kStreamedInputs;  // = quads of an affine row
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < kStages; ++slot) {
      barrier_init(&full[slot], 1);
      barrier_init(&empty[slot], kWarps * 32);  // every thread releases its own reads
    }
    barrier_init_fence();
  }
  __syncthreads();
  // Warp 0 copies: lane i < 16 the words of the block's weight row i, lane 16 + i its scale/bias
  // entries (a column past n_out takes row 0's, never stored, as in the swapped kernel).
  const auto issue = [&](int stage) {
    const int slot = stage % kStages, row = lane % Shape::kRows;
    const int64_t col = block_col0 + row < n_out ? block_col0 + row : 0;
    if constexpr (Shape::kIsBf16) {
      const int inputs = min(kStreamedInputs, n_in - stage * kStreamedInputs);  // the last stage may be short
      if (lane == 0) barrier_arrive_expecting(&full[slot], uint32_t(Shape::kRows * inputs * 2));
      __syncwarp();
      if (lane < Shape::kRows)
        copy_bytes(words_of(slot, row), w.data + col * n_in + int64_t(stage) * kStreamedInputs, inputs * 2, &full[slot]);
    } else {
      const int entry_words = 32 >> w.group_shift;  // a row's scale/bias entries in one quad
      if (lane == 0)
        barrier_arrive_expecting(&full[slot], uint32_t(Shape::kRows * (Shape::kWordsBytes + entry_words * 4)));
      __syncwarp();
      if (lane < Shape::kRows)
        copy_bytes(words_of(slot, row), w.packed + (col * w.quads + stage) * Rows::kQuadWords, Shape::kWordsBytes,
                   &full[slot]);
      else
        copy_bytes(entries_of(slot, row), w.scale_bias + ((col * w.quads + stage) << (5 - w.group_shift)),
                   entry_words * 4, &full[slot]);
    }
  };
  if (warp == 0)
    for (int stage = 0; stage < kStages && stage < n_stages; ++stage) issue(stage);

  const uint16_t* x_row = x + int64_t(row0 + g < n_rows ? row0 + g : 0) * n_in + 8 * q;
  const bool x_ok = row0 + g < n_rows;
  wait_for_prior_kernel();
  let_next_kernel_start();

  float acc[1][1][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int stage = 0; stage < n_stages; ++stage) {
    const int slot = stage % kStages;
    barrier_wait(&full[slot], uint32_t(stage / kStages) & 1);
    // Weight rows g and g + 8: the swapped kernel's fetches of this quad, or its 4 bf16 blocks.
    uint4 low[4], high[4];
    if constexpr (Shape::kIsBf16) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int offset = ((warp + kWarps * s) * kBlockK + 8 * q) * 2;
        const bool in_row = stage * kStreamedInputs + offset / 2 < n_in;  // past it the swapped kernel reads zeros
        low[s] = in_row ? *reinterpret_cast<const uint4*>(words_of(slot, g) + offset) : zero;
        high[s] = in_row ? *reinterpret_cast<const uint4*>(words_of(slot, g + 8) + offset) : zero;
      }
    } else {
      typename Rows::Fetched fetched[2];
      const int word_offset = (warp * 16 + q * 4) * Rows::kLaneWords * 4;  // the swapped kernel's cursor, in bytes
      const int entry_offset = ((warp >> w.group_shift) << 2) * 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < Rows::kLaneWords; ++i)
          fetched[h].words[i] = *reinterpret_cast<const uint4*>(words_of(slot, g + 8 * h) + word_offset + 16 * i);
        fetched[h].scale_bias = *reinterpret_cast<const uint4*>(entries_of(slot, g + 8 * h) + entry_offset);
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        low[s] = Rows::expand(fetched[0], s);
        high[s] = Rows::expand(fetched[1], s);
      }
    }
    barrier_arrive(&empty[slot]);  // read into registers: the slot may be refilled
    uint4 xv[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int k = (stage * 32 + warp + kWarps * s) * kBlockK;
      xv[s] = k + 8 * q < n_in && x_ok ? __ldg(reinterpret_cast<const uint4*>(x_row + k)) : zero;
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (stage * 32 + warp + kWarps * s >= n_blocks_k) break;  // skipped, as the register kernel skips it
#pragma unroll
      for (int step = 0; step < 2; ++step)
        mma_bf16(acc[0][0], word(low[s], 2 * step), word(high[s], 2 * step), word(low[s], 2 * step + 1),
                 word(high[s], 2 * step + 1), word(xv[s], 2 * step), word(xv[s], 2 * step + 1));
    }
    if (warp == 0 && stage + kStages < n_stages) {
      barrier_wait(&empty[slot], uint32_t(stage / kStages) & 1);  // every thread has read this stage
      issue(stage + kStages);
    }
  }
  store_swapped_sums<1, 1, kOutput>(acc, partials, row0, block_col0, n_rows, n_out, y);
}

// The staged kernel, for many rows: the register kernel's element chains fed from shared memory.
// TMA copies K blocks into a ring of kStages stages, each holding kBlocksPerStage consecutive
// blocks of one chain (w, w + 8, ...) for the block's rows and columns; mbarriers, not block
// barriers, pass the stages. Each of the 8 warps owns kRowTiles x kColTiles mma tiles of the
// block's output and runs the chains of the register kernel's 8 warps one after another, each from
// zero, adding its sum into a running total in chain order: the register kernel's warp chains and
// warp_sum, so the same bits. Thread 0 also issues the copies, kStages - 1 stages ahead.
// A stage's weights: bf16 rows as one box [kCols][32] per K block; MLX affine rows
// (kBlocksPerStage = 4: one quad's slice of a chain, affine_layout.h) as one box of the slice's
// packed words [kCols][16 * lane words] and one of its scale/bias entries [kCols][4], dequantized
// by the register kernel's own reader.
constexpr int kStagedBlockBytes = kBlockK * 2;  // one row's K block of activations: 64 bytes
template <class Rows>
struct StagedWeights;
// copy(): thread 0 brings a stage's weights (chain `chain`, K blocks first_block, + 8, ...: `count`
// of them) for the weight rows col0.. into the box; fetch(): what a lane (weight row `row` of the
// box, quad q) reads of it, expand(fetched, s): block s's inputs 8q .. 8q + 7 as bf16 pairs.
template <>
struct StagedWeights<Bf16Rows> {
  __host__ __device__ static constexpr int box_bytes(int cols, int blocks) {
    return blocks * cols * kStagedBlockBytes;
  }
  template <int kCols>
  __device__ __forceinline__ static void copy(unsigned char* box, const CUtensorMap* w_map, const CUtensorMap*,
                                              const Bf16Rows&, int chain, int first_block, int count, int col0,
                                              uint64_t* barrier) {
    for (int s = 0; s < count; ++s)
      copy_box(box + s * kCols * kStagedBlockBytes, w_map, (first_block + kWarps * s) * kBlockK, col0, barrier);
  }
  using Fetched = const unsigned char*;  // the row's inputs 8q.. of block 0; block s follows kCols rows later
  template <int kCols>
  __device__ __forceinline__ static Fetched fetch(const unsigned char* box, int row, int q) {
    return box + row * kStagedBlockBytes + 16 * q;
  }
  template <int kCols>
  __device__ __forceinline__ static uint4 expand(Fetched fetched, int s) {
    return *reinterpret_cast<const uint4*>(fetched + s * kCols * kStagedBlockBytes);
  }
  // hold(): every block's inputs of fetch()'s place loaded at once (blocks past a short stage's
  // count included: the box has room for them, and nothing stores them); held(h, s) is block s's.
  template <int kBlocks>
  struct Held {
    uint4 blocks[kBlocks];
  };
  template <int kCols, int kBlocks>
  __device__ __forceinline__ static Held<kBlocks> hold(const unsigned char* box, int row, int q) {
    Held<kBlocks> h;
#pragma unroll
    for (int s = 0; s < kBlocks; ++s) h.blocks[s] = expand<kCols>(fetch<kCols>(box, row, q), s);
    return h;
  }
  template <int kCols, int kBlocks>
  __device__ __forceinline__ static uint4 held(const Held<kBlocks>& h, int s) {
    return h.blocks[s];
  }
};
template <int kBits>
struct StagedWeights<AffineRows<kBits>> {
  static constexpr int kWordBytes = 16 * AffineRows<kBits>::kLaneWords;  // a lane's four blocks
  // A quad slice comes whole, whatever the stage's count of blocks.
  __host__ __device__ static constexpr int box_bytes(int cols, int) { return cols * (4 * kWordBytes + 16); }
  // The chain's slice of quad t: lane words at t * 32 * 4 * words + w * 16 * words, entries at
  // t * (32 >> shift) + (w >> shift) * 4 (the register kernel's cursor and fetch).
  template <int kCols>
  __device__ __forceinline__ static void copy(unsigned char* box, const CUtensorMap* w_map,
                                              const CUtensorMap* scale_map, const AffineRows<kBits>& rows, int chain,
                                              int first_block, int, int col0, uint64_t* barrier) {
    const int quad = first_block / 32;
    copy_box(box, w_map, quad * AffineRows<kBits>::kQuadWords + chain * 16 * AffineRows<kBits>::kLaneWords, col0,
             barrier);
    const int entry = (quad << (5 - rows.group_shift)) + ((chain >> rows.group_shift) << 2);
    copy_box(box + kCols * 4 * kWordBytes, scale_map, entry, col0, barrier);
  }
  using Fetched = typename AffineRows<kBits>::Fetched;
  template <int kCols>
  __device__ __forceinline__ static Fetched fetch(const unsigned char* box, int row, int q) {
    const unsigned char* words = box + row * 4 * kWordBytes + q * kWordBytes;
    Fetched fetched;
#pragma unroll
    for (int h = 0; h < AffineRows<kBits>::kLaneWords; ++h)
      fetched.words[h] = *reinterpret_cast<const uint4*>(words + 16 * h);
    fetched.scale_bias = *reinterpret_cast<const uint4*>(box + kCols * 4 * kWordBytes + row * 16);
    return fetched;
  }
  template <int kCols>
  __device__ __forceinline__ static uint4 expand(const Fetched& fetched, int s) {
    return AffineRows<kBits>::expand(fetched, s);
  }
  template <int kBlocks>
  using Held = Fetched;  // a quad's words and scales: fetch() loads them all
  template <int kCols, int kBlocks>
  __device__ __forceinline__ static Held<kBlocks> hold(const unsigned char* box, int row, int q) {
    return fetch<kCols>(box, row, q);
  }
  template <int kCols, int kBlocks>
  __device__ __forceinline__ static uint4 held(const Held<kBlocks>& h, int s) {
    return expand<kCols>(h, s);
  }
};

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, class Rows>
struct StagedShape {
  static_assert(kWarps % kWarpRows == 0, "linear: the warp grid must hold the 8 warps");
  static_assert(std::is_same_v<Rows, Bf16Rows> || kBlocksPerStage == 4, "linear: a quantized stage is one quad");
  static constexpr int kWarpCols = kWarps / kWarpRows;
  static constexpr int kRows = kWarpRows * kRowTiles * kMmaRows;   // activation rows of a block
  static constexpr int kCols = kWarpCols * kColTiles * kMmaCols;   // weight rows (output columns)
  static_assert(kRows <= 256 && kCols <= 256, "linear: a TMA box holds at most 256 rows");
  static constexpr int kInputBytes = kBlocksPerStage * kRows * kStagedBlockBytes;
  static constexpr int kStageBytes = kInputBytes + StagedWeights<Rows>::box_bytes(kCols, kBlocksPerStage);
};

// The stages of one call in order: chain w's blocks b = w, w + 8, ..., kBlocksPerStage to a stage,
// then chain w + 1's; chains with no blocks (K under 8 blocks) have no stage.
template <int kBlocksPerStage>
struct StageWalk {
  int chain = 0, first_block = 0;
  __device__ __forceinline__ bool at_stage(int n_blocks) {
    while (chain < kWarps && first_block >= n_blocks) first_block = ++chain;
    return chain < kWarps;
  }
  __device__ __forceinline__ int blocks(int n_blocks) const {
    return min(kBlocksPerStage, (n_blocks - first_block + kWarps - 1) / kWarps);
  }
  __device__ __forceinline__ void next() { first_block += kWarps * kBlocksPerStage; }
};

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, int kStages, LinearOutput kOutput,
          class Rows>
__global__ void __launch_bounds__(kWarps * 32, 1)
    linear_staged_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                         const __grid_constant__ CUtensorMap scale_map, Rows rows, int n_rows, int n_out, int n_in,
                         void* __restrict__ y) {
  using Shape = StagedShape<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, Rows>;
  extern __shared__ __align__(128) unsigned char staged_shared[];
  // Stage s: kBlocksPerStage activation boxes [kRows][32], then the weights (StagedWeights).
  uint64_t* full = reinterpret_cast<uint64_t*>(staged_shared + kStages * Shape::kStageBytes);
  uint64_t* empty = full + kStages;
  const auto x_box = [&](int slot, int s) {
    return staged_shared + slot * Shape::kStageBytes + s * Shape::kRows * kStagedBlockBytes;
  };
  const auto w_box = [&](int slot) { return staged_shared + slot * Shape::kStageBytes + Shape::kInputBytes; };
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int row0 = int(blockIdx.x) * Shape::kRows, col0 = int(blockIdx.y) * Shape::kCols;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;
  const bool is_producer = threadIdx.x == 0;
  if (is_producer) {
    for (int slot = 0; slot < kStages; ++slot) {
      barrier_init(&full[slot], 1);
      barrier_init(&empty[slot], kWarps);
    }
    barrier_init_fence();
  }
  __syncthreads();
  wait_for_prior_kernel();
  let_next_kernel_start();

  StageWalk<kBlocksPerStage> copies;  // thread 0's: the next stage to copy
  int issued = 0;
  const auto issue_next = [&] {
    if (!copies.at_stage(n_blocks_k)) return;
    const int slot = issued % kStages;
    if (issued >= kStages) barrier_wait(&empty[slot], uint32_t(issued / kStages - 1) & 1);  // its last use read
    const int count = copies.blocks(n_blocks_k);
    // A box's bytes count in full, the zeros past the matrix's edges included.
    const int weight_bytes = StagedWeights<Rows>::box_bytes(Shape::kCols, count);
    barrier_arrive_expecting(&full[slot], uint32_t(count * Shape::kRows * kStagedBlockBytes + weight_bytes));
    for (int s = 0; s < count; ++s)
      copy_box(x_box(slot, s), &x_map, (copies.first_block + kWarps * s) * kBlockK, row0, &full[slot]);
    StagedWeights<Rows>::template copy<Shape::kCols>(w_box(slot), &w_map, &scale_map, rows, copies.chain,
                                                     copies.first_block, count, col0, &full[slot]);
    copies.next();
    ++issued;
  };
  if (is_producer)
    for (int i = 0; i < kStages - 1; ++i) issue_next();

  const int warp_row0 = (warp / Shape::kWarpCols) * kRowTiles * kMmaRows;
  const int warp_col0 = (warp % Shape::kWarpCols) * kColTiles * kMmaCols;
  float total[kRowTiles][kColTiles][4];
  int consumed = 0;
  for (int w = 0; w < kWarps; ++w) {
    float acc[kRowTiles][kColTiles][4] = {};
    for (int b = w; b < n_blocks_k; b += kWarps * kBlocksPerStage) {
      if (is_producer) issue_next();
      __syncwarp();  // warp 0 whole again before its mma
      const int count = min(kBlocksPerStage, (n_blocks_k - b + kWarps - 1) / kWarps);
      const int slot = consumed % kStages;
      barrier_wait(&full[slot], uint32_t(consumed / kStages) & 1);
      typename StagedWeights<Rows>::Fetched fetched[kColTiles];  // each column tile's part of the stage
#pragma unroll
      for (int c = 0; c < kColTiles; ++c)
        fetched[c] = StagedWeights<Rows>::template fetch<Shape::kCols>(w_box(slot), warp_col0 + c * kMmaCols + g, q);
      const auto multiply_block = [&](int s) {
        uint4 xv[kRowTiles][2], wv[kColTiles];
        const unsigned char* xs = x_box(slot, s) + (warp_row0 + g) * kStagedBlockBytes + 16 * q;
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            xv[r][h] = *reinterpret_cast<const uint4*>(xs + (r * kMmaRows + 8 * h) * kStagedBlockBytes);
#pragma unroll
        for (int c = 0; c < kColTiles; ++c) wv[c] = StagedWeights<Rows>::template expand<Shape::kCols>(fetched[c], s);
        multiply_k_block(acc, xv, wv);
      };
      if (count == kBlocksPerStage) {  // a whole stage: no exit between its blocks, so loads can run ahead
#pragma unroll
        for (int s = 0; s < kBlocksPerStage; ++s) multiply_block(s);
      } else {
        for (int s = 0; s < count; ++s) multiply_block(s);
      }
      __syncwarp();
      if (lane == 0) barrier_arrive(&empty[slot]);
      ++consumed;
    }
    // warp_sum's order: the first chain's sum as it is, then each next one added.
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int c = 0; c < kColTiles; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) total[r][c][e] = w == 0 ? acc[r][c][e] : total[r][c][e] + acc[r][c][e];
  }

  // mma tile layout: entries 0, 1 are row g, columns 2q, 2q + 1; entries 2, 3 the same for row g + 8.
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int c = 0; c < kColTiles; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + warp_row0 + r * kMmaRows + g + 8 * h;
        const int col = col0 + warp_col0 + c * kMmaCols + 2 * q;
        if (row < n_rows && col < n_out)
          store_pair<kOutput>(y, row, col, n_out, total[r][c][2 * h], total[r][c][2 * h + 1]);
      }
}

// The wgmma kernel, for many rows of bf16 or MLX weights: the staged kernel's stages and chains
// with each k16 step one warpgroup mma (bench/receipts/h100-mma-bits-probe.md: the same bits for the
// same steps). Three warpgroups: the first feeds the stages, the other two each multiply 64 rows by the
// block's 128 weight rows. A step must take the register kernels' inputs (step s of a K block:
// 8q + 4s + i for q, i < 4), but wgmma reads B's K as two core matrices of 8 k slots, so the weights
// are regrouped by step in shared memory: thread 0 brings each stage's activations into the stage and
// its weight rows, as they lie, into a raw buffer (TMA moves nothing under 16 bytes), and the
// feeding warpgroup moves the raw weights' input pairs into the stage. Which slot of a step holds
// which input does not change the bits, so the slots are those that let thread q of an mma quad take
// its A registers for both steps, inputs 8q .. 8q + 7 of a row, in one 16-byte load that no other
// thread's load shares a bank with: pair 4q + j of a weight row (inputs 8q + 2j, + 1) goes to step
// j / 2, core matrix j % 2, 4-byte place q. A warp's moves (8 weight rows, 4 places) touch every bank
// once. (Async copies of each pair from global memory starved the multipliers, and the 64-byte
// swizzle for B, with the same bits, was slower: h100-wgmma-linear.md.)
constexpr size_t kMaxSharedBytes = 227 * 1024;                    // a Hopper block's, opted in
constexpr int kWgmmaRows = 128, kWgmmaCols = 128;                 // activation rows, weight rows of a block
constexpr int kWgmmaBlockBytes = kWgmmaCols * kStagedBlockBytes;  // a K block of the weights: 8 KB
constexpr int kWgmmaStepBytes = kWgmmaBlockBytes / 2;             // one k16 step's B
constexpr int kWgmmaHalfBytes = kWgmmaStepBytes / 2;              // its 8-slot core matrices (K step)

template <int kBlocksPerStage, int kStages, int kRaw, class Rows>
struct WgmmaShape {
  static_assert(std::is_same_v<Rows, Bf16Rows> || kBlocksPerStage == 4, "linear: a quantized stage is one quad");
  static constexpr int kInputBytes = kBlocksPerStage * kWgmmaRows * kStagedBlockBytes;
  static constexpr int kStageBytes = kInputBytes + kBlocksPerStage * kWgmmaBlockBytes;
  static constexpr int kRawBytes = StagedWeights<Rows>::box_bytes(kWgmmaCols, kBlocksPerStage);
  // Raw buffers: up to kRaw stages' weights in flight from global memory while one is moved, as many
  // as fit beside the stages.
  static constexpr size_t shared_bytes(int raw_buffers) {
    return size_t(kStages) * kStageBytes + size_t(raw_buffers) * kRawBytes +
           (2 * kStages + 2 * raw_buffers) * sizeof(uint64_t);
  }
  static constexpr int kRawBuffers = [] {
    int raw_buffers = kRaw;
    while (raw_buffers > 1 && shared_bytes(raw_buffers) > kMaxSharedBytes) --raw_buffers;
    return raw_buffers;
  }();
  static constexpr size_t kSharedBytes = shared_bytes(kRawBuffers);
  static_assert(kSharedBytes <= kMaxSharedBytes, "linear: the wgmma kernel's stages do not fit in shared memory");
  // Thread 0 refills a raw buffer with the stage kRawBuffers on, whose slot the multipliers free only
  // once they have started the stage after the one it held: more raw buffers than kStages - 1 wait on
  // a stage not yet moved (a deadlock), and more than kStages - 2 make the feeders wait on the
  // multipliers (4 of 5 stages ran 1.38x slower than 2, h100-wgmma-feeders.md; 2 of 3 1.05-1.25x
  // slower than 1, while 3 of 5 ran as 2: h100-wgmma-raw-buffers.md).
  static_assert(kRawBuffers <= kStages - 1, "linear: the wgmma kernel's raw buffers must stay behind its stages");
  // Passes whose raw loads a feeding thread holds at once: 32 registers' worth.
  static constexpr int kHeldPasses =
      sizeof(typename StagedWeights<Rows>::template Held<kBlocksPerStage>) <= 32 ? kWgmmaCols / 32 : 2;
};

template <int kBlocksPerStage, int kStages, int kRaw, LinearOutput kOutput, class Rows>
__global__ void __launch_bounds__(3 * 128, 1)
    linear_wgmma_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                        const __grid_constant__ CUtensorMap scale_map, Rows rows, int n_rows, int n_out, int n_in,
                        void* __restrict__ y) {
  // The multiplying warps free a stage only once the next one's wgmma has started: two stages are
  // held, and the feeders need a third to fill.
  static_assert(kStages >= 3, "linear: the wgmma kernel needs a third stage to make progress");
  using Shape = WgmmaShape<kBlocksPerStage, kStages, kRaw, Rows>;
  using Raw = StagedWeights<Rows>;
  extern __shared__ __align__(128) unsigned char wgmma_shared[];
  unsigned char* raw_weights = wgmma_shared + kStages * Shape::kStageBytes;  // [buffer][the staged kernel's box]
  uint64_t* full = reinterpret_cast<uint64_t*>(raw_weights + Shape::kRawBuffers * Shape::kRawBytes);
  uint64_t* empty = full + kStages;
  uint64_t* raw_full = empty + kStages;
  uint64_t* raw_empty = raw_full + Shape::kRawBuffers;  // every feeder has read it
  const auto x_box = [&](int slot, int s) {
    return wgmma_shared + slot * Shape::kStageBytes + s * kWgmmaRows * kStagedBlockBytes;
  };
  const auto w_box = [&](int slot, int s) {
    return wgmma_shared + slot * Shape::kStageBytes + Shape::kInputBytes + s * kWgmmaBlockBytes;
  };
  const auto raw_box = [&](int buffer) { return raw_weights + buffer * Shape::kRawBytes; };
  // Read through a shuffle so the compiler knows it is the same in every thread of a warp: wgmma in
  // a path it took for divergent would be serialized.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0), thread = int(threadIdx.x) % 128;
  const int row0 = int(blockIdx.x) * kWgmmaRows, col0 = int(blockIdx.y) * kWgmmaCols;
  const int n_blocks_k = (n_in + kBlockK - 1) / kBlockK;
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < kStages; ++slot) {
      barrier_init(&full[slot], 128 + 1);  // every feeding thread, and thread 0's expected bytes
      barrier_init(&empty[slot], 8);       // every multiplying warp
    }
    for (int buffer = 0; buffer < Shape::kRawBuffers; ++buffer) {
      barrier_init(&raw_full[buffer], 1);
      barrier_init(&raw_empty[buffer], 128);
    }
    barrier_init_fence();
  }
  __syncthreads();
  wait_for_prior_kernel();
  let_next_kernel_start();

  if (warpgroup == 0) {
    // The feeding warps need few registers (56: 32 of them a stage's raw loads): they give theirs to
    // the multiplying ones, whose two 64 x 128 sums (a chain's and the total) would not fit the 168
    // each of 384 threads gets.
    registers_give<56>();
    StageWalk<kBlocksPerStage> copies, moves;  // thread 0's next stage to copy; everyone's next to move
    int issued = 0;
    // Thread 0: stage `issued`'s activations into its slot, its weights as they lie into a raw buffer.
    const auto issue_next = [&] {
      if (!copies.at_stage(n_blocks_k)) return;
      const int slot = issued % kStages, buffer = issued % Shape::kRawBuffers;
      if (issued >= kStages) barrier_wait(&empty[slot], uint32_t(issued / kStages - 1) & 1);  // its last use read
      if (issued >= Shape::kRawBuffers)  // every feeder has read the buffer's last stage
        barrier_wait(&raw_empty[buffer], uint32_t(issued / Shape::kRawBuffers - 1) & 1);
      const int count = copies.blocks(n_blocks_k);
      // A box's bytes count in full, the zeros past the matrix's edges included.
      barrier_arrive_expecting(&full[slot], uint32_t(count * kWgmmaRows * kStagedBlockBytes));
      barrier_arrive_expecting(&raw_full[buffer], uint32_t(Raw::box_bytes(kWgmmaCols, count)));
      for (int s = 0; s < count; ++s)
        copy_box(x_box(slot, s), &x_map, (copies.first_block + kWarps * s) * kBlockK, row0, &full[slot]);
      Raw::template copy<kWgmmaCols>(raw_box(buffer), &w_map, &scale_map, rows, copies.chain, copies.first_block, count,
                                     col0, &raw_full[buffer]);
      copies.next();
      ++issued;
    };
    if (thread == 0)
      for (int i = 0; i < Shape::kRawBuffers; ++i) issue_next();
    // Thread (row r, quad q) moves inputs 8q .. 8q + 7 of each block of weight row r, as bf16 (the
    // register kernels' reader dequantizes), as four pairs; a block of the stage is
    // [step][core matrix][row / 8][row % 8][16 bytes].
    const int quad = thread % 4, first_row = thread / 4;  // 32 rows a pass
    for (int moved = 0; moves.at_stage(n_blocks_k); moves.next(), ++moved) {
      const int slot = moved % kStages, buffer = moved % Shape::kRawBuffers;
      barrier_wait(&raw_full[buffer], uint32_t(moved / Shape::kRawBuffers) & 1);
      const int count = moves.blocks(n_blocks_k);
      const auto store_pairs = [&](int r, const uint4& pairs, int s) {
        unsigned char* place = w_box(slot, s) + (r / 8) * 128 + (r % 8) * 16 + 4 * quad;
        *reinterpret_cast<uint32_t*>(place) = pairs.x;
        *reinterpret_cast<uint32_t*>(place + kWgmmaHalfBytes) = pairs.y;
        *reinterpret_cast<uint32_t*>(place + kWgmmaStepBytes) = pairs.z;
        *reinterpret_cast<uint32_t*>(place + kWgmmaStepBytes + kWgmmaHalfBytes) = pairs.w;
      };
      // The stores of a pass cannot start before its loads land, and ptxas keeps shared loads and
      // stores in order: loading kHeldPasses passes first puts their latencies side by side.
      using Held = typename Raw::template Held<kBlocksPerStage>;
#pragma unroll
      for (int first_pass = 0; first_pass < kWgmmaCols / 32; first_pass += Shape::kHeldPasses) {
        Held held[Shape::kHeldPasses];
#pragma unroll
        for (int p = 0; p < Shape::kHeldPasses; ++p)
          held[p] = Raw::template hold<kWgmmaCols, kBlocksPerStage>(raw_box(buffer), first_row + 32 * (first_pass + p),
                                                                    quad);
        if (first_pass + Shape::kHeldPasses == kWgmmaCols / 32) barrier_arrive(&raw_empty[buffer]);
#pragma unroll
        for (int p = 0; p < Shape::kHeldPasses; ++p)
#pragma unroll
          for (int s = 0; s < kBlocksPerStage; ++s) {
            if (s >= count) break;
            store_pairs(first_row + 32 * (first_pass + p), Raw::template held<kWgmmaCols, kBlocksPerStage>(held[p], s),
                        s);
          }
      }
      fence_async_shared();  // the moved pairs, as the async proxy wgmma reads through sees them
      barrier_arrive(&full[slot]);
      if (thread == 0) issue_next();
    }
  } else {
    registers_take<224>();
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
    const int tile_row = (warpgroup - 1) * 64 + warp * 16 + g;  // and tile_row + 8
    // Inputs 8q .. 8q + 7 of rows tile_row and tile_row + 8: step s's A registers are their pairs 2s, 2s + 1.
    const int a_offset = tile_row * kStagedBlockBytes + 16 * q;
    float total[64];
    int consumed = 0, running_slot = -1;  // the stage whose wgmma may still be running
    const auto release = [&](int slot) {
      __syncwarp();
      if (lane == 0) barrier_arrive(&empty[slot]);
    };
    for (int chain = 0; chain < kWarps; ++chain) {
      float acc[64];
#pragma unroll
      for (int e = 0; e < 64; ++e) acc[e] = 0.0f;
      for (int b = chain; b < n_blocks_k; b += kWarps * kBlocksPerStage) {
        const int count = min(kBlocksPerStage, (n_blocks_k - b + kWarps - 1) / kWarps);
        const int slot = consumed % kStages;
        barrier_wait(&full[slot], uint32_t(consumed / kStages) & 1);
        fence_async_shared();  // the copied weights, as the async proxy wgmma reads through sees them
        wgmma_fence();
        for (int s = 0; s < count; ++s) {
          const unsigned char* a = x_box(slot, s) + a_offset;
          const uint4 upper = *reinterpret_cast<const uint4*>(a);
          const uint4 lower = *reinterpret_cast<const uint4*>(a + 8 * kStagedBlockBytes);
          wgmma_m64n128k16(acc, upper.x, lower.x, upper.y, lower.y,
                           wgmma_descriptor(w_box(slot, s), kWgmmaHalfBytes, 128));
          wgmma_m64n128k16(acc, upper.z, lower.z, upper.w, lower.w,
                           wgmma_descriptor(w_box(slot, s) + kWgmmaStepBytes, kWgmmaHalfBytes, 128));
        }
        wgmma_commit();
        if (running_slot >= 0) {  // the stage before has been read: its slot can be refilled
          wgmma_wait<1>();
          release(running_slot);
        }
        running_slot = slot;
        ++consumed;
      }
      wgmma_wait<0>();  // the chain's sum is complete
      if (running_slot >= 0) release(running_slot);
      running_slot = -1;
      // warp_sum's order: the first chain's sum as it is, then each next one added.
#pragma unroll
      for (int e = 0; e < 64; ++e) total[e] = chain == 0 ? acc[e] : total[e] + acc[e];
    }
    // Tile j (8 weight rows): entries 4j, 4j + 1 are row tile_row, columns 8j + 2q, +1; 4j + 2, 4j + 3 row + 8.
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + tile_row + 8 * h, col = col0 + 8 * j + 2 * q;
        if (row < n_rows && col < n_out)
          store_pair<kOutput, true>(y, row, col, n_out, total[4 * j + 2 * h], total[4 * j + 2 * h + 1]);
      }
  }
}

using Launcher = void (*)(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in,
                          void* y, LinearOutput output, cudaStream_t stream);

template <int kRowTiles, int kColTiles, int kColGroups, int kUnroll, bool kUpperRows, class Rows>
void launch_rows(const uint16_t* x, int64_t n_rows, const Rows& rows, int64_t n_out, int64_t n_in, void* y,
                 LinearOutput output, cudaStream_t stream) {
  constexpr int64_t block_rows = kMmaRows * kRowTiles, block_cols = kMmaCols * kColTiles * kColGroups;
  constexpr unsigned threads = kWarps * 32 * kColGroups;
  // Row tiles vary fastest, so the blocks that share a weight slice run together and share it in L2.
  const dim3 grid(unsigned((n_rows + block_rows - 1) / block_rows), unsigned((n_out + block_cols - 1) / block_cols));
  const auto launch_for = [&](auto output_constant) {
    constexpr LinearOutput kOutput = decltype(output_constant)::value;
    launch_overlapped("linear_kernel", linear_kernel<kRowTiles, kColTiles, kColGroups, kUnroll, kUpperRows, kOutput, Rows>,
                      grid, dim3(threads), 0, stream, x, int(n_rows), rows, int(n_out), int(n_in), y);
  };
  switch (output) {
    case LinearOutput::f32: return launch_for(std::integral_constant<LinearOutput, LinearOutput::f32>{});
    case LinearOutput::bf16: return launch_for(std::integral_constant<LinearOutput, LinearOutput::bf16>{});
    case LinearOutput::swiglu_bf16: return launch_for(std::integral_constant<LinearOutput, LinearOutput::swiglu_bf16>{});
  }
}

// Calls f(std::integral_constant<LinearOutput, ...>{}) for `output`.
template <class F>
void with_output(LinearOutput output, F&& f) {
  switch (output) {
    case LinearOutput::f32: return f(std::integral_constant<LinearOutput, LinearOutput::f32>{});
    case LinearOutput::bf16: return f(std::integral_constant<LinearOutput, LinearOutput::bf16>{});
    case LinearOutput::swiglu_bf16: return f(std::integral_constant<LinearOutput, LinearOutput::swiglu_bf16>{});
  }
}

// Which weight formats a configuration is compiled for: every one costs a kernel per output type.
enum Formats : int { kBf16 = 1, kQuantized = 2, kAllFormats = 3 };

template <int kRowTiles, int kColTiles, int kColGroups, int kUnroll, bool kUpperRows, int kFormats>
void launch(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in, void* y,
            LinearOutput output, cudaStream_t stream) {
  with_rows(w, int(n_in), [&](const auto& rows) {
    constexpr bool is_bf16 = std::is_same_v<std::decay_t<decltype(rows)>, Bf16Rows>;
    if constexpr ((kFormats & (is_bf16 ? kBf16 : kQuantized)) != 0)
      launch_rows<kRowTiles, kColTiles, kColGroups, kUnroll, kUpperRows>(x, n_rows, rows, n_out, n_in, y, output, stream);
  });
}

template <int kColTiles, int kRowTiles, int kUnroll, int kFormats>
void launch_swapped(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in, void* y,
                    LinearOutput output, cudaStream_t stream) {
  with_rows(w, int(n_in), [&](const auto& rows) {
    using Rows = std::decay_t<decltype(rows)>;
    if constexpr ((kFormats & (std::is_same_v<Rows, Bf16Rows> ? kBf16 : kQuantized)) != 0)
      with_output(output, [&](auto output_constant) {
        constexpr int64_t block_rows = kSwappedTileRows * kRowTiles, block_cols = kSwappedTileCols * kColTiles;
        const dim3 grid(unsigned((n_rows + block_rows - 1) / block_rows), unsigned((n_out + block_cols - 1) / block_cols));
        launch_overlapped("linear_swapped_kernel",
                          linear_swapped_kernel<kColTiles, kRowTiles, kUnroll, decltype(output_constant)::value, Rows>,
                          grid, dim3(kWarps * 32), 0, stream, x, int(n_rows), rows, int(n_out), int(n_in), y);
      });
  });
}

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, int kStages, class Rows>
constexpr size_t staged_shared_bytes() {
  return size_t(kStages) * StagedShape<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, Rows>::kStageBytes +
         2 * kStages * sizeof(uint64_t);
}

// Lets kKernel take `bytes` of shared memory (past the 48 KB a launch gets by default), once per
// kernel and device. prepare_linear_kernels() does it for every one before a forward is captured.
template <auto kKernel>
void allow_shared_bytes(size_t bytes) {
  static std::atomic<uint64_t> sized_devices{0};
  int device = 0;
  TF_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device % 64);
  if ((sized_devices.load(std::memory_order_relaxed) & bit) != 0) return;
  TF_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  sized_devices.fetch_or(bit);
}

template <int kStages, LinearOutput kOutput, class Rows>
void size_streamed_kernel() {
  allow_shared_bytes<linear_streamed_kernel<kStages, kOutput, Rows>>(streamed_shared_bytes<kStages, Rows>());
}

template <int kStages, int kFormats>
void size_streamed_kernels() {
  const auto for_rows = [&]<class Rows>() {
    size_streamed_kernel<kStages, LinearOutput::bf16, Rows>();
    size_streamed_kernel<kStages, LinearOutput::f32, Rows>();
    size_streamed_kernel<kStages, LinearOutput::swiglu_bf16, Rows>();
  };
  if constexpr ((kFormats & kBf16) != 0) for_rows.template operator()<Bf16Rows>();
  if constexpr ((kFormats & kQuantized) != 0) {
    for_rows.template operator()<AffineRows<4>>();
    for_rows.template operator()<AffineRows<8>>();
  }
}

template <int kStages, int kFormats>
void launch_streamed(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in, void* y,
                     LinearOutput output, cudaStream_t stream) {
  with_rows(w, int(n_in), [&](const auto& rows) {
    using Rows = std::decay_t<decltype(rows)>;
    if constexpr ((kFormats & (std::is_same_v<Rows, Bf16Rows> ? kBf16 : kQuantized)) != 0) {
      // Bulk copies need 16-byte aligned sources; the swapped kernel reads any 8-byte aligned rows,
      // with the same bits.
      if (reinterpret_cast<uintptr_t>(w.packed) % 16 != 0 || reinterpret_cast<uintptr_t>(w.scale_bias) % 16 != 0)
        return launch_swapped<1, 1, 4, kAllFormats>(x, n_rows, w, n_out, n_in, y, output, stream);
      const dim3 grid(unsigned((n_rows + kSwappedTileRows - 1) / kSwappedTileRows),
                      unsigned((n_out + kSwappedTileCols - 1) / kSwappedTileCols));
      with_output(output, [&](auto output_constant) {
        constexpr LinearOutput kOutput = decltype(output_constant)::value;
        size_streamed_kernel<kStages, kOutput, Rows>();
        launch_overlapped("linear_streamed_kernel", linear_streamed_kernel<kStages, kOutput, Rows>, grid,
                          dim3(kWarps * 32), streamed_shared_bytes<kStages, Rows>(), stream, x, int(n_rows), rows,
                          int(n_out), int(n_in), y);
      });
    }
  });
}

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, int kStages, LinearOutput kOutput,
          class Rows>
void size_staged_kernel() {
  allow_shared_bytes<linear_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, kOutput, Rows>>(
      staged_shared_bytes<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, Rows>());
}

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, int kStages, int kFormats>
void size_staged_kernels() {
  const auto for_rows = [&]<class Rows>() {
    size_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, LinearOutput::bf16, Rows>();
    size_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, LinearOutput::f32, Rows>();
    size_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, LinearOutput::swiglu_bf16, Rows>();
  };
  if constexpr ((kFormats & kBf16) != 0) for_rows.template operator()<Bf16Rows>();
  if constexpr ((kFormats & kQuantized) != 0) {
    for_rows.template operator()<AffineRows<4>>();
    for_rows.template operator()<AffineRows<8>>();
  }
}

// The tensor maps StagedWeights<Rows>::copy reads, boxes of `cols` weight rows: bf16 rows by K
// block, or a quad slice's packed words and its scale/bias entries (the second map unused for bf16).
template <class Rows>
std::pair<CUtensorMap, CUtensorMap> staged_weight_maps(const LinearWeights& w, int64_t n_out, int64_t n_in, int cols) {
  if constexpr (std::is_same_v<Rows, Bf16Rows>) {
    const CUtensorMap w_map = matrix_map(w.bf16, TensorElement::bf16, n_out, n_in, cols, kBlockK);
    return {w_map, w_map};
  } else {
    return {matrix_map(w.packed, TensorElement::u32, n_out, affine_row_words(n_in, w.bits), cols,
                       4 * StagedWeights<Rows>::kWordBytes / 4),
            matrix_map(w.scale_bias, TensorElement::u32, n_out, affine_row_entries(n_in, w.group_size), cols, 4)};
  }
}

template <int kWarpRows, int kRowTiles, int kColTiles, int kBlocksPerStage, int kStages, int kFormats>
void launch_staged(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in, void* y,
                   LinearOutput output, cudaStream_t stream) {
  with_rows(w, int(n_in), [&](const auto& rows) {
    using Rows = std::decay_t<decltype(rows)>;
    constexpr bool is_bf16 = std::is_same_v<Rows, Bf16Rows>;
    if constexpr ((kFormats & (is_bf16 ? kBf16 : kQuantized)) != 0) {
      using Shape = StagedShape<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, Rows>;
      constexpr size_t shared_bytes =
          staged_shared_bytes<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, Rows>();
      const CUtensorMap x_map = matrix_map(x, TensorElement::bf16, n_rows, n_in, Shape::kRows, kBlockK);
      const auto [w_map, scale_map] = staged_weight_maps<Rows>(w, n_out, n_in, Shape::kCols);
      const dim3 grid(unsigned((n_rows + Shape::kRows - 1) / Shape::kRows),
                      unsigned((n_out + Shape::kCols - 1) / Shape::kCols));
      with_output(output, [&](auto output_constant) {
        const auto kernel = linear_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages,
                                                 decltype(output_constant)::value, Rows>;
        size_staged_kernel<kWarpRows, kRowTiles, kColTiles, kBlocksPerStage, kStages, decltype(output_constant)::value,
                           Rows>();
        launch_overlapped("linear_staged_kernel", kernel, grid, dim3(kWarps * 32), shared_bytes, stream, x_map, w_map,
                          scale_map, rows, int(n_rows), int(n_out), int(n_in), y);
      });
    }
  });
}

template <int kBlocksPerStage, int kStages, int kRaw, int kFormats>
void size_wgmma_kernels() {
  const auto for_rows = [&]<class Rows>() {
    constexpr size_t bytes = WgmmaShape<kBlocksPerStage, kStages, kRaw, Rows>::kSharedBytes;
    allow_shared_bytes<linear_wgmma_kernel<kBlocksPerStage, kStages, kRaw, LinearOutput::bf16, Rows>>(bytes);
    allow_shared_bytes<linear_wgmma_kernel<kBlocksPerStage, kStages, kRaw, LinearOutput::f32, Rows>>(bytes);
    allow_shared_bytes<linear_wgmma_kernel<kBlocksPerStage, kStages, kRaw, LinearOutput::swiglu_bf16, Rows>>(
        bytes);
  };
  if constexpr ((kFormats & kBf16) != 0) for_rows.template operator()<Bf16Rows>();
  if constexpr ((kFormats & kQuantized) != 0) {
    for_rows.template operator()<AffineRows<4>>();
    for_rows.template operator()<AffineRows<8>>();
  }
}

template <int kBlocksPerStage, int kStages, int kRaw, int kFormats>
void launch_wgmma(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_out, int64_t n_in, void* y,
                  LinearOutput output, cudaStream_t stream) {
  with_rows(w, int(n_in), [&](const auto& rows) {
    using Rows = std::decay_t<decltype(rows)>;
    constexpr bool is_bf16 = std::is_same_v<Rows, Bf16Rows>;
    if constexpr ((kFormats & (is_bf16 ? kBf16 : kQuantized)) != 0) {
      const CUtensorMap x_map = matrix_map(x, TensorElement::bf16, n_rows, n_in, kWgmmaRows, kBlockK);
      const auto [w_map, scale_map] = staged_weight_maps<Rows>(w, n_out, n_in, kWgmmaCols);
      const dim3 grid(unsigned((n_rows + kWgmmaRows - 1) / kWgmmaRows),
                      unsigned((n_out + kWgmmaCols - 1) / kWgmmaCols));
      size_wgmma_kernels<kBlocksPerStage, kStages, kRaw, kFormats>();
      with_output(output, [&](auto output_constant) {
        launch_overlapped("linear_wgmma_kernel",
                          linear_wgmma_kernel<kBlocksPerStage, kStages, kRaw, decltype(output_constant)::value,
                                              Rows>,
                          grid,
                          dim3(3 * 128), WgmmaShape<kBlocksPerStage, kStages, kRaw, Rows>::kSharedBytes, stream, x_map,
                          w_map, scale_map, rows, int(n_rows), int(n_out), int(n_in), y);
      });
    }
  });
}

struct ConfigEntry {
  LinearConfig config;
  int formats;
  Launcher launcher;
  void (*prepare)() = nullptr;  // what its kernels need set up before a capture, if anything
};

#define TF_LINEAR_CONFIG(name, rows, cols, groups, unroll, is_lower_only, formats) \
  ConfigEntry{{name, rows, cols, groups, unroll, is_lower_only}, formats, &launch<rows, cols, groups, unroll, !is_lower_only, formats>}
// The swapped kernel: `cols` tiles of 16 columns by `rows` tiles of 8 rows (any M).
#define TF_SWAPPED_CONFIG(name, cols, rows, unroll, formats) \
  ConfigEntry{{name, rows, 2 * cols, 1, unroll, false}, formats, &launch_swapped<cols, rows, unroll, formats>}
// The streamed kernel: the swapped kernel's t1r1u4 chains fed through `stages` stages of shared memory.
#define TF_STREAMED_CONFIG(name, stages, formats)                                      \
  ConfigEntry{{name, 1, 2, 1, 4, false}, formats, &launch_streamed<stages, formats>, \
              &size_streamed_kernels<stages, formats>}
// The wgmma kernel: 128 rows by 128 weight rows a block, `blocks` K blocks a stage (4 for quantized
// weights: a quad's slice), `stages` stages, `raw` stages' weights landing as they lie.
#define TF_WGMMA_CONFIG(name, blocks, stages, raw, formats)                                            \
  ConfigEntry{{name, 8, 16, 1, blocks, false}, formats, &launch_wgmma<blocks, stages, raw, formats>, \
              &size_wgmma_kernels<blocks, stages, raw, formats>}
// The staged kernel: a grid of warp_rows x (8 / warp_rows) warps, each row_tiles 16-row by
// col_tiles 8-column mma tiles; blocks K blocks a stage (4 for quantized weights), `stages` stages.
#define TF_STAGED_CONFIG(name, warp_rows, row_tiles, col_tiles, blocks, stages, formats)                       \
  ConfigEntry{{name, warp_rows * row_tiles, (8 / warp_rows) * col_tiles, 1, blocks, false}, formats,           \
              &launch_staged<warp_rows, row_tiles, col_tiles, blocks, stages, formats>,                        \
              &size_staged_kernels<warp_rows, row_tiles, col_tiles, blocks, stages, formats>}
// Every configuration the bench times and the test checks. The first four are the original ones.
// Quantized fetches are 4 or 8 bytes, not 16, so deeper unrolls keep as many bytes in flight.
constexpr ConfigEntry kConfigs[] = {
    TF_LINEAR_CONFIG("r1c1u8-lo", 1, 1, 1, 8, true, kAllFormats),
    TF_LINEAR_CONFIG("r1c1u4", 1, 1, 1, 4, false, kAllFormats),
    TF_LINEAR_CONFIG("r2c1u2", 2, 1, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r4c2u1", 4, 2, 1, 1, false, kBf16),
    TF_LINEAR_CONFIG("r1c2u8-lo", 1, 2, 1, 8, true, kAllFormats),
    TF_LINEAR_CONFIG("r1c4u4-lo", 1, 4, 1, 4, true, kAllFormats),
    TF_LINEAR_CONFIG("r1c2u4", 1, 2, 1, 4, false, kAllFormats),
    TF_LINEAR_CONFIG("r1c4u2", 1, 4, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r1c4u4", 1, 4, 1, 4, false, kAllFormats),
    TF_LINEAR_CONFIG("r1c8u2", 1, 8, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r1c4g2u2", 1, 4, 2, 2, false, kBf16),
    TF_LINEAR_CONFIG("r2c2u2", 2, 2, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r2c4u1", 2, 4, 1, 1, false, kAllFormats),
    TF_LINEAR_CONFIG("r2c4u2", 2, 4, 1, 2, false, kAllFormats),
    TF_LINEAR_CONFIG("r2c8u1", 2, 8, 1, 1, false, kBf16),
    TF_LINEAR_CONFIG("r2c4g2u2", 2, 4, 2, 2, false, kBf16),
    TF_LINEAR_CONFIG("r4c2u2", 4, 2, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r4c4u1", 4, 4, 1, 1, false, kAllFormats),
    TF_LINEAR_CONFIG("r4c4u2", 4, 4, 1, 2, false, kBf16),
    TF_LINEAR_CONFIG("r4c8u1", 4, 8, 1, 1, false, kBf16),
    TF_LINEAR_CONFIG("r4c2g2u1", 4, 2, 2, 1, false, kBf16),
    TF_LINEAR_CONFIG("r4c4g2u1", 4, 4, 2, 1, false, kAllFormats),
    TF_LINEAR_CONFIG("r1c1u16-lo", 1, 1, 1, 16, true, kQuantized),
    TF_LINEAR_CONFIG("r1c2u16-lo", 1, 2, 1, 16, true, kQuantized),
    TF_LINEAR_CONFIG("r1c1u8", 1, 1, 1, 8, false, kQuantized),
    TF_LINEAR_CONFIG("r1c2u8", 1, 2, 1, 8, false, kQuantized),
    TF_SWAPPED_CONFIG("t1r1u8", 1, 1, 8, kAllFormats),
    TF_SWAPPED_CONFIG("t1r1u4", 1, 1, 4, kAllFormats),
    TF_STREAMED_CONFIG("q16s2", 2, kAllFormats),
    TF_SWAPPED_CONFIG("t2r1u4", 2, 1, 4, kAllFormats),
    TF_SWAPPED_CONFIG("t1r2u4", 1, 2, 4, kAllFormats),
    TF_SWAPPED_CONFIG("t2r2u4", 2, 2, 4, kQuantized),
    TF_SWAPPED_CONFIG("t1r4u4", 1, 4, 4, kAllFormats),
    TF_SWAPPED_CONFIG("t2r4u4", 2, 4, 4, kQuantized),
    TF_SWAPPED_CONFIG("t1r4u2", 1, 4, 2, kAllFormats),
    TF_SWAPPED_CONFIG("t2r4u2", 2, 4, 2, kAllFormats),
    TF_SWAPPED_CONFIG("t1r8u1", 1, 8, 1, kAllFormats),
    TF_SWAPPED_CONFIG("t1r8u2", 1, 8, 2, kAllFormats),
    TF_SWAPPED_CONFIG("t2r8u1", 2, 8, 1, kAllFormats),
    TF_STAGED_CONFIG("s128x128b2s4", 4, 2, 8, 2, 4, kBf16),
    TF_STAGED_CONFIG("s128x128b4s3", 4, 2, 8, 4, 3, kBf16),
    TF_STAGED_CONFIG("s64x128b4s4", 2, 2, 4, 4, 4, kAllFormats),
    TF_STAGED_CONFIG("s64x64b4s4", 2, 2, 2, 4, 4, kAllFormats),
    TF_STAGED_CONFIG("s128x64b4s4", 4, 2, 4, 4, 4, kAllFormats),
    TF_STAGED_CONFIG("s256x64b2s4", 4, 4, 4, 2, 4, kBf16),
    TF_STAGED_CONFIG("s64x32b4s6", 4, 1, 2, 4, 6, kAllFormats),
    TF_WGMMA_CONFIG("g128x128b2s5r2", 2, 5, 2, kBf16),
    TF_WGMMA_CONFIG("g128x128b4s3r1", 4, 3, 1, kAllFormats),
};
#undef TF_LINEAR_CONFIG
#undef TF_SWAPPED_CONFIG
#undef TF_STREAMED_CONFIG
#undef TF_STAGED_CONFIG
#undef TF_WGMMA_CONFIG
constexpr int kConfigCount = int(sizeof kConfigs / sizeof kConfigs[0]);

constexpr int config_id_of(std::string_view name) {
  for (int i = 0; i < kConfigCount; ++i)
    if (name == kConfigs[i].config.name) return i;
  return -1;
}

constexpr int formats_of(int bits) { return bits == 0 ? kBf16 : kQuantized; }

// The dispatch tables, bf16 and quantized: the configuration for every M up to max_rows. Edit them
// from the bench's table (bench_cuda_linear prints the fastest configuration per M); a name not in
// kConfigs, or one not compiled for the table's format, fails to compile.
struct DispatchEntry {
  int64_t max_rows;
  int config_id;
};
constexpr DispatchEntry kBf16Dispatch[] = {
    {8, config_id_of("q16s2")},  // in a whole step; alone it is 1.02x r1c1u8-lo's time (h100-linear-streamed-decode.md)
    {16, config_id_of("r1c2u4")},
    {32, config_id_of("r2c4u2")},
    {192, config_id_of("r4c4g2u1")},  // 0.99x the wgmma kernel's time at 192 rows, 0.90-0.93x at 129-160 (h100-wgmma-loads-first.md)
    // 0.92x s128x128b4s3's time at 4,096 rows (h100-wgmma-feeders.md); loads first, 0.92x again, and 0.89x
    // s64x128b4s4's at 193-256 rows (h100-wgmma-loads-first.md)
    {INT64_MAX, config_id_of("g128x128b2s5r2")},
};
constexpr DispatchEntry kQuantizedDispatch[] = {
    {8, config_id_of("t1r1u4")},
    {16, config_id_of("t2r2u4")},
    {32, config_id_of("r1c4u4")},
    {112, config_id_of("t2r8u1")},  // 0.98x the wgmma kernel's time at 112 rows, 1.01x at 120 (h100-wgmma-loads-first.md)
    // 0.75x s64x128b4s4's time at 256 rows; 0.95x two raw buffers' at 4,096, 0.80x at 512 (h100-wgmma-raw-buffers.md);
    // loads first, 0.91-0.95x again, and 0.81-0.93x t2r8u1's at 128-160 rows (h100-wgmma-loads-first.md)
    {INT64_MAX, config_id_of("g128x128b4s3r1")},
};
template <size_t N>
constexpr bool is_dispatch_valid(const DispatchEntry (&table)[N], int formats) {
  for (const DispatchEntry& entry : table)
    if (entry.config_id < 0 || (kConfigs[entry.config_id].formats & formats) == 0 ||
        (kConfigs[entry.config_id].config.is_lower_rows_only && entry.max_rows > 8))
      return false;
  return true;
}
static_assert(is_dispatch_valid(kBf16Dispatch, kBf16) && is_dispatch_valid(kQuantizedDispatch, kQuantized),
              "linear dispatch: unknown configuration, one not compiled for the format, or a -lo one past 8 rows");
constexpr int kNarrowQuantizedDecode = config_id_of("t1r1u8");
static_assert(kNarrowQuantizedDecode >= 0 && (kConfigs[kNarrowQuantizedDecode].formats & kQuantized) != 0,
              "linear dispatch: the narrow quantized decode configuration is not compiled for quantized weights");

template <size_t N>
int config_for(const DispatchEntry (&table)[N], int64_t n_rows) {
  for (const DispatchEntry& entry : table)
    if (n_rows <= entry.max_rows) return entry.config_id;
  return table[N - 1].config_id;
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, value = 0;
    TF_CUDA_CHECK(cudaGetDevice(&device));
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device));
    return value;
  }();
  return count;
}

// Quantized weights at up to 8 rows with at most two column blocks per SM (an 8B model's o and down):
// too few warps are in flight to cover a fetch of four K blocks, and fetching eight covers more
// (h200-linear-swapped-mma.md, M = 1: o 7.8 against 8.4 us, down 15.7 against 18.2). Wider grids
// keep t1r1u4 (qkv 9.8 against 11.0). Both are the same chains: the same bits.
bool is_narrow_quantized_decode(int64_t n_rows, int64_t n_cols_out, int bits) {
  const int64_t column_blocks = (n_cols_out + kSwappedTileCols - 1) / kSwappedTileCols;
  return bits != 0 && n_rows <= 8 && column_blocks <= 2 * int64_t(multiprocessor_count());
}

void check_weights(const LinearWeights& w, int64_t n_cols_in) {
  if (w.bits == 0) {
    TF_CUDA_REQUIRE(n_cols_in % 8 == 0, "linear: n_cols_in must be a multiple of 8");
    TF_CUDA_REQUIRE(w.bf16 != nullptr && reinterpret_cast<uintptr_t>(w.bf16) % 16 == 0,
                    "linear: bf16 weights must be 16-byte aligned");
    return;
  }
  TF_CUDA_REQUIRE(w.bits == 4 || w.bits == 8, "linear: quantized weights must be 4- or 8-bit");
  TF_CUDA_REQUIRE(w.group_size == 32 || w.group_size == 64 || w.group_size == 128,
                  "linear: the quantization group size must be 32, 64 or 128");
  TF_CUDA_REQUIRE(n_cols_in % w.group_size == 0, "linear: n_cols_in must be a multiple of the group size");
  TF_CUDA_REQUIRE(w.packed != nullptr && w.scale_bias != nullptr &&
                      reinterpret_cast<uintptr_t>(w.packed) % 8 == 0,
                  "linear: quantized weights need packed words (8-byte aligned) and scales with biases");
}

}  // namespace

int linear_config_count() { return kConfigCount; }

void prepare_linear_kernels() {
  for (const ConfigEntry& entry : kConfigs)
    if (entry.prepare != nullptr) entry.prepare();
}

const LinearConfig& linear_config(int config_id) {
  TF_CUDA_REQUIRE(config_id >= 0 && config_id < kConfigCount, "linear: no such configuration");
  return kConfigs[config_id].config;
}

bool linear_config_fits(int config_id, int64_t n_rows, int bits) {
  return (kConfigs[config_id].formats & formats_of(bits)) != 0 &&
         (!linear_config(config_id).is_lower_rows_only || n_rows <= 8);
}

int linear_default_config(int64_t n_rows, int64_t n_cols_out, int bits) {
  if (is_narrow_quantized_decode(n_rows, n_cols_out, bits)) return kNarrowQuantizedDecode;
  return bits == 0 ? config_for(kBf16Dispatch, n_rows) : config_for(kQuantizedDispatch, n_rows);
}

void linear_with_config(int config_id, const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_cols_out,
                        int64_t n_cols_in, void* y, LinearOutput output, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_cols_out > 0 && n_cols_in > 0, "linear: empty shape");
  check_weights(w, n_cols_in);
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0, "linear: x must be 16-byte aligned");
  TF_CUDA_REQUIRE(n_rows < (int64_t(1) << 31) && n_cols_out < (int64_t(1) << 31) && n_cols_in < (int64_t(1) << 31),
                  "linear: dimension too large");
  TF_CUDA_REQUIRE(n_cols_out <= int64_t(65535) * kMmaCols, "linear: too many output columns");
  TF_CUDA_REQUIRE(output != LinearOutput::swiglu_bf16 || n_cols_out % 2 == 0,
                  "linear: a SwiGLU output needs gate and up rows in pairs");
  TF_CUDA_REQUIRE(linear_config_fits(config_id, n_rows, w.bits),
                  std::string("linear: configuration ") + linear_config(config_id).name +
                      " is not compiled for these weights, or takes at most 8 rows");
  if (n_rows == 0) return;
  kConfigs[config_id].launcher(x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
}

void linear(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_cols_out, int64_t n_cols_in, void* y,
            LinearOutput output, cudaStream_t stream) {
  // The configuration only changes how many rows and columns share a weight or activation load;
  // every element's K order is the same in all of them (tests compare them bit for bit).
  linear_with_config(linear_default_config(n_rows, n_cols_out, w.bits), x, n_rows, w, n_cols_out, n_cols_in, y, output, stream);
}

}  // namespace tf::cuda
