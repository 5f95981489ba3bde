// `tensorfold spec-bench`: tokens per round and decode speed of speculative rounds against
// `"draft": false`, for a whole-file rename, prose and new code, at several stream counts.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/receipt.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/reply_collector.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {
namespace {

struct SpecBenchFlags {
  EngineFlags engine;
  std::string rename_file = std::string(TF_SOURCE_DIR_FOR_BENCH) + "/bench/inputs/rename_source.cpp.txt";
  std::vector<int> streams = {1, 4};
  int waves = 3;
  int64_t max_tokens = 256;
  std::string receipt;
};

struct BenchCase {
  std::string name;
  std::vector<int32_t> prompt;
};

enum class DraftMode { off, proposers, replay_self };
const char* mode_name(DraftMode mode) {
  return mode == DraftMode::off ? "draft off" : mode == DraftMode::proposers ? "proposers" : "replay + proposers";
}

std::vector<BenchCase> make_cases(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const std::string& rename_file) {
  std::ifstream in(rename_file);
  if (!in) fail("cannot read --rename-file " + rename_file);
  std::stringstream source;
  source << in.rdbuf();
  if (source.str().find_first_not_of(" \t\r\n") == std::string::npos) fail("--rename-file " + rename_file + " is empty");
  if (!is_valid_utf8(source.str())) fail("--rename-file " + rename_file + " is not valid UTF-8 text");
  auto chat = [&](const std::string& user) {
    ChatOptions options;
    options.enable_thinking = false;
    return tokenizer.encode(chat_template.render({{"user", user, std::nullopt, {}}}, options).text);
  };
  std::vector<BenchCase> cases;
  cases.push_back({"rename", chat("Rename the identifier `request` to `incoming` in this file and reply "
                                  "with the whole file, nothing else.\n\n```cpp\n" + source.str() + "```")});
  cases.push_back({"prose", chat("Write a long, plain essay on the history of printing, from woodblocks "
                                 "to the laser printer.")});
  cases.push_back({"code", chat("Write a new Python module with a binary search tree class: insert, "
                                "delete, search, in-order traversal, and tests.")});
  return cases;
}

struct WaveResult {
  double tokens_per_second;
  double tokens_per_round;
  int64_t drafted, accepted;
  std::vector<std::vector<int32_t>> replies;
};

WaveResult run_wave(const ServingStack& stack, EngineOptions options, const BenchCase& bench_case, int n_streams,
                    int64_t max_tokens, DraftMode mode, const std::vector<int32_t>& own_reply) {
  options.n_parallel = n_streams;
  options.n_ctx = int64_t(bench_case.prompt.size()) + max_tokens + 1;
  if (options.n_ctx > stack.facts().context_length)
    fail("the " + bench_case.name + " case's prompt (" + std::to_string(bench_case.prompt.size()) + " tokens) plus " +
         "--max-tokens " + std::to_string(max_tokens) + " exceeds the model's context of " +
         std::to_string(stack.facts().context_length) + " (a shorter --rename-file, or fewer --max-tokens)");
  std::shared_ptr<Engine> engine = stack.make_engine(options);
  GenerationRequest request;
  request.prompt = bench_case.prompt;
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  if (mode == DraftMode::off) request.draft.proposers = kNoProposers;
  if (mode == DraftMode::replay_self) request.draft.replay = own_reply;
  std::vector<Reply> replies = run_to_completion(*engine, std::vector<GenerationRequest>(size_t(n_streams), request));
  WaveResult wave{0, 0, 0, 0, {}};
  int64_t tokens = 0, rounds = 0;
  double decode_seconds = 0;
  for (auto& reply : replies) {
    const ReplyTimings& t = reply.final_update.timings;
    tokens += t.predicted_n;
    rounds += t.rounds;
    wave.drafted += t.draft_n;
    wave.accepted += t.draft_accepted_n;
    decode_seconds = std::max(decode_seconds, t.predicted_ms / 1000.0);
    wave.replies.push_back(std::move(reply.tokens));
  }
  wave.tokens_per_second = decode_seconds > 0 ? double(tokens) / decode_seconds : 0;
  wave.tokens_per_round = rounds ? double(tokens) / double(rounds) : 0;
  return wave;
}

void run_spec_bench(const SpecBenchFlags& flags) {
  ServingOptions options = serving_options(flags.engine, EngineOptions{});
  const EngineOptions engine_options = *options.engine;
  options.engine.reset();  // one engine per wave, sized to its streams and case
  options.load.progress = stderr_progress("loading " + flags.engine.model_dir);
  auto stack = ServingStack::load(options);
  const Tokenizer& tokenizer = *stack->tokenizer();
  const std::string& drafter_dir = stack->facts().drafter_dir;
  const std::string& device = flags.engine.device;
  std::ostringstream report;
  report << "# Speculative rounds on the " << (device == "cuda" ? "GPU" : "CPU") << ": " << flags.engine.model_dir
         << "\n\n"
         << "- command: `" << invocation() << "`\n"
         << "- settings: `--device " << device << " --model " << flags.engine.model_dir
         << " --drafter " << (stack->facts().uses_mtp ? "mtp" : drafter_dir.empty() ? "none" : drafter_dir) << " --waves " << flags.waves
         << " --max-tokens " << flags.max_tokens << " --lanes " << flags.engine.lanes << " --windows "
         << window_policy_flag(parse_window_policy(flags.engine.windows, device)) << "`\n"
         << "- commit: " << receipt_commit() << "\n- machine: " << receipt_machine() << "\n"
         << "- decode tok/s per wave = completion tokens of all streams / the slowest stream's decode time;"
            " medians and ranges over " << flags.waves << " waves (plus one warm-up wave, discarded)\n"
         << "- every drafted reply was checked token for token against its `draft: false` reply\n\n"
         << "| Streams | Case | prompt tokens | Drafts | tok/s | range | tokens per round | accepted / drafted | vs draft off |\n"
         << "|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchCase& bench_case : make_cases(tokenizer, stack->chat_template(), flags.rename_file)) {
    for (int n_streams : flags.streams) {
      std::vector<int32_t> own_reply;
      double off_median = 0;
      for (DraftMode mode : {DraftMode::off, DraftMode::proposers, DraftMode::replay_self}) {
        std::vector<double> rates, per_round;
        int64_t drafted = 0, accepted = 0;
        for (int wave = 0; wave <= flags.waves; ++wave) {
          WaveResult r = run_wave(*stack, engine_options, bench_case, n_streams, flags.max_tokens, mode, own_reply);
          if (mode == DraftMode::off && own_reply.empty()) own_reply = r.replies[0];
          for (const auto& reply : r.replies)
            if (reply != own_reply) fail("a drafted reply differs from the draft-off reply: exactness is broken");
          if (wave == 0) continue;
          rates.push_back(r.tokens_per_second);
          per_round.push_back(r.tokens_per_round);
          drafted += r.drafted;
          accepted += r.accepted;
        }
        Summary rate = summarize(rates), round = summarize(per_round);
        if (mode == DraftMode::off) off_median = rate.median;
        char line[512];
        std::snprintf(line, sizeof line, "| %d | %s | %zu | %s | %.1f | %.1f – %.1f | %.2f | %lld / %lld | %.2fx |\n",
                      n_streams, bench_case.name.c_str(), bench_case.prompt.size(), mode_name(mode), rate.median,
                      rate.low, rate.high, round.median, (long long)accepted, (long long)drafted,
                      off_median > 0 ? rate.median / off_median : 0.0);
        report << line;
        std::fputs(line, stderr);
      }
    }
  }
  std::fputs(report.str().c_str(), stdout);
  if (!flags.receipt.empty()) write_receipt(flags.receipt, report.str());
}

}  // namespace

void register_spec_bench_command(CLI::App& app) {
  auto flags = std::make_shared<SpecBenchFlags>();
  CLI::App* cmd = app.add_subcommand("spec-bench", "Measure speculative rounds against draft off (prints a receipt)");
  add_engine_flags(*cmd, flags->engine);
  cmd->add_option("--rename-file", flags->rename_file, "Source file of the whole-file rename case")->capture_default_str();
  cmd->add_option("--streams", flags->streams, "Simultaneous streams, e.g. 1 4")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--waves", flags->waves, "Timed waves per row")->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--max-tokens", flags->max_tokens, "Completion tokens per stream")
      ->check(CLI::Range(int64_t(2), int64_t(100000)))->capture_default_str();
  cmd->add_option("--receipt", flags->receipt, "Also write the receipt to this file");
  cmd->callback([flags] { run_spec_bench(*flags); });
}

}  // namespace tf::cli
