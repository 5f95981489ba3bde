// Added tokens (special or not) found inside text, leftmost-longest, before the rest of the
// text goes through normalization and BPE.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool is_special = false;
  bool lstrip = false;       // the match absorbs whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word
  bool normalized = false;   // matched against normalized text rather than raw text
};

struct TextSegment {
  std::string_view text;
  int32_t added_token_id;  // -1: plain text to be encoded normally
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool is_empty() const { return tokens_.empty(); }
  // Says whether a special token may match text[begin, end); null: everywhere.
  using SpecialFilter = std::function<bool(size_t begin, size_t end)>;
  // Cuts text into plain segments and added-token segments, in order. A special token that
  // `is_special_allowed` refuses is not a candidate there (as if it were not an added token).
  void split(std::string_view text, std::vector<TextSegment>& segments,
             const SpecialFilter& is_special_allowed = nullptr) const;

 private:
  struct Match {
    size_t begin, end;
    const AddedToken* token;
  };
  bool find_next(std::string_view text, size_t from, Match& match, const SpecialFilter& is_special_allowed) const;

  std::vector<AddedToken> tokens_;
  std::array<std::vector<size_t>, 256> candidates_by_first_byte_;  // longest first
};

}  // namespace tf
