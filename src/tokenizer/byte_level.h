// GPT-2 byte-level mapping: every byte has a printable Unicode stand-in, so a vocabulary of
// strings can hold arbitrary bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::byte_level {

// UTF-8 of the stand-in character of one byte.
const std::string& char_of_byte(uint8_t byte);

// Raw bytes -> the string of stand-ins (how the vocabulary spells them).
std::string encode(std::string_view bytes);

// A vocabulary string back to raw bytes. A string holding any character that is not a
// stand-in is returned as its own UTF-8 bytes, as the reference ByteLevel decoder does.
std::string decode(std::string_view token);

}  // namespace tf::byte_level
