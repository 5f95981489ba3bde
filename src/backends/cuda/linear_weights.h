// The weight matrix the linear kernel and the embedding gather read, as plain device pointers; a
// host header, so model code can hold one without CUDA device code.
#pragma once
#include <cstdint>

namespace tf::cuda {

// A weight matrix as the kernels read it: bf16 rows, or MLX affine-quantized rows (4 or 8 bits,
// packed little-endian into u32 words as MLX stores them, one bf16 scale and bias per group of
// inputs, interleaved so one 4-byte load fetches both).
struct LinearWeights {
  int bits = 0;                          // 0: bf16 rows; 4 or 8: MLX affine
  int group_size = 0;                    // 32, 64 or 128 when quantized
  const uint16_t* bf16 = nullptr;        // [n_out][n_in]
  const uint32_t* packed = nullptr;      // [n_out][n_in * bits / 32]
  const uint32_t* scale_bias = nullptr;  // [n_out][n_in / group_size]: scale | bias << 16, bf16 bits
};

// One scale_bias entry.
inline uint32_t pack_scale_bias(uint16_t scale, uint16_t bias) { return uint32_t(scale) | (uint32_t(bias) << 16); }

}  // namespace tf::cuda
