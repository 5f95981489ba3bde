

#include "backends/cuda/affine_layout.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cuda/linear_weights.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tf::cuda {
namespace {

// a + b rounded once to bf16 (nearest, ties to even). bf16 keeps 8 significant bits down to 2^-126
// and a grid of 2^-133 below it. The double sum may itself be rounded (a and b far apart); its error
// (TwoSum) then decides the one case where that matters, a sum exactly halfway between two bf16s.
uint16_t bf16_of_sum_rounded_once(double a, double b) {
  const double sum = a + b;
  if (!std::isfinite(sum) || sum == 0.0) return f32_to_bf16(float(sum));
  const double b_part = sum - a, error = (a - (sum - b_part)) + (b - b_part);  // a + b = sum + error exactly
  int exponent = 0;
  (void)std::frexp(sum, &exponent);  // |sum| in [2^(exponent-1), 2^exponent)
  const int last_bit = std::max(exponent - 8, -133);
  const double steps = std::ldexp(sum, -last_bit), below = std::floor(steps);
  const double rounded = steps - below == 0.5 && error != 0.0 ? (error > 0.0 ? below + 1.0 : below) : std::nearbyint(steps);
  return f32_to_bf16(float(std::ldexp(rounded, last_bit)));  // at most 8 significant bits: exact
}

// scale * 2^gpu_scale_exponent(bits), exact: a power of two times a bf16 that stays finite.
uint16_t gpu_scale(uint16_t scale, int bits) {
  return f32_to_bf16(float(std::ldexp(double(bf16_to_f32(scale)), gpu_scale_exponent(bits))));
}

// Nibbles n0..n7 (n_i at bits 4i) to n0 n2 n4 n6 n1 n3 n5 n7: entries 2p and 2p+1 then sit at bits
// 4p and 16 + 4p, where one shift and one mask make them a bf16 pair.
uint32_t pair_nibbles(uint32_t word) {
  uint32_t out = 0;
  for (int i = 0; i < 8; ++i) out |= ((word >> (4 * i)) & 0xfu) << (i % 2 == 0 ? 2 * i : 16 + 2 * (i - 1));
  return out;
}

}  // namespace

bool gpu_scale_fits(uint16_t scale, int bits) {
  constexpr double kLargestBf16 = 0x1.fep127;
  const double stored = std::ldexp(double(bf16_to_f32(scale)), gpu_scale_exponent(bits));
  return std::isfinite(stored) && std::fabs(stored) <= kLargestBf16;
}

uint16_t affine_bf16_rounded_once(double scale, uint32_t q, double bias) {
  // Any scale up to f32 times a code of at most 8 bits is exact in double.
  return bf16_of_sum_rounded_once(scale * double(q), bias);
}

void affine_row_bf16(const WeightMatrix& w, int64_t row, uint16_t* out) {
  if (!w.is_quantized() || row < 0 || row >= w.n_rows)
    fail("affine_row_bf16: row " + std::to_string(row) + " of a quantized matrix of " + std::to_string(w.n_rows));
  const int64_t values_per_word = 32 / w.bits, words_per_row = w.n_cols * w.bits / 32;
  const uint32_t* words = static_cast<const uint32_t*>(w.data) + row * words_per_row;
  const uint32_t mask = (1u << w.bits) - 1u;
  for (int64_t k = 0; k < w.n_cols; ++k) {
    const int64_t group = row * w.n_groups_per_row() + k / w.group_size;
    const uint32_t q = (words[k / values_per_word] >> (w.bits * (k % values_per_word))) & mask;
    out[k] = affine_bf16_rounded_once(load_as_f32(w.scales, w.scale_dtype, group), q,
                                      load_as_f32(w.biases, w.scale_dtype, group));
  }
}

AffineRowsOnGpu to_gpu_affine_layout(const uint32_t* words, const uint16_t* scales, const uint16_t* biases,
                                     int64_t n_rows, int64_t n_in, int bits, int group_size) {
  const int64_t row_words = affine_row_words(n_in, bits), row_entries = affine_row_entries(n_in, group_size);
  const int64_t mlx_row_words = n_in * bits / 32, mlx_row_groups = n_in / group_size;
  const int64_t n_blocks = n_in / kAffineBlockInputs, words_per_block = kAffineBlockInputs * bits / 32;
  const int words_per_lane = bits / 4;  // eight inputs
  const int blocks_per_group = group_size / kAffineBlockInputs;
  AffineRowsOnGpu out{std::vector<uint32_t>(std::size_t(n_rows * row_words)),
                      std::vector<uint32_t>(std::size_t(n_rows * row_entries))};
  for (int64_t i = 0; i < n_rows * mlx_row_groups; ++i)
    if (!gpu_scale_fits(scales[i], bits))
      fail("to_gpu_affine_layout: scale " + std::to_string(bf16_to_f32(scales[i])) + " is too large to pack");
  for (int64_t row = 0; row < n_rows; ++row) {
    const uint32_t* from = words + row * mlx_row_words;
    uint32_t* to = out.words.data() + row * row_words;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t quad = b / kAffineQuadBlocks, w = b % 8, s = (b % kAffineQuadBlocks) / 8;
      for (int q = 0; q < 4; ++q)
        for (int h = 0; h < words_per_lane; ++h) {
          const uint32_t word = from[b * words_per_block + q * words_per_lane + h];
          to[((quad * 8 + w) * 4 + q) * 4 * words_per_lane + s * words_per_lane + h] =
              bits == 4 ? pair_nibbles(word) : word;
        }
    }
    uint32_t* entries = out.scale_bias.data() + row * row_entries;
    for (int64_t group = 0; group < mlx_row_groups; ++group) {
      const int64_t b = group * blocks_per_group;  // the group's first block
      const int64_t quad = b / kAffineQuadBlocks, w = b % 8, s = (b % kAffineQuadBlocks) / 8;
      entries[quad * (kAffineQuadBlocks / blocks_per_group) + (w / blocks_per_group) * 4 + s] =
          pack_scale_bias(gpu_scale(scales[row * mlx_row_groups + group], bits), biases[row * mlx_row_groups + group]);
    }
  }
  return out;
}

}  // namespace tf::cuda
