

#include "backends/cuda/affine_layout.h"

#include "backends/cuda/linear_weights.h"

namespace tf::cuda {
namespace {

// Nibbles n0..n7 (n_i at bits 4i) to n0 n2 n4 n6 n1 n3 n5 n7: entries 2p and 2p+1 then sit at bits
// 4p and 16 + 4p, where one shift and one mask make them a bf16 pair.
uint32_t pair_nibbles(uint32_t word) {
  uint32_t out = 0;
  for (int i = 0; i < 8; ++i) out |= ((word >> (4 * i)) & 0xfu) << (i % 2 == 0 ? 2 * i : 16 + 2 * (i - 1));
  return out;
}

}  // namespace

AffineRowsOnGpu to_gpu_affine_layout(const uint32_t* words, const uint16_t* scales, const uint16_t* biases,
                                     int64_t n_rows, int64_t n_in, int bits, int group_size) {
  const int64_t row_words = affine_row_words(n_in, bits), row_entries = affine_row_entries(n_in, group_size);
  const int64_t mlx_row_words = n_in * bits / 32, mlx_row_groups = n_in / group_size;
  const int64_t n_blocks = n_in / kAffineBlockInputs, words_per_block = kAffineBlockInputs * bits / 32;
  const int words_per_lane = bits / 4;  // eight inputs
  const int blocks_per_group = group_size / kAffineBlockInputs;
  AffineRowsOnGpu out{std::vector<uint32_t>(std::size_t(n_rows * row_words)),
                      std::vector<uint32_t>(std::size_t(n_rows * row_entries))};
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
          pack_scale_bias(scales[row * mlx_row_groups + group], biases[row * mlx_row_groups + group]);
    }
  }
  return out;
}

}  // namespace tf::cuda
