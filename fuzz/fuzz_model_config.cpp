// A model (or drafter) directory's JSON files as the loader reads them: config.json, and
// optionally generation_config.json, tokenizer_config.json and tokenizer.json (for the EOS token).
// Input: the files' texts separated by NUL bytes, in that order.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "loader/model_config.h"
#include "models/dflash_drafter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const names[] = {"config.json", "generation_config.json", "tokenizer_config.json",
                                      "tokenizer.json"};
  const std::string& dir = tf::fuzz::scratch_dir();
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  bool has_more = true;
  for (const char* name : names) {
    const std::string path = dir + "/" + name;
    if (!has_more) {
      tf::fuzz::remove_file(path);
      continue;
    }
    const auto [text, after] = tf::fuzz::split_once(rest, std::string_view("\0", 1));
    has_more = rest.find('\0') != std::string_view::npos;
    tf::fuzz::write_file(path, text);
    rest = after;
  }
  tf::fuzz::expect_only_user_errors([&] {
    const tf::ModelConfig config = tf::ModelConfig::load(dir);
    for (int32_t id : config.eos_token_ids)
      if (id < 0 || id >= config.vocab_size) tf::fuzz::broken("an EOS id outside the vocabulary was accepted");
  });
  // The same files as a drafter's, checked against the embedded target it would draft for.
  static const tf::ModelConfig target = tf::ModelConfig::load(TF_SOURCE_DIR "/models/tensorfold-code-target");
  tf::fuzz::expect_only_user_errors([&] { tf::DFlashConfig::load(dir).validate(dir + "/config.json", target); });
  return 0;
}
