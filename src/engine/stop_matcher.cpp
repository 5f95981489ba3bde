// Streaming stop-string detection: hold back only what could still grow into a stop string.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tf {
namespace {

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Bytes in a UTF-8 sequence that starts with `lead` (1 for ASCII and for invalid leads).
size_t utf8_sequence_length(char lead) {
  const auto byte = static_cast<unsigned char>(lead);
  if (byte >= 0xF0 && byte < 0xF8) return 4;
  if (byte >= 0xE0) return byte < 0xF0 ? 3 : 1;
  if (byte >= 0xC0) return 2;
  return 1;
}

// Start of the trailing UTF-8 sequence if it is still missing bytes, else text.size().
size_t incomplete_tail_start(const std::string& text) {
  size_t start = text.size();
  // A sequence is at most 4 bytes, so its lead is among the last 4.
  while (start > 0 && text.size() - start < 4 && is_continuation_byte(text[start - 1])) --start;
  if (start == 0) return text.size();
  const size_t lead = start - 1;
  if (is_continuation_byte(text[lead])) return text.size();
  return text.size() - lead < utf8_sequence_length(text[lead]) ? lead : text.size();
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return {};
  held_ += text;

  // held_ never contains a whole stop string (we would have stopped), so the earliest match is
  // found by searching it alone.
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) first_match = std::min(first_match, held_.find(stop));
  if (first_match != std::string::npos) {
    std::string released = held_.substr(0, first_match);
    held_.clear();
    stopped_ = true;
    return released;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold_from = held_.size();
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t length = longest; length > 0 && held_.size() - length < hold_from; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        hold_from = held_.size() - length;
        break;
      }
    }
  }
  // Never split a character: neither one a stop prefix starts inside, nor one still arriving.
  hold_from = std::min(hold_from, incomplete_tail_start(held_));
  while (hold_from > 0 && hold_from < held_.size() && is_continuation_byte(held_[hold_from])) {
    --hold_from;
  }

  std::string released = held_.substr(0, hold_from);
  held_.erase(0, hold_from);
  return released;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, std::string());
}

}  // namespace tf
