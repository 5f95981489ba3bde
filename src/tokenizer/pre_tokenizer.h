// The pre-tokenizer of tokenizer.json: Split steps by regex (PCRE2) followed by ByteLevel,
// which here only marks that BPE works on raw bytes.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tf {

// One Split step with behavior Isolated: each match is a piece, and so is each gap between.
class RegexSplitter {
 public:
  RegexSplitter(const std::string& pattern, const std::string& file_path);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

class PreTokenizer {
 public:
  // Reads the "pre_tokenizer" field; errors name file_path and the field.
  PreTokenizer(const nlohmann::json& config, const std::string& file_path);
  // Appends the pieces of valid UTF-8 text.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
};

}  // namespace tf
