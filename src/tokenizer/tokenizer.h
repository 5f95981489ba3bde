// Hugging Face tokenizer.json: NFC normalizer, Split pre-tokenizer regex, ByteLevel, BPE by
// merge rank, and added/special tokens matched inside text. Equal to the reference library.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  // Throws tf::Error naming the file and the field when the file is missing or malformed.
  static std::shared_ptr<const Tokenizer> from_file(const std::string& tokenizer_json_path);
  virtual ~Tokenizer() = default;

  // Added tokens found in the text become their ids (special or not); the rest is normalized,
  // pre-tokenized and merged.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The same, except that special tokens are not matched where they would overlap a literal span
  // (sorted, disjoint): text there is encoded as text, as a chat's user messages are.
  virtual std::vector<int32_t> encode(std::string_view text, const std::vector<TextSpan>& literal_spans) const = 0;
  // Concatenated bytes of the tokens (may end in an incomplete UTF-8 sequence).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The raw bytes of one token; empty for an unknown id.
  virtual std::string token_bytes(int32_t id) const = 0;
  // The id of a token given by its content (a vocab entry or an added token), or -1.
  virtual int32_t token_id(std::string_view content) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // The bytes a token adds to a reply's text: none for a special token when the reply skips them
  // (Hugging Face's decode(skip_special_tokens=True)), else its own. Qwen3 marks <think> and
  // <tool_call> not special, so they stay for the reply parser.
  std::string text_bytes(int32_t id, bool skips_special_tokens) const {
    return skips_special_tokens && is_special(id) ? std::string() : token_bytes(id);
  }
  // One past the largest id.
  virtual int64_t n_tokens() const = 0;
};

// Streaming decode: bytes of an incomplete UTF-8 sequence are held until it completes, so each
// piece returned is valid UTF-8; invalid bytes become U+FFFD. Each token adds its text_bytes, so a
// skipped special token between the bytes of one character does not split it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skips_special_tokens = false)
      : tokenizer_(tokenizer), skips_special_tokens_(skips_special_tokens) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is held, with U+FFFD for an incomplete tail

 private:
  const Tokenizer& tokenizer_;
  bool skips_special_tokens_;
  std::string pending_;
};

// True when s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);
// Length of the longest prefix of s that ends on a complete UTF-8 sequence boundary.
size_t complete_utf8_prefix(std::string_view s);
// NFC normalization of valid UTF-8.
std::string nfc(std::string_view s);

}  // namespace tf
