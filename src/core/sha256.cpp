// SHA-256 as in FIPS 180-4, small and dependency-free.
#include "core/sha256.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace tf {
namespace {

constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotate_right(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

void Sha256::compress() {
  std::array<uint32_t, 64> schedule;
  for (int t = 0; t < 16; ++t) {
    schedule[t] = uint32_t{block_[4 * t]} << 24 | uint32_t{block_[4 * t + 1]} << 16 |
                  uint32_t{block_[4 * t + 2]} << 8 | uint32_t{block_[4 * t + 3]};
  }
  for (int t = 16; t < 64; ++t) {
    const uint32_t w15 = schedule[t - 15], w2 = schedule[t - 2];
    const uint32_t sigma0 = rotate_right(w15, 7) ^ rotate_right(w15, 18) ^ (w15 >> 3);
    const uint32_t sigma1 = rotate_right(w2, 17) ^ rotate_right(w2, 19) ^ (w2 >> 10);
    schedule[t] = schedule[t - 16] + sigma0 + schedule[t - 7] + sigma1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t big_sigma1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t temp1 = h + big_sigma1 + choose + kRoundConstants[t] + schedule[t];
    const uint32_t big_sigma0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t temp2 = big_sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + temp1;
    d = c;
    c = b;
    b = a;
    a = temp1 + temp2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const uint8_t* data, size_t size) {
  n_bytes_total_ += size;
  while (size > 0) {
    const size_t take = std::min(size, block_.size() - n_buffered_);
    std::memcpy(block_.data() + n_buffered_, data, take);
    n_buffered_ += take;
    data += take;
    size -= take;
    if (n_buffered_ == block_.size()) {
      compress();
      n_buffered_ = 0;
    }
  }
}

std::array<uint8_t, 32> Sha256::digest() {
  // Padding: a 1 bit, zeros up to 56 mod 64 bytes, then the message length in bits, big-endian.
  const uint64_t n_bits = n_bytes_total_ * 8;
  const uint8_t one_bit = 0x80;
  update(&one_bit, 1);
  const uint8_t zero = 0;
  while (n_buffered_ != 56) update(&zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n_bits >> (56 - 8 * i));
  update(length, 8);
  std::array<uint8_t, 32> out{};
  for (size_t w = 0; w < 8; ++w)
    for (int b = 0; b < 4; ++b) out[w * 4 + size_t(b)] = static_cast<uint8_t>(state_[w] >> (24 - 8 * b));
  return out;
}

std::string Sha256::hex_digest() {
  static const char* const kHex = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint8_t byte : digest()) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.hex_digest();
}

std::string token_sha(const std::vector<int32_t>& tokens) {
  // Explicit little-endian bytes, so the digest does not depend on the host's byte order.
  std::string bytes;
  bytes.reserve(tokens.size() * 4);
  for (int32_t token : tokens) {
    const auto value = static_cast<uint32_t>(token);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  return sha256_hex(bytes);
}

}  // namespace tf
