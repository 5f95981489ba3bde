// Presence and frequency penalties on the GPU, applied to logits in place before the token is
// chosen, as the host Sampler applies them: logit -= presence + frequency * count, in that order
// of operations (no fused multiply-add), once per token the row's history holds.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// One row's penalties: its parameters and where its (token, count) entries sit.
struct GpuPenaltyRow {
  float presence;     // subtracted once from every token the history holds
  float frequency;    // subtracted once per occurrence
  int32_t first;      // index of the row's first entry
  int32_t n_entries;  // each token at most once (penalty_counts in sampling/sampler.h)
};

// logits: [n_rows][n_vocab] f32, rows: [n_rows], entries: (token, count) pairs (all device).
void apply_penalties_f32(float* logits, int64_t n_rows, int64_t n_vocab, const GpuPenaltyRow* rows,
                         const int2* entries, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
