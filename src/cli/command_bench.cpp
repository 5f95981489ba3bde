// `tensorfold bench`: prefill, decode and verify-round speed on a device, against its memory bandwidth.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "backends/backends.h"
#include "backends/cpu/read_bandwidth.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/receipt.h"
#include "core/error.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "runtime/kv_cache.h"
#include "sampling/sampler.h"
#if TF_HAVE_CUDA
#include "backends/cuda/device_info.h"
#endif

namespace tf::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  std::string model_dir;
  std::string synthetic;
  int bits = 0;
  int64_t prompt_len = 128;
  int64_t n_decode = 32;
  int repeats = 5;
  int n_threads = 0;
  std::string device = "cpu";
  std::vector<int64_t> verify_rows;
  CudaLaunchFlags cuda;
  std::string bf16_dot = "on";
  std::string receipt;
};

// The device's memory bandwidth and its name for the receipt.
struct DeviceCeiling {
  double gbs;
  std::string what;     // what the number measures
  std::string machine;  // receipt line
};

DeviceCeiling measure_ceiling(const BenchFlags& flags, const ModelLoadOptions& load, int64_t weight_bytes) {
#if TF_HAVE_CUDA
  if (flags.device == "cuda")
    return {cuda::measure_copy_bandwidth_gbs(), "device copy ceiling GB/s (read + write)",
            cuda::gpu_description() + "; host " + receipt_machine()};
#endif
  // A read of as many bytes as a decode step's weights, with the bench's threads.
  return {cpu::measure_read_bandwidth_gbs(weight_bytes, flags.n_threads), "measured read ceiling GB/s (the weights' size)",
          receipt_machine() + ", threads " + std::to_string(flags.n_threads) + " (0 = one per core), numerics " +
              device_numerics(load)};
}

void run_bench(const BenchFlags& flags, const std::string& command_line) {
  if (flags.model_dir.empty() == flags.synthetic.empty()) fail("give exactly one of --model and --synthetic");
  if (flags.bits != 0 && flags.synthetic.empty())
    fail("--bits sets the --synthetic weights' format; a --model is benchmarked in its own (" + flags.model_dir +
         "/config.json)");
  ModelLoadOptions load;
  load.device = flags.device;
  load.n_threads = flags.n_threads;
  load.cpu_bf16_dot = parse_switch(flags.bf16_dot, "--bf16-dot (TF_BF16_DOT)");
  flags.cuda.apply_to(load);
  std::shared_ptr<Model> model = flags.synthetic.empty() ? load_model_for_cli(flags.model_dir, load)
                                                         : make_synthetic_model(flags.synthetic, flags.bits, load);
  const ModelConfig& config = model->config();
  const int64_t n_vocab = config.vocab_size;
  const int64_t max_verify_rows =
      flags.verify_rows.empty() ? 0 : *std::max_element(flags.verify_rows.begin(), flags.verify_rows.end());
  const int64_t n_positions = flags.prompt_len + flags.n_decode + max_verify_rows;
  if (n_positions > config.max_position_embeddings)
    fail("--prompt-len plus --decode plus the largest --verify-rows exceeds the model's context");
  std::mt19937 random(7);
  auto random_token = [&] { return int32_t(random() % uint32_t(std::min<int64_t>(n_vocab, 151643))); };
  std::vector<int32_t> prompt(size_t(flags.prompt_len));
  for (auto& id : prompt) id = random_token();

  std::vector<double> prefill_rates, decode_rates;
  std::vector<std::vector<double>> verify_ms(flags.verify_rows.size());
  // Every token is chosen greedily by the model itself, as the engine has a greedy lane's tokens
  // chosen (on a GPU the logits stay there): no row needs its logits on the host.
  const SamplingParams greedy;
  const auto greedy_picks = [&](int64_t n_rows, int64_t first_position) {
    std::vector<LogitRowPick> picks(size_t(n_rows), LogitRowPick{&greedy, 0});
    for (int64_t i = 0; i < n_rows; ++i) picks[size_t(i)].position = first_position + i + 1;
    return picks;
  };
  std::vector<int32_t> tokens(size_t(std::max<int64_t>(1, max_verify_rows)));
  // One cache for every repetition: a backend that captures a forward per shape and cache (CUDA
  // graphs) captures in the warm-up and replays in the timed runs, as a server does.
  KvCache kv = make_kv_cache(*model, kv_blocks_for(n_positions));
  for (int rep = 0; rep <= flags.repeats; ++rep) {  // repetition 0 warms up and is discarded
    int32_t lane = kv.lane_open();
    kv.lane_reserve(lane, n_positions);
    Batch prefill;
    for (int64_t i = 0; i < flags.prompt_len; ++i)
      prefill.rows.push_back({prompt[size_t(i)], int32_t(i), lane, int32_t(i) - 1,
                              kv.slot(lane, i), i + 1 == flags.prompt_len});
    auto start = Clock::now();
    model->forward_and_pick(prefill, kv, greedy_picks(1, flags.prompt_len - 1), tokens.data(), nullptr);
    double prefill_s = seconds_since(start);
    int32_t token = tokens[0];
    start = Clock::now();
    for (int64_t i = 0; i < flags.n_decode; ++i) {
      int32_t pos = int32_t(flags.prompt_len + i);
      Batch step;
      step.rows.push_back({token, pos, lane, -1, kv.slot(lane, pos), true});
      model->forward_and_pick(step, kv, greedy_picks(1, pos), tokens.data(), nullptr);
      token = tokens[0];
    }
    double decode_s = seconds_since(start);
    // A verify round: one lane's chain of n draft rows after the decoded tokens, every row asking
    // for logits, as a speculative round at that accepted length would run it.
    const int32_t verify_start = int32_t(flags.prompt_len + flags.n_decode);
    for (size_t v = 0; v < flags.verify_rows.size(); ++v) {
      Batch verify;
      for (int64_t i = 0; i < flags.verify_rows[v]; ++i)
        verify.rows.push_back({random_token(), verify_start + int32_t(i), lane, int32_t(i) - 1,
                               kv.slot(lane, verify_start + i), true});
      start = Clock::now();
      model->forward_and_pick(verify, kv, greedy_picks(flags.verify_rows[v], verify_start), tokens.data(), nullptr);
      if (rep > 0) verify_ms[v].push_back(seconds_since(start) * 1e3);
    }
    kv.lane_close(lane);
    if (rep == 0) continue;
    prefill_rates.push_back(double(flags.prompt_len) / prefill_s);
    decode_rates.push_back(double(flags.n_decode) / decode_s);
  }
  double bytes_per_step = double(model->weight_bytes_per_step());
  const DeviceCeiling ceiling = measure_ceiling(flags, load, model->weight_bytes_per_step());
  Summary prefill = summarize(prefill_rates), decode = summarize(decode_rates);
  double gbs = decode.median * bytes_per_step / 1e9;

  std::ostringstream report;
  report << "# " << (flags.device == "cuda" ? "GPU" : "CPU") << " bench: "
         << (flags.synthetic.empty() ? flags.model_dir : "synthetic " + flags.synthetic)
         << (config.quantization.bits ? " (" + std::to_string(config.quantization.bits) + "-bit)" : std::string())
         << "\n\n"
         << "- command: `" << invocation() << "`\n"
         << "- settings: `" << command_line << "`\n"
         << "- commit: " << receipt_commit() << "\n"
         << "- machine: " << ceiling.machine << "\n"
         << "- model: " << config.n_layers << " layers, hidden " << config.hidden_size << ", vocab "
         << n_vocab << ", " << bytes_per_step / 1e6 << " MB of weights read per decode step\n"
         << "- runs: " << flags.repeats << " after one warm-up; prompt " << flags.prompt_len
         << " tokens, " << flags.n_decode << " decode steps\n\n";
  char line[512];
  report << "| measure | median | range |\n|---|---|---|\n";
  std::snprintf(line, sizeof(line), "| prefill tok/s | %.1f | %.1f – %.1f |\n", prefill.median, prefill.low, prefill.high);
  report << line;
  std::snprintf(line, sizeof(line), "| decode tok/s | %.2f | %.2f – %.2f |\n", decode.median, decode.low, decode.high);
  report << line;
  std::snprintf(line, sizeof(line), "| decode weight GB/s | %.2f | %.2f – %.2f |\n", gbs,
                decode.low * bytes_per_step / 1e9, decode.high * bytes_per_step / 1e9);
  report << line;
  std::snprintf(line, sizeof(line), "| %s | %.2f | |\n| decode / ceiling | %.0f%% | |\n", ceiling.what.c_str(),
                ceiling.gbs, 100.0 * gbs / ceiling.gbs);
  report << line;
  for (size_t v = 0; v < flags.verify_rows.size(); ++v) {
    Summary ms = summarize(verify_ms[v]);
    std::snprintf(line, sizeof(line), "| verify round of %lld rows, ms (x one decode step) | %.3f (%.2fx) | %.3f – %.3f |\n",
                  (long long)flags.verify_rows[v], ms.median, ms.median / 1e3 * decode.median, ms.low, ms.high);
    report << line;
  }
  std::fputs(report.str().c_str(), stdout);
  if (!flags.receipt.empty()) write_receipt(flags.receipt, report.str());
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed (prints a receipt)");
  cmd->add_option("--model", flags->model_dir, "Model directory");
  cmd->add_option("--synthetic", flags->synthetic, "Real shape with generated weights: " + synthetic_names_text());
  cmd->add_option("--bits", flags->bits, "Synthetic weights: 0 (bf16), 4 or 8 (MLX affine)")
      ->check(CLI::IsMember({0, 4, 8}))->capture_default_str();
  cmd->add_option("--prompt-len", flags->prompt_len, "Prompt tokens prefilled in one forward")
      ->check(CLI::Range(int64_t(1), int64_t(32768)))->capture_default_str();
  cmd->add_option("--decode", flags->n_decode, "Decode steps")->check(CLI::Range(int64_t(1), int64_t(100000)))->capture_default_str();
  cmd->add_option("--repeats", flags->repeats, "Timed runs (after one warm-up)")->check(CLI::Range(1, 1000))->capture_default_str();
  add_threads_option(*cmd, flags->n_threads);
  cmd->add_option("--verify-rows", flags->verify_rows,
                  "Also time verify rounds of these many draft rows of one lane, e.g. 1 16 64")
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  add_device_option(*cmd, flags->device);
  add_bf16_dot_option(*cmd, flags->bf16_dot);
  add_cuda_launch_flags(*cmd, flags->cuda);
  cmd->add_option("--receipt", flags->receipt, "Also write the receipt to this file");
  cmd->callback([flags] {
    std::string verify_rows;
    for (int64_t n : flags->verify_rows) verify_rows += " " + std::to_string(n);
    run_bench(*flags, "--device " + flags->device + std::string(flags->synthetic.empty() ? " --model " + flags->model_dir : " --synthetic " + flags->synthetic) +
                          (flags->synthetic.empty() ? std::string() : " --bits " + std::to_string(flags->bits)) + " --prompt-len " + std::to_string(flags->prompt_len) +
                          " --decode " + std::to_string(flags->n_decode) + " --repeats " + std::to_string(flags->repeats) +
                          " --threads " + std::to_string(flags->n_threads) + " --cuda-graphs " + flags->cuda.graphs +
                          " --cuda-pdl " + flags->cuda.pdl + " --bf16-dot " + flags->bf16_dot +
                          (verify_rows.empty() ? std::string() : " --verify-rows" + verify_rows));
  });
}

}  // namespace tf::cli
