// Logprobs held until their token's text is released (see logprob_release.h for the rule).
#include "server/logprob_release.h"

#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace tf::server {

ListedLogprobs LogprobRelease::add(const GenerationUpdate& update) {
  for (const TokenLogprobs& entry : update.logprobs) {
    held_.push_back(entry);
    token_bytes_ += int64_t(tokenizer_.token_bytes(entry.token).size());
  }
  text_bytes_ += int64_t(update.text.size());
  const bool is_whole = update.is_final && text_bytes_ >= token_bytes_;
  ListedLogprobs listed;
  while (!held_.empty() && (is_whole || held_from_byte_ < text_bytes_)) {
    const std::string bytes = tokenizer_.token_bytes(held_.front().token);
    listed.logprobs.push_back(held_.front());
    listed.text_offsets.push_back(held_from_character_);
    held_from_byte_ += int64_t(bytes.size());
    held_from_character_ += utf8_characters_begun(bytes);
    held_.pop_front();
  }
  return listed;
}

}  // namespace tf::server
