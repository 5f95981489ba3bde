// Finds stop strings in a reply's text as it streams, across token and chunk boundaries.
// Text that could still be the start of a stop string is held back; text from a stop on is
// never released. A closing string (ClosingString) ends the reply too, but stays in it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"

namespace tf {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop_strings, std::optional<ClosingString> closing = std::nullopt);

  // Appends newly decoded text. Returns the text that is now safe to send.
  // After a stop string (or the closing string) is found, is_stopped() is true and nothing more is
  // released.
  std::string push(const std::string& text);
  // At the end of the reply (no stop found): releases everything held back.
  std::string flush();
  bool is_stopped() const { return stopped_; }

 private:
  // Stop strings: appends text, returns what is safe to send.
  std::string release(const std::string& text);
  // The length of the prefix of `text` that ends with the closing string outside the quiet
  // sections, or npos; advances the scan's state over what it reads.
  size_t find_closing(const std::string& text);

  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::optional<ClosingString> closing_;
  bool is_quiet_ = false;
  bool is_armed_ = true;   // the closing string's armed_by has been seen (or it has none)
  std::string recent_;     // the last bytes scanned, enough to see a marker across pieces
  size_t n_scanned_ = 0;   // bytes of the reply scanned so far
};

}  // namespace tf
