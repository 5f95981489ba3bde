// Internal to linear_bf16: the tile configurations it can launch, so the test can check each one
// bit for bit against the others and the bench can time each one (linear_bf16() picks by M).
#pragma once
#include <cstdint>

#include "backends/cuda/linear_bf16.cuh"

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

int linear_bf16_config_count();
const LinearConfig& linear_bf16_config(int config_id);
// Whether the configuration can compute n_rows rows (the "-lo" ones only up to 8).
bool linear_bf16_config_fits(int config_id, int64_t n_rows);
// The configuration linear_bf16() uses for n_rows (its dispatch table).
int linear_bf16_default_config(int64_t n_rows);

// linear_bf16() with the tile configuration given; same checks, same result bit for bit.
void linear_bf16_with_config(int config_id, const uint16_t* x, int64_t n_rows, const uint16_t* w,
                             int64_t n_cols_out, int64_t n_cols_in, void* y, LinearOutput output,
                             cudaStream_t stream = nullptr);

}  // namespace tf::cuda
