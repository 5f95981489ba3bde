// Readers of one weight row, eight inputs at a time, as bf16: the linear kernel and the embedding
// gather share them, so a quantized entry becomes the same bf16 value wherever it is read.
// MLX affine entries are dequantized in registers to bf16(scale * q + bias) rounded once, by the
// bf16x2 fused multiply-add (two entries an instruction: the dequantization is most of a 4-bit
// decode's arithmetic) on the codes as they lie in a register, masked (affine_layout.h). Nothing
// dequantized is ever written to memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backends/cuda/affine_layout.h"
#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/linear_weights.h"

namespace tf::cuda {

// Word i of a 16-byte load (i known at compile time after unrolling, so no local memory).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Weights are read once per call: keep them out of L1 so the activations stay there.
__device__ __forceinline__ uint4 load_streaming(const uint16_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The interface the kernels use: at(row, first, warp) is a lane's cursor on a row, for its eight
// inputs first..first+7 of each K block b of the warp (b % 8 == warp; first = 8q); fetch(cursor, b)
// loads kBlocksPerFetch of its K blocks from block b on (b, b + 8, b + 16, ...: a warp's
// consecutive blocks); expand(fetched, s) gives block b + 8s's eight inputs as bf16 pairs;
// in_row(cursor, b) says whether block b exists in memory. Blocks are 32 inputs.

// bf16 rows: a fetch is already the eight values.
struct Bf16Rows {
  static constexpr int kBlocksPerFetch = 1;
  const uint16_t* data;
  int n_in;

  using Fetched = uint4;
  struct Cursor {
    const uint16_t* inputs;  // the row's input `first` on
    int first;
  };
  __device__ __forceinline__ Cursor at(int row, int first, int) const { return {data + int64_t(row) * n_in + first, first}; }
  __device__ __forceinline__ bool in_row(const Cursor& c, int b) const { return b * 32 + c.first < n_in; }
  __device__ __forceinline__ Fetched fetch(const Cursor& c, int b) const { return load_streaming(c.inputs + b * 32); }
  __device__ __forceinline__ static uint4 expand(const Fetched& f, int) { return f; }
};

__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// MLX affine rows of kBits (4 or 8) in the GPU layout of affine_layout.h: one fetch is a lane's
// next four K blocks, one 16-byte load per 4 bits of width, and their four scale/bias entries.
template <int kBits>
struct AffineRows {
  static_assert(kBits == 4 || kBits == 8, "MLX affine rows are 4- or 8-bit here");
  static constexpr int kBlocksPerFetch = 4;
  static constexpr int kLaneWords = kBits / 4;  // u32 words of eight inputs
  const uint32_t* packed;
  const uint32_t* scale_bias;
  int quads;        // per row (affine_quads_per_row)
  int group_shift;  // log2(group_size / 32): K blocks per scale entry, as a shift
  static constexpr int kQuadWords = 32 * 4 * kLaneWords;  // u32 words of one row's quad

  struct Fetched {
    uint4 words[kLaneWords];  // [s][word] for s = 0..3
    uint4 scale_bias;         // [s]: bf16 scale in the low half, bias in the high half
  };
  // A lane's place in every quad of a row: its warp w's words, its own (lane q's) among them, and
  // the entries of w's blocks; a fetch then only steps whole quads.
  struct Cursor {
    const uint32_t* words;
    const uint32_t* scale_bias;
  };
  __device__ __forceinline__ Cursor at(int row, int first, int warp) const {
    return {packed + int64_t(row) * quads * kQuadWords + warp * 16 * kLaneWords + (first / 8) * 4 * kLaneWords,
            scale_bias + (int64_t(row) * quads << (5 - group_shift)) + ((warp >> group_shift) << 2)};
  }
  __device__ __forceinline__ bool in_row(const Cursor&, int b) const { return b < quads * 32; }
  // L1-allocating loads: the warp's eight rows each read 64 (or 128) contiguous bytes, and the
  // scale entries of a row are shared by its four lanes.
  // Block b of the cursor's warp (b % 8 is the warp the cursor was made for) sits in quad b / 32.
  __device__ __forceinline__ Fetched fetch(const Cursor& c, int b) const {
    const int quad = b >> 5;
    const uint4* words = reinterpret_cast<const uint4*>(c.words + quad * kQuadWords);
    Fetched f;
#pragma unroll
    for (int h = 0; h < kLaneWords; ++h) f.words[h] = __ldg(words + h);
    f.scale_bias = __ldg(reinterpret_cast<const uint4*>(c.scale_bias + (quad << (5 - group_shift))));
    return f;
  }
  // Entries 2p and 2p+1 of block s as the bf16 pair (q[2p], q[2p+1]) * 2^-gpu_scale_exponent(kBits),
  // exact (affine_layout.h): the codes moved into a half's low byte, the rest of it zero.
  __device__ __forceinline__ static uint32_t codes(const Fetched& f, int s, int p) {
    if constexpr (kBits == 4) {
      // Entries 2p and 2p+1 sit at bits 4p and 16 + 4p; moved to bits 4..7 of each half.
      const uint32_t w = word(f.words[0], s);
      return (p == 0 ? w << 4 : p == 1 ? w : w >> (4 * (p - 1))) & 0x00f000f0u;
    } else {
      // A word holds entries 4i..4i+3, a byte each: two bytes to the low bytes of the halves.
      return __byte_perm(word(f.words[s / 2], 2 * (s % 2) + p / 2), 0, p % 2 == 0 ? 0x4140 : 0x4342);
    }
  }
  __device__ __forceinline__ static uint4 expand(const Fetched& f, int s) {
    const uint32_t entry = word(f.scale_bias, s);
    const uint32_t scale = __byte_perm(entry, 0, 0x1010), bias = __byte_perm(entry, 0, 0x3232);
    uint32_t out[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) out[p] = fma_bf16x2(scale, codes(f, s, p), bias);
    return make_uint4(out[0], out[1], out[2], out[3]);
  }
};

// Calls f with the reader of w's format (rows of n_in inputs): Bf16Rows or AffineRows<4 or 8>.
// The caller has checked the format.
template <class F>
void with_rows(const LinearWeights& w, int n_in, F&& f) {
  if (w.bits == 0) {
    f(Bf16Rows{w.bf16, n_in});
    return;
  }
  int group_shift = 0;  // group_size = 32 << group_shift
  while ((32 << group_shift) < w.group_size) ++group_shift;
  const int quads = int(affine_quads_per_row(n_in));
  if (w.bits == 4) {
    f(AffineRows<4>{w.packed, w.scale_bias, quads, group_shift});
  } else {
    f(AffineRows<8>{w.packed, w.scale_bias, quads, group_shift});
  }
}

}  // namespace tf::cuda
