// Reads and validates config.json, generation_config.json and the EOS token of tokenizer_config.json.
#include "loader/model_config.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "loader/config_fields.h"
#include "loader/file_helpers.h"

namespace tf {

namespace {

using Json = nlohmann::json;

int64_t read_int(const Json& value, const char* field, const std::string& path) {
  if (!value.is_number_integer()) fail_field(field, path, "must be an integer");
  return value.get<int64_t>();
}

double read_number(const Json& value, const char* field, const std::string& path) {
  if (!value.is_number()) fail_field(field, path, "must be a number");
  return value.get<double>();
}

// "eos_token_id" is an int or a list of ints in config.json and generation_config.json.
void add_eos_ids(const Json& object, const std::string& path, std::set<int32_t>* ids) {
  const Json* value = find_field(object, "eos_token_id");
  if (!value) return;
  if (value->is_array()) {
    for (const Json& id : *value) ids->insert(read_index(id, "eos_token_id", path));
  } else {
    ids->insert(read_index(*value, "eos_token_id", path));
  }
}

// tokenizer_config.json names the EOS token by text; its id comes from tokenizer.json's
// added_tokens, or from tokenizer_config.json's own added_tokens_decoder.
void add_eos_token_from_tokenizer(const std::string& dir, std::set<int32_t>* ids) {
  const std::string config_path = dir + "/tokenizer_config.json";
  if (!file_exists(config_path)) return;
  const Json config = read_json_file(config_path);
  const Json* eos = config.is_object() ? find_field(config, "eos_token") : nullptr;
  if (!eos || eos->is_null()) return;  // null: transformers writes it for a tokenizer without one
  std::string content;
  if (eos->is_string()) {
    content = eos->get<std::string>();
  } else if (eos->is_object() && eos->contains("content") && (*eos)["content"].is_string()) {
    content = (*eos)["content"].get<std::string>();
  } else {
    fail_field("eos_token", config_path, "must be a string or an object with \"content\"");
  }

  const std::string tokenizer_path = dir + "/tokenizer.json";
  if (file_exists(tokenizer_path)) {
    const Json tokenizer = read_json_file(tokenizer_path, {"model"});
    const Json* added = tokenizer.is_object() ? find_field(tokenizer, "added_tokens") : nullptr;
    if (added && added->is_array()) {
      for (size_t i = 0; i < added->size(); ++i) {
        const Json& token = (*added)[i];
        const std::string field = "added_tokens[" + std::to_string(i) + "]";
        if (!token.is_object()) fail_field(field, tokenizer_path, "must be an object");
        const Json* token_content = find_field(token, "content");
        if (!token_content || !token_content->is_string())
          fail_field(field + ".content", tokenizer_path, "must be a string");
        if (token_content->get_ref<const std::string&>() != content) continue;
        const Json* id = find_field(token, "id");
        if (!id) fail_field(field + ".id", tokenizer_path, "is missing");
        ids->insert(read_index(*id, field + ".id", tokenizer_path));
        return;
      }
    }
  }
  const Json* decoder = find_field(config, "added_tokens_decoder");
  if (decoder && decoder->is_object()) {
    for (const auto& [id_text, token] : decoder->items()) {
      const std::string field = "added_tokens_decoder." + id_text;
      if (!token.is_object()) fail_field(field, config_path, "must be an object");
      const Json* token_content = find_field(token, "content");
      if (!token_content || !token_content->is_string())
        fail_field(field + ".content", config_path, "must be a string");
      if (token_content->get_ref<const std::string&>() != content) continue;
      // The key is the id: decimal digits only, within int32 (std::stol would take "12abc" as 12).
      if (id_text.empty() || id_text.size() > 10 || id_text.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(id_text) > INT32_MAX)
        fail_field(field, config_path, "has a key that is not a token id from 0 to " + std::to_string(INT32_MAX));
      ids->insert(int32_t(std::stoll(id_text)));
      return;
    }
  }
}

// A RoPE setting (rope_theta, partial_rotary_factor): newer transformers versions keep it in
// "rope_parameters", older files at the top level; a file with both must say the same in both.
double rope_number(const Json& text, const char* name, const std::string& path) {
  const Json* parameters = find_field(text, "rope_parameters");
  const Json* nested = parameters && parameters->is_object() ? find_field(*parameters, name) : nullptr;
  const Json* top = find_field(text, name);
  if (!nested && !top) fail_field(name, path, "is missing (looked in rope_parameters and at the top level)");
  const std::string nested_name = std::string("rope_parameters.") + name;
  const double value = nested ? read_number(*nested, nested_name.c_str(), path) : read_number(*top, name, path);
  if (nested && top && read_number(*top, name, path) != value)
    fail_field(name, path, "is given at the top level and in rope_parameters with different values");
  return value;
}

// MLX writes "quantization" and, for Hugging Face tools, the same dict as "quantization_config".
QuantizationConfig read_quantization(const Json& config, const std::string& path) {
  const char* field = "quantization";
  const Json* value = find_field(config, field);
  if (!value) {
    field = "quantization_config";
    value = find_field(config, field);
    if (!value) return {};
  }
  if (!value->is_object()) fail_field(field, path, "must be an object");
  if (const Json* method = find_field(*value, "quant_method")) {
    fail(std::string("unsupported quantization method ") + method->dump() + " in " + path +
         " (only MLX affine quantization is supported)");
  }
  if (const Json* mode = find_field(*value, "mode"); mode && *mode != "affine") {
    fail(std::string("unsupported quantization mode ") + mode->dump() + " in " + path +
         " (only \"affine\" is supported)");
  }
  QuantizationConfig quantization;
  quantization.group_size = int(required_int(*value, "group_size", path));
  quantization.bits = int(required_int(*value, "bits", path));
  // mlx-lm may name modules one by one: true or false (quantized or not: the tensors say which), or
  // the settings of the whole model again. Other settings for one module (mixed precision) are not
  // supported.
  for (const auto& [key, entry] : value->items()) {
    if (!entry.is_object()) continue;
    const bool is_same = entry.contains("group_size") && entry["group_size"] == quantization.group_size &&
                         entry.contains("bits") && entry["bits"] == quantization.bits &&
                         (!entry.contains("mode") || entry["mode"] == "affine");
    if (!is_same)
      fail("per-layer quantization settings (\"" + key + "\": " + entry.dump() + ") in " + path +
           " differ from the model's; mixed precision is not supported");
  }
  return quantization;
}

// The Gated DeltaNet fields and the layer schedule of a hybrid's text config; each is required.
HybridConfig read_hybrid_fields(const Json& text, const std::string& path, int64_t head_dim, int64_t n_layers) {
  HybridConfig hybrid;
  // Bounded before the default schedule is built, one entry per layer.
  require_in_range(n_layers, "num_hidden_layers", path, 1, 4096);
  const Json* given_types = find_field(text, "layer_types");
  Json types = given_types ? *given_types : Json::array();
  if (!given_types) {
    // As transformers builds it: every full_attention_interval-th layer (default 4) is full attention.
    const Json* interval_field = find_field(text, "full_attention_interval");
    const int64_t interval = interval_field ? required_int(text, "full_attention_interval", path) : 4;
    if (interval < 1) fail_field("full_attention_interval", path, "must be at least 1");
    for (int64_t i = 0; i < n_layers; ++i) types.push_back((i + 1) % interval ? "linear_attention" : "full_attention");
  }
  if (!types.is_array()) fail_field("layer_types", path, "must be a list of \"linear_attention\" / \"full_attention\"");
  for (const Json& type : types) {
    if (type == "linear_attention") {
      hybrid.layer_kinds.push_back(LayerKind::linear_attention);
    } else if (type == "full_attention") {
      hybrid.layer_kinds.push_back(LayerKind::full_attention);
    } else {
      fail_field("layer_types", path, "holds " + type.dump() + " (each entry must be \"linear_attention\" or \"full_attention\")");
    }
  }
  // Checked here, not only in validate_hybrid: an empty schedule would make the model dense.
  if (int64_t(hybrid.layer_kinds.size()) != n_layers)
    fail_field("layer_types", path,
               "has " + std::to_string(hybrid.layer_kinds.size()) + " entries for " + std::to_string(n_layers) +
                   " layers (num_hidden_layers)");
  hybrid.linear_n_key_heads = required_int(text, "linear_num_key_heads", path);
  hybrid.linear_n_value_heads = required_int(text, "linear_num_value_heads", path);
  hybrid.linear_key_head_dim = required_int(text, "linear_key_head_dim", path);
  hybrid.linear_value_head_dim = required_int(text, "linear_value_head_dim", path);
  hybrid.conv_kernel = required_int(text, "linear_conv_kernel_dim", path);
  const double rotary_fraction = rope_number(text, "partial_rotary_factor", path);
  if (!(rotary_fraction > 0 && rotary_fraction <= 1)) fail_field("partial_rotary_factor", path, "must be in (0, 1]");
  hybrid.rotary_dim = int64_t(double(head_dim) * rotary_fraction);  // int(), as transformers
  return hybrid;
}

}  // namespace

ModelConfig ModelConfig::load(const std::string& model_dir) {
  std::string path;
  const Json json = read_config_object(model_dir, "model", &path);
  ModelConfig config;
  config.architecture = config_architecture(json, path);
  const bool is_nested = config.architecture == "Qwen3_5ForConditionalGeneration";
  const bool is_hybrid = is_nested || config.architecture == "Qwen3_5ForCausalLM";
  if (config.architecture != "Qwen3ForCausalLM" && !is_hybrid)
    fail("unsupported architecture " + config.architecture + " in " + path +
         " (supported: Qwen3ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5ForCausalLM)");
  if (const Json* type = find_field(json, "model_type"); type && type->is_string()) config.model_type = type->get<std::string>();

  // The multimodal layout keeps the text model's fields under "text_config" (the vision tower is ignored).
  const Json* text_object = &json;
  std::string text_path = path;
  if (is_nested) {
    text_object = &required_field(json, "text_config", path);
    if (!text_object->is_object()) fail_field("text_config", path, "must be an object");
    text_path = path + " (text_config)";
  }
  const Json& text = *text_object;
  config.hidden_size = required_int(text, "hidden_size", text_path);
  config.intermediate_size = required_int(text, "intermediate_size", text_path);
  config.n_layers = required_int(text, "num_hidden_layers", text_path);
  config.n_heads = required_int(text, "num_attention_heads", text_path);
  config.n_kv_heads = required_int(text, "num_key_value_heads", text_path);
  config.vocab_size = required_int(text, "vocab_size", text_path);
  config.max_position_embeddings = required_int(text, "max_position_embeddings", text_path);
  config.rms_norm_eps = float(required_number(text, "rms_norm_eps", text_path));

  if (const Json* head_dim = find_field(text, "head_dim")) {
    config.head_dim = read_int(*head_dim, "head_dim", text_path);
  } else {
    if (config.n_heads <= 0) fail_field("num_attention_heads", text_path, "must be positive");
    config.head_dim = config.hidden_size / config.n_heads;
  }

  config.rope_theta = rope_number(text, "rope_theta", text_path);

  // What this engine does not implement would give other tokens than the model: refused, never ignored.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const Json* rope = find_field(text, key);
    if (!rope || !rope->is_object()) continue;
    for (const char* type_key : {"rope_type", "type"})
      if (const Json* type = find_field(*rope, type_key); type && *type != "default")
        fail_field(std::string(key) + "." + type_key, text_path,
                   "is " + type->dump() + ": only the default RoPE is supported (no yarn, linear or dynamic scaling)");
  }
  if (const Json* sliding = find_field(text, "use_sliding_window"); sliding && *sliding == true)
    fail_field("use_sliding_window", text_path, "is true: sliding-window attention is not supported");
  if (!is_hybrid)
    if (const Json* types = find_field(text, "layer_types")) {
      if (!types->is_array()) fail_field("layer_types", text_path, "must be a list of \"full_attention\"");
      for (const Json& type : *types)
        if (type != "full_attention")
          fail_field("layer_types", text_path, "holds " + type.dump() + ": this architecture's layers are all full_attention");
      if (int64_t(types->size()) != config.n_layers)
        fail_field("layer_types", text_path,
                   "has " + std::to_string(types->size()) + " entries for " + std::to_string(config.n_layers) +
                       " layers (num_hidden_layers)");
    }
  // Every layer's MLP is SwiGLU: another activation would compute another model.
  if (const Json* activation = find_field(text, "hidden_act"); activation && *activation != "silu")
    fail_field("hidden_act", text_path, "must be \"silu\", got " + activation->dump());
  if (const Json* type = find_field(json, "model_type"); type && !type->is_string())
    fail_field("model_type", path, "must be a string");

  // The composite model's own flag decides; the text config's is the fallback.
  for (const Json* object : {&json, &text}) {
    if (const Json* tie = find_field(*object, "tie_word_embeddings")) {
      if (!tie->is_boolean()) fail_field("tie_word_embeddings", path, "must be true or false");
      config.tie_word_embeddings = tie->get<bool>();
      break;
    }
  }
  if (is_hybrid) config.hybrid = read_hybrid_fields(text, text_path, config.head_dim, config.n_layers);
  config.quantization = read_quantization(json, path);

  std::set<int32_t> eos_ids;
  add_eos_ids(json, path, &eos_ids);
  if (is_nested) add_eos_ids(text, text_path, &eos_ids);
  const std::string generation_path = model_dir + "/generation_config.json";
  if (file_exists(generation_path)) {
    const Json generation = read_json_file(generation_path);
    if (!generation.is_object()) fail(generation_path + " must hold a JSON object");
    add_eos_ids(generation, generation_path, &eos_ids);
  }
  add_eos_token_from_tokenizer(model_dir, &eos_ids);
  config.eos_token_ids.assign(eos_ids.begin(), eos_ids.end());

  config.validate(path);
  return config;
}

void ModelConfig::validate(const std::string& source) const {
  auto require_positive = [&](int64_t value, const char* field) {
    if (value <= 0)
      fail(std::string(field) + " in " + source + " must be positive, got " + std::to_string(value));
  };
  require_positive(hidden_size, "hidden_size");
  require_positive(intermediate_size, "intermediate_size");
  require_positive(n_layers, "num_hidden_layers");
  require_positive(n_heads, "num_attention_heads");
  require_positive(n_kv_heads, "num_key_value_heads");
  require_positive(head_dim, "head_dim");
  require_positive(vocab_size, "vocab_size");
  require_positive(max_position_embeddings, "max_position_embeddings");
  // Far above any real model; they keep products of sizes (q_dim, vocab x hidden) inside int64.
  require_in_range(hidden_size, "hidden_size", source, 1, 1 << 20);
  require_in_range(intermediate_size, "intermediate_size", source, 1, 1 << 22);
  require_in_range(n_layers, "num_hidden_layers", source, 1, 4096);
  require_in_range(n_heads, "num_attention_heads", source, 1, 4096);
  require_in_range(n_kv_heads, "num_key_value_heads", source, 1, 4096);
  require_in_range(head_dim, "head_dim", source, 1, 4096);
  // Token ids are int32, so the vocabulary ends at 2^31 - 1.
  require_in_range(vocab_size, "vocab_size", source, 1, INT32_MAX);
  require_in_range(max_position_embeddings, "max_position_embeddings", source, 1, INT32_MAX);
  if (!(rope_theta > 0)) fail("rope_theta in " + source + " must be positive");
  if (!(rms_norm_eps > 0)) fail("rms_norm_eps in " + source + " must be positive");
  if (n_heads % n_kv_heads != 0)
    fail("num_attention_heads (" + std::to_string(n_heads) + ") in " + source +
         " must be a multiple of num_key_value_heads (" + std::to_string(n_kv_heads) + ")");
  for (int32_t id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail("eos_token_id " + std::to_string(id) + " (from " + source + ", generation_config.json or "
           "tokenizer_config.json) is outside the vocabulary of " + std::to_string(vocab_size) + " tokens");
  if (is_hybrid()) validate_hybrid(source);
  if (quantization.bits == 0 && quantization.group_size == 0) return;
  if (quantization.bits != 4 && quantization.bits != 8)
    fail("quantization bits in " + source + " must be 4 or 8, got " +
         std::to_string(quantization.bits));
  if (quantization.group_size != 32 && quantization.group_size != 64 &&
      quantization.group_size != 128)
    fail("quantization group_size in " + source + " must be 32, 64 or 128, got " +
         std::to_string(quantization.group_size));
}

void ModelConfig::validate_hybrid(const std::string& source) const {
  const HybridConfig& h = hybrid;
  if (int64_t(h.layer_kinds.size()) != n_layers)
    fail("layer_types in " + source + " has " + std::to_string(h.layer_kinds.size()) + " entries for " +
         std::to_string(n_layers) + " layers (num_hidden_layers)");
  // Bounded as the dense sizes are, so every product of them (conv_dim, a state's size) stays in
  // int64: a wrapped product once matched a real tensor's shape.
  require_in_range(h.linear_n_key_heads, "linear_num_key_heads", source, 1, 4096);
  require_in_range(h.linear_n_value_heads, "linear_num_value_heads", source, 1, 4096);
  require_in_range(h.linear_key_head_dim, "linear_key_head_dim", source, 1, 4096);
  require_in_range(h.linear_value_head_dim, "linear_value_head_dim", source, 1, 4096);
  require_in_range(h.conv_kernel, "linear_conv_kernel_dim", source, 1, 16);
  if (h.linear_n_value_heads % h.linear_n_key_heads != 0)
    fail("linear_num_value_heads (" + std::to_string(h.linear_n_value_heads) + ") in " + source +
         " must be a multiple of linear_num_key_heads (" + std::to_string(h.linear_n_key_heads) + ")");
  if (h.rotary_dim <= 0 || h.rotary_dim % 2 != 0 || h.rotary_dim > head_dim)
    fail("partial_rotary_factor in " + source + " gives " + std::to_string(h.rotary_dim) +
         " rotary dimensions of head_dim " + std::to_string(head_dim) + " (must be even and positive)");
}

}  // namespace tf
