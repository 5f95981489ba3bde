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

}  // namespace tf::cli
