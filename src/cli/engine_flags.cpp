// The shared model and engine flags: their table and their checks.
#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>

#include "cli/common.h"
#include "core/error.h"

namespace tf::cli {
namespace {

constexpr int64_t most_rows_per_round = 65536;

void require(bool is_ok, const std::string& message) {
  if (!is_ok) fail(message);
}

void require_in_range(int64_t value, int64_t low, int64_t high, const std::string& flag, const std::string& what) {
  require(value >= low && value <= high, flag + " (" + what + ") must be between " + std::to_string(low) + " and " +
                                             std::to_string(high) + "; got " + std::to_string(value) + ".");
}

}  // namespace

LanePolicy parse_lane_policy(const std::string& text) {
  if (text == "auto" || text.empty()) return LanePolicy::automatic;
  if (text == "1") return LanePolicy::always_lanes;
  if (text == "0") return LanePolicy::always_lone;
  fail("--lanes (TF_LANES) must be auto, 0 (the lone driver for a lone greedy stream) or 1 (always the "
       "shared lanes); got '" + text + "'.");
}

WindowPolicy parse_window_policy(const std::string& text, const std::string& device) {
  if (text == "auto" || text.empty()) return device == "cpu" ? WindowPolicy::measured : WindowPolicy::fixed;
  if (text == "fixed") return WindowPolicy::fixed;
  if (text == "measured") return WindowPolicy::measured;
  fail("--windows (TF_WINDOWS) must be auto (measured on the CPU, fixed on a GPU), measured (each round "
       "verifies the rows whose expected tokens pay for their cost) or fixed (the whole window, doubled by "
       "full acceptance); got '" + text + "'.");
}

const char* window_policy_flag(WindowPolicy policy) {
  return policy == WindowPolicy::measured ? "measured" : "fixed";
}

void CudaLaunchFlags::apply_to(ModelLoadOptions& options) const {
  options.use_cuda_graphs = parse_switch(graphs, "--cuda-graphs (TF_CUDA_GRAPHS)");
  options.use_overlapped_launches = parse_switch(pdl, "--cuda-pdl (TF_CUDA_PDL)");
}

void add_cuda_launch_flags(CLI::App& command, CudaLaunchFlags& flags) {
  command.add_option("--cuda-graphs", flags.graphs, "CUDA: replay captured graphs for small forwards (on|off)")
      ->envname("TF_CUDA_GRAPHS")->capture_default_str();
  command.add_option("--cuda-pdl", flags.pdl,
                     "CUDA: overlap kernel launches with programmatic dependent launch (on|off)")
      ->envname("TF_CUDA_PDL")->capture_default_str();
}

void add_engine_flags(CLI::App& command, EngineFlags& flags) {
  command.add_option("--model", flags.model_dir, "Model directory (Hugging Face layout)")
      ->envname("TF_MODEL")->capture_default_str();
  command.add_option("--drafter", flags.drafter,
                     "DFlash block drafter directory for the model; 'mtp' drafts with the checkpoint's own MTP "
                     "head (Qwen3.5-class, on the CPU); 'auto' takes the embedded drafter when running the "
                     "embedded model on the CPU, 'none' turns the drafter off")
      ->envname("TF_DRAFTER")->capture_default_str();
  add_device_option(command, flags.device);
  add_bf16_dot_option(command, flags.bf16_dot);
  add_threads_option(command, flags.n_threads);
  command.add_option("--lanes", flags.lanes,
                     "Window policy: auto (a lone greedy stream gets the lone driver's wide, copy-heavy tree), "
                     "1 (always the shared lanes' window), 0 (always the lone driver's)")
      ->envname("TF_LANES")->capture_default_str();
  command.add_option("--windows", flags.windows,
                     "Rows verified within that window: measured (each round, those whose expected accepted tokens "
                     "per second pay for them, from the measured round cost and acceptance by depth), fixed "
                     "(the whole window, doubled after each round whose window was accepted) or auto (measured "
                     "on the CPU, fixed on a GPU)")
      ->envname("TF_WINDOWS")->capture_default_str();
  add_cuda_launch_flags(command, flags.cuda);
  command.add_option("--prefill-chunk", flags.prefill_chunk, "Most prompt rows of one request per round")
      ->envname("TF_PREFILL_CHUNK")->capture_default_str();
  command.add_option("--max-rows-per-round", flags.max_rows_per_round,
                     "Most rows (prompt chunks and drafts of every request) in one forward")
      ->envname("TF_MAX_ROWS_PER_ROUND")->capture_default_str();
  command.add_option("--lane-window", flags.lane_window,
                     "Rows (root + drafts) a request starts with per round when sharing rounds")
      ->envname("TF_LANE_WINDOW")->capture_default_str();
  command.add_option("--lone-window", flags.lone_window,
                     "Rows of a lone greedy stream's round to start with; also the most a shared request earns "
                     "(0: by device, 16 on the CPU, 64 on a GPU)")
      ->envname("TF_LONE_WINDOW")->capture_default_str();
  command.add_option("--most-lone-window", flags.most_lone_window,
                     "Most rows the lone stream earns by having its whole window accepted, doubling per round (0: "
                     "by device, 16 on the CPU, 256 on a GPU)")
      ->envname("TF_MOST_LONE_WINDOW")->capture_default_str();
  command.add_option("--mtp-tokens", flags.mtp_tokens,
                     "With --drafter mtp: most tokens the MTP head chains a round")
      ->envname("TF_MTP_TOKENS")->capture_default_str();
  command.add_option("--min-confident-match", flags.min_confident_match,
                     "Long-copy match length (tokens) from which the copy is proposed in full")
      ->envname("TF_MIN_CONFIDENT_MATCH")->capture_default_str();
  command.add_option("--kv-pool-tokens", flags.kv_pool_tokens,
                     "Positions of K/V all requests share, prefix cache included (0: --parallel x --ctx)")
      ->envname("TF_KV_POOL_TOKENS")->capture_default_str();
  command.add_option("--kv-pool-fraction", flags.kv_pool_fraction,
                     "Or size it as this fraction of the GPU's free memory after loading (0: by tokens)")
      ->envname("TF_KV_POOL_FRACTION")->capture_default_str();
  command.add_flag("--no-prompt-cache", flags.no_prompt_cache,
                   "Turn the automatic prefix cache off (every prompt is prefilled from nothing)")
      ->envname("TF_NO_PROMPT_CACHE");
  command.add_option("--recurrent-cache-mib", flags.recurrent_cache_mib,
                     "Hybrid models: MiB of recurrent-state checkpoints cached prefixes resume from (-1: as much "
                     "as the KV pool)")
      ->envname("TF_RECURRENT_CACHE_MIB")->capture_default_str();
  command.add_option("--recurrent-checkpoint-blocks", flags.recurrent_checkpoint_blocks,
                     "Hybrid models: a prompt keeps its state every this many 16-token blocks (0: as often as costs "
                     "no more memory than their K/V)")
      ->envname("TF_RECURRENT_CHECKPOINT_BLOCKS")->capture_default_str();
}

// On a GPU a verified row costs little beside a round, so a lone stream starts wide and earns wider;
// on the CPU a row costs about a quarter of a decode step, and rows past what is accepted cost
// that each (bench/receipts/cpu-rename-windows.md: 16 rows beat 64 -> 256 on renames by 1.2x).
LoneWindows lone_windows_for(const std::string& device) {
  if (device == "cpu") return {16, 16};
  return {EngineOptions{}.lone_window, EngineOptions{}.most_lone_window};
}

ServingOptions serving_options(const EngineFlags& flags, EngineOptions engine) {
  require_in_range(flags.prefill_chunk, 1, most_rows_per_round, "--prefill-chunk", "prompt rows per round");
  require_in_range(flags.max_rows_per_round, 1, most_rows_per_round, "--max-rows-per-round", "rows per forward");
  require_in_range(flags.lane_window, 1, flags.max_rows_per_round, "--lane-window",
                   "rows per round; at most --max-rows-per-round");
  const LoneWindows by_device = lone_windows_for(flags.device);
  const int64_t lone_window = flags.lone_window != 0 ? flags.lone_window : std::max(by_device.first, flags.lane_window);
  const int64_t most_lone_window = flags.most_lone_window != 0 ? flags.most_lone_window
                                                              : std::max(by_device.most, lone_window);
  require_in_range(lone_window, std::max<int64_t>(2, flags.lane_window), 4096, "--lone-window",
                   "rows per round; at least 2 and --lane-window");
  require_in_range(most_lone_window, lone_window, 4096, "--most-lone-window",
                   "rows per round; at least --lone-window");
  require_in_range(flags.min_confident_match, 1, 4096, "--min-confident-match", "tokens");
  require_in_range(flags.mtp_tokens, 1, 64, "--mtp-tokens", "tokens");
  require(flags.kv_pool_tokens == 0 || flags.kv_pool_tokens >= engine.n_ctx,
          "--kv-pool-tokens must be 0 (--parallel x --ctx) or at least --ctx (" + std::to_string(engine.n_ctx) +
              "), so one request of the longest context fits; got " + std::to_string(flags.kv_pool_tokens) + ".");
  require(flags.kv_pool_tokens <= (int64_t(1) << 31) / 2, "--kv-pool-tokens is too large; got " +
                                                              std::to_string(flags.kv_pool_tokens) + ".");
  require(flags.kv_pool_fraction >= 0.0 && flags.kv_pool_fraction < 1.0,
          "--kv-pool-fraction must be at least 0 and below 1; got " + std::to_string(flags.kv_pool_fraction) + ".");
  require(flags.kv_pool_fraction == 0.0 || flags.kv_pool_tokens == 0,
          "give --kv-pool-tokens or --kv-pool-fraction, not both.");
  require(flags.recurrent_cache_mib >= -1 && flags.recurrent_cache_mib <= (int64_t(1) << 24),
          "--recurrent-cache-mib must be -1 (as much as the KV pool), 0 (none) or a size in MiB; got " +
              std::to_string(flags.recurrent_cache_mib) + ".");
  require_in_range(flags.recurrent_checkpoint_blocks, 0, int64_t(1) << 20, "--recurrent-checkpoint-blocks",
                   "blocks (0: automatic)");
  engine.recurrent_cache_bytes = flags.recurrent_cache_mib < 0 ? -1 : flags.recurrent_cache_mib << 20;
  engine.recurrent_checkpoint_blocks = flags.recurrent_checkpoint_blocks;
  engine.kv_pool_tokens = flags.kv_pool_tokens;
  engine.kv_pool_fraction = flags.kv_pool_fraction;
  engine.prompt_cache = !flags.no_prompt_cache;
  engine.lane_policy = parse_lane_policy(flags.lanes);
  engine.window_policy = parse_window_policy(flags.windows, flags.device);
  engine.prefill_chunk = flags.prefill_chunk;
  engine.max_rows_per_round = flags.max_rows_per_round;
  engine.lane_window = flags.lane_window;
  engine.lone_window = lone_window;
  engine.most_lone_window = most_lone_window;
  engine.speculation.min_confident_match = flags.min_confident_match;
  engine.speculation.mtp_chain.max_chain = flags.mtp_tokens;

  ServingOptions options;
  options.model_dir = flags.model_dir;
  options.synthetic = flags.synthetic;
  if (flags.synthetic_bits != 0 && flags.synthetic.empty())
    fail("--synthetic-bits " + std::to_string(flags.synthetic_bits) + " sets the bits of --synthetic weights; give --synthetic too.");
  options.synthetic_bits = flags.synthetic_bits;
  options.drafter = flags.drafter;
  options.load.device = flags.device;
  options.load.n_threads = flags.n_threads;
  options.load.cpu_bf16_dot = parse_switch(flags.bf16_dot, "--bf16-dot (TF_BF16_DOT)");
  flags.cuda.apply_to(options.load);
  options.engine = engine;
  read_model_facts(options);  // the model and drafter directories exist, config.json reads
  return options;
}

}  // namespace tf::cli
