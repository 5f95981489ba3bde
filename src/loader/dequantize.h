// One row of a weight matrix as f32, dense or MLX affine-quantized (w = scale * q + bias), on the
// host: what a backend needs to upload a matrix in another layout. Bitwise what the CPU kernels
// compute in registers (one multiply and one add per weight, no fusion).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tf {

// out: [w.n_cols]. Throws tf::Error for a row outside the matrix.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace tf
