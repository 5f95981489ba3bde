// `tensorfold quantize`: MLX affine quantization of a dense checkpoint, bit-compatible with mx.quantize.
#include "loader/quantize.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "loader/file_helpers.h"
#include "loader/model_config.h"

namespace tf {

namespace {

namespace fs = std::filesystem;

struct QuantizedTensor {
  std::string prefix;             // "model.layers.0.mlp.up_proj"
  int64_t n_rows = 0;
  int64_t n_words_per_row = 0;
  int64_t n_groups_per_row = 0;
  DType scale_dtype = DType::bf16;
  std::vector<uint32_t> packed;   // [n_rows][n_cols * bits / 32]
  std::vector<uint8_t> scales;    // [n_rows][n_groups_per_row] of scale_dtype
  std::vector<uint8_t> biases;    // [n_rows][n_groups_per_row] of scale_dtype
};

void store_as(DType dtype, float value, uint8_t* bytes, int64_t i) {
  switch (dtype) {
    case DType::bf16: {
      uint16_t bits = f32_to_bf16(value);
      std::memcpy(bytes + 2 * i, &bits, 2);
      break;
    }
    case DType::f16: {
      uint16_t bits = f32_to_f16(value);
      std::memcpy(bytes + 2 * i, &bits, 2);
      break;
    }
    default: std::memcpy(bytes + 4 * i, &value, 4);
  }
}

bool ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_lm_head(const std::string& name) { return name == "lm_head.weight" || name == "language_model.lm_head.weight"; }

// The linear projections and the embedding, as mlx-lm quantizes them; norms stay dense. In a hybrid
// the convolution, A_log and dt_bias stay dense too (not 2-D projections), and so does the vision
// tower (not served); the MTP head's projections and its fc are quantized like the target's (mlx-lm
// drops the head, so there is no MLX copy to follow; the loader reads it dense or quantized alike),
// and, as mlx-lm leaves them, projections whose input width is not a multiple of the group size.
bool is_quantized_layer(const std::string& name, const TensorView& tensor, const ModelConfig& config,
                        int group_size) {
  const bool is_deltanet_input = name.find(".linear_attn.in_proj_") != std::string::npos && ends_with(name, ".weight");
  const bool is_projection = tensor.shape.size() == 2 && (ends_with(name, "_proj.weight") || is_deltanet_input ||
                                                          ends_with(name, "embed_tokens.weight") || is_lm_head(name) ||
                                                          (config.is_hybrid() && name == "mtp.fc.weight"));
  if (!is_projection || !config.is_hybrid()) return is_projection;
  if (name.rfind("model.visual.", 0) == 0) return false;
  return tensor.shape[1] % group_size == 0;
}

// One group as MLX's affine quantizer does it: besides min/max, the endpoint of larger magnitude
// is made exact (it becomes the bias, code 0) and the scale is snapped so that 0.0 is exact too.
void quantize_group(const float* w, int group_size, int bits, float* scale_out, float* bias_out,
                    uint32_t* words) {
  const float n_bins = float((1 << bits) - 1);
  float w_min = INFINITY, w_max = -INFINITY;
  for (int i = 0; i < group_size; i++) {
    w_min = std::min(w_min, w[i]);
    w_max = std::max(w_max, w[i]);
  }
  const bool min_is_edge = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, 1e-7f);  // the floor guards a constant group
  scale = min_is_edge ? scale : -scale;
  const float edge = min_is_edge ? w_min : w_max;
  const float edge_code = std::rint(edge / scale);
  float bias = 0;
  if (edge_code != 0) {
    scale = edge / edge_code;
    bias = edge;
  }
  const int per_word = 32 / bits;
  for (int word = 0; word < group_size / per_word; word++) {
    uint32_t packed = 0;
    for (int k = 0; k < per_word; k++) {
      float q = std::rint((w[word * per_word + k] - bias) / scale);
      q = std::min(std::max(q, 0.0f), n_bins);
      packed |= uint32_t(q) << (k * bits);  // lowest bits first
    }
    words[word] = packed;
  }
  *scale_out = scale;
  *bias_out = bias;
}

QuantizedTensor quantize_tensor(const std::string& name, const std::string& file, const TensorView& tensor,
                                const QuantizeOptions& options) {
  if (tensor.dtype != DType::f32 && tensor.dtype != DType::f16 && tensor.dtype != DType::bf16)
    fail("cannot quantize tensor \"" + name + "\" in " + file + ": dtype " + dtype_name(tensor.dtype) +
         " is not f32, f16 or bf16");
  const int64_t n_rows = tensor.shape[0], n_cols = tensor.shape[1];
  if (n_cols % options.group_size != 0)
    fail("cannot quantize tensor \"" + name + "\" in " + file + " with group size " +
         std::to_string(options.group_size) + ": its input dimension " + std::to_string(n_cols) +
         " is not a multiple of it");
  QuantizedTensor out;
  out.prefix = name.substr(0, name.size() - std::string(".weight").size());
  out.n_rows = n_rows;
  out.n_words_per_row = n_cols * options.bits / 32;
  out.n_groups_per_row = n_cols / options.group_size;
  out.scale_dtype = tensor.dtype;  // as MLX: scales and biases in the weight's own type
  out.packed.resize(size_t(n_rows * out.n_words_per_row));
  out.scales.resize(size_t(n_rows * out.n_groups_per_row) * dtype_size(tensor.dtype));
  out.biases.resize(out.scales.size());

  std::vector<float> row(static_cast<size_t>(n_cols));
  const int64_t words_per_group = options.group_size * options.bits / 32;
  for (int64_t r = 0; r < n_rows; r++) {
    for (int64_t c = 0; c < n_cols; c++) {
      row[size_t(c)] = load_as_f32(tensor.data, tensor.dtype, r * n_cols + c);
      if (!std::isfinite(row[size_t(c)]))
        fail("cannot quantize tensor \"" + name + "\" in " + file + ": row " + std::to_string(r) +
             " holds a value that is not finite");
    }
    for (int64_t g = 0; g < out.n_groups_per_row; g++) {
      float scale, bias;
      quantize_group(row.data() + g * options.group_size, options.group_size, options.bits, &scale,
                     &bias, out.packed.data() + r * out.n_words_per_row + g * words_per_group);
      store_as(out.scale_dtype, scale, out.scales.data(), r * out.n_groups_per_row + g);
      store_as(out.scale_dtype, bias, out.biases.data(), r * out.n_groups_per_row + g);
    }
  }
  return out;
}

void write_quantized_config(const std::string& in_dir, const std::string& out_dir,
                            const QuantizeOptions& options) {
  auto config = read_json_file(in_dir + "/config.json");
  nlohmann::json quantization = {{"group_size", options.group_size}, {"bits", options.bits}};
  config["quantization"] = quantization;
  config["quantization_config"] = quantization;  // MLX writes both; Hugging Face tools read the second
  const std::string path = out_dir + "/config.json";
  std::ofstream out(path, std::ios::trunc);
  out << config.dump(2) << "\n";
  out.close();
  if (!out) fail("cannot write " + path);
}

}  // namespace

// The quantized weights, config and tokenizer files into out_dir (made and checked by the caller).
static void write_quantized_model(const std::string& in_dir, const std::string& out_dir, const ModelConfig& config,
                                  const QuantizeOptions& options, const LoadProgress& progress);

void quantize_model_dir(const std::string& in_dir, const std::string& out_dir,
                        const QuantizeOptions& options, const LoadProgress& progress) {
  if (options.bits != 4 && options.bits != 8)
    fail("quantization bits must be 4 or 8, got " + std::to_string(options.bits));
  if (options.group_size != 32 && options.group_size != 64 && options.group_size != 128)
    fail("quantization group size must be 32, 64 or 128, got " + std::to_string(options.group_size));
  const ModelConfig config = ModelConfig::load(in_dir);
  if (config.quantization.bits != 0)
    fail("model in " + in_dir + " is already quantized (" + std::to_string(config.quantization.bits) +
         " bits); quantize from the dense checkpoint");
  std::error_code error;
  const bool existed = fs::exists(out_dir, error);
  if (existed && fs::equivalent(in_dir, out_dir, error))
    fail("output directory " + out_dir + " is the input directory; choose another");
  // Another model's files left beside ours (a tokenizer, an index) would make a mixture that loads.
  if (existed && (!fs::is_directory(out_dir, error) || !fs::is_empty(out_dir, error)))
    fail("output directory " + out_dir + " exists and is not an empty directory; choose a new or empty one");
  fs::create_directories(out_dir, error);
  if (!fs::is_directory(out_dir, error)) fail("cannot create output directory " + out_dir);
  try {
    write_quantized_model(in_dir, out_dir, config, options, progress);
  } catch (...) {
    if (!existed) fs::remove_all(out_dir, error);  // nothing half-written stays behind
    throw;
  }
}

static void write_quantized_model(const std::string& in_dir, const std::string& out_dir, const ModelConfig& config,
                                  const QuantizeOptions& options, const LoadProgress& progress) {
  std::error_code error;

  const Checkpoint checkpoint = Checkpoint::open(in_dir);
  size_t total_bytes = 0, done_bytes = 0;
  for (const std::string& name : checkpoint.names()) total_bytes += checkpoint.get(name).n_bytes;
  if (progress) progress(0, total_bytes);

  std::vector<QuantizedTensor> quantized;
  std::vector<TensorToWrite> outputs;
  for (const std::string& name : checkpoint.names()) {
    const TensorView& tensor = checkpoint.get(name);
    done_bytes += tensor.n_bytes;
    // mlx-lm drops a tied head: the embedding serves as both.
    if (is_lm_head(name) && config.tie_word_embeddings) continue;
    if (is_quantized_layer(name, tensor, config, options.group_size)) {
      quantized.push_back(quantize_tensor(name, checkpoint.file_of(name), tensor, options));
    } else {
      outputs.push_back({name, tensor.dtype, tensor.shape, tensor.data, tensor.n_bytes});
    }
    if (progress) progress(done_bytes, total_bytes);
  }
  for (const QuantizedTensor& q : quantized) {
    const size_t n_scale_bytes = q.scales.size();
    outputs.push_back({q.prefix + ".weight", DType::u32, {q.n_rows, q.n_words_per_row}, q.packed.data(),
                       q.packed.size() * sizeof(uint32_t)});
    const std::vector<int64_t> group_shape = {q.n_rows, q.n_groups_per_row};
    outputs.push_back({q.prefix + ".scales", q.scale_dtype, group_shape, q.scales.data(), n_scale_bytes});
    outputs.push_back({q.prefix + ".biases", q.scale_dtype, group_shape, q.biases.data(), n_scale_bytes});
  }
  write_safetensors(out_dir + "/model.safetensors", outputs, {{"format", "mlx"}});
  write_quantized_config(in_dir, out_dir, options);

  for (const char* file :
       {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"}) {
    const std::string source = in_dir + "/" + file;
    if (!file_exists(source)) continue;
    fs::copy_file(source, out_dir + "/" + file, fs::copy_options::overwrite_existing, error);
    if (error) fail("cannot copy " + source + " to " + out_dir + ": " + error.message());
  }
}

}  // namespace tf
