// SHA-256, for token_sha: the hex digest of a reply's token ids as little-endian int32.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

std::string sha256_hex(std::string_view bytes);
std::string token_sha(const std::vector<int32_t>& tokens);

}  // namespace tf
