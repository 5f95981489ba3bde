// Leftmost-longest search for added tokens with the lstrip/rstrip/single_word rules of the
// reference library.
#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tf {
namespace {

// The reference asks char::is_alphanumeric of the neighbouring character: letters and numbers.
bool is_alphanumeric(char32_t codepoint) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(codepoint));
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

size_t lead_byte_before(std::string_view text, size_t end, size_t floor) {
  size_t lead = end - 1;
  while (lead > floor && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
  return lead;
}

bool is_word_char_at(std::string_view text, size_t pos) {
  const utf8::Sequence sequence = utf8::sequence_at(text, pos);
  return sequence.kind == utf8::SequenceKind::complete &&
         is_alphanumeric(utf8::decode_at(text, pos, sequence.length));
}

size_t whitespace_before(std::string_view text, size_t end, size_t floor) {
  size_t begin = end;
  while (begin > floor) {
    const size_t lead = lead_byte_before(text, begin, floor);
    const utf8::Sequence sequence = utf8::sequence_at(text, lead);
    if (sequence.kind != utf8::SequenceKind::complete ||
        !utf8::is_unicode_whitespace(utf8::decode_at(text, lead, sequence.length))) {
      break;
    }
    begin = lead;
  }
  return begin;
}

size_t whitespace_after(std::string_view text, size_t begin) {
  size_t end = begin;
  while (end < text.size()) {
    const utf8::Sequence sequence = utf8::sequence_at(text, end);
    if (sequence.kind != utf8::SequenceKind::complete ||
        !utf8::is_unicode_whitespace(utf8::decode_at(text, end, sequence.length))) {
      break;
    }
    end += sequence.length;
  }
  return end;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    candidates_by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& candidates : candidates_by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

bool AddedTokenMatcher::find_next(std::string_view text, size_t from, Match& match,
                                  const SpecialFilter& is_special_allowed) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (size_t index : candidates_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& token = tokens_[index];
      if (text.substr(pos).starts_with(token.content)) {
        if (token.is_special && is_special_allowed && !is_special_allowed(pos, pos + token.content.size())) continue;
        match = {pos, pos + token.content.size(), &token};
        return true;
      }
    }
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& segments,
                              const SpecialFilter& is_special_allowed) const {
  size_t plain_begin = 0;
  Match match{};
  for (size_t search_from = 0; find_next(text, search_from, match, is_special_allowed);) {
    search_from = match.end;
    const AddedToken& token = *match.token;
    if (token.single_word) {
      const bool is_word_before =
          match.begin > 0 && is_word_char_at(text, lead_byte_before(text, match.begin, 0));
      const bool is_word_after = match.end < text.size() && is_word_char_at(text, match.end);
      if (is_word_before || is_word_after) continue;
    }
    size_t begin = match.begin, end = match.end;
    if (token.lstrip) begin = whitespace_before(text, begin, plain_begin);
    if (token.rstrip) end = whitespace_after(text, end);
    if (begin > plain_begin) segments.push_back({text.substr(plain_begin, begin - plain_begin), -1});
    segments.push_back({text.substr(begin, end - begin), token.id});
    plain_begin = search_from = end;
  }
  if (plain_begin < text.size()) segments.push_back({text.substr(plain_begin), -1});
}

}  // namespace tf
