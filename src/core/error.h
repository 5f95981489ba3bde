// One exception type for every user-facing failure: the message is what the user reads.
#pragma once
#include <stdexcept>
#include <string>

namespace tf {

// A failure caused by input (a file, a flag, a request), with a message that names what was wrong.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace tf
