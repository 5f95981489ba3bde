// Two exception types: tf::Error for a user-facing failure (the message is what the user reads),
// tf::InternalError for a broken invariant (a bug: the user reads only that something went wrong).
#pragma once
#include <stdexcept>
#include <string>

namespace tf {

// A failure caused by input (a file, a flag, a request), with a message that names what was wrong.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken invariant inside TensorFold: no input of the user's makes it, so the server answers 500
// without the text (logged instead) and the CLI exits 2. Deliberately not a tf::Error.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }
[[noreturn]] inline void fail_internal(const std::string& message) { throw InternalError(message); }

}  // namespace tf
