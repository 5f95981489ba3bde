// Model files: config.json, safetensors, checkpoints and Qwen3 weight binding, good and malformed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "backends/backends.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/generation_config.h"
#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "loader/weight_scan.h"
#include "models/dflash_drafter.h"
#include "models/model.h"
#include "models/qwen3_weights.h"
#include "models/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "support/expect_error.h"
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using tf::DType;
using Json = nlohmann::ordered_json;

const std::string kSourceDir = TF_SOURCE_DIR;

// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  std::string path;
  explicit TempDir(const fs::path& base = fs::temp_directory_path()) {
    std::string pattern = (base / "tf_loader_XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

using tf::test::expect_error_naming;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file with this exact header text and `n_data_bytes` bytes of data.
void write_raw_safetensors(const std::string& path, const std::string& header, size_t n_data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; i++) bytes[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  bytes += header;
  bytes += std::string(n_data_bytes, '\x01');
  write_text(path, bytes);
}

struct FixtureModel {
  std::string dir;
  int64_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab;
  double rope_theta;
  bool tied;
  int32_t eos;
  size_t n_files;
};

const FixtureModel kFixtures[] = {
    {"tests/fixtures/models/qwen3-tiny-a", 96, 160, 2, 3, 3, 32, 384, 1e4, true, 383, 1},
    {"tests/fixtures/models/qwen3-tiny-b", 80, 136, 3, 10, 2, 24, 320, 1e6, false, 319, 20},
    {"tests/fixtures/models/qwen3-tiny-c", 64, 200, 2, 4, 2, 40, 300, 5e5, false, 299, 1},
    {"tests/fixtures/models/qwen3-tiny-chat", 32, 64, 2, 4, 2, 16, 151936, 1e6, true, 151645, 1},
};

void expect_matrix(const tf::WeightMatrix& m, int64_t n_rows, int64_t n_cols) {
  EXPECT_EQ(m.n_rows, n_rows);
  EXPECT_EQ(m.n_cols, n_cols);
  EXPECT_EQ(m.dtype, DType::bf16);
  EXPECT_FALSE(m.is_quantized());
  EXPECT_NE(m.data, nullptr);
}

TEST(Loader, LoadsEveryFixtureModel) {
  for (const FixtureModel& fixture : kFixtures) {
    SCOPED_TRACE(fixture.dir);
    const std::string dir = kSourceDir + "/" + fixture.dir;
    const tf::ModelConfig config = tf::ModelConfig::load(dir);
    EXPECT_EQ(config.architecture, "Qwen3ForCausalLM");
    EXPECT_EQ(config.hidden_size, fixture.hidden);
    EXPECT_EQ(config.intermediate_size, fixture.intermediate);
    EXPECT_EQ(config.n_layers, fixture.n_layers);
    EXPECT_EQ(config.n_heads, fixture.n_heads);
    EXPECT_EQ(config.n_kv_heads, fixture.n_kv_heads);
    EXPECT_EQ(config.head_dim, fixture.head_dim);
    EXPECT_EQ(config.vocab_size, fixture.vocab);
    EXPECT_EQ(config.max_position_embeddings, 4096);
    EXPECT_EQ(config.rope_theta, fixture.rope_theta);
    EXPECT_FLOAT_EQ(config.rms_norm_eps, 1e-6f);
    EXPECT_EQ(config.tie_word_embeddings, fixture.tied);
    EXPECT_EQ(config.quantization.bits, 0);
    EXPECT_EQ(config.eos_token_ids, std::vector<int32_t>{fixture.eos});

    size_t last_done = 0, last_total = 0, n_calls = 0;
    const tf::Checkpoint checkpoint = tf::Checkpoint::open(dir, [&](size_t done, size_t total) {
      EXPECT_GE(done, last_done);
      last_done = done;
      last_total = total;
      n_calls++;
    });
    EXPECT_GT(n_calls, 0u);
    EXPECT_EQ(last_done, last_total);
    size_t n_file_bytes = 0;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".safetensors") n_file_bytes += entry.file_size();
    EXPECT_EQ(last_total, n_file_bytes);
    EXPECT_EQ(checkpoint.names().size(), size_t(11 * fixture.n_layers + 2 + (fixture.tied ? 0 : 1)));

    const tf::Qwen3Weights weights = tf::bind_qwen3_weights(checkpoint, config);
    ASSERT_EQ(weights.layers.size(), size_t(fixture.n_layers));
    const int64_t q_dim = fixture.n_heads * fixture.head_dim;
    const int64_t kv_dim = fixture.n_kv_heads * fixture.head_dim;
    expect_matrix(weights.embed_tokens, fixture.vocab, fixture.hidden);
    expect_matrix(weights.lm_head, fixture.vocab, fixture.hidden);
    EXPECT_EQ(weights.lm_head.data == weights.embed_tokens.data, fixture.tied);
    EXPECT_EQ(weights.final_norm.n, fixture.hidden);
    EXPECT_EQ(weights.embed_tokens.data, checkpoint.get("model.embed_tokens.weight").data);
    for (const tf::Qwen3LayerWeights& layer : weights.layers) {
      expect_matrix(layer.q_proj, q_dim, fixture.hidden);
      expect_matrix(layer.k_proj, kv_dim, fixture.hidden);
      expect_matrix(layer.v_proj, kv_dim, fixture.hidden);
      expect_matrix(layer.o_proj, fixture.hidden, q_dim);
      expect_matrix(layer.gate_proj, fixture.intermediate, fixture.hidden);
      expect_matrix(layer.up_proj, fixture.intermediate, fixture.hidden);
      expect_matrix(layer.down_proj, fixture.hidden, fixture.intermediate);
      EXPECT_EQ(layer.input_norm.n, fixture.hidden);
      EXPECT_EQ(layer.post_attention_norm.n, fixture.hidden);
      EXPECT_EQ(layer.q_norm.n, fixture.head_dim);
      EXPECT_EQ(layer.k_norm.n, fixture.head_dim);
      EXPECT_EQ(layer.q_norm.dtype, DType::bf16);
    }
  }
}

// A device the build lacks, or no device by that name, is an error that says which and why.
TEST(Loader, RejectsDevicesThisBuildLacks) {
  const std::string dir = kSourceDir + "/" + kFixtures[0].dir;
  tf::ModelLoadOptions options;
  options.device = "tpu";
  tf::test::expect_error_naming([&] { tf::load_model(dir, options); }, {"unknown device", "tpu"});
#if !TF_HAVE_CUDA
  options.device = "cuda";
  tf::test::expect_error_naming([&] { tf::load_model(dir, options); }, {"no CUDA backend", "-DTF_CUDA=ON"});
  tf::test::expect_error_naming([] { tf::make_synthetic_model("qwen3-0.6b", 0, {.device = "cuda"}); }, {"no CUDA backend"});
#endif
}

TEST(Safetensors, WriteReadRoundTrip) {
  TempDir temp;
  const std::vector<float> matrix = {1, 2, 3, 4, 5, -6.5f};
  const std::vector<uint16_t> odd_bf16 = {1, 2, 3, 4, 5};  // 10 bytes: forces alignment care
  const std::vector<uint8_t> small = {7, 8, 9};
  const std::vector<int64_t> wide = {-1, 1LL << 40};
  const std::vector<tf::TensorToWrite> tensors = {
      {"odd", DType::bf16, {5}, odd_bf16.data(), 10},
      {"matrix", DType::f32, {2, 3}, matrix.data(), 24},
      {"small", DType::u8, {3}, small.data(), 3},
      {"empty", DType::f32, {0, 4}, nullptr, 0},
      {"wide", DType::i64, {2}, wide.data(), 16},
  };
  const std::string path = temp / "round.safetensors";
  tf::write_safetensors(path, tensors, {{"format", "pt"}});

  const std::string bytes = read_bytes(path);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; i++) header_size |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);

  const auto file = tf::SafetensorsFile::open(path);
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const tf::TensorToWrite& written : tensors) {
    SCOPED_TRACE(written.name);
    const tf::TensorView& read = file->tensors().at(written.name);
    EXPECT_EQ(read.dtype, written.dtype);
    EXPECT_EQ(read.shape, written.shape);
    ASSERT_EQ(read.n_bytes, written.n_bytes);
    if (read.n_bytes) {
      EXPECT_EQ(std::memcmp(read.data, written.data, read.n_bytes), 0);
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(read.data) % tf::dtype_size(read.dtype), 0u);
  }

  expect_error_naming([&] { tf::write_safetensors(temp / "bad.safetensors", {{"short", DType::f32, {3}, matrix.data(), 8}}); },
                      {"bad.safetensors", "short", "[3]"});
}

TEST(Safetensors, RejectsEachMalformedHeader) {
  TempDir temp;
  struct Case {
    const char* what;
    std::string header;
    size_t n_data_bytes;
    std::vector<std::string> names;
  };
  const std::string f32_ok = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::vector<Case> cases = {
      {"not JSON", "{\"bad.weight\": ", 8, {}},
      {"not an object", "[1, 2]", 8, {"object"}},
      {"unknown dtype", R"({"bad.weight":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8, {"bad.weight", "Q7"}},
      {"shape not a list", R"({"bad.weight":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, {"bad.weight", "shape"}},
      {"negative shape", R"({"bad.weight":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, {"bad.weight", "shape"}},
      {"fractional shape", R"({"bad.weight":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, {"bad.weight", "shape"}},
      {"one offset", R"({"bad.weight":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8, {"bad.weight", "data_offsets"}},
      {"string offset", R"({"bad.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", 8, {"bad.weight", "data_offsets"}},
      {"begin after end", R"({"bad.weight":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8, {"bad.weight", "begin"}},
      {"end beyond data", R"({"bad.weight":{"dtype":"F32","shape":[16],"data_offsets":[0,64]}})", 16, {"bad.weight", "64"}},
      {"size mismatch", R"({"bad.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"bad.weight", "[3]"}},
      {"overflowing shape", R"({"bad.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, {"bad.weight"}},
      // Zero bytes, yet TensorView::n_elements overflowed (UB) before reaching the zero.
      {"overflow before a zero", R"({"bad.weight":{"dtype":"U8","shape":[4611686018427387904,3,0],"data_offsets":[0,0]}})", 8,
       {"bad.weight", "overflows"}},
      {"overlap", R"({"first.weight":{)" + f32_ok + R"(},"second.weight":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16,
       {"first.weight", "second.weight", "overlap"}},
      {"metadata not strings", R"({"__metadata__":{"format":3},"ok":{)" + f32_ok + "}}", 8, {"__metadata__", "format"}},
      // JSON keeps the last of two equal keys: the second entry would silently replace the first.
      {"name given twice", R"({"twice.weight":{)" + f32_ok + R"(},"twice.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       16, {"twice.weight", "twice"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = temp / "malformed.safetensors";
    write_raw_safetensors(path, c.header, c.n_data_bytes);
    std::vector<std::string> parts = c.names;
    parts.push_back("malformed.safetensors");
    expect_error_naming([&] { tf::SafetensorsFile::open(path); }, parts);
  }

  const std::string short_path = temp / "short.safetensors";
  write_text(short_path, "abc");
  expect_error_naming([&] { tf::SafetensorsFile::open(short_path); }, {"short.safetensors", "8-byte"});
  const std::string long_header_path = temp / "long_header.safetensors";
  write_text(long_header_path, std::string("\xe8\x03\0\0\0\0\0\0{}", 10));
  expect_error_naming([&] { tf::SafetensorsFile::open(long_header_path); }, {"long_header.safetensors", "1000"});
  expect_error_naming([&] { tf::SafetensorsFile::open(temp / "absent.safetensors"); }, {"absent.safetensors"});
}

// Random byte changes and truncations of a valid file must open or throw tf::Error, nothing else
// (run under ASan/UBSan in CI to catch out-of-bounds reads as well).
TEST(Safetensors, FuzzedFilesOpenOrThrowCleanly) {
  // Thousands of small rewrites are slow on a disk; shared memory keeps the test quick where present.
  std::error_code error;
  TempDir temp(fs::is_directory("/dev/shm", error) ? fs::path("/dev/shm") : fs::temp_directory_path());
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::string valid_path = temp / "valid.safetensors";
  tf::write_safetensors(valid_path,
                        {{"a.weight", DType::f32, {2, 2}, values.data(), 16},
                         {"b.weight", DType::bf16, {4}, values.data(), 8},
                         {"c", DType::u8, {8}, values.data(), 8}},
                        {{"format", "pt"}});
  const std::string valid = read_bytes(valid_path);
  std::mt19937 random(1234);
  const std::string alphabet = "{}[]\":,0123456789-.eE \\FUIBDabcdefghijklmnopqrstuvwxyz_";
  int n_opened = 0, n_rejected = 0;
  for (int iteration = 0; iteration < 3000; iteration++) {
    std::string bytes = valid;
    const int n_changes = 1 + int(random() % 3);
    for (int change = 0; change < n_changes; change++) {
      const size_t position = random() % bytes.size();
      switch (random() % 4) {
        case 0: bytes[position] = char(random()); break;
        case 1: bytes[position] = alphabet[random() % alphabet.size()]; break;
        case 2: bytes.resize(position); break;
        default: bytes[random() % 8] = char(random()); break;  // the header length
      }
      if (bytes.empty()) break;
    }
    const std::string path = temp / "fuzzed.safetensors";
    write_text(path, bytes);
    try {
      auto file = tf::SafetensorsFile::open(path);
      for (const auto& [name, view] : file->tensors())  // views must lie inside the mapping
        ASSERT_LE(view.data + view.n_bytes, file->bytes() + file->n_bytes()) << name;
      n_opened++;
    } catch (const tf::Error&) {
      n_rejected++;
    } catch (const std::exception& error) {
      FAIL() << "iteration " << iteration << " threw a non-tf::Error: " << error.what();
    }
  }
  EXPECT_GT(n_opened, 0);
  EXPECT_GT(n_rejected, 0);
}

TEST(Checkpoint, ReportsMissingFilesAndTensors) {
  TempDir temp;
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); }, {temp.path, "model.safetensors"});
  expect_error_naming([&] { tf::Checkpoint::open(temp / "absent"); }, {temp / "absent"});

  write_text(temp / "model.safetensors.index.json",
             R"({"weight_map": {"x.weight": "model-00001-of-00002.safetensors"}})");
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); },
                      {"model-00001-of-00002.safetensors", "model.safetensors.index.json"});

  const std::vector<float> values = {1, 2};
  tf::write_safetensors(temp / "model-00001-of-00002.safetensors", {{"y.weight", DType::f32, {2}, values.data(), 8}});
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); },
                      {"x.weight", "model-00001-of-00002.safetensors", "model.safetensors.index.json"});

  write_text(temp / "model.safetensors.index.json", R"({"weight_map": {"y.weight": "../escape.safetensors"}})");
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); }, {"escape.safetensors", "model.safetensors.index.json"});
  write_text(temp / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); }, {"weight_map", "model.safetensors.index.json"});

  // A single file beside an index of other shards is refused (one is stale); one the index names is a shard.
  write_text(temp / "model.safetensors.index.json",
             R"({"weight_map": {"y.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(tf::Checkpoint::open(temp.path).names().size(), 1u);
  tf::write_safetensors(temp / "model.safetensors", {{"y.weight", DType::f32, {2}, values.data(), 8}});
  expect_error_naming([&] { tf::Checkpoint::open(temp.path); }, {temp.path, "stale"});
  write_text(temp / "model.safetensors.index.json", R"({"weight_map": {"y.weight": "model.safetensors"}})");
  EXPECT_EQ(tf::Checkpoint::open(temp.path).names().size(), 1u);
  fs::remove(temp / "model-00001-of-00002.safetensors");

  const tf::Checkpoint checkpoint = tf::Checkpoint::open(kSourceDir + "/tests/fixtures/models/qwen3-tiny-a");
  expect_error_naming([&] { checkpoint.get("nope.weight"); }, {"nope.weight", "model.safetensors"});
  expect_error_naming([&] { checkpoint.get("model.embed_tokens.weight", {1, 2}); },
                      {"model.embed_tokens.weight", "model.safetensors", "[384, 96]", "[1, 2]"});
}

// A copy of the checkpoint in SOURCE with its tensors changed by `edit` and its config.json changed by `edit_config`.
std::string write_variant(const TempDir& temp, const std::string& source,
                          const std::function<void(std::vector<tf::TensorToWrite>&)>& edit,
                          const std::function<void(Json&)>& edit_config = {}) {
  const tf::Checkpoint checkpoint = tf::Checkpoint::open(source);
  std::vector<tf::TensorToWrite> tensors;
  for (const std::string& name : checkpoint.names()) {
    const tf::TensorView& t = checkpoint.get(name);
    tensors.push_back({name, t.dtype, t.shape, t.data, t.n_bytes});
  }
  edit(tensors);
  tf::write_safetensors(temp / "model.safetensors", tensors);
  Json config = Json::parse(read_bytes(source + "/config.json"));
  if (edit_config) edit_config(config);
  write_text(temp / "config.json", config.dump(2));
  return temp.path;
}

std::string write_tiny_a_variant(const TempDir& temp, const std::function<void(std::vector<tf::TensorToWrite>&)>& edit,
                                 const std::function<void(Json&)>& edit_config = {}) {
  return write_variant(temp, kSourceDir + "/tests/fixtures/models/qwen3-tiny-a", edit, edit_config);
}

tf::TensorToWrite& tensor_named(std::vector<tf::TensorToWrite>& tensors, const std::string& name) {
  for (tf::TensorToWrite& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

void expect_bind_error(const std::string& dir, const std::vector<std::string>& parts) {
  const tf::ModelConfig config = tf::ModelConfig::load(dir);
  const tf::Checkpoint checkpoint = tf::Checkpoint::open(dir);
  expect_error_naming([&] { tf::bind_qwen3_weights(checkpoint, config); }, parts);
}

TEST(Qwen3Weights, RejectsWrongShapesDtypesAndMissingTensors) {
  {
    TempDir temp;
    write_tiny_a_variant(temp, [](auto& tensors) {
      auto& q = tensor_named(tensors, "model.layers.1.self_attn.q_proj.weight");
      q.shape = {96, 48};
      q.n_bytes /= 2;
    });
    expect_bind_error(temp.path, {"model.layers.1.self_attn.q_proj.weight", "model.safetensors", "[96, 48]", "[96, 96]"});
  }
  {
    TempDir temp;
    write_tiny_a_variant(temp, [](auto& tensors) { tensor_named(tensors, "model.norm.weight").dtype = DType::i16; });
    expect_bind_error(temp.path, {"model.norm.weight", "model.safetensors", "i16"});
  }
  {
    TempDir temp;
    write_tiny_a_variant(temp, [](auto& tensors) {
      tensors.erase(std::find_if(tensors.begin(), tensors.end(),
                                 [](const auto& t) { return t.name == "model.layers.0.self_attn.k_norm.weight"; }));
    });
    expect_bind_error(temp.path, {"model.layers.0.self_attn.k_norm.weight", "model.safetensors"});
  }
  {
    TempDir temp;  // untied config, but the file has no lm_head
    write_tiny_a_variant(temp, [](auto&) {}, [](Json& config) { config["tie_word_embeddings"] = false; });
    expect_bind_error(temp.path, {"lm_head.weight", "model.safetensors"});
  }
  {
    TempDir temp;  // quantized tensors in a checkpoint whose config says dense
    static const std::vector<uint16_t> scales(160 * 3, 0);
    write_tiny_a_variant(temp, [](auto& tensors) {
      tensors.push_back({"model.layers.0.mlp.up_proj.scales", DType::bf16, {160, 3}, scales.data(), 160 * 3 * 2});
    });
    expect_bind_error(temp.path, {"model.layers.0.mlp.up_proj.scales", "model.safetensors", "quantization"});
  }
  {
    TempDir temp;  // a quantized layer whose packed weight has the wrong width
    static const std::vector<uint32_t> packed(160 * 96, 0);
    static const std::vector<uint16_t> scales(160 * 3, 0);
    write_tiny_a_variant(
        temp,
        [](auto& tensors) {
          auto& up = tensor_named(tensors, "model.layers.0.mlp.up_proj.weight");
          up = {up.name, DType::u32, {160, 24}, packed.data(), 160 * 24 * 4};
          tensors.push_back({"model.layers.0.mlp.up_proj.scales", DType::bf16, {160, 3}, scales.data(), 160 * 3 * 2});
          tensors.push_back({"model.layers.0.mlp.up_proj.biases", DType::bf16, {160, 3}, scales.data(), 160 * 3 * 2});
        },
        [](Json& config) { config["quantization"] = {{"group_size", 32}, {"bits", 4}}; });
    expect_bind_error(temp.path, {"model.layers.0.mlp.up_proj.weight", "model.safetensors", "[160, 24]", "[160, 12]"});
  }
}

// Writes tiny-a's config.json changed by `edit` into a temp dir and loads it.
void expect_config_error(const std::function<void(Json&)>& edit, const std::vector<std::string>& parts) {
  TempDir temp;
  Json config = Json::parse(read_bytes(kSourceDir + "/tests/fixtures/models/qwen3-tiny-a/config.json"));
  edit(config);
  write_text(temp / "config.json", config.dump());
  std::vector<std::string> with_path = parts;
  with_path.push_back(temp / "config.json");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, with_path);
}

TEST(ModelConfig, RejectsMissingWrongAndUnsupportedFields) {
  expect_config_error([](Json& c) { c.erase("hidden_size"); }, {"hidden_size", "missing"});
  expect_config_error([](Json& c) { c["num_hidden_layers"] = "2"; }, {"num_hidden_layers", "integer"});
  expect_config_error([](Json& c) { c["rms_norm_eps"] = "small"; }, {"rms_norm_eps"});
  expect_config_error([](Json& c) { c.erase("vocab_size"); }, {"vocab_size"});
  expect_config_error([](Json& c) { c["architectures"] = {"LlamaForCausalLM"}; },
                      {"unsupported architecture LlamaForCausalLM"});
  expect_config_error([](Json& c) { c.erase("architectures"); }, {"architectures"});
  expect_config_error([](Json& c) { c.erase("rope_theta"); c.erase("rope_parameters"); }, {"rope_theta"});
  expect_config_error([](Json& c) { c["rope_theta"] = 1e4; c["rope_parameters"]["rope_theta"] = 5e6; },
                      {"rope_theta", "different values"});
  expect_config_error([](Json& c) { c["num_key_value_heads"] = 2; }, {"num_key_value_heads"});
  expect_config_error([](Json& c) { c["hidden_size"] = 0; }, {"hidden_size", "positive"});
  expect_config_error([](Json& c) { c["tie_word_embeddings"] = 1; }, {"tie_word_embeddings"});
  expect_config_error([](Json& c) { c["quantization"] = {{"group_size", 48}, {"bits", 4}}; }, {"group_size", "48"});
  expect_config_error([](Json& c) { c["quantization"] = {{"group_size", 64}, {"bits", 3}}; }, {"bits", "3"});
  expect_config_error(
      [](Json& c) { c["quantization"] = {{"group_size", 64}, {"bits", 4}, {"lm_head", {{"group_size", 64}, {"bits", 8}}}}; },
      {"lm_head", "mixed precision"});
  expect_config_error([](Json& c) { c["quantization"] = {{"bits", 4}}; }, {"group_size"});
  expect_config_error([](Json& c) { c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}}; },
                      {"gptq"});
  expect_config_error([](Json& c) { c["eos_token_id"] = "end"; }, {"eos_token_id"});
  // What the engine does not implement would change tokens: refused, never ignored.
  expect_config_error([](Json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
                      {"rope_scaling.rope_type", "yarn"});
  expect_config_error([](Json& c) { c["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 1e4}}; },
                      {"rope_parameters.rope_type", "linear"});
  expect_config_error([](Json& c) { c["use_sliding_window"] = true; }, {"use_sliding_window"});
  expect_config_error([](Json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; }, {"layer_types", "sliding_attention"});
  expect_config_error([](Json& c) { c["layer_types"] = "full_attention"; }, {"layer_types", "list"});
  expect_config_error([](Json& c) { c["model_type"] = 5; }, {"model_type"});
  expect_config_error([](Json& c) { c["layer_types"] = {"full_attention"}; }, {"layer_types", "num_hidden_layers"});
  expect_config_error([](Json& c) { c["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"});
  {
    // Found by fuzz_model_config: a number beyond double range escaped as a JSON library exception.
    TempDir temp;
    write_text(temp / "config.json", R"({"architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e356})");
    expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {temp / "config.json", "not valid JSON", "1e356"});
  }
  expect_error_naming([] { tf::ModelConfig::load("/nonexistent/model"); }, {"/nonexistent/model", "does not exist"});
}

TEST(ModelConfig, DefaultsAlternativesAndEosUnion) {
  TempDir temp;
  Json config = Json::parse(read_bytes(kSourceDir + "/tests/fixtures/models/qwen3-tiny-a/config.json"));
  config.erase("head_dim");
  config.erase("rope_theta");  // still in rope_parameters
  config.erase("tie_word_embeddings");
  config["eos_token_id"] = {5, 2};
  // mlx-lm's per-module entries: the model's own settings again, or true / false, are accepted.
  config["quantization_config"] = {{"group_size", 64},
                                   {"bits", 8},
                                   {"model.layers.0.mlp.gate_proj", {{"group_size", 64}, {"bits", 8}}},
                                   {"model.layers.1.mlp.down_proj", false}};
  write_text(temp / "config.json", config.dump());
  write_text(temp / "generation_config.json", R"({"eos_token_id": 3})");
  write_text(temp / "tokenizer_config.json", R"({"eos_token": {"content": "<end>", "special": true}})");
  write_text(temp / "tokenizer.json", R"({"added_tokens": [{"id": 6, "content": "<pad>"}, {"id": 7, "content": "<end>"}]})");

  const tf::ModelConfig loaded = tf::ModelConfig::load(temp.path);
  EXPECT_EQ(loaded.head_dim, 96 / 3);
  EXPECT_EQ(loaded.rope_theta, 10000.0);
  EXPECT_FALSE(loaded.tie_word_embeddings);
  EXPECT_EQ(loaded.quantization.group_size, 64);
  EXPECT_EQ(loaded.quantization.bits, 8);
  EXPECT_EQ(loaded.eos_token_ids, (std::vector<int32_t>{2, 3, 5, 7}));

  // Without tokenizer.json the id comes from tokenizer_config.json's added_tokens_decoder.
  fs::remove(temp / "tokenizer.json");
  write_text(temp / "tokenizer_config.json",
             R"({"eos_token": "<end>", "added_tokens_decoder": {"9": {"content": "<end>"}}})");
  EXPECT_EQ(tf::ModelConfig::load(temp.path).eos_token_ids, (std::vector<int32_t>{2, 3, 5, 9}));
  // "eos_token": null names none (the config's and generation config's ids stand).
  write_text(temp / "tokenizer_config.json", R"({"eos_token": null})");
  EXPECT_EQ(tf::ModelConfig::load(temp.path).eos_token_ids, (std::vector<int32_t>{2, 3, 5}));

  write_text(temp / "generation_config.json", "{oops");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {"generation_config.json"});
  // A directory where a file belongs is named as one (its size read as garbage asked for a huge allocation).
  fs::remove(temp / "generation_config.json");
  fs::create_directory(temp / "generation_config.json");
  expect_error_naming([&] { tf::read_generation_defaults(temp.path); }, {"generation_config.json", "is a directory"});
  fs::create_directory(temp / "tokenizer.json");
  expect_error_naming([&] { tf::Tokenizer::from_file(temp / "tokenizer.json"); },
                      {"tokenizer.json", "is a directory"});
}


// A copy of `tensor` whose bytes live in `storage`, so a test can change its values.
tf::TensorToWrite& own_bytes(tf::TensorToWrite& tensor, std::vector<uint8_t>& storage) {
  const auto* bytes = static_cast<const uint8_t*>(tensor.data);
  storage.assign(bytes, bytes + tensor.n_bytes);
  tensor.data = storage.data();
  return tensor;
}

TEST(WeightScan, FindsTheFirstNonFiniteElementOfEachFloatType) {
  // bf16 across several scan blocks: a NaN or Inf anywhere is found at its exact index; the
  // largest finite values, subnormals and signed zeros are not flagged.
  std::vector<uint16_t> bf16(3 * 4096 + 17, 0x3f80);
  bf16[5] = 0x7f7f;  // largest finite
  bf16[6] = 0xff7f;
  bf16[7] = 0x0001;  // subnormal
  bf16[8] = 0x8000;  // -0
  auto view = [](const auto& values, DType dtype, std::vector<int64_t> shape) {
    tf::TensorView tensor;
    tensor.name = "t";
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
    tensor.data = reinterpret_cast<const uint8_t*>(values.data());
    tensor.n_bytes = values.size() * sizeof(values[0]);
    return tensor;
  };
  EXPECT_FALSE(tf::find_non_finite(view(bf16, DType::bf16, {int64_t(bf16.size())})));
  for (size_t at : {size_t(0), size_t(4095), size_t(4096), bf16.size() - 1}) {
    for (uint16_t bad : {uint16_t(0x7fc0), uint16_t(0x7f80), uint16_t(0xff80), uint16_t(0xff81)}) {
      std::vector<uint16_t> values = bf16;
      values[at] = bad;
      if (at + 1 < values.size()) values.back() = bad;  // a later one must not win
      const auto found = tf::find_non_finite(view(values, DType::bf16, {int64_t(values.size())}));
      ASSERT_TRUE(found) << at;
      EXPECT_EQ(found->index, int64_t(at));
      EXPECT_EQ(found->is_nan, (bad & 0x7f) != 0);
    }
  }
  std::vector<float> f32 = {1.0f, -3.4e38f, 1e-45f, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(tf::find_non_finite(view(f32, DType::f32, {4}))->index, 3);
  f32[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(tf::find_non_finite(view(f32, DType::f32, {4}))->is_nan);
  f32[3] = std::numeric_limits<float>::max();
  EXPECT_FALSE(tf::find_non_finite(view(f32, DType::f32, {4})));
  const std::vector<uint16_t> f16 = {0x3c00, 0x7bff, 0xfc00};  // 1, 65504, -Inf
  EXPECT_EQ(tf::find_non_finite(view(f16, DType::f16, {3}))->index, 2);
  const std::vector<double> f64 = {1.0, std::nan("")};
  EXPECT_EQ(tf::find_non_finite(view(f64, DType::f64, {2}))->index, 1);
  const std::vector<uint32_t> packed = {0xffffffffu};  // packed quantized weights: any bits are valid
  EXPECT_FALSE(tf::find_non_finite(view(packed, DType::u32, {1})));
  // Unaligned data (safetensors offsets need not be aligned) reads the same.
  std::vector<uint8_t> unaligned(1 + 8, 0);
  const float values[2] = {2.0f, -std::numeric_limits<float>::infinity()};
  std::memcpy(unaligned.data() + 1, values, 8);
  tf::TensorView shifted = view(unaligned, DType::f32, {2});
  shifted.data += 1;
  shifted.n_bytes = 8;
  EXPECT_EQ(tf::find_non_finite(shifted)->index, 1);
}

TEST(Checkpoint, RefusesNonFiniteWeightsNamingTheTensor) {
  {
    TempDir temp;  // a NaN in a bf16 matrix, named with its row and column
    std::vector<uint8_t> storage;
    write_tiny_a_variant(temp, [&](auto& tensors) {
      auto& q = own_bytes(tensor_named(tensors, "model.layers.1.self_attn.q_proj.weight"), storage);
      const uint16_t nan = 0x7fc1;
      std::memcpy(storage.data() + (3 * 96 + 5) * 2, &nan, 2);
      (void)q;
    });
    expect_error_naming([&] { tf::Checkpoint::open(temp.path); },
                        {"model.layers.1.self_attn.q_proj.weight", temp / "model.safetensors", "NaN", "[3, 5]", "[96, 96]"});
  }
  {
    TempDir temp;  // an infinity in a norm gain stored as f32
    static std::vector<float> gain(96, 1.0f);
    gain[95] = -std::numeric_limits<float>::infinity();
    write_tiny_a_variant(temp, [](auto& tensors) {
      tensor_named(tensors, "model.norm.weight") = {"model.norm.weight", DType::f32, {96}, gain.data(), 96 * 4};
    });
    expect_error_naming([&] { tf::Checkpoint::open(temp.path); }, {"model.norm.weight", "infinity", "[95]"});
  }
  {
    TempDir temp;  // an MLX checkpoint: scales are scanned; packed weights are not floats
    std::vector<uint8_t> storage;
    const std::string source = kSourceDir + "/models/tensorfold-code-target-mlx4";
    write_variant(temp, source, [&](auto& tensors) {
      auto& scales = own_bytes(tensor_named(tensors, "model.layers.0.mlp.down_proj.scales"), storage);
      const uint16_t inf = scales.dtype == DType::f16 ? 0x7c00 : 0x7f80;
      std::memcpy(storage.data() + 2, &inf, 2);
    });
    expect_error_naming([&] { tf::Checkpoint::open(temp.path); },
                        {"model.layers.0.mlp.down_proj.scales", "infinity", "[0, 1]"});
  }
}

TEST(Qwen3Weights, EveryTensorTheCheckpointHasMustBeUsed) {
  {
    TempDir temp;  // one layer more in the checkpoint than num_hidden_layers
    write_tiny_a_variant(temp, [](auto& tensors) {
      std::vector<tf::TensorToWrite> extra;
      for (const auto& t : tensors) {
        if (!t.name.starts_with("model.layers.1.")) continue;
        extra.push_back(t);
        extra.back().name = "model.layers.2." + t.name.substr(std::string("model.layers.1.").size());
      }
      tensors.insert(tensors.end(), extra.begin(), extra.end());
    });
    expect_bind_error(temp.path, {"model.layers.2.", "num_hidden_layers", "is 2", temp / "config.json",
                                  temp / "model.safetensors", "10 more"});
  }
  {
    TempDir temp;  // the config drops a layer the checkpoint still has
    write_tiny_a_variant(temp, [](auto&) {}, [](Json& config) {
      config["num_hidden_layers"] = 1;
      config["layer_types"] = {"full_attention"};  // cut with it: a list of another length is refused first
    });
    expect_bind_error(temp.path, {"model.layers.1.", "num_hidden_layers", "is 1"});
  }
  {
    TempDir temp;  // an LM head in a checkpoint whose config ties it to the embedding
    write_tiny_a_variant(temp, [](auto& tensors) {
      tf::TensorToWrite head = tensor_named(tensors, "model.embed_tokens.weight");
      head.name = "lm_head.weight";
      tensors.push_back(head);
    });
    expect_bind_error(temp.path, {"lm_head.weight", "tie_word_embeddings"});
  }
  {
    TempDir temp;  // a tensor no Qwen3 has
    static const std::vector<uint16_t> bias(96, 0);
    write_tiny_a_variant(temp, [](auto& tensors) {
      tensors.push_back({"model.layers.0.self_attn.q_proj.bias", DType::bf16, {96}, bias.data(), 96 * 2});
    });
    expect_bind_error(temp.path, {"model.layers.0.self_attn.q_proj.bias", "Qwen3ForCausalLM", "architectures"});
  }
  {
    TempDir temp;  // a shard holding a tensor its index does not list
    const std::vector<float> values = {1, 2};
    tf::write_safetensors(temp / "a.safetensors", {{"x.weight", DType::f32, {2}, values.data(), 8},
                                                    {"y.weight", DType::f32, {2}, values.data(), 8}});
    write_text(temp / "model.safetensors.index.json", R"({"weight_map": {"x.weight": "a.safetensors"}})");
    expect_error_naming([&] { tf::Checkpoint::open(temp.path); },
                        {"y.weight", temp / "a.safetensors", "model.safetensors.index.json"});
  }
  {
    TempDir temp;  // a drafter checkpoint with a layer past its num_hidden_layers
    const std::string source = kSourceDir + "/tests/fixtures/drafter/tiny-a-drafter";
    write_variant(temp, source, [](auto&) {}, [](Json& config) { config["num_hidden_layers"] = 1; });
    const tf::DFlashConfig config = tf::DFlashConfig::load(temp.path);
    const tf::Checkpoint checkpoint = tf::Checkpoint::open(temp.path);
    expect_error_naming([&] { tf::bind_dflash_weights(checkpoint, config); },
                        {"layers.1.", "num_hidden_layers", "is 1", temp / "config.json"});
  }
}

// The embedded checkpoints use every tensor they have: the dense target, its MLX 4-bit copy
// (.scales and .biases beside every matrix) and the DFlash drafter.
TEST(Qwen3Weights, EmbeddedCheckpointsUseEveryTensor) {
  for (const char* dir : {"models/tensorfold-code-target", "models/tensorfold-code-target-mlx4"}) {
    SCOPED_TRACE(dir);
    const tf::ModelConfig config = tf::ModelConfig::load(kSourceDir + "/" + dir);
    const tf::Checkpoint checkpoint = tf::Checkpoint::open(kSourceDir + "/" + dir);
    const tf::Qwen3Weights weights = tf::bind_qwen3_weights(checkpoint, config);
    EXPECT_EQ(int64_t(weights.layers.size()), config.n_layers);
  }
  EXPECT_TRUE(tf::bind_qwen3_weights(tf::Checkpoint::open(kSourceDir + "/models/tensorfold-code-target-mlx4"),
                                     tf::ModelConfig::load(kSourceDir + "/models/tensorfold-code-target-mlx4"))
                  .layers[0]
                  .q_proj.is_quantized());
  const std::string drafter = kSourceDir + "/models/tensorfold-code-drafter";
  const tf::DFlashConfig config = tf::DFlashConfig::load(drafter);
  EXPECT_EQ(int64_t(tf::bind_dflash_weights(tf::Checkpoint::open(drafter), config).layers.size()), config.n_layers);
}

TEST(ModelConfig, RefusesTokenIdsOutsideInt32OrTheVocabulary) {
  const int64_t big = int64_t(1) << 40;
  expect_config_error([&](Json& c) { c["eos_token_id"] = big; }, {"eos_token_id", "2147483647"});
  expect_config_error([&](Json& c) { c["eos_token_id"] = {1, big}; }, {"eos_token_id"});
  expect_config_error([](Json& c) { c["eos_token_id"] = -2; }, {"eos_token_id"});
  expect_config_error([](Json& c) { c["eos_token_id"] = 384; }, {"eos_token_id 384", "vocabulary of 384"});
  expect_config_error([](Json& c) { c["vocab_size"] = int64_t(1) << 31; }, {"vocab_size", "2147483647"});
  expect_config_error([&](Json& c) { c["num_attention_heads"] = big; c["num_key_value_heads"] = big; },
                      {"num_attention_heads"});
  expect_config_error([&](Json& c) { c["head_dim"] = big; }, {"head_dim"});

  TempDir temp;  // the EOS token named by tokenizer_config.json, its id looked up in tokenizer.json
  write_text(temp / "config.json", read_bytes(kSourceDir + "/tests/fixtures/models/qwen3-tiny-a/config.json"));
  write_text(temp / "tokenizer_config.json", R"({"eos_token": "<end>"})");
  write_text(temp / "tokenizer.json", R"({"added_tokens": [{"id": 6, "content": 7}]})");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {temp / "tokenizer.json", "added_tokens[0].content"});
  write_text(temp / "tokenizer.json", R"({"added_tokens": [{"id": 1099511627776, "content": "<end>"}]})");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {temp / "tokenizer.json", "added_tokens[0].id"});
  write_text(temp / "tokenizer.json", R"({"added_tokens": [{"id": 300, "content": "<end>"}]})");
  EXPECT_EQ(tf::ModelConfig::load(temp.path).eos_token_ids, (std::vector<int32_t>{300, 383}));
  fs::remove(temp / "tokenizer.json");
  write_text(temp / "tokenizer_config.json",
             R"({"eos_token": "<end>", "added_tokens_decoder": {"12abc": {"content": "<end>"}}})");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {temp / "tokenizer_config.json", "12abc"});
  write_text(temp / "tokenizer_config.json",
             R"({"eos_token": "<end>", "added_tokens_decoder": {"4294967297": {"content": "<end>"}}})");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {"added_tokens_decoder.4294967297"});
  write_text(temp / "tokenizer_config.json",
             R"({"eos_token": "<end>", "added_tokens_decoder": {"384": {"content": "<end>"}}})");
  expect_error_naming([&] { tf::ModelConfig::load(temp.path); }, {"eos_token_id 384", "vocabulary"});
}

TEST(DFlashConfig, RefusesIdsOutsideInt32) {
  const std::string source = kSourceDir + "/tests/fixtures/drafter/tiny-a-drafter";
  auto expect_drafter_error = [&](const std::function<void(Json&)>& edit, const std::vector<std::string>& parts) {
    TempDir temp;
    Json config = Json::parse(read_bytes(source + "/config.json"));
    edit(config);
    write_text(temp / "config.json", config.dump());
    std::vector<std::string> with_path = parts;
    with_path.push_back(temp / "config.json");
    expect_error_naming([&] { tf::DFlashConfig::load(temp.path); }, with_path);
  };
  expect_drafter_error([](Json& c) { c["mask_token_id"] = (int64_t(1) << 32) + 5; }, {"mask_token_id"});
  expect_drafter_error([](Json& c) { c["mask_token_id"] = -1; }, {"mask_token_id"});
  expect_drafter_error([](Json& c) { c["target_layer_ids"] = {0, int64_t(1) << 32}; }, {"target_layer_ids"});
}

}  // namespace
