// Finds stop strings in a reply's text as it streams, across token and chunk boundaries.
// Text that could still be the start of a stop string is held back; text from a stop on is
// never released.
#pragma once
#include <string>
#include <vector>

namespace tf {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop_strings);

  // Appends newly decoded text. Returns the text that is now safe to send.
  // After a stop string is found, is_stopped() is true and nothing more is released.
  std::string push(const std::string& text);
  // At the end of the reply (no stop found): releases everything held back.
  std::string flush();
  bool is_stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tf
