// Qwen3.5-class hybrids (Gated DeltaNet + gated attention) on the CPU: parity with transformers on
// tiny random checkpoints of both layouts, loader errors, bitwise batch invariance of the forward,
// recurrent state after verify-and-accept equal to plain decoding (the engine's equalities on hybrids
// are in test_hybrid_engine.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/backends.h"
#include "loader/quantize.h"
#include "loader/safetensors.h"
#include "models/synthetic.h"
#include "models/model.h"
#include "support/cpu_numerics.h"
#include "support/expect_error.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "support/hybrid_runs.h"
#include "support/widened_hybrid.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

// float32 on both sides; transformers' prefill runs the chunked (UT transform) form of the delta
// rule and we run the recurrence, so sums differ in order only.
constexpr float kLogitTolerance = 1e-4f;
constexpr size_t kMinGreedySteps = 8;

const char* const kHybrids[] = {"qwen3.5-tiny-a", "qwen3.5-tiny-b", "qwen3.5-tiny-c"};

std::shared_ptr<Model> load_hybrid(const std::string& name, int n_threads = 0) {
  ModelLoadOptions options;
  options.n_threads = n_threads;
  return load_model(test::hybrid_model_dir(name), options);
}

class HybridParity : public ::testing::TestWithParam<std::string> {};

// At each numerics the machine has (support/cpu_numerics.h); every position's argmax at f32 inputs.
TEST_P(HybridParity, PrefillLogitsMatchTransformers) {
  const std::string dir = test::fixture_model(GetParam());
  auto ref = test::read_json(dir + "/reference.json");
  for (const test::CpuNumerics& numerics : test::cpu_numerics_here()) {
    SCOPED_TRACE(numerics.name);
    test::CpuNumericsScope scope(numerics);
    auto model = load_hybrid(GetParam());
    ASSERT_TRUE(model->config().is_hybrid());
    const auto ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<float> logits = test::prefill_logits(*model, ids);
    const int64_t n_vocab = model->config().vocab_size;
    ASSERT_EQ(ref["logits"].size(), ids.size());
    float worst = 0, largest = 0;
    for (size_t p = 0; p < ids.size(); ++p)
      for (int64_t v = 0; v < n_vocab; ++v) {
        const float expected = ref["logits"][p][size_t(v)].get<float>();
        worst = std::max(worst, std::fabs(logits[p * size_t(n_vocab) + size_t(v)] - expected));
        largest = std::max(largest, std::fabs(expected));
      }
    EXPECT_LT(worst, test::logit_tolerance(numerics, kLogitTolerance, largest))
        << "largest logit difference over every position";
    EXPECT_GT(largest, 0.5f) << "the reference logits are too small to tell anything";
    std::printf("%s, %s: largest logit difference %.3g\n", GetParam().c_str(), numerics.name.c_str(), worst);
    if (numerics.has_bf16_inputs) continue;
    const auto argmax = ref["argmax"].get<std::vector<int32_t>>();
    for (size_t p = 0; p < ids.size(); ++p) {
      const float* row = logits.data() + p * size_t(n_vocab);
      EXPECT_FLOAT_EQ(*std::max_element(row, row + n_vocab), row[argmax[p]]) << "position " << p;
    }
  }
}

// Greedy through the engine against transformers' cached decoding (its token-by-token path), up to
// the first thin margin, with the top logits of every compared step.
TEST_P(HybridParity, GreedyTokensMatchTransformers) {
  test::CpuNumericsScope scope(test::f32_inputs());  // whose tolerance makes the margins worth comparing
  const std::string dir = test::fixture_model(GetParam());
  auto ref = test::read_json(dir + "/reference.json");
  auto model = load_hybrid(GetParam());
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["greedy_tokens"].get<std::vector<int32_t>>();
  const auto margins = ref["greedy_top2_margins"].get<std::vector<float>>();
  const auto got = test::greedy_generate(model, prompt, int64_t(expected.size()));
  ASSERT_EQ(got.size(), expected.size());
  size_t compared = 0;
  for (; compared < expected.size() && margins[compared] >= 10 * kLogitTolerance; ++compared)
    EXPECT_EQ(got[compared], expected[compared]) << "step " << compared;
  EXPECT_GE(compared, kMinGreedySteps);

  // The logits of each compared step, computed as plain decode rows.
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), expected.begin(), expected.begin() + int64_t(compared));
  const std::vector<float> logits = test::prefill_logits(*model, sequence);
  const int64_t n_vocab = model->config().vocab_size;
  for (size_t step = 0; step < compared; ++step) {
    const float* row = logits.data() + (prompt.size() - 1 + step) * size_t(n_vocab);
    const auto& top = ref["greedy_step_top"][step];
    for (size_t i = 0; i < top["ids"].size(); ++i)
      EXPECT_NEAR(row[top["ids"][i].get<int32_t>()], top["values"][i].get<float>(), kLogitTolerance)
          << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, HybridParity,
                         ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b", "qwen3.5-tiny-c"));

TEST(HybridParity, ChatSizedVocabularyTopLogitsMatch) {
  const std::string dir = test::fixture_model("qwen3.5-tiny-chat");
  auto ref = test::read_json(dir + "/reference.json");
  for (const test::CpuNumerics& numerics : test::cpu_numerics_here()) {
    SCOPED_TRACE(numerics.name);
    test::CpuNumericsScope scope(numerics);
    auto model = load_hybrid("qwen3.5-tiny-chat");
    const auto ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<float> logits = test::prefill_logits(*model, ids);
    const float* last = logits.data() + (ids.size() - 1) * size_t(model->config().vocab_size);
    const auto top = ref["logits_last_top"].get<std::vector<int32_t>>();
    const auto values = ref["logits_last_top_values"].get<std::vector<float>>();
    float largest = 0;
    for (float v : values) largest = std::max(largest, std::fabs(v));
    for (size_t i = 0; i < top.size(); ++i)
      EXPECT_NEAR(last[top[i]], values[i], test::logit_tolerance(numerics, kLogitTolerance, largest));
  }
}

// ---- Loader ----

TEST(HybridLoader, BothLayoutsGiveTheScheduleAndShapes) {
  const ModelConfig nested = ModelConfig::load(test::fixture_model("qwen3.5-tiny-a"));
  EXPECT_EQ(nested.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(nested.hidden_size, 64);
  EXPECT_TRUE(nested.tie_word_embeddings);
  EXPECT_EQ(nested.hybrid.rotary_dim, 12);  // 48 * 0.25
  EXPECT_EQ(nested.hybrid.n_layers_of(LayerKind::linear_attention), 3);
  EXPECT_EQ(nested.hybrid.layer_kinds.back(), LayerKind::full_attention);
  const ModelConfig flat = ModelConfig::load(test::fixture_model("qwen3.5-tiny-b"));
  EXPECT_EQ(flat.architecture, "Qwen3_5ForCausalLM");
  EXPECT_EQ(flat.model_type, "qwen3_5_text");
  const std::vector<LayerKind> expected = {LayerKind::linear_attention, LayerKind::full_attention,
                                           LayerKind::linear_attention, LayerKind::linear_attention,
                                           LayerKind::full_attention};
  EXPECT_EQ(flat.hybrid.layer_kinds, expected);
  EXPECT_EQ(flat.hybrid.linear_n_value_heads / flat.hybrid.linear_n_key_heads, 3);
  EXPECT_FALSE(flat.tie_word_embeddings);
}

// A copy of a fixture directory whose config.json `edit` changes.
std::string edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path from = test::fixture_model(name);
  const fs::path to = fs::temp_directory_path() / ("tf-hybrid-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(to);
  fs::create_directories(to);
  for (const auto& entry : fs::directory_iterator(from)) fs::copy(entry.path(), to / entry.path().filename());
  nlohmann::json config = test::read_json((to / "config.json").string());
  edit(config);
  std::ofstream((to / "config.json").string(), std::ios::trunc) << config.dump(2);
  return to.string();
}

TEST(HybridLoader, AMissingHybridFieldIsAnErrorNamingIt) {
  for (const char* field : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                            "linear_value_head_dim", "linear_conv_kernel_dim"}) {
    const std::string dir = edited_copy("qwen3.5-tiny-a", [&](nlohmann::json& c) { c["text_config"].erase(field); });
    test::expect_error_naming([&] { ModelConfig::load(dir); }, {field, dir + "/config.json", "text_config"});
    fs::remove_all(dir);
  }
  const std::string dir = edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) {
    c.erase("partial_rotary_factor");
    c["rope_parameters"].erase("partial_rotary_factor");
  });
  test::expect_error_naming([&] { ModelConfig::load(dir); }, {"partial_rotary_factor", dir + "/config.json"});
  fs::remove_all(dir);
  // Without layer_types, transformers' schedule: every full_attention_interval-th layer (4 unless
  // given) is full attention, the rest linear.
  const std::string by_interval = edited_copy("qwen3.5-tiny-a", [](nlohmann::json& c) { c["text_config"].erase("layer_types"); });
  EXPECT_EQ(ModelConfig::load(by_interval).hybrid.layer_kinds, ModelConfig::load(test::fixture_model("qwen3.5-tiny-a")).hybrid.layer_kinds);
  fs::remove_all(by_interval);
  const std::string every_other = edited_copy("qwen3.5-tiny-a", [](nlohmann::json& c) {
    c["text_config"].erase("layer_types");
    c["text_config"]["full_attention_interval"] = 2;
  });
  EXPECT_EQ(ModelConfig::load(every_other).hybrid.layer_kinds,
            (std::vector<LayerKind>{LayerKind::linear_attention, LayerKind::full_attention, LayerKind::linear_attention,
                                    LayerKind::full_attention}));
  fs::remove_all(every_other);
  // Given twice (the top level and rope_parameters), the two must agree.
  const std::string twice = edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) {
    c["rope_parameters"]["partial_rotary_factor"] = 0.25;
    c["partial_rotary_factor"] = 0.5;
  });
  test::expect_error_naming([&] { ModelConfig::load(twice); }, {"partial_rotary_factor", "different values"});
  fs::remove_all(twice);
  const std::string short_schedule =
      edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) { c["layer_types"].erase(c["layer_types"].size() - 1); });
  test::expect_error_naming([&] { ModelConfig::load(short_schedule); }, {"layer_types", "4 entries", "5 layers"});
  fs::remove_all(short_schedule);
  // An empty schedule is refused as one, not read as a dense model (whose tensors it then lacks).
  const std::string no_schedule = edited_copy("qwen3.5-tiny-a", [](nlohmann::json& c) { c["text_config"]["layer_types"] = nlohmann::json::array(); });
  test::expect_error_naming([&] { ModelConfig::load(no_schedule); }, {"layer_types", "0 entries", "4 layers", "text_config"});
  fs::remove_all(no_schedule);
  // Without layer_types the default schedule has one entry per layer: the count is bounded first.
  const std::string huge = edited_copy("qwen3.5-tiny-a", [](nlohmann::json& c) {
    c["text_config"].erase("layer_types");
    c["text_config"]["num_hidden_layers"] = int64_t(1) << 40;
  });
  test::expect_error_naming([&] { ModelConfig::load(huge); }, {"num_hidden_layers", "1099511627776", "text_config"});
  fs::remove_all(huge);
  const std::string bad_kind =
      edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) { c["layer_types"][0] = "sliding_attention"; });
  test::expect_error_naming([&] { ModelConfig::load(bad_kind); }, {"layer_types", "sliding_attention"});
  fs::remove_all(bad_kind);
}

// A size whose products wrap int64 back to the real shapes (2 * 2^62 * heads + value dim == the
// true conv_dim) is refused by its own bound, before any shape is compared.
TEST(HybridLoader, ASizeWhoseProductsWrapIsRefused) {
  const std::string dir = edited_copy("qwen3.5-tiny-a", [](nlohmann::json& c) {
    c["text_config"]["linear_key_head_dim"] = c["text_config"]["linear_key_head_dim"].get<int64_t>() + (int64_t(1) << 62);
  });
  test::expect_error_naming([&] { ModelConfig::load(dir); }, {"linear_key_head_dim", dir + "/config.json"});
  fs::remove_all(dir);
}

// A checkpoint with tensors the config does not ask for loads no model: a layer past
// num_hidden_layers, an untied head beside tie_word_embeddings, an attention tensor in a layer
// "layer_types" makes linear. The vision tower alone may go unused (tiny-a carries one).
TEST(HybridLoader, ATensorTheConfigDoesNotUseIsAnErrorNamingTheField) {
  const std::string fewer_layers = edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) {
    c["num_hidden_layers"] = 4;
    c["layer_types"].erase(4);
  });
  test::expect_error_naming([&] { load_model(fewer_layers, {}); },
                            {"model.layers.4.", "num_hidden_layers", fewer_layers + "/config.json"});
  fs::remove_all(fewer_layers);
  const std::string tied = edited_copy("qwen3.5-tiny-b", [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
  test::expect_error_naming([&] { load_model(tied, {}); }, {"lm_head.weight", "tie_word_embeddings"});
  fs::remove_all(tied);
  EXPECT_NO_THROW(load_model(test::hybrid_model_dir("qwen3.5-tiny-a"), {}));

  // Layer 0 of tiny-b is linear; an attention projection beside its DeltaNet names layer_types.
  const fs::path mixed = fs::temp_directory_path() / ("tf-hybrid-mixed-" + std::to_string(::getpid()));
  fs::remove_all(mixed);
  fs::create_directories(mixed);
  const std::string from = test::fixture_model("qwen3.5-tiny-b");
  fs::copy(from + "/config.json", mixed / "config.json");
  {
    const Checkpoint checkpoint = Checkpoint::open(from);
    std::vector<TensorToWrite> tensors;
    for (const std::string& name : checkpoint.names()) {
      const TensorView& t = checkpoint.get(name);
      tensors.push_back({name, t.dtype, t.shape, t.data, t.n_bytes});
    }
    const TensorView& norm = checkpoint.get("model.norm.weight");
    tensors.push_back({"model.layers.0.self_attn.q_norm.weight", norm.dtype, norm.shape, norm.data, norm.n_bytes});
    write_safetensors((mixed / "model.safetensors").string(), tensors);
  }
  test::expect_error_naming([&] { load_model(mixed.string(), {}); },
                            {"model.layers.0.self_attn.q_norm.weight", "layer 0 is \"linear_attention\"", "layer_types"});
  fs::remove_all(mixed);
}

// The layout mlx-lm saves: the text model under language_model.model.* (its head under
// language_model.lm_head), the convolution as [C][K][1], and the zero-centred norms already shifted
// to 1 + w. Stored here in f32 (1 + w formed in f32, as the loader forms it), the copy must give the
// transformers layout's logits bit for bit.
TEST(HybridLoader, MlxLmLayoutGivesTheSameLogits) {
  for (const char* name : {"qwen3.5-tiny-a", "qwen3.5-tiny-c"}) {
    SCOPED_TRACE(name);
    const std::string from = test::fixture_model(name);
    const fs::path to = fs::temp_directory_path() / ("tf-hybrid-mlxlm-" + std::string(name) + "-" + std::to_string(::getpid()));
    fs::remove_all(to);
    fs::create_directories(to);
    fs::copy(from + "/config.json", to / "config.json");
    const Checkpoint checkpoint = Checkpoint::open(from);
    std::vector<TensorToWrite> tensors;
    std::vector<std::vector<float>> shifted;
    shifted.reserve(checkpoint.names().size());
    auto ends_with = [](const std::string& s, const std::string& suffix) {
      return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    for (const std::string& tensor_name : checkpoint.names()) {
      if (tensor_name.rfind("model.visual.", 0) == 0) continue;  // mlx-lm drops the vision tower
      const TensorView& t = checkpoint.get(tensor_name);
      std::string renamed = tensor_name;
      if (renamed.rfind("model.language_model.", 0) == 0) renamed = "language_model.model." + renamed.substr(21);
      if (renamed == "lm_head.weight") renamed = "language_model.lm_head.weight";
      std::vector<int64_t> shape = t.shape;
      if (ends_with(renamed, "conv1d.weight")) shape = {t.shape[0], t.shape[2], 1};
      const bool is_centred_norm = t.shape.size() == 1 && ends_with(renamed, "norm.weight") &&
                                   !ends_with(renamed, "linear_attn.norm.weight");
      if (is_centred_norm) {
        auto& values = shifted.emplace_back(size_t(t.shape[0]));
        for (int64_t i = 0; i < t.shape[0]; ++i) values[size_t(i)] = 1.0f + load_as_f32(t.data, t.dtype, i);
        tensors.push_back({renamed, DType::f32, shape, values.data(), values.size() * sizeof(float)});
      } else {
        tensors.push_back({renamed, t.dtype, shape, t.data, t.n_bytes});
      }
    }
    write_safetensors((to / "model.safetensors").string(), tensors, {{"format", "mlx"}});
    auto hf = load_hybrid(name, 2);
    auto mlx = load_model(to.string(), {});
    std::mt19937 rng(3);
    const auto ids = test::random_ids(rng, 20, hf->config().vocab_size);
    const std::vector<float> a = test::prefill_logits(*hf, ids), b = test::prefill_logits(*mlx, ids);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    fs::remove_all(to);
  }
}

// `tensorfold quantize` on hybrids of both layouts: the projections and the embedding become MLX
// affine, the convolution, norms, A_log and dt_bias (and any projection whose input width is not a
// multiple of the group) stay dense; the copy loads, stays close to the dense model, and keeps
// every invariance of the forward.
TEST(HybridQuantize, MlxCopiesOfBothLayoutsLoadAndStayClose) {
  for (const char* name : {"qwen3.5-tiny-a", "qwen3.5-tiny-b"}) {
    SCOPED_TRACE(name);
    const fs::path out = fs::temp_directory_path() / ("tf-hybrid-mlx-" + std::string(name) + "-" + std::to_string(::getpid()));
    fs::remove_all(out);
    quantize_model_dir(test::fixture_model(name), out.string(), QuantizeOptions{8, 32});
    const Checkpoint checkpoint = Checkpoint::open(out.string());
    const std::string text = std::string(name) == "qwen3.5-tiny-a" ? "model.language_model." : "model.";
    const bool is_a = std::string(name) == "qwen3.5-tiny-a";
    // Group 32: tiny-a's hidden width 64 divides; its out_proj reads 80 values (2 heads of 40) and
    // stays dense. tiny-b's hidden width 80 does not divide, so only its wider inputs are quantized.
    const std::vector<std::pair<std::string, bool>> expected =
        is_a ? std::vector<std::pair<std::string, bool>>{{"layers.0.linear_attn.in_proj_qkv", true},
                                                         {"layers.0.linear_attn.in_proj_a", true},
                                                         {"embed_tokens", true},
                                                         {"layers.3.self_attn.q_proj", true},
                                                         {"layers.3.mlp.down_proj", true},
                                                         {"layers.0.linear_attn.out_proj", false}}
             : std::vector<std::pair<std::string, bool>>{{"layers.0.mlp.down_proj", true},
                                                         {"layers.1.self_attn.o_proj", true},
                                                         {"layers.0.linear_attn.in_proj_qkv", false},
                                                         {"embed_tokens", false}};
    for (const auto& [tensor, is_quantized] : expected)
      EXPECT_EQ(checkpoint.has(text + tensor + ".scales"), is_quantized) << tensor;
    for (const char* dense : {"layers.0.linear_attn.conv1d", "layers.0.linear_attn.norm", "layers.0.input_layernorm",
                              "layers.0.linear_attn.A_log", "layers.0.linear_attn.dt_bias"})
      EXPECT_FALSE(checkpoint.has(text + dense + ".scales")) << dense;

    // Random tiny weights amplify rounding, so the check is that the error shrinks as bits grow (a
    // misread layout would not): 8-bit well under the 4-bit copy's error, and small next to the logits.
    auto dense = load_hybrid(name, 2);
    auto quantized = load_model(out.string(), {});
    EXPECT_EQ(quantized->config().quantization.bits, 8);
    const fs::path out4 = out.string() + "-4bit";
    fs::remove_all(out4);
    quantize_model_dir(test::fixture_model(name), out4.string(), QuantizeOptions{4, 32});
    auto quantized4 = load_model(out4.string(), {});
    std::mt19937 rng(5);
    const auto ids = test::random_ids(rng, 30, dense->config().vocab_size);
    const std::vector<float> a = test::prefill_logits(*dense, ids), b = test::prefill_logits(*quantized, ids),
                             b4 = test::prefill_logits(*quantized4, ids);
    float worst = 0, worst4 = 0, largest = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::fabs(a[i] - b[i]));
      worst4 = std::max(worst4, std::fabs(a[i] - b4[i]));
      largest = std::max(largest, std::fabs(a[i]));
    }
    EXPECT_GT(worst, 0.0f) << "the copy is really quantized";
    EXPECT_LT(worst, worst4 / 4) << "8-bit error against the 4-bit copy's";
    EXPECT_LT(worst, 0.25f * largest) << "8-bit logits against the dense ones (largest " << largest << ")";
    const std::vector<float> chunked = test::hybrid_chunked_logits(*quantized, ids, {7, 1, 13, 9}, 9, rng);
    EXPECT_EQ(0, std::memcmp(chunked.data(), b.data(), b.size() * sizeof(float))) << "chunked among neighbours";
    fs::remove_all(out4);
    fs::remove_all(out);
  }
}

// The benchmark shape: Qwen3.6-27B's widths with its 3:1 schedule (only the config: the weights are 27B).
TEST(HybridSynthetic, Qwen36Shape) {
  const ModelConfig c = synthetic_config("qwen3.6-27b");
  c.validate("synthetic qwen3.6-27b");
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_EQ(c.n_layers, 64);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 17408);
  EXPECT_EQ(c.hybrid.n_layers_of(LayerKind::linear_attention), 48);
  EXPECT_EQ(c.hybrid.n_layers_of(LayerKind::full_attention), 16);
  EXPECT_EQ(c.hybrid.layer_kinds[3], LayerKind::full_attention);
  EXPECT_EQ(c.n_heads, 24);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.hybrid.rotary_dim, 64);
  EXPECT_EQ(c.hybrid.linear_key_dim(), 16 * 128);
  EXPECT_EQ(c.hybrid.linear_value_dim(), 48 * 128);
  EXPECT_EQ(c.vocab_size, 248320);
  const auto names = synthetic_model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "qwen3.6-27b"), names.end());
}

// ---- Batch invariance ----

class HybridInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridInvariance, ChunkingNeighboursAndThreadsDoNotChangeLogits) {
  std::mt19937 rng(42);
  auto model = load_hybrid(GetParam(), 1);
  const int64_t n = 70;  // crosses an attention chunk (64 keys)
  const auto ids = test::random_ids(rng, n, model->config().vocab_size);
  const std::vector<float> reference = test::hybrid_chunked_logits(*model, ids, {n}, 0, rng);
  for (int trial = 0; trial < 6; ++trial) {
    const int threads = 1 + trial % 4;
    auto threaded = load_hybrid(GetParam(), threads);
    const std::vector<float> got = test::hybrid_chunked_logits(*threaded, ids, test::random_chunks(rng, n), trial * 5, rng);
    ASSERT_EQ(got.size(), reference.size());
    EXPECT_EQ(0, std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)))
        << "trial " << trial << " with " << threads << " threads";
  }
}

// One decode row alone and among M - 1 neighbour rows, for M = 1 ... 64 and 257.
TEST_P(HybridInvariance, DecodeRowIsTheSameAmongAnyNumberOfRows) {
  std::mt19937 rng(7);
  auto model = load_hybrid(GetParam(), 3);
  const auto ids = test::random_ids(rng, 12, model->config().vocab_size);
  const std::vector<float> alone = test::hybrid_chunked_logits(*model, ids, {11, 1}, 0, rng);
  std::vector<int> sizes;
  for (int m = 1; m <= 64; ++m) sizes.push_back(m);
  sizes.push_back(257);
  for (int m : sizes) {
    const std::vector<float> crowded = test::hybrid_chunked_logits(*model, ids, {11, 1}, m - 1, rng);
    EXPECT_EQ(0, std::memcmp(crowded.data(), alone.data(), alone.size() * sizeof(float))) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, HybridInvariance,
                         ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b", "qwen3.5-tiny-c", test::kWidenedHybrid));

TEST(HybridInvariance, PicksEqualTheSamplerOnTheLogits) {
  std::mt19937 rng(9);
  auto model = load_hybrid("qwen3.5-tiny-c", 3);
  test::expect_picks_match_logits(*model, test::random_ids(rng, 37, model->config().vocab_size));
}

// ---- Recurrent state under speculation ----

class HybridSpeculation : public ::testing::TestWithParam<std::string> {};

// Siblings at the root and below it, chains beneath; the accepted path runs through scratch rows.
TEST_P(HybridSpeculation, AcceptedSiblingPathEqualsPlainDecoding) {
  test::expect_sibling_paths_equal_plain(*load_hybrid(GetParam(), 2));
}

TEST_P(HybridSpeculation, RejectedEverywhereLeavesNoTrace) {
  test::expect_rejection_leaves_no_trace(*load_hybrid(GetParam(), 2));
}

// The lone long-copy driver's widest window: a 256-row chain accepted whole, and cut halfway.
TEST_P(HybridSpeculation, CopyChainOf256RowsEqualsPlainDecoding) {
  test::expect_copy_chain_equals_plain(*load_hybrid(GetParam(), 4));
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, HybridSpeculation, ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b"));

}  // namespace
}  // namespace tf
