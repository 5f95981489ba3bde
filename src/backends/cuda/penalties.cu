// Penalties: one block per row, a thread per entry; each entry names a distinct token, so no two
// threads touch the same logit.
#include "backends/cuda/penalties.cuh"

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void penalties_kernel(float* __restrict__ logits, int n_vocab, const GpuPenaltyRow* __restrict__ rows,
                                 const int2* __restrict__ entries) {
  const GpuPenaltyRow row = rows[blockIdx.x];
  float* row_logits = logits + int64_t(blockIdx.x) * n_vocab;
  for (int i = int(threadIdx.x); i < row.n_entries; i += kThreads) {
    const int2 entry = entries[row.first + i];
    if (entry.x < 0 || entry.x >= n_vocab) continue;
    const float presence = entry.y > 0 ? row.presence : 0.0f;
    // The host's `values[token] -= presence + frequency * count`, rounded step by step.
    const float penalty = __fadd_rn(presence, __fmul_rn(row.frequency, float(entry.y)));
    row_logits[entry.x] = __fsub_rn(row_logits[entry.x], penalty);
  }
}

}  // namespace

void apply_penalties_f32(float* logits, int64_t n_rows, int64_t n_vocab, const GpuPenaltyRow* rows,
                         const int2* entries, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0 && n_vocab < (int64_t(1) << 31),
                  "apply_penalties_f32: bad vocabulary size");
  if (n_rows == 0) return;
  penalties_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), rows, entries);
  TF_CUDA_CHECK_LAUNCH("penalties_kernel");
}

}  // namespace tf::cuda
