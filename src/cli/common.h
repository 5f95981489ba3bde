// Pieces shared by the subcommands: model and tokenizer loading, id lists, a progress bar.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/checkpoint.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tf {
class Model;
class Tokenizer;
}  // namespace tf

namespace tf::cli {

// "1,2,3" -> {1,2,3}; throws tf::Error naming the flag on anything else.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

// A progress bar on stderr for loads of more than a few megabytes (only when stderr is a tty).
LoadProgress stderr_progress(const std::string& label);

// --device (TF_DEVICE): the backend the command's model runs on, cpu or cuda.
void add_device_option(CLI::App& command, std::string& device);

std::shared_ptr<Model> load_model_for_cli(const std::string& model_dir, const std::string& device, int n_threads);
// DIR/tokenizer.json, or nullptr when the directory has none (models driven by ids only).
std::shared_ptr<const Tokenizer> load_tokenizer_if_present(const std::string& model_dir);

// The synthetic shapes' names, comma-separated, for --synthetic help texts.
std::string synthetic_names_text();

}  // namespace tf::cli
