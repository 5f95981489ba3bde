// A request's logit constraint on the GPU, as the host's apply_logit_constraint (sampling/sampler.h)
// does it: logit_bias added to the raw logits, then every token outside the row's allowed mask set
// to -inf, before penalties and the choice.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct GpuBiasEntry {
  int32_t token;  // each token at most once per row
  float bias;
};

// One row's constraint: where its bias entries and mask words sit.
struct GpuConstraintRow {
  int32_t first_bias;
  int32_t n_bias;
  int64_t mask_offset;  // index of the row's first mask word, or -1: every token allowed
};

// logits: [n_rows][n_vocab] f32; rows: [n_rows]; masks: ceil(n_vocab / 32) words per masked row,
// bit t % 32 of word t / 32 set when token t is allowed (all device).
void apply_logit_constraints_f32(float* logits, int64_t n_rows, int64_t n_vocab, const GpuConstraintRow* rows,
                                 const GpuBiasEntry* bias, const uint32_t* masks, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
