// SHA-256: token_sha (the hex digest of a reply's token ids as little-endian int32), the prefix
// cache's block keys and saved slots' checksums.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// Incremental: update() any number of times, then digest() once.
class Sha256 {
 public:
  void update(const uint8_t* data, size_t size);
  void update(std::string_view bytes) { update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); }
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void compress();

  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<uint8_t, 64> block_{};
  size_t n_buffered_ = 0;
  uint64_t n_bytes_total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
std::string token_sha(const std::vector<int32_t>& tokens);

}  // namespace tf
