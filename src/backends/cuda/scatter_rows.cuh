// Rows written to slots of a table on the GPU: a forward's keys and values into the paged KV cache.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// Row r of `rows` (dim bf16 values at rows + r * row_stride) is copied to table[slots[r]]
// ([n_slots][dim] bf16 bits); slots on the device. dim and row_stride are multiples of 8 and
// both pointers 16-byte aligned. Slots of one call must be distinct.
void scatter_rows_bf16(const uint16_t* rows, int64_t row_stride, int64_t n_rows, int64_t dim,
                       const int32_t* slots, uint16_t* table, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
