// The subcommands of the `tensorfold` program; each file under src/cli/ registers one.
// Every flag is declared once, with help text, a default and an environment mirror (TF_*).
#pragma once
#include <CLI/CLI.hpp>

namespace tf::cli {

// Each adds its subcommand to `app`; the callback runs the command and may throw tf::Error.
void register_generate_command(CLI::App& app);
void register_tokenize_command(CLI::App& app);
void register_eval_command(CLI::App& app);
void register_quantize_command(CLI::App& app);
void register_bench_command(CLI::App& app);
void register_serve_command(CLI::App& app);
void register_spec_bench_command(CLI::App& app);
void register_spec_eval_command(CLI::App& app);

// The model used when --model is not given: the embedded default under the source tree.
std::string default_model_dir();
// The block drafter trained for the default model.
std::string default_drafter_dir();
// The --drafter flag: "auto" (the default drafter when running the default model on the CPU, else
// none), "none", or a directory. The drafter runs on the target's device.
std::string resolve_drafter_dir(const std::string& model_dir, const std::string& drafter_flag,
                                const std::string& device);

}  // namespace tf::cli
