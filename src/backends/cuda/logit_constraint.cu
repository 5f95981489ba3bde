// Logit constraints: one block per row; the bias entries name distinct tokens, so no two threads
// touch the same logit, and the mask pass starts after every bias is in.
#include "backends/cuda/logit_constraint.cuh"

#include <cmath>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void logit_constraint_kernel(float* __restrict__ logits, int n_vocab, const GpuConstraintRow* __restrict__ rows,
                                        const GpuBiasEntry* __restrict__ bias, const uint32_t* __restrict__ masks) {
  const GpuConstraintRow row = rows[blockIdx.x];
  float* row_logits = logits + int64_t(blockIdx.x) * n_vocab;
  for (int i = int(threadIdx.x); i < row.n_bias; i += kThreads) {
    const GpuBiasEntry entry = bias[row.first_bias + i];
    if (entry.token >= 0 && entry.token < n_vocab) row_logits[entry.token] = __fadd_rn(row_logits[entry.token], entry.bias);
  }
  if (row.mask_offset < 0) return;
  __syncthreads();
  const uint32_t* mask = masks + row.mask_offset;
  for (int id = int(threadIdx.x); id < n_vocab; id += kThreads)
    if (((mask[id >> 5] >> (id & 31)) & 1u) == 0) row_logits[id] = -INFINITY;
}

}  // namespace

void apply_logit_constraints_f32(float* logits, int64_t n_rows, int64_t n_vocab, const GpuConstraintRow* rows,
                                 const GpuBiasEntry* bias, const uint32_t* masks, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0 && n_vocab < (int64_t(1) << 31),
                  "apply_logit_constraints_f32: bad vocabulary size");
  if (n_rows == 0) return;
  logit_constraint_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), rows, bias, masks);
  TF_CUDA_CHECK_LAUNCH("logit_constraint_kernel");
}

}  // namespace tf::cuda
