// y = x W^T on tensor cores for bf16 weights and bf16 activations, accumulated in f32.
// Batch-invariant: each y[m][n] is reduced over K in one order that depends on K alone:
// K is cut into 32-wide blocks, block j goes to warp j % 8 of the column's thread block, each warp
// chains its blocks in increasing j through mma.m16n8k16, and the 8 warp partials are added in warp
// order. Rows are padded to the 16-row MMA shape, so a row's result never depends on M.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// Where the result goes: bf16 for activations between layers, f32 for logits.
enum class LinearOutput { bf16, f32 };

// x: [n_rows][n_cols_in] bf16 bits, w: [n_cols_out][n_cols_in] bf16 bits,
// y: [n_rows][n_cols_out] as bf16 bits or f32. n_cols_in must be a multiple of 8 and x, w
// 16-byte aligned (rows are read 16 bytes at a time).
void linear_bf16(const uint16_t* x, int64_t n_rows, const uint16_t* w, int64_t n_cols_out,
                 int64_t n_cols_in, void* y, LinearOutput output, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
