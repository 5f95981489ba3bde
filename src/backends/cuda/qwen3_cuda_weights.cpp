

#include "backends/cuda/qwen3_cuda_weights.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>

#include "backends/cuda/affine_layout.h"
#include "backends/cuda/fill_random.cuh"
#include "core/thread_pool.h"
#include "loader/dequantize.h"

namespace tf::cuda {
namespace {

// How one (possibly fused) matrix is stored on the GPU.
struct MatrixFormat {
  int bits = 0;
  int group_size = 0;
};

// The formats of a layer's four matrices, the embedding's and the untied LM head's.
struct Qwen3Formats {
  MatrixFormat embed, lm_head;
  std::vector<std::array<MatrixFormat, 4>> layers;  // qkv, o, gate_up, down
};

int64_t matrix_bytes(int64_t n_rows, int64_t n_cols, const MatrixFormat& f) {
  if (f.bits == 0) return n_rows * n_cols * 2;
  return n_rows * (affine_row_words(n_cols, f.bits) + affine_row_entries(n_cols, f.group_size)) * 4;
}

CudaMatrix allocate_matrix(int64_t n_rows, int64_t n_cols, const MatrixFormat& f) {
  CudaMatrix m;
  m.n_rows = n_rows;
  m.n_cols = n_cols;
  m.bits = f.bits;
  m.group_size = f.group_size;
  if (f.bits == 0) {
    m.bf16 = DeviceBuffer<uint16_t>(size_t(n_rows * n_cols));
  } else {
    m.packed = DeviceBuffer<uint32_t>(size_t(n_rows * affine_row_words(n_cols, f.bits)));
    m.scale_bias = DeviceBuffer<uint32_t>(size_t(n_rows * affine_row_entries(n_cols, f.group_size)));
  }
  return m;
}

// One decoder layer's buffers in the given formats (qkv, o, gate_up, down).
Qwen3CudaLayerWeights allocate_layer(const ModelConfig& c, const std::array<MatrixFormat, 4>& format) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, qkv = c.q_dim() + 2 * c.kv_dim();
  Qwen3CudaLayerWeights l;
  l.input_norm = DeviceBuffer<uint16_t>(size_t(hidden));
  l.qkv_proj = allocate_matrix(qkv, hidden, format[0]);
  l.q_norm = DeviceBuffer<uint16_t>(size_t(c.head_dim));
  l.k_norm = DeviceBuffer<uint16_t>(size_t(c.head_dim));
  l.o_proj = allocate_matrix(hidden, c.q_dim(), format[1]);
  l.post_attention_norm = DeviceBuffer<uint16_t>(size_t(hidden));
  l.gate_up_proj = allocate_matrix(2 * inter, hidden, format[2]);
  l.down_proj = allocate_matrix(hidden, inter, format[3]);
  return l;
}

// Buffers of the config's shape in the given formats, after checking they fit in free GPU memory.
Qwen3CudaWeights allocate_weights(const ModelConfig& c, const Qwen3Formats& formats) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, qkv = c.q_dim() + 2 * c.kv_dim();
  int64_t n_bytes = matrix_bytes(c.vocab_size, hidden, formats.embed) + 2 * hidden;
  if (!c.tie_word_embeddings) n_bytes += matrix_bytes(c.vocab_size, hidden, formats.lm_head);
  for (const auto& layer : formats.layers)
    n_bytes += matrix_bytes(qkv, hidden, layer[0]) + matrix_bytes(hidden, c.q_dim(), layer[1]) +
               matrix_bytes(2 * inter, hidden, layer[2]) + matrix_bytes(hidden, inter, layer[3]) +
               2 * (2 * hidden + 2 * c.head_dim);
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (size_t(n_bytes) > free_bytes)
    fail("the model's weights need " + std::to_string(n_bytes >> 20) + " MiB of GPU memory, but only " +
         std::to_string(free_bytes >> 20) + " MiB are free");

  Qwen3CudaWeights w;
  w.embed_tokens = allocate_matrix(c.vocab_size, hidden, formats.embed);
  for (const auto& format : formats.layers) w.layers.push_back(allocate_layer(c, format));
  w.final_norm = DeviceBuffer<uint16_t>(size_t(hidden));
  if (!c.tie_word_embeddings) w.untied_lm_head = allocate_matrix(c.vocab_size, hidden, formats.lm_head);
  return w;
}

bool scales_fit(const WeightMatrix& w) {
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  for (int64_t i = 0; i < w.n_rows * w.n_groups_per_row(); ++i)
    if (!gpu_scale_fits(scales[i], w.bits)) return false;
  return true;
}

// Packed on the GPU when every part is MLX-quantized alike with bf16 scales that fit the kernels'
// stored form (the kernels read bf16 scales; rounding another type to bf16 would change the
// values), bf16 rows of the same values otherwise.
MatrixFormat format_of(std::initializer_list<const WeightMatrix*> parts) {
  const WeightMatrix& first = **parts.begin();
  for (const WeightMatrix* part : parts)
    if (!part->is_quantized() || part->bits != first.bits || part->group_size != first.group_size ||
        part->scale_dtype != DType::bf16 || !scales_fit(*part))
      return {};
  if ((first.bits != 4 && first.bits != 8) ||
      (first.group_size != 32 && first.group_size != 64 && first.group_size != 128))
    return {};
  return {first.bits, first.group_size};
}

std::array<MatrixFormat, 4> layer_formats(const Qwen3LayerWeights& l) {
  return {format_of({&l.q_proj, &l.k_proj, &l.v_proj}), format_of({&l.o_proj}), format_of({&l.gate_proj, &l.up_proj}),
          format_of({&l.down_proj})};
}

}  // namespace

// Host weights to the GPU. bf16 rows go straight from the mapped file; packed MLX rows are reordered
// on the host into the kernels' layout; anything else is converted row by row (in parallel) into one
// pinned staging buffer.
class WeightUploader {
 public:
  WeightUploader() : staging_(kStagingElements) {}

  // The parts' rows into `target`, in its format: one part after another, or (interleaved) row r of
  // part i at row r * n_parts + i.
  void matrix(std::initializer_list<const WeightMatrix*> parts, CudaMatrix& target, bool is_interleaved = false) {
    int64_t first_row = 0, part_index = 0;
    for (const WeightMatrix* part : parts) {
      const RowPlacement placement = is_interleaved ? RowPlacement{part_index++, int64_t(parts.size())} : RowPlacement{first_row, 1};
      if (target.bits == 0) {
        rows_bf16(*part, target, placement);
      } else {
        rows_packed(*part, target, placement);
      }
      first_row += part->n_rows;
    }
  }

  void vector(const WeightVector& v, DeviceBuffer<uint16_t>& target) {
    std::vector<uint16_t> bf16(static_cast<size_t>(v.n));
    for (int64_t i = 0; i < v.n; ++i) bf16[size_t(i)] = f32_to_bf16(load_as_f32(v.data, v.dtype, i));
    target.copy_from_host(bf16);
  }

 private:
  // Where a part's rows go: its row r to target row first + r * step.
  struct RowPlacement {
    int64_t first, step;
  };

  // Rows [0, n_rows) of `source` (row_elements each) to rows placement.first + (first_source_row + r) *
  // placement.step of `target`.
  template <class T>
  static void copy_rows(T* target, const T* source, int64_t row_elements, int64_t first_source_row, int64_t n_rows,
                        const RowPlacement& placement) {
    const size_t row_bytes = size_t(row_elements) * sizeof(T);
    TF_CUDA_CHECK(cudaMemcpy2D(target + (placement.first + first_source_row * placement.step) * row_elements,
                               row_bytes * size_t(placement.step), source, row_bytes, row_bytes, size_t(n_rows),
                               cudaMemcpyHostToDevice));
  }

  // Reordered on the host into the kernels' layout (affine_layout.h), a bounded number of rows at a time.
  static void rows_packed(const WeightMatrix& w, CudaMatrix& target, const RowPlacement& placement) {
    const int64_t row_words = affine_row_words(w.n_cols, w.bits), row_entries = affine_row_entries(w.n_cols, w.group_size);
    const int64_t mlx_row_words = w.n_cols * w.bits / 32, mlx_row_groups = w.n_groups_per_row();
    const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t(64) << 20) / (row_words * 4));
    for (int64_t first = 0; first < w.n_rows; first += rows_per_chunk) {
      const int64_t n = std::min(rows_per_chunk, w.n_rows - first);
      const AffineRowsOnGpu rows = to_gpu_affine_layout(
          static_cast<const uint32_t*>(w.data) + first * mlx_row_words,
          static_cast<const uint16_t*>(w.scales) + first * mlx_row_groups,
          static_cast<const uint16_t*>(w.biases) + first * mlx_row_groups, n, w.n_cols, w.bits, w.group_size);
      copy_rows(target.packed.data(), rows.words.data(), row_words, first, n, placement);
      copy_rows(target.scale_bias.data(), rows.scale_bias.data(), row_entries, first, n, placement);
    }
  }

  void rows_bf16(const WeightMatrix& w, CudaMatrix& target, const RowPlacement& placement) {
    if (!w.is_quantized() && w.dtype == DType::bf16) {
      copy_rows(target.bf16.data(), static_cast<const uint16_t*>(w.data), w.n_cols, 0, w.n_rows, placement);
      return;
    }
    const int64_t rows_per_chunk = std::max<int64_t>(1, int64_t(kStagingElements) / w.n_cols);
    for (int64_t first = 0; first < w.n_rows; first += rows_per_chunk) {
      const int64_t n_rows = std::min(rows_per_chunk, w.n_rows - first);
      pool_.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(w.n_cols));
        for (int64_t r = begin; r < end; ++r) {
          uint16_t* out = staging_.data() + r * w.n_cols;
          if (w.is_quantized()) {
            affine_row_bf16(w, first + r, out);  // as the packed kernels dequantize it
            continue;
          }
          dequantize_row(w, first + r, row.data());
          for (int64_t i = 0; i < w.n_cols; ++i) out[i] = f32_to_bf16(row[size_t(i)]);
        }
      });
      // Synchronous: the staging buffer is refilled by the next chunk.
      copy_rows(target.bf16.data(), staging_.data(), w.n_cols, first, n_rows, placement);
    }
  }

  static constexpr size_t kStagingElements = size_t(32) << 20;  // 64 MiB of bf16
  PinnedHostBuffer<uint16_t> staging_;
  ThreadPool pool_;
};

namespace {

void upload_layer(WeightUploader& upload, const Qwen3LayerWeights& from, Qwen3CudaLayerWeights& to) {
  upload.vector(from.input_norm, to.input_norm);
  upload.matrix({&from.q_proj, &from.k_proj, &from.v_proj}, to.qkv_proj);
  upload.vector(from.q_norm, to.q_norm);
  upload.vector(from.k_norm, to.k_norm);
  upload.matrix({&from.o_proj}, to.o_proj);
  upload.vector(from.post_attention_norm, to.post_attention_norm);
  upload.matrix({&from.gate_proj, &from.up_proj}, to.gate_up_proj, /*is_interleaved=*/true);
  upload.matrix({&from.down_proj}, to.down_proj);
}

void fill_ones(DeviceBuffer<uint16_t>& gain) {
  gain.copy_from_host(std::vector<uint16_t>(gain.size(), f32_to_bf16(1.0f)));
}

}  // namespace

Qwen3CudaWeights upload_qwen3_weights(const Qwen3Weights& weights, const ModelConfig& c) {
  Qwen3Formats formats;
  formats.embed = format_of({&weights.embed_tokens});
  if (!c.tie_word_embeddings) formats.lm_head = format_of({&weights.lm_head});
  for (const Qwen3LayerWeights& l : weights.layers) formats.layers.push_back(layer_formats(l));
  Qwen3CudaWeights w = allocate_weights(c, formats);
  WeightUploader upload;
  upload.matrix({&weights.embed_tokens}, w.embed_tokens);
  for (size_t i = 0; i < w.layers.size(); ++i) upload_layer(upload, weights.layers[i], w.layers[i]);
  upload.vector(weights.final_norm, w.final_norm);
  if (!c.tie_word_embeddings) upload.matrix({&weights.lm_head}, w.untied_lm_head);
  return w;
}

std::vector<Qwen3CudaLayerWeights> upload_qwen3_layers(const std::vector<Qwen3LayerWeights>& layers,
                                                       const ModelConfig& shape) {
  WeightUploader upload;
  std::vector<Qwen3CudaLayerWeights> out;
  for (const Qwen3LayerWeights& from : layers) {
    out.push_back(allocate_layer(shape, layer_formats(from)));
    upload_layer(upload, from, out.back());
  }
  return out;
}

CudaMatrix upload_matrix(const WeightMatrix& weights) { return WeightUploads().fused_matrix({&weights}); }

WeightUploads::WeightUploads() : uploader_(std::make_unique<WeightUploader>()) {}
WeightUploads::~WeightUploads() = default;

CudaMatrix WeightUploads::fused_matrix(std::initializer_list<const WeightMatrix*> parts, bool is_interleaved) {
  int64_t n_rows = 0;
  for (const WeightMatrix* part : parts) n_rows += part->n_rows;
  CudaMatrix m = allocate_matrix(n_rows, (*parts.begin())->n_cols, format_of(parts));
  uploader_->matrix(parts, m, is_interleaved);
  return m;
}

DeviceBuffer<uint16_t> WeightUploads::vector(const WeightVector& weights) {
  DeviceBuffer<uint16_t> v{size_t(weights.n)};
  uploader_->vector(weights, v);
  return v;
}

DeviceBuffer<float> upload_f32(const float* values, int64_t n) {
  DeviceBuffer<float> v{size_t(n)};
  v.copy_from_host(values, size_t(n));
  return v;
}

DeviceBuffer<uint16_t> upload_vector(const WeightVector& weights) {
  DeviceBuffer<uint16_t> v{size_t(weights.n)};
  WeightUploader().vector(weights, v);
  return v;
}

CudaMatrix random_cuda_matrix(int64_t n_rows, int64_t n_cols, int bits, int group_size, uint64_t* seed) {
  CudaMatrix matrix = allocate_matrix(n_rows, n_cols, {bits, group_size});
  if (bits == 0) {
    fill_random_bf16(matrix.bf16.data(), int64_t(matrix.bf16.size()), (*seed)++, 0.02f);
  } else {
    fill_random_u32(matrix.packed.data(), int64_t(matrix.packed.size()), (*seed)++);
    fill_random_scale_bias(matrix.scale_bias.data(), int64_t(matrix.scale_bias.size()), (*seed)++, bits);
  }
  return matrix;
}

Qwen3CudaWeights synthetic_qwen3_cuda_weights(const ModelConfig& c) {
  const MatrixFormat format{c.quantization.bits, c.quantization.group_size};
  Qwen3Formats formats{format, format, {size_t(c.n_layers), {format, format, format, format}}};
  Qwen3CudaWeights w = allocate_weights(c, formats);
  uint64_t seed = 1;
  auto fill = [&seed](CudaMatrix& matrix) {
    if (matrix.bits == 0) {
      fill_random_bf16(matrix.bf16.data(), int64_t(matrix.bf16.size()), seed++, 0.02f);
      return;
    }
    fill_random_u32(matrix.packed.data(), int64_t(matrix.packed.size()), seed++);
    fill_random_scale_bias(matrix.scale_bias.data(), int64_t(matrix.scale_bias.size()), seed++, matrix.bits);
  };
  fill(w.embed_tokens);
  for (Qwen3CudaLayerWeights& l : w.layers) {
    for (DeviceBuffer<uint16_t>* gain : {&l.input_norm, &l.q_norm, &l.k_norm, &l.post_attention_norm}) fill_ones(*gain);
    for (CudaMatrix* matrix : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) fill(*matrix);
  }
  fill_ones(w.final_norm);
  if (w.untied_lm_head.n_rows) fill(w.untied_lm_head);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace tf::cuda
