// y = x W^T on the CPU for dense (f32/f16/bf16) and MLX affine-quantized (4/8-bit) weights.
// Batch-invariant: each y[m][n] is reduced over K in one fixed order that depends on K alone,
// never on M, on which thread computes it, or on the thread count.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tf::cpu {

// x: [n_rows][w.n_cols] f32, y: [n_rows][w.n_rows] f32. Threads split the output columns.
void linear(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool);

// One matrix and where its outputs go: y [n_rows][w->n_rows].
struct LinearOutput {
  const WeightMatrix* w;
  float* y;
};
// Several matrices over the same x [n_rows][k] (q, k and v; gate and up) in one parallel pass, so
// a decode step wakes the threads once for them; each y is bitwise what linear() gives.
void linear_many(const float* x, int64_t n_rows, int64_t k, const LinearOutput* outputs, int n_outputs,
                 ThreadPool& pool);

// Gathers rows of an embedding table (dense or quantized) as f32: out [n][table.n_cols].
void embedding_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out);

// Dequantizes one row of a (possibly quantized) matrix to f32: out [w.n_cols].
void matrix_row_f32(const WeightMatrix& w, int64_t row, float* out);

}  // namespace tf::cpu
