// Logprobs held until their token's text is released (see logprob_release.h for the rule).
#include "server/logprob_release.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf::server {
namespace {

constexpr int64_t kReplacementCharacterBytes = 3;  // U+FFFD, which the stream decoder writes for invalid bytes

}  // namespace

ListedLogprobs LogprobRelease::add(const GenerationUpdate& update) {
  for (const TokenLogprobs& entry : update.logprobs) {
    const std::string bytes = tokenizer_.text_bytes(entry.token, skips_special_tokens_);
    held_.push_back({entry, n_token_bytes_, std::nullopt});
    n_unplaced_ += 1;
    n_token_bytes_ += int64_t(bytes.size());
    unread_ += bytes;
  }
  read_characters(update.is_final);
  text_bytes_ += int64_t(update.text.size());
  const bool is_whole = update.is_final && text_bytes_ >= end_of_read_.byte;
  ListedLogprobs listed;
  while (!held_.empty() && held_.front().start && (is_whole || held_.front().start->byte < text_bytes_)) {
    listed.logprobs.push_back(held_.front().logprobs);
    listed.text_offsets.push_back(held_.front().start->character);
    held_.pop_front();
  }
  return listed;
}

// The stream decoder cuts the same characters: whole sequences pass, each maximal invalid part
// becomes one U+FFFD, and a sequence still arriving waits (the reply's end makes it one U+FFFD).
void LogprobRelease::read_characters(bool is_final) {
  const int64_t unread_from = n_token_bytes_ - int64_t(unread_.size());
  size_t position = 0;
  while (position < unread_.size()) {
    const utf8::Sequence sequence = utf8::sequence_at(unread_, position);
    if (sequence.kind == utf8::SequenceKind::truncated && !is_final) break;
    const int64_t begin = unread_from + int64_t(position);
    const int64_t end = begin + int64_t(sequence.length);
    for (; n_unplaced_ > 0 && held_[held_.size() - size_t(n_unplaced_)].first_byte < end; --n_unplaced_) {
      HeldToken& token = held_[held_.size() - size_t(n_unplaced_)];
      token.start = TextPosition{end_of_read_.byte, end_of_read_.character + (token.first_byte > begin ? 1 : 0)};
    }
    end_of_read_.byte +=
        sequence.kind == utf8::SequenceKind::complete ? int64_t(sequence.length) : kReplacementCharacterBytes;
    end_of_read_.character += 1;
    position += sequence.length;
  }
  unread_.erase(0, position);
  // Tokens without text at the reply's end start where it ends.
  if (is_final)
    for (; n_unplaced_ > 0; --n_unplaced_) held_[held_.size() - size_t(n_unplaced_)].start = end_of_read_;
}

}  // namespace tf::server
