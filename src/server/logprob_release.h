// Which tokens a reply's logprobs list: those whose text has begun in the text released so far.
// The engine sends each token's logprobs at once, but holds back text that may begin a stop string
// and cuts the reply there, so logprobs wait here until their text is out.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"

namespace tf {

class Tokenizer;

namespace server {

// Logprobs ready to list, with where each token starts in the reply's text, in characters
// (completions' text_offset: code points, as OpenAI and vLLM count).
struct ListedLogprobs {
  std::vector<TokenLogprobs> logprobs;
  std::vector<int64_t> text_offsets;  // one per entry of logprobs
  bool is_empty() const { return logprobs.empty(); }
};

// The rule: a token is listed when its text begins in the reply's text. So the listed tokens'
// bytes, concatenated, start with the reply's text and only the last may run past its end: a token
// that straddles a stop string's cut is listed, tokens wholly inside the stop string (and any
// after it) never are. A reply that ends uncut lists every token, also those without text.
// Positions are the text's as the client reads it: invalid bytes count as the U+FFFD they became.
// A special token the reply skips has no text; as in vLLM it is still listed, under its own name,
// where the text after it begins (so with that text, or at the end of an uncut reply).
class LogprobRelease {
 public:
  // skips_special_tokens: as the reply's StreamDecoder, so the bytes counted are the text's.
  LogprobRelease(const Tokenizer& tokenizer, bool skips_special_tokens)
      : tokenizer_(tokenizer), skips_special_tokens_(skips_special_tokens) {}

  // Holds the update's logprobs and counts its text; returns the held ones now listed, in order.
  ListedLogprobs add(const GenerationUpdate& update);

 private:
  struct TextPosition {
    int64_t byte = 0;
    int64_t character = 0;
  };
  struct HeldToken {
    TokenLogprobs logprobs;
    int64_t first_byte = 0;  // in the tokens' bytes
    // In the text: the character its first byte belongs to, and the characters before the token
    // (that one too when the token starts inside it). Known once that character is complete.
    std::optional<TextPosition> start;
  };

  // Reads the characters complete in the unread bytes (at the end of the reply, also a cut one)
  // and places the held tokens that start in them.
  void read_characters(bool is_final);

  const Tokenizer& tokenizer_;
  bool skips_special_tokens_;
  std::deque<HeldToken> held_;
  int64_t n_unplaced_ = 0;  // the last held tokens, whose start is not known yet
  std::string unread_;      // the tokens' bytes after the last complete character
  int64_t n_token_bytes_ = 0;
  TextPosition end_of_read_;  // where the text of the bytes read so far ends
  int64_t text_bytes_ = 0;    // the reply's text released so far
};

}  // namespace server
}  // namespace tf
