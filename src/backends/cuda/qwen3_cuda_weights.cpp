#include "backends/cuda/qwen3_cuda_weights.h"

#include <algorithm>
#include <string>

#include "backends/cuda/fill_random.cuh"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace tf::cuda {
namespace {

// Buffers of the config's shape, after checking they fit in free GPU memory.
Qwen3CudaWeights allocate_weights(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t per_layer = 2 * hidden + 2 * c.head_dim + (c.q_dim() + 2 * c.kv_dim()) * hidden +
                            hidden * c.q_dim() + 3 * inter * hidden;
  const int64_t n_lm_heads = c.tie_word_embeddings ? 1 : 2;
  const int64_t n_elements = n_lm_heads * c.vocab_size * hidden + c.n_layers * per_layer + hidden;
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (size_t(n_elements) * sizeof(uint16_t) > free_bytes)
    fail("the model's bf16 weights need " + std::to_string((n_elements * 2) >> 20) + " MiB of GPU memory, but only " +
         std::to_string(free_bytes >> 20) + " MiB are free");

  Qwen3CudaWeights w;
  w.embed_tokens = DeviceBuffer<uint16_t>(size_t(c.vocab_size * hidden));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    Qwen3CudaLayerWeights& l = w.layers.emplace_back();
    l.input_norm = DeviceBuffer<uint16_t>(size_t(hidden));
    l.qkv_proj = DeviceBuffer<uint16_t>(size_t((c.q_dim() + 2 * c.kv_dim()) * hidden));
    l.q_norm = DeviceBuffer<uint16_t>(size_t(c.head_dim));
    l.k_norm = DeviceBuffer<uint16_t>(size_t(c.head_dim));
    l.o_proj = DeviceBuffer<uint16_t>(size_t(hidden * c.q_dim()));
    l.post_attention_norm = DeviceBuffer<uint16_t>(size_t(hidden));
    l.gate_up_proj = DeviceBuffer<uint16_t>(size_t(2 * inter * hidden));
    l.down_proj = DeviceBuffer<uint16_t>(size_t(hidden * inter));
  }
  w.final_norm = DeviceBuffer<uint16_t>(size_t(hidden));
  if (!c.tie_word_embeddings) w.untied_lm_head = DeviceBuffer<uint16_t>(size_t(c.vocab_size * hidden));
  return w;
}

// Host weights to device bf16 rows. bf16 goes straight from the mapped file; anything else is
// converted row by row (in parallel) into one pinned staging buffer.
class WeightUploader {
 public:
  WeightUploader() : staging_(kStagingElements) {}

  void matrix(const WeightMatrix& w, uint16_t* target) {
    if (!w.is_quantized() && w.dtype == DType::bf16) {
      TF_CUDA_CHECK(cudaMemcpy(target, w.data, size_t(w.n_rows * w.n_cols) * sizeof(uint16_t), cudaMemcpyHostToDevice));
      return;
    }
    const int64_t rows_per_chunk = std::max<int64_t>(1, int64_t(kStagingElements) / w.n_cols);
    for (int64_t first = 0; first < w.n_rows; first += rows_per_chunk) {
      const int64_t n_rows = std::min(rows_per_chunk, w.n_rows - first);
      pool_.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(w.n_cols));
        for (int64_t r = begin; r < end; ++r) {
          cpu::matrix_row_f32(w, first + r, row.data());
          uint16_t* out = staging_.data() + r * w.n_cols;
          for (int64_t i = 0; i < w.n_cols; ++i) out[i] = f32_to_bf16(row[size_t(i)]);
        }
      });
      // Synchronous: the staging buffer is refilled by the next chunk.
      TF_CUDA_CHECK(cudaMemcpy(target + first * w.n_cols, staging_.data(),
                               size_t(n_rows * w.n_cols) * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
  }

  void vector(const WeightVector& v, DeviceBuffer<uint16_t>& target) {
    std::vector<uint16_t> bf16(static_cast<size_t>(v.n));
    for (int64_t i = 0; i < v.n; ++i) bf16[size_t(i)] = f32_to_bf16(load_as_f32(v.data, v.dtype, i));
    target.copy_from_host(bf16);
  }

 private:
  static constexpr size_t kStagingElements = size_t(32) << 20;  // 64 MiB of bf16
  PinnedHostBuffer<uint16_t> staging_;
  ThreadPool pool_;
};

void fill_ones(DeviceBuffer<uint16_t>& gain) {
  gain.copy_from_host(std::vector<uint16_t>(gain.size(), f32_to_bf16(1.0f)));
}

}  // namespace

Qwen3CudaWeights upload_qwen3_weights(const Qwen3Weights& weights, const ModelConfig& c) {
  Qwen3CudaWeights w = allocate_weights(c);
  WeightUploader upload;
  const int64_t hidden = c.hidden_size;
  upload.matrix(weights.embed_tokens, w.embed_tokens.data());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const Qwen3LayerWeights& from = weights.layers[i];
    Qwen3CudaLayerWeights& to = w.layers[i];
    upload.vector(from.input_norm, to.input_norm);
    upload.matrix(from.q_proj, to.qkv_proj.data());
    upload.matrix(from.k_proj, to.qkv_proj.data() + c.q_dim() * hidden);
    upload.matrix(from.v_proj, to.qkv_proj.data() + (c.q_dim() + c.kv_dim()) * hidden);
    upload.vector(from.q_norm, to.q_norm);
    upload.vector(from.k_norm, to.k_norm);
    upload.matrix(from.o_proj, to.o_proj.data());
    upload.vector(from.post_attention_norm, to.post_attention_norm);
    upload.matrix(from.gate_proj, to.gate_up_proj.data());
    upload.matrix(from.up_proj, to.gate_up_proj.data() + c.intermediate_size * hidden);
    upload.matrix(from.down_proj, to.down_proj.data());
  }
  upload.vector(weights.final_norm, w.final_norm);
  if (!c.tie_word_embeddings) upload.matrix(weights.lm_head, w.untied_lm_head.data());
  return w;
}

Qwen3CudaWeights synthetic_qwen3_cuda_weights(const ModelConfig& c) {
  Qwen3CudaWeights w = allocate_weights(c);
  uint64_t seed = 1;
  auto fill = [&seed](DeviceBuffer<uint16_t>& matrix) { fill_random_bf16(matrix.data(), int64_t(matrix.size()), seed++, 0.02f); };
  fill(w.embed_tokens);
  for (Qwen3CudaLayerWeights& l : w.layers) {
    for (DeviceBuffer<uint16_t>* gain : {&l.input_norm, &l.q_norm, &l.k_norm, &l.post_attention_norm}) fill_ones(*gain);
    for (DeviceBuffer<uint16_t>* matrix : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) fill(*matrix);
  }
  fill_ones(w.final_norm);
  if (w.untied_lm_head.size()) fill(w.untied_lm_head);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace tf::cuda
