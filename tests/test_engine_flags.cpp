// The shared model and engine flags: defaults, TF_* mirrors, and the checks' messages.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>

#include "cli/engine_flags.h"
#include "core/error.h"
#include "support/fixtures.h"

using namespace tf;
using namespace tf::cli;

namespace {

// The flags a command line gives, as serve/generate/spec-bench/spec-eval register them.
EngineFlags parsed(std::vector<std::string> args) {
  EngineFlags flags;
  flags.model_dir = test::fixture_model("qwen3-tiny-chat");
  CLI::App command;
  add_engine_flags(command, flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  command.parse(args);
  return flags;
}

// The tf::Error serving_options throws, or "" when it accepts the flags.
std::string error_of(const EngineFlags& flags) {
  try {
    serving_options(flags, EngineOptions{});
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST(EngineFlags, DefaultsAreTheEngineAndLoadDefaults) {
  const ServingOptions options = serving_options(parsed({}), EngineOptions{});
  const EngineOptions defaults;
  ASSERT_TRUE(options.engine.has_value());
  EXPECT_EQ(options.engine->lane_policy, LanePolicy::automatic);
  // Windows by device: measured on the CPU (the default device), fixed on a GPU.
  EXPECT_EQ(options.engine->window_policy, WindowPolicy::measured);
  EXPECT_EQ(parse_window_policy("auto", "cuda"), WindowPolicy::fixed);
  EXPECT_EQ(parse_window_policy("measured", "cuda"), WindowPolicy::measured);
  EXPECT_EQ(parse_window_policy("fixed", "cpu"), WindowPolicy::fixed);
  EXPECT_EQ(options.engine->prefill_chunk, defaults.prefill_chunk);
  EXPECT_EQ(options.engine->max_rows_per_round, defaults.max_rows_per_round);
  EXPECT_EQ(options.engine->lane_window, defaults.lane_window);
  // The lone window by device: narrow on the CPU, where a verified row costs a share of a step.
  EXPECT_EQ(options.engine->lone_window, 16);
  EXPECT_EQ(options.engine->most_lone_window, 16);
  // A build without CUDA refuses --device cuda, so the GPU's pair is asked of the rule itself.
  EXPECT_EQ(lone_windows_for("cuda").first, defaults.lone_window);
  EXPECT_EQ(lone_windows_for("cuda").most, defaults.most_lone_window);
  const ServingOptions wider_lanes = serving_options(parsed({"--lane-window", "24"}), EngineOptions{});
  EXPECT_EQ(wider_lanes.engine->lone_window, 24) << "the lone window is never below the lanes' own";
  EXPECT_EQ(wider_lanes.engine->most_lone_window, 24);
  EXPECT_EQ(options.engine->speculation.min_confident_match, defaults.speculation.min_confident_match);
  EXPECT_TRUE(options.load.use_cuda_graphs);
  EXPECT_TRUE(options.load.use_overlapped_launches);
  EXPECT_TRUE(options.load.cpu_bf16_dot);
  EXPECT_EQ(options.load.device, "cpu");
  EXPECT_EQ(options.drafter, "auto");
}

TEST(EngineFlags, FlagsReachTheOptions) {
  const ServingOptions options =
      serving_options(parsed({"--lanes", "0", "--windows", "fixed", "--cuda-graphs", "off", "--cuda-pdl", "0", "--prefill-chunk", "64",
                              "--max-rows-per-round", "128", "--lane-window", "8", "--lone-window", "32",
                              "--most-lone-window", "96", "--min-confident-match", "12", "--threads", "3",
                              "--drafter", "none", "--mtp-tokens", "6", "--bf16-dot", "off"}),
                      EngineOptions{});
  EXPECT_EQ(options.engine->lane_policy, LanePolicy::always_lone);
  EXPECT_EQ(options.engine->window_policy, WindowPolicy::fixed);
  EXPECT_FALSE(options.load.use_cuda_graphs);
  EXPECT_FALSE(options.load.use_overlapped_launches);
  EXPECT_EQ(options.engine->prefill_chunk, 64);
  EXPECT_EQ(options.engine->max_rows_per_round, 128);
  EXPECT_EQ(options.engine->lane_window, 8);
  EXPECT_EQ(options.engine->lone_window, 32);
  EXPECT_EQ(options.engine->most_lone_window, 96);
  EXPECT_EQ(options.engine->speculation.min_confident_match, 12);
  EXPECT_EQ(options.load.n_threads, 3);
  EXPECT_FALSE(options.load.cpu_bf16_dot);
  EXPECT_EQ(options.drafter, "none");
  EXPECT_EQ(options.engine->speculation.mtp_chain.max_chain, 6);
  EXPECT_EQ(serving_options(parsed({"--drafter", "mtp"}), EngineOptions{}).drafter, "mtp");
  EXPECT_EQ(serving_options(parsed({"--lanes", "1", "--cuda-pdl", "on"}), EngineOptions{}).engine->lane_policy,
            LanePolicy::always_lanes);
}

// The command's own settings (lanes, context, gating) pass through untouched.
TEST(EngineFlags, TheCommandsEngineOptionsAreKept) {
  EngineOptions own;
  own.n_parallel = 7;
  own.n_ctx = 999;
  own.speculation.gate_proposers = true;
  const ServingOptions options = serving_options(parsed({}), own);
  EXPECT_EQ(options.engine->n_parallel, 7);
  EXPECT_EQ(options.engine->n_ctx, 999);
  EXPECT_TRUE(options.engine->speculation.gate_proposers);
}

// tools/gpu_run.sh sets TF_CUDA_PDL=0 and TF_CUDA_GRAPHS=0; TF_LANES picks the lane policy,
// TF_WINDOWS the window policy.
TEST(EngineFlags, EnvironmentMirrorsTheFlags) {
  setenv("TF_LANES", "1", 1);
  setenv("TF_CUDA_PDL", "0", 1);
  setenv("TF_CUDA_GRAPHS", "0", 1);
  setenv("TF_LONE_WINDOW", "48", 1);
  setenv("TF_WINDOWS", "fixed", 1);
  setenv("TF_DRAFTER", "mtp", 1);
  setenv("TF_MTP_TOKENS", "3", 1);
  setenv("TF_BF16_DOT", "0", 1);
  const ServingOptions from_env = serving_options(parsed({}), EngineOptions{});
  const ServingOptions flag_wins = serving_options(parsed({"--lanes", "0"}), EngineOptions{});
  unsetenv("TF_LANES");
  unsetenv("TF_CUDA_PDL");
  unsetenv("TF_CUDA_GRAPHS");
  unsetenv("TF_LONE_WINDOW");
  unsetenv("TF_WINDOWS");
  unsetenv("TF_DRAFTER");
  unsetenv("TF_MTP_TOKENS");
  unsetenv("TF_BF16_DOT");
  EXPECT_FALSE(from_env.load.cpu_bf16_dot);
  EXPECT_EQ(from_env.drafter, "mtp");
  EXPECT_EQ(from_env.engine->speculation.mtp_chain.max_chain, 3);
  EXPECT_EQ(from_env.engine->lane_policy, LanePolicy::always_lanes);
  EXPECT_FALSE(from_env.load.use_overlapped_launches);
  EXPECT_FALSE(from_env.load.use_cuda_graphs);
  EXPECT_EQ(from_env.engine->lone_window, 48);
  EXPECT_EQ(from_env.engine->window_policy, WindowPolicy::fixed);
  EXPECT_EQ(flag_wins.engine->lane_policy, LanePolicy::always_lone);
}

TEST(EngineFlags, BadValuesSayWhatToChange) {
  auto expect_message = [](const std::vector<std::string>& args, const std::string& fragment) {
    const std::string message = error_of(parsed(args));
    EXPECT_NE(message.find(fragment), std::string::npos) << "for " << args[0] << ": '" << message << "'";
  };
  expect_message({"--lanes", "2"}, "--lanes (TF_LANES) must be auto, 0");
  expect_message({"--lanes", "yes"}, "got 'yes'");
  expect_message({"--windows", "wide"}, "--windows (TF_WINDOWS) must be auto");
  expect_message({"--cuda-graphs", "maybe"}, "--cuda-graphs (TF_CUDA_GRAPHS) must be on or off (1 or 0); got 'maybe'");
  expect_message({"--cuda-pdl", "true"}, "--cuda-pdl (TF_CUDA_PDL) must be on or off");
  expect_message({"--bf16-dot", "auto"}, "--bf16-dot (TF_BF16_DOT) must be on or off (1 or 0); got 'auto'");
  expect_message({"--prefill-chunk", "0"}, "--prefill-chunk (prompt rows per round) must be between 1 and");
  expect_message({"--max-rows-per-round", "0"}, "--max-rows-per-round");
  expect_message({"--lane-window", "600"}, "at most --max-rows-per-round");
  expect_message({"--lone-window", "1"}, "--lone-window");
  expect_message({"--lone-window", "8"}, "at least 2 and --lane-window");
  expect_message({"--most-lone-window", "8"}, "at least --lone-window");
  expect_message({"--lone-window", "32", "--most-lone-window", "24"}, "at least --lone-window");
  expect_message({"--lone-window", "-1"}, "--lone-window (rows per round; at least 2 and --lane-window)");
  expect_message({"--min-confident-match", "0"}, "--min-confident-match (tokens) must be between 1 and 4096; got 0.");
  expect_message({"--mtp-tokens", "0"}, "--mtp-tokens (tokens) must be between 1 and 64; got 0.");
  expect_message({"--model", "/no/such/model"}, "/no/such/model is not a directory");
  expect_message({"--drafter", "/no/such/drafter"}, "/no/such/drafter is not a directory");
  EXPECT_THROW(parsed({"--device", "tpu"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--threads", "-1"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--threads", "1025"}), CLI::ValidationError);  // 100,000 hung creating threads
  EXPECT_EQ(parsed({"--threads", "1024"}).n_threads, 1024);
  EngineFlags bits_alone = parsed({});
  bits_alone.synthetic_bits = 4;  // serve's --synthetic-bits without --synthetic
  EXPECT_NE(error_of(bits_alone).find("--synthetic-bits 4 sets the bits of --synthetic weights"), std::string::npos)
      << error_of(bits_alone);
}
