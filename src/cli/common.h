// Pieces shared by the subcommands: model loading for the engine-less commands, id lists, a progress bar.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backends.h"
#include "loader/checkpoint.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tf {
class Model;
}  // namespace tf

namespace tf::cli {

// "1,2,3" -> {1,2,3}; throws tf::Error naming the flag on anything else.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

// A progress bar on stderr for loads of more than a few megabytes (only when stderr is a tty).
LoadProgress stderr_progress(const std::string& label);

// --device (TF_DEVICE): the backend the command's model runs on, cpu or cuda.
void add_device_option(CLI::App& command, std::string& device);

// --bf16-dot (TF_BF16_DOT): on | off, whether CPU bf16 weights meet bf16-rounded inputs in the
// dot-product instruction where the machine has it (ModelLoadOptions::cpu_bf16_dot).
void add_bf16_dot_option(CLI::App& command, std::string& bf16_dot);

// --threads (TF_THREADS): CPU worker threads, 0 (one per core) to 1,024 (more would only exhaust the
// machine's threads and memory before the first forward).
void add_threads_option(CLI::App& command, int& n_threads);

// "on" / "1" -> true, "off" / "0" -> false; throws tf::Error naming the flag on anything else.
bool parse_switch(const std::string& text, const std::string& flag);

// load_model with a progress bar on stderr.
std::shared_ptr<Model> load_model_for_cli(const std::string& model_dir, ModelLoadOptions options);

// The synthetic shapes' names, comma-separated, for --synthetic help texts.
std::string synthetic_names_text();

}  // namespace tf::cli
