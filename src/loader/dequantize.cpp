#include "loader/dequantize.h"

#include <string>

#include "core/error.h"

namespace tf {

void dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  if (row < 0 || row >= w.n_rows)
    fail("row " + std::to_string(row) + " is outside a matrix of " + std::to_string(w.n_rows) + " rows");
  if (!w.is_quantized()) {
    for (int64_t k = 0; k < w.n_cols; ++k) out[k] = load_as_f32(w.data, w.dtype, row * w.n_cols + k);
    return;
  }
  const int64_t words_per_row = w.n_cols * w.bits / 32;
  const uint32_t* words = static_cast<const uint32_t*>(w.data) + row * words_per_row;
  const uint32_t mask = (1u << w.bits) - 1u;
  const int64_t values_per_word = 32 / w.bits;
  for (int64_t k = 0; k < w.n_cols; ++k) {
    const int64_t group = row * w.n_groups_per_row() + k / w.group_size;
    const float scale = load_as_f32(w.scales, w.scale_dtype, group);
    const float bias = load_as_f32(w.biases, w.scale_dtype, group);
    const uint32_t q = (words[k / values_per_word] >> (w.bits * (k % values_per_word))) & mask;
    out[k] = scale * float(q) + bias;
  }
}

}  // namespace tf
