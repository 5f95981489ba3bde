// `tensorfold tokenize`: UTF-8 text on stdin to a JSON array of token ids.
#include <filesystem>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

void register_tokenize_command(CLI::App& app) {
  auto tokenizer_path = std::make_shared<std::string>();
  auto model_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Read UTF-8 text on stdin, print its token ids as JSON");
  auto* file_opt = cmd->add_option("--tokenizer", *tokenizer_path, "A tokenizer.json file");
  cmd->add_option("--model", *model_dir, "A model directory holding tokenizer.json")->excludes(file_opt)->envname("TF_MODEL");
  cmd->callback([tokenizer_path, model_dir] {
    std::string path = *tokenizer_path;
    if (path.empty())
      path = (std::filesystem::path(model_dir->empty() ? default_model_dir() : *model_dir) /
              "tokenizer.json").string();
    auto tokenizer = Tokenizer::from_file(path);
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (!is_valid_utf8(text)) fail("standard input is not valid UTF-8");
    std::cout << nlohmann::json(tokenizer->encode(text)).dump() << "\n";
  });
}

}  // namespace tf::cli
