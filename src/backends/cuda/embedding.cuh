// Embedding gather on the GPU: rows of a bf16 or MLX-quantized table by token id.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/linear_weights.h"

namespace tf::cuda {

// table: [n_vocab] rows of dim inputs (LinearWeights), ids: [n] (device), out: [n][dim] bf16 bits;
// dim % 8 == 0 (and a multiple of the group size when quantized). Quantized rows are dequantized
// exactly as the linear kernel dequantizes them, so a tied LM head and its embedding agree.
// An id outside [0, n_vocab) gives a zero row: the engine validates ids before they get here.
void embedding(const LinearWeights& table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n, uint16_t* out,
               cudaStream_t stream = nullptr);

// The bf16 case: also the gather of activation rows.
void embedding_bf16(const uint16_t* table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n,
                    uint16_t* out, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
