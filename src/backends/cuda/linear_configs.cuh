// Internal to linear(): the tile configurations it can launch, so the test can check each one bit
// for bit against the others and the bench can time each one (linear() picks by M and format).
#pragma once
#include <cstdint>

#include "backends/cuda/linear.cuh"

namespace tf::cuda {

// A block covers 16*row_tiles rows and 8*col_tiles*col_groups columns, all of K. Each of its
// col_groups groups of 8 warps splits K the same way (K block j -> warp j % 8) over its own
// 8*col_tiles columns; unroll is how many K blocks a warp loads before it multiplies.
// is_lower_rows_only: rows 8..15 of the 16-row tile are never loaded (valid only for M <= 8).
struct LinearConfig {
  const char* name;  // "r<row_tiles>c<col_tiles>[g<col_groups>]u<unroll>[-lo]"
  int row_tiles, col_tiles, col_groups, unroll;
  bool is_lower_rows_only;
};

int linear_config_count();
const LinearConfig& linear_config(int config_id);
// Whether the configuration is compiled for weights of `bits` (0 = bf16) and can compute n_rows
// rows (the "-lo" ones only up to 8).
bool linear_config_fits(int config_id, int64_t n_rows, int bits);
// The configuration linear() uses for n_rows rows and n_cols_out outputs of weights of `bits` (its
// dispatch tables, and the GPU's SM count for quantized decode).
int linear_default_config(int64_t n_rows, int64_t n_cols_out, int bits);

// linear() with the tile configuration given; same checks, same result bit for bit.
void linear_with_config(int config_id, const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_cols_out,
                        int64_t n_cols_in, void* y, LinearOutput output, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
