// UTF-8 validation, lossy replacement and NFC (through utf8proc).
#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tf::utf8 {

Sequence sequence_at(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {SequenceKind::complete, 1};
  size_t length = 0;
  // The allowed range of the second byte excludes overlongs, surrogates and > U+10FFFF.
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    return {SequenceKind::invalid, 1};
  }
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= s.size()) return {SequenceKind::truncated, i};
    const unsigned char low = i == 1 ? second_low : 0x80;
    const unsigned char high = i == 1 ? second_high : 0xBF;
    if (byte(pos + i) < low || byte(pos + i) > high) return {SequenceKind::invalid, i};
  }
  return {SequenceKind::complete, length};
}

std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const Sequence sequence = sequence_at(s, pos);
    if (sequence.kind == SequenceKind::complete) {
      out.append(s.substr(pos, sequence.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += sequence.length;
  }
  return out;
}

void append_codepoint(std::string& out, char32_t codepoint) {
  if (codepoint < 0x80) {
    out.push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (codepoint >> 18)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

char32_t decode_at(std::string_view s, size_t pos, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + i])); };
  if (length == 1) return byte(0);
  static constexpr unsigned char lead_mask[5] = {0, 0, 0x1F, 0x0F, 0x07};
  char32_t codepoint = byte(0) & lead_mask[length];
  for (size_t i = 1; i < length; ++i) codepoint = (codepoint << 6) | (byte(i) & 0x3F);
  return codepoint;
}

bool is_unicode_whitespace(char32_t c) {
  // The White_Space property, as Rust's char::is_whitespace uses it.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace tf::utf8

namespace tf {

bool is_valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const utf8::Sequence sequence = utf8::sequence_at(s, pos);
    if (sequence.kind != utf8::SequenceKind::complete) return false;
    pos += sequence.length;
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const utf8::Sequence sequence = utf8::sequence_at(s, pos);
    if (sequence.kind == utf8::SequenceKind::truncated) return pos;
    pos += sequence.length;
  }
  return s.size();
}

std::string nfc(std::string_view s) {
  bool is_ascii = true;
  for (char c : s) is_ascii = is_ascii && static_cast<unsigned char>(c) < 0x80;
  if (is_ascii) return std::string(s);  // ASCII is already in NFC
  const std::string valid = is_valid_utf8(s) ? std::string(s) : utf8::replace_invalid(s);
  utf8proc_uint8_t* normalized = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &normalized,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) fail(std::string("NFC normalization failed: ") + utf8proc_errmsg(length));
  std::string out(reinterpret_cast<const char*>(normalized), static_cast<size_t>(length));
  std::free(normalized);
  return out;
}

}  // namespace tf
