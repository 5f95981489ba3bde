// Greedy token choice on the GPU: argmax over each row of logits, ties to the lowest id.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// logits: [n_rows][n_vocab] f32, ids: [n_rows] (device). NaN is never chosen; a row with no
// value above -inf gives id 0, as sampling::argmax does on the CPU.
void argmax_f32(const float* logits, int64_t n_rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
