// Views of stored tensors and of the weight layouts the kernels read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf {

// A tensor inside a mapped file (or owned buffer); the view does not own the bytes.
struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;

  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// A weight matrix of n_rows outputs by n_cols inputs (y = x W^T), dense or MLX affine-quantized.
// MLX layout: each group of `group_size` consecutive inputs of a row has one scale and one bias,
// w = scale * q + bias, and q values are packed into uint32 words lowest bits first.
struct WeightMatrix {
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  DType dtype = DType::bf16;        // dense: f32, f16 or bf16; quantized: u32
  const void* data = nullptr;       // dense: [n_rows][n_cols]; quantized: [n_rows][n_cols * bits / 32]
  int bits = 0;                     // 0 when dense; 4 or 8 when quantized
  int group_size = 0;               // 32, 64 or 128 when quantized
  DType scale_dtype = DType::bf16;  // of scales and biases
  const void* scales = nullptr;     // [n_rows][n_cols / group_size]
  const void* biases = nullptr;     // [n_rows][n_cols / group_size]

  bool is_quantized() const { return bits != 0; }
  int64_t n_groups_per_row() const { return group_size ? n_cols / group_size : 0; }
  // Bytes a pass over every weight reads (packed values, scales and biases when quantized).
  int64_t n_stored_bytes() const {
    if (!is_quantized()) return n_rows * n_cols * int64_t(dtype_size(dtype));
    return n_rows * n_cols * bits / 8 + 2 * n_rows * n_groups_per_row() * int64_t(dtype_size(scale_dtype));
  }
};

// A vector of per-channel weights (norm gains).
struct WeightVector {
  int64_t n = 0;
  DType dtype = DType::bf16;  // f32, f16 or bf16
  const void* data = nullptr;
};

}  // namespace tf
