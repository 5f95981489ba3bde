// SHA-256 against the FIPS 180-4 example vectors and token_sha against python3's hashlib.
#include <gtest/gtest.h>

#include <string>

#include "core/sha256.h"

namespace tf {
namespace {

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the 56- and 64-byte padding edges, checked with python3 hashlib.
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha256_hex(std::string(55, 'x')),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(sha256_hex(std::string(56, 'x')),
            "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(sha256_hex(std::string(63, 'x')),
            "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  EXPECT_EQ(sha256_hex(std::string(64, 'x')),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(sha256_hex(std::string(65, 'x')),
            "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9");
}

TEST(Sha256, AllByteValues) {
  std::string bytes;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (int value = 0; value < 256; ++value) bytes.push_back(static_cast<char>(value));
  }
  EXPECT_EQ(sha256_hex(bytes), "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363");
}

// Expected digests from: hashlib.sha256(struct.pack('<3i', 1, 2, -3)).hexdigest() etc.
TEST(TokenSha, LittleEndianInt32) {
  EXPECT_EQ(token_sha({1, 2, -3}), "67e32f76d69f88d259a0a241c2e2c490847983145166f416d348bdf62c8a8f03");
  EXPECT_EQ(token_sha({151643, 0, 2147483647, -2147483647 - 1}),
            "c60582c5dbe8af4cccee369e123c73322aac895e996ca98ba3d831b71d3d2098");
  EXPECT_EQ(token_sha({}), sha256_hex(""));
}

}  // namespace
}  // namespace tf
