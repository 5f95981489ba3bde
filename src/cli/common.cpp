

#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "backends/backends.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/model.h"
#include "models/synthetic.h"

namespace tf::cli {

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
  if (text.back() == ',') fail(flag + " expects comma-separated token ids, got a trailing ','");
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

void add_bf16_dot_option(CLI::App& command, std::string& bf16_dot) {
  command.add_option("--bf16-dot", bf16_dot,
                     "CPU: bf16 weights meet inputs rounded to bf16 in the AVX-512 BF16 dot product where the CPU "
                     "has it (on: faster prefill and verify rounds), or f32 inputs, the numerics of CPUs without it "
                     "(off); each gives its own bits, reported as the numerics")
      ->envname("TF_BF16_DOT")->capture_default_str();
}

void add_threads_option(CLI::App& command, int& n_threads) {
  command.add_option("--threads", n_threads, "CPU worker threads (0: one per core; at most 1024)")
      ->envname("TF_THREADS")->capture_default_str()->check(CLI::Range(0, 1024));
}

bool parse_switch(const std::string& text, const std::string& flag) {
  if (text == "on" || text == "1") return true;
  if (text == "off" || text == "0") return false;
  fail(flag + " must be on or off (1 or 0); got '" + text + "'.");
}

std::shared_ptr<Model> load_model_for_cli(const std::string& model_dir, ModelLoadOptions options) {
  options.progress = stderr_progress("loading " + model_dir);
  return load_model(model_dir, options);
}

std::string synthetic_names_text() {
  std::string names;
  for (const std::string& name : synthetic_model_names()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace tf::cli
