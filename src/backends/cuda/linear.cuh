// y = x W^T on tensor cores for bf16 activations and bf16 or MLX 4/8-bit weights, accumulated in f32.
// Batch-invariant: each y[m][n] is reduced over K in one order that depends on K alone:
// K is cut into 32-wide blocks, block j goes to warp j % 8 of the column's thread block, each warp
// chains its blocks in increasing j through mma.m16n8k16, and the 8 warp partials are added in warp
// order. Rows are padded to the 16-row MMA shape, so a row's result never depends on M.
// Quantized weights are dequantized in registers to the bf16 values the CPU's dequantization rounds
// to (weight_rows.cuh), so they give bit for bit what the bf16 kernel gives on those values.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/linear_weights.h"

namespace tf::cuda {

// Where the result goes: bf16 for activations between layers, f32 for logits, or SwiGLU of a gate/up
// projection whose rows interleave gate and up (row 2c gate c, row 2c+1 up c): y [n_rows][n_cols_out / 2]
// = silu(gate) * up of the two sums rounded to bf16, bit for bit what the bf16 output followed by
// swiglu_bf16 gives.
enum class LinearOutput { bf16, f32, swiglu_bf16 };

// x: [n_rows][n_cols_in] bf16 bits, 16-byte aligned; w: [n_cols_out] rows of n_cols_in inputs
// (LinearWeights); y: [n_rows][n_cols_out] as bf16 bits or f32. bf16 weights need n_cols_in a
// multiple of 8 and 16-byte alignment; quantized ones n_cols_in a multiple of the group size.
void linear(const uint16_t* x, int64_t n_rows, const LinearWeights& w, int64_t n_cols_out, int64_t n_cols_in, void* y,
            LinearOutput output, cudaStream_t stream = nullptr);

// Sets up, on the current device, what linear()'s kernels need before their first launch (shared
// memory past the default); a model calls it before it captures forwards, where that setup must not
// run. linear() does it itself otherwise.
void prepare_linear_kernels();

}  // namespace tf::cuda
