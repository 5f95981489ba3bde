// The model and engine flags that serve, generate, spec-bench and spec-eval share: one table, each
// flag with help, a default and a TF_* environment mirror, checked in one place.
#pragma once
#include <cstdint>
#include <string>

#include "app/serving_stack.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tf::cli {

// --cuda-graphs and --cuda-pdl (TF_CUDA_GRAPHS, TF_CUDA_PDL): on | off, or 1 | 0 as scripts set them.
struct CudaLaunchFlags {
  std::string graphs = "on";
  std::string pdl = "on";
  // Sets use_cuda_graphs and use_overlapped_launches; throws tf::Error on a value that is no switch.
  void apply_to(ModelLoadOptions& options) const;
};

// A lone greedy stream's window when the flags leave it to the device: rows of its first round and
// the most it earns.
struct LoneWindows {
  int64_t first;
  int64_t most;
};
LoneWindows lone_windows_for(const std::string& device);

// The flags as given; serving_options() checks them and turns them into options.
struct EngineFlags {
  std::string model_dir = default_model_dir();
  std::string synthetic;  // serve registers --synthetic itself; the others run real weights only
  int synthetic_bits = 0;  // serve's --synthetic-bits: 0 (bf16), 4 or 8 (MLX affine)
  std::string drafter = "auto";
  std::string device = "cpu";
  std::string bf16_dot = "on";  // --bf16-dot: on | off
  int n_threads = 0;
  std::string lanes = "auto";       // auto | 0 (the lone driver) | 1 (lanes)
  std::string windows = "auto";     // auto (by device) | fixed | measured
  CudaLaunchFlags cuda;
  int64_t prefill_chunk = EngineOptions{}.prefill_chunk;
  int64_t max_rows_per_round = EngineOptions{}.max_rows_per_round;
  int64_t lane_window = EngineOptions{}.lane_window;
  int64_t lone_window = 0;       // 0: by device (lone_windows_for)
  int64_t most_lone_window = 0;  // 0: by device
  int64_t min_confident_match = EngineOptions{}.speculation.min_confident_match;
  int64_t mtp_tokens = EngineOptions{}.speculation.mtp_chain.max_chain;
  int64_t kv_pool_tokens = EngineOptions{}.kv_pool_tokens;
  double kv_pool_fraction = EngineOptions{}.kv_pool_fraction;
  bool no_prompt_cache = false;
  int64_t recurrent_cache_mib = -1;  // -1: as large as the KV pool
  int64_t recurrent_checkpoint_blocks = EngineOptions{}.recurrent_checkpoint_blocks;
};

// Registers the shared flags on a subcommand.
void add_engine_flags(CLI::App& command, EngineFlags& flags);
// Only the CUDA launch switches, for commands that drive a model without an engine (bench).
void add_cuda_launch_flags(CLI::App& command, CudaLaunchFlags& flags);

// The checked flags as serving options: `engine` (the command's own lanes, context and queue) gets
// the shared round and window settings and the lane policy. Throws tf::Error naming the flag.
ServingOptions serving_options(const EngineFlags& flags, EngineOptions engine);

// "auto" / "0" / "1" (--lanes, TF_LANES); throws tf::Error on anything else.
LanePolicy parse_lane_policy(const std::string& text);
// "auto" / "measured" / "fixed" (--windows, TF_WINDOWS) on `device`; throws tf::Error on anything
// else. auto: measured on the CPU, where a verified row costs a good share of a round, and fixed on
// a GPU, where rows are nearly free and shaping measured slower on held-out prose at four streams
// (bench/receipts/cpu-windows-measured-default.md).
WindowPolicy parse_window_policy(const std::string& text, const std::string& device);
// The --windows value that gives `policy`, for receipts.
const char* window_policy_flag(WindowPolicy policy);

}  // namespace tf::cli
