// Seeded sampling on the GPU: temperature, top-k, top-p, min-p and one Philox draw per row.
//
// The twin of the CPU tf::Sampler after penalties and constraints: the same candidates, the same
// integer masses and cuts (sampling_math.h) and the same random number philox_uniform(seed,
// position), so each row's token is bitwise the CPU's (NaN ranks as -inf; a row with no finite
// best gives its best-ranked token). A row's token depends only on its logits, its GpuSamplingRow
// and n_vocab, never on the other rows of the call. Penalties are applied to the logits before it
// (penalties.cuh); logprobs come from the raw logits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// One row's sampling parameters: tf::SamplingParams without the penalties, plus the position.
struct GpuSamplingRow {
  float temperature;  // <= 0 (or NaN): not sampled here, ids[row] is left as it is
  int32_t top_k;      // <= 0 or >= n_vocab: off
  float top_p;        // >= 1 (or NaN): off
  float min_p;        // <= 0 (or NaN): off
  uint64_t seed;
  uint64_t position;  // the index the sampled token will have in its sequence
};

// logits: [n_rows][n_vocab] f32, rows: [n_rows], ids: [n_rows] (all device). Writes ids[row] for
// every row whose temperature is above 0. cluster_blocks (8 or 16; 0: chosen by the row count)
// splits each row over that many blocks; the tokens are the same either way.
void sample_rows_f32(const float* logits, int64_t n_rows, int64_t n_vocab, const GpuSamplingRow* rows, int32_t* ids,
                     cudaStream_t stream = nullptr, int cluster_blocks = 0);

}  // namespace tf::cuda
