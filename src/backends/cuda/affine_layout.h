// How MLX affine rows are laid out in GPU memory: reordered so that each lane of the linear kernel
// reads its next four K blocks with one 16-byte load (MLX's own order would give it 4 bytes at a
// time, half of every sector wasted, and four times the load instructions).
//
// The kernel's K order fixes what a lane needs (linear.cuh): warp w owns K blocks b = 8i + w, and
// lane q of it the eight inputs 8q..8q+7 of each. Blocks are taken four iterations at a time: quad
// t holds blocks 32t..32t+31, and within it a row's words are ordered [w][q][s] (s = i % 4, then the
// bits/4 words of the eight inputs), so lane (w, q) finds blocks 8(4t+s)+w, s = 0..3, side by side.
// At 4 bits a word's nibbles are also reordered n0 n2 n4 n6 n1 n3 n5 n7, so each pair of entries
// is at most one shift and one mask from a bf16 pair. A row's scales and biases (pack_scale_bias) follow
// the same quads: a group of G = group_size / 32
// blocks is one entry, ordered [w / G][s], so a lane's four entries are side by side too. Rows are
// padded to whole quads; the kernel never multiplies past the real K.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tf::cuda {

constexpr int kAffineBlockInputs = 32;  // inputs per K block
constexpr int kAffineQuadBlocks = 32;   // K blocks per quad (8 warps x 4 iterations)

inline int64_t affine_quads_per_row(int64_t n_in) {
  return (n_in + kAffineBlockInputs * kAffineQuadBlocks - 1) / (kAffineBlockInputs * kAffineQuadBlocks);
}
// u32 words of one padded row, and scale_bias entries of one padded row.
inline int64_t affine_row_words(int64_t n_in, int bits) {
  return affine_quads_per_row(n_in) * kAffineQuadBlocks * kAffineBlockInputs * bits / 32;
}
inline int64_t affine_row_entries(int64_t n_in, int group_size) {
  return affine_quads_per_row(n_in) * kAffineQuadBlocks * kAffineBlockInputs / group_size;
}

// The kernels read a code without converting it: a bf16 whose exponent field is 0 or 1 has the value
// (its low byte) * 2^-133, so a 4-bit code n masked into bits 4..7 is n * 2^-129 and an 8-bit code u
// in bits 0..7 is u * 2^-133. The stored scale is the MLX scale times 2^gpu_scale_exponent(bits), a
// power of two, so one bf16x2 fma gives bf16(scale * q + bias) rounded once, as MLX's values are.
constexpr int gpu_scale_exponent(int bits) { return bits == 4 ? 129 : 133; }

// Whether scale * 2^gpu_scale_exponent(bits) is a finite bf16 (|scale| < 0.5 at 4 bits, < 2^-5 at
// 8). A matrix with a scale that does not fit is held as bf16 rows instead (the same values).
bool gpu_scale_fits(uint16_t scale, int bits);

// scale * q + bias computed exactly and rounded once to bf16 (nearest, ties to even): what the GPU
// computes for every quantized weight, packed or held as bf16 rows.
uint16_t affine_bf16_rounded_once(double scale, uint32_t q, double bias);

// Row `row` of an MLX affine matrix (any bits, any scale type) as those bf16 values. out: [w.n_cols].
void affine_row_bf16(const WeightMatrix& w, int64_t row, uint16_t* out);

struct AffineRowsOnGpu {
  std::vector<uint32_t> words;       // [n_rows][affine_row_words]
  std::vector<uint32_t> scale_bias;  // [n_rows][affine_row_entries]
};

// MLX rows ([n_rows][n_in * bits / 32] words; bf16 scales and biases [n_rows][n_in / group_size])
// in the GPU layout above; padding is zero. Every scale must fit (gpu_scale_fits).
AffineRowsOnGpu to_gpu_affine_layout(const uint32_t* words, const uint16_t* scales, const uint16_t* biases,
                                     int64_t n_rows, int64_t n_in, int bits, int group_size);

}  // namespace tf::cuda
