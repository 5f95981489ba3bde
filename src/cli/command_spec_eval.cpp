// `tensorfold spec-eval`: acceptance and speed of each proposer on held-out cases (code completion,
// prose, whole-file renames; bench/inputs/heldout-eval.jsonl from tools/train/eval_set.py), against
// `"draft": false`, at several stream counts. Every drafted reply must equal its draft-off reply.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/receipt.h"
#include "core/error.h"
#include "core/json_error_text.h"
#include "core/regular_file.h"
#include "engine/engine.h"
#include "engine/reply_collector.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {
namespace {

struct SpecEvalFlags {
  EngineFlags engine;
  std::string cases_file = std::string(TF_SOURCE_DIR_FOR_BENCH) + "/bench/inputs/heldout-eval.jsonl";
  std::vector<std::string> kinds = {"code", "prose", "rename"};
  std::vector<std::string> modes = {"long-copy", "drafter", "both", "all"};
  std::vector<int> streams = {1, 4};
  int per_kind = 12;
  int64_t code_tokens = 128;
  int64_t prose_tokens = 96;
  bool gate_proposers = false;
  DrafterProposerOptions drafter_tree;
  std::string receipt;
  bool are_modes_given = false;  // --modes on the command line: none may be skipped
};

struct EvalCase {
  std::vector<int32_t> prompt;
  std::string answer;  // renames: the known right file
  int64_t max_tokens;
};

// Named proposer sets; "all" is what the server drafts with.
ProposerSet proposers_of_mode(const std::string& mode) {
  // "drafter": the block drafter or the MTP head, whichever is loaded.
  const ProposerSet copy = proposer_bit(ProposerKind::long_copy);
  const ProposerSet drafter = ProposerSet(proposer_bit(ProposerKind::drafter) | proposer_bit(ProposerKind::mtp));
  if (mode == "long-copy") return copy;
  if (mode == "drafter") return drafter;
  if (mode == "both") return copy | drafter;
  if (mode == "all") return copy | drafter | proposer_bit(ProposerKind::ngram);
  if (mode == "ngram") return proposer_bit(ProposerKind::ngram);
  fail("--modes: unknown mode '" + mode + "' (long-copy, drafter, both, all, ngram)");
}

std::map<std::string, std::vector<EvalCase>> read_cases(const SpecEvalFlags& flags, const Tokenizer& tokenizer,
                                                         const ChatTemplate& chat_template) {
  require_regular_file(flags.cases_file, "--cases");
  std::ifstream in(flags.cases_file);
  if (!in) fail("cannot read --cases " + flags.cases_file);
  std::map<std::string, std::vector<EvalCase>> cases;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines (a trailing one) hold no case
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
      const auto text_field = [&](const char* name) {
        if (!record.is_object() || !record.contains(name) || !record[name].is_string())
          fail(flags.cases_file + " line " + std::to_string(line_no) + ": '" + name + "' must be a string");
        return record[name].get<std::string>();
      };
      const std::string kind = text_field("kind"), prompt = text_field("prompt"), answer = text_field("answer");
      if (prompt.empty() || !is_valid_utf8(prompt) || !is_valid_utf8(answer))
        fail(flags.cases_file + " line " + std::to_string(line_no) + ": 'prompt' must be non-empty UTF-8 text");
      if (std::find(flags.kinds.begin(), flags.kinds.end(), kind) == flags.kinds.end()) continue;
      auto& list = cases[kind];
      if (int(list.size()) >= flags.per_kind) continue;
      EvalCase c;
      c.answer = answer;
      if (kind == "rename") {
        // the assistant reply is the whole edited file, then <|im_end|>
        c.prompt = tokenizer.encode(chat_template.render({{"user", prompt, std::nullopt, {}}}, ChatOptions{}).text);
        c.max_tokens = int64_t(tokenizer.encode(answer).size()) + 32;
      } else {
        c.prompt = tokenizer.encode(prompt);
        c.max_tokens = kind == "code" ? flags.code_tokens : flags.prose_tokens;
      }
      list.push_back(std::move(c));
    } catch (const nlohmann::json::exception& e) {
      fail(flags.cases_file + " line " + std::to_string(line_no) + ": " + json_error_text(e.what()));
    }
  }
  if (cases.empty()) fail("--cases " + flags.cases_file + " holds no case of the kinds asked for (--kinds)");
  return cases;
}

struct ModeResult {
  std::vector<Reply> replies;
  double seconds;
};

// Every case submitted at once to an engine of n_streams lanes (the rest queue), greedy.
ModeResult run_cases(const ServingStack& stack, EngineOptions options, const std::vector<EvalCase>& cases,
                     int n_streams, bool use_draft, ProposerSet proposers) {
  options.n_parallel = n_streams;
  options.max_queue = int32_t(cases.size());
  options.n_ctx = 0;
  for (const auto& c : cases) options.n_ctx = std::max(options.n_ctx, int64_t(c.prompt.size()) + c.max_tokens + 1);
  std::shared_ptr<Engine> engine = stack.make_engine(options);
  std::vector<GenerationRequest> requests;
  for (const auto& c : cases) {
    GenerationRequest request;
    request.prompt = c.prompt;
    request.max_tokens = c.max_tokens;
    request.draft.proposers = use_draft ? proposers : kNoProposers;
    requests.push_back(std::move(request));
  }
  auto start = std::chrono::steady_clock::now();
  ModeResult out;
  out.replies = run_to_completion(*engine, requests);
  out.seconds = seconds_since(start);
  return out;
}

// " a b c": a list flag's values as the command line gave them.
template <typename T>
std::string joined(const std::vector<T>& values) {
  std::ostringstream out;
  for (const auto& v : values) out << ' ' << v;
  return out.str();
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

void run_spec_eval(const SpecEvalFlags& flags) {
  EngineOptions base;
  base.speculation.gate_proposers = flags.gate_proposers;
  base.speculation.drafter_tree = flags.drafter_tree;
  ServingOptions options = serving_options(flags.engine, base);
  const EngineOptions engine_options = *options.engine;
  options.engine.reset();  // one engine per run, sized to its streams and cases
  options.load.progress = stderr_progress("loading " + flags.engine.model_dir);
  auto stack = ServingStack::load(options);
  const std::string& drafter_dir = stack->facts().drafter_dir;
  const bool has_drafter = !drafter_dir.empty() || stack->facts().uses_mtp;
  if (flags.are_modes_given && !has_drafter)
    for (const std::string& mode : flags.modes)
      if (mode != "long-copy" && mode != "ngram")
        fail("--modes " + mode + " needs a drafter, and this run has none (--drafter none, or the model has no MTP "
             "head); leave it out or give --drafter");
  auto cases = read_cases(flags, *stack->tokenizer(), stack->chat_template());
  const EngineFlags& knobs = flags.engine;

  std::ostringstream report;
  report << "# Proposers on held-out cases: " << knobs.model_dir << "\n\n"
         << "- command: `" << invocation() << "`\n"
         << "- settings: `--device " << knobs.device << " --model " << knobs.model_dir << " --drafter "
         << (stack->facts().uses_mtp ? "mtp" : drafter_dir.empty() ? "none" : drafter_dir) << " --per-kind " << flags.per_kind << " --kinds"
         << joined(flags.kinds) << " --modes" << joined(flags.modes) << " --streams" << joined(flags.streams)
         << (flags.gate_proposers ? " --gate-proposers" : "") << " --drafter-min-path-probability "
         << flags.drafter_tree.min_path_probability << " --drafter-root-candidates "
         << flags.drafter_tree.n_root_candidates << " --lone-window " << engine_options.lone_window
         << " --most-lone-window " << engine_options.most_lone_window << " --min-confident-match " << knobs.min_confident_match
         << " --lanes " << knobs.lanes << " --windows " << window_policy_flag(engine_options.window_policy) << "`\n"
         << "- cases: " << flags.cases_file << "\n- commit: " << receipt_commit() << "\n- machine: " << receipt_machine()
         << "\n- greedy; all cases of a kind submitted at once to an engine of N lanes; tok/s = completion tokens"
            " / wall time from the first submit to the last reply (prefill included)\n"
         << "- acceptance length = completion tokens / target rounds (the round's own token included)\n"
         << "- every drafted reply was checked token for token against its `draft: false` reply\n\n"
         << "| Kind | Cases | Streams | Drafts | acceptance length | accepted / drafted | tok/s | vs draft off |\n"
         << "|---|---|---|---|---|---|---|---|\n";
  std::ostringstream correctness;
  for (const std::string& kind : flags.kinds) {
    const auto& list = cases[kind];
    if (list.empty()) continue;
    for (int n_streams : flags.streams) {
      ModeResult off = run_cases(*stack, engine_options, list, n_streams, false, 0);
      auto row = [&](const std::string& mode, const ModeResult& r) {
        int64_t tokens = 0, rounds = 0, drafted = 0, accepted = 0;
        for (size_t i = 0; i < r.replies.size(); ++i) {
          const auto& t = r.replies[i].final_update.timings;
          tokens += t.predicted_n;
          rounds += t.rounds;
          drafted += t.draft_n;
          accepted += t.draft_accepted_n;
          if (r.replies[i].tokens != off.replies[i].tokens)
            fail(kind + " case " + std::to_string(i) + " (" + mode + "): the drafted reply differs from the "
                 "draft-off reply: exactness is broken");
        }
        char line[512];
        std::snprintf(line, sizeof line, "| %s | %zu | %d | %s | %.2f | %lld / %lld | %.1f | %.2fx |\n", kind.c_str(),
                      list.size(), n_streams, mode.c_str(), rounds ? double(tokens) / double(rounds) : 0.0,
                      (long long)accepted, (long long)drafted, double(tokens) / r.seconds, off.seconds / r.seconds);
        report << line;
        std::fputs(line, stderr);
      };
      row("draft off", off);
      for (const std::string& mode : flags.modes) {
        if (mode != "long-copy" && mode != "ngram" && drafter_dir.empty() && !stack->facts().uses_mtp) continue;
        row(mode, run_cases(*stack, engine_options, list, n_streams, true, proposers_of_mode(mode)));
      }
      if (kind == "rename" && n_streams == flags.streams.front()) {
        int exact = 0, modulo_trailing = 0;
        for (size_t i = 0; i < list.size(); ++i) {
          const std::string& text = off.replies[i].text;
          exact += text == list[i].answer;
          modulo_trailing += trimmed(text) == trimmed(list[i].answer);
        }
        correctness << "\nRename correctness (the reply against the file Python's tokenize module renamed): "
                    << exact << " of " << list.size() << " byte for byte, " << modulo_trailing << " of "
                    << list.size() << " ignoring trailing blank lines.\n";
      }
    }
  }
  report << correctness.str();
  std::fputs(report.str().c_str(), stdout);
  if (!flags.receipt.empty()) write_receipt(flags.receipt, report.str());
}

}  // namespace

void register_spec_eval_command(CLI::App& app) {
  auto flags = std::make_shared<SpecEvalFlags>();
  CLI::App* cmd = app.add_subcommand("spec-eval", "Acceptance of each proposer on held-out cases (prints a receipt)");
  add_engine_flags(*cmd, flags->engine);
  cmd->add_option("--cases", flags->cases_file, "Held-out cases (JSON lines: kind, prompt, answer)")
      ->capture_default_str();
  cmd->add_option("--kinds", flags->kinds, "Case kinds to run: code prose rename")
      ->check(CLI::IsMember({"code", "prose", "rename"}))->capture_default_str();
  CLI::Option* modes = cmd->add_option("--modes", flags->modes, "Proposer sets: long-copy drafter both all ngram")
      ->check(CLI::IsMember({"long-copy", "drafter", "both", "all", "ngram"}))->capture_default_str();
  cmd->add_option("--streams", flags->streams, "Lanes of the engine, e.g. 1 4")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--per-kind", flags->per_kind, "Cases of each kind")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--code-tokens", flags->code_tokens, "Completion tokens for a code case")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  cmd->add_option("--prose-tokens", flags->prose_tokens, "Completion tokens for a prose case")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  cmd->add_flag("--gate-proposers", flags->gate_proposers,
                "Let the drafter and n-gram draft only while they pay, as the server does (acceptance then depends on timing)");
  cmd->add_option("--drafter-min-path-probability", flags->drafter_tree.min_path_probability,
                  "The block drafter proposes a node while its path's probability stays at or above this")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--drafter-root-candidates", flags->drafter_tree.n_root_candidates,
                  "Top-k of the drafter's first position: the chain's head plus k-1 siblings")
      ->check(CLI::Range(int64_t(1), int64_t(64)))->capture_default_str();
  cmd->add_option("--receipt", flags->receipt, "Also write the receipt to this file");
  cmd->callback([flags, modes] {
    flags->are_modes_given = modes->count() > 0;
    run_spec_eval(*flags);
  });
}

}  // namespace tf::cli
