// A drafter row's likeliest tokens on the GPU: top-k of each row of logits and their softmax
// probabilities, so only k (token, probability) pairs per row cross to the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

constexpr int kMaxTopK = 64;

// logits: [n_rows][n_vocab] f32; ids, probabilities: [n_rows][k] (device), best first, ties to the
// lower id, probability = exp(logit - max) / sum over the row of exp(logit - max). NaN is never
// chosen; where a row has fewer than k values above -inf the rest are id 0 with probability 0.
void top_k_softmax_f32(const float* logits, int64_t n_rows, int64_t n_vocab, int k, int32_t* ids,
                       float* probabilities, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
