// Byte-level BPE model: merges applied by rank to the bytes of one pre-token, with a cache
// of recent words because real text repeats its words.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tf {

class BpeModel {
 public:
  // Reads the "model" object of tokenizer.json; errors name file_path and the field.
  BpeModel(const nlohmann::json& model, const std::string& file_path);

  // Appends the ids of one pre-token given as raw bytes.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  // Vocabulary strings as tokenizer.json spells them (byte-level stand-ins) -> id.
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  std::array<int32_t, 256> id_of_byte_;         // -1 when a byte has no token
  bool is_ignore_merges_ = false;               // a word found whole in the vocab is one token

  // Bounded so memory stays flat on endless distinct input; cleared when full.
  static constexpr size_t max_cached_words = 1 << 16;
  static constexpr size_t max_cached_word_bytes = 64;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tf
