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

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, std::optional<ClosingString> closing)
    : closing_(std::move(closing)) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
  if (closing_ && closing_->text.empty()) closing_.reset();
  is_quiet_ = closing_ && closing_->starts_quiet && !closing_->quiet_close.empty();
  is_armed_ = !closing_ || closing_->armed_by.empty();
}

size_t StopMatcher::find_closing(const std::string& text) {
  if (!closing_) return std::string::npos;
  const ClosingString& c = *closing_;
  const auto ends_with = [this](const std::string& marker) {
    return !marker.empty() && recent_.size() >= marker.size() &&
           recent_.compare(recent_.size() - marker.size(), marker.size(), marker) == 0;
  };
  const size_t longest = std::max({c.text.size(), c.quiet_open.size(), c.quiet_close.size(), c.armed_by.size()});
  for (size_t i = 0; i < text.size(); ++i) {
    recent_ += text[i];
    ++n_scanned_;
    if (is_quiet_) {
      is_quiet_ = !ends_with(c.quiet_close);
    } else if (n_scanned_ == c.quiet_open.size() && ends_with(c.quiet_open) && !c.quiet_close.empty()) {
      is_quiet_ = true;  // only a reply that opens with the marker reasons, as the reply parser reads it
    } else if (!is_armed_) {
      is_armed_ = ends_with(c.armed_by);  // prose that merely quotes the closing string goes on
    } else if (ends_with(c.text)) {
      return i + 1;
    }
    if (recent_.size() > longest) recent_.erase(0, recent_.size() - longest);
  }
  return std::string::npos;
}

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return {};
  const size_t closing_end = find_closing(text);
  if (closing_end == std::string::npos) return release(text);
  // The reply ends with the closing string, unless a stop string comes first.
  std::string released = release(text.substr(0, closing_end));
  if (stopped_) return released;
  stopped_ = true;
  return released + std::exchange(held_, std::string());
}

std::string StopMatcher::release(const std::string& text) {
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
