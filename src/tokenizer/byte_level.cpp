// The GPT-2 bytes_to_unicode table and its inverse.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tf::byte_level {
namespace {

// Stand-ins are below U+0144 (256 plus the 68 unprintable bytes), so a flat table inverts them.
constexpr char32_t stand_in_limit = 256 + 68;

struct Tables {
  std::array<std::string, 256> char_of_byte;
  std::array<int16_t, stand_in_limit> byte_of_char;  // -1: not a stand-in
};

// Printable Latin-1 bytes stand for themselves; the rest take code points from 256 upward.
const Tables& tables() {
  static const Tables built = [] {
    Tables t;
    t.byte_of_char.fill(-1);
    char32_t next_free = 256;
    for (int b = 0; b < 256; ++b) {
      const bool is_printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t codepoint = is_printable ? static_cast<char32_t>(b) : next_free++;
      utf8::append_codepoint(t.char_of_byte[b], codepoint);
      t.byte_of_char[codepoint] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return built;
}

}  // namespace

const std::string& char_of_byte(uint8_t byte) { return tables().char_of_byte[byte]; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += char_of_byte(static_cast<uint8_t>(c));
  return out;
}

std::string decode(std::string_view token) {
  const auto& byte_of_char = tables().byte_of_char;
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const utf8::Sequence sequence = utf8::sequence_at(token, pos);
    if (sequence.kind != utf8::SequenceKind::complete) return std::string(token);
    const char32_t codepoint = utf8::decode_at(token, pos, sequence.length);
    if (codepoint >= stand_in_limit || byte_of_char[codepoint] < 0) return std::string(token);
    out.push_back(static_cast<char>(byte_of_char[codepoint]));
    pos += sequence.length;
  }
  return out;
}

}  // namespace tf::byte_level
