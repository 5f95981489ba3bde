// Embedding gather on the GPU: rows of a bf16 table by token id.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// table: [n_vocab][dim] bf16 bits, ids: [n] (device), out: [n][dim] bf16 bits; dim % 8 == 0.
// An id outside [0, n_vocab) gives a zero row: the engine validates ids before they get here.
void embedding_bf16(const uint16_t* table, int64_t n_vocab, int64_t dim, const int32_t* ids, int64_t n,
                    uint16_t* out, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
