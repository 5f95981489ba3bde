

#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "backends/backends.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

std::string default_model_dir() {
#ifdef TF_DEFAULT_MODEL_DIR
  return TF_DEFAULT_MODEL_DIR;
#else
  return "models/tensorfold-code-target";
#endif
}

std::string default_drafter_dir() {
#ifdef TF_DEFAULT_DRAFTER_DIR
  return TF_DEFAULT_DRAFTER_DIR;
#else
  return "models/tensorfold-code-drafter";
#endif
}

std::string resolve_drafter_dir(const std::string& model_dir, const std::string& drafter_flag,
                                const std::string& device) {
  if (drafter_flag == "none" || drafter_flag.empty()) return "";
  if (drafter_flag != "auto") return drafter_flag;
  // Beside the embedded target on a GPU, a round of that small model costs about what the drafter's
  // block does, so long copy alone is faster (h200-spec-eval-tensorfold-code-mlx4-gated.md): there
  // "auto" means none, and --drafter DIR runs the drafter on the GPU.
  if (device != "cpu") return "";
  // The embedded drafter was trained on the embedded target's taps; it means nothing to another model.
  namespace fs = std::filesystem;
  std::error_code ignored;
  bool is_default_model = fs::equivalent(model_dir, default_model_dir(), ignored);
  return is_default_model && fs::is_directory(default_drafter_dir()) ? default_drafter_dir() : "";
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX)
      fail(flag + " expects comma-separated token ids, got '" + item + "'");
    ids.push_back(int32_t(value));
  }
  if (ids.empty()) fail(flag + " is empty");
  return ids;
}

LoadProgress stderr_progress(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return {};
  return [label, last = -1](size_t done, size_t total) mutable {
    if (total < (8u << 20)) return;
    int percent = total ? int(done * 100 / total) : 100;
    if (percent == last) return;
    last = percent;
    int filled = percent * 30 / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% of %.1f MB", label.c_str(),
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(30 - filled), ' ').c_str(),
                 percent, double(total) / 1e6);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void add_device_option(CLI::App& command, std::string& device) {
  command.add_option("--device", device, "Backend: cpu or cuda")
      ->envname("TF_DEVICE")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
}

std::shared_ptr<Model> load_model_for_cli(const std::string& model_dir, const std::string& device, int n_threads) {
  ModelLoadOptions options;
  options.device = device;
  options.n_threads = n_threads;
  options.progress = stderr_progress("loading " + model_dir);
  return load_model(model_dir, options);
}

std::shared_ptr<const Tokenizer> load_tokenizer_if_present(const std::string& model_dir) {
  std::string path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  if (!std::filesystem::exists(path)) return nullptr;
  return Tokenizer::from_file(path);
}

std::string synthetic_names_text() {
  std::string names;
  for (const std::string& name : synthetic_model_names()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace tf::cli
