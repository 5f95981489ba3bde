// Which tokens a reply's logprobs list: those whose text has begun in the text released so far.
// The engine sends each token's logprobs at once, but holds back text that may begin a stop string
// and cuts the reply there, so logprobs wait here until their text is out.
#pragma once
#include <cstdint>
#include <deque>
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
class LogprobRelease {
 public:
  explicit LogprobRelease(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Holds the update's logprobs and counts its text; returns the held ones now listed, in order.
  ListedLogprobs add(const GenerationUpdate& update);

 private:
  const Tokenizer& tokenizer_;
  std::deque<TokenLogprobs> held_;
  int64_t held_from_byte_ = 0;       // where the first held token's text starts in the reply's text
  int64_t held_from_character_ = 0;  // ...counted in characters
  int64_t token_bytes_ = 0;          // all tokens' bytes so far
  int64_t text_bytes_ = 0;           // the reply's text released so far
};

}  // namespace server
}  // namespace tf
