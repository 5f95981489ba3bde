// UTF-8 scanning shared by the tokenizer, the stream decoder and NFC: one definition of
// what a valid sequence is, and U+FFFD replacement as the reference library does it.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tf::utf8 {

enum class SequenceKind { complete, truncated, invalid };

struct Sequence {
  SequenceKind kind;
  size_t length;  // bytes: the whole sequence, the truncated prefix, or the maximal invalid part
};

// Classifies the sequence starting at s[pos]; truncated means a valid prefix cut by the end of s.
Sequence sequence_at(std::string_view s, size_t pos);

// Each maximal invalid subpart (and a truncated tail) becomes one U+FFFD, as Rust's
// from_utf8_lossy and Python's errors="replace" do.
std::string replace_invalid(std::string_view s);

void append_codepoint(std::string& out, char32_t codepoint);

// Decodes the complete sequence at s[pos] (callers check sequence_at first).
char32_t decode_at(std::string_view s, size_t pos, size_t length);

bool is_unicode_whitespace(char32_t codepoint);

}  // namespace tf::utf8
