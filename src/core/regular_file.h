// Opening a directory as a file succeeds on Linux and its size then reads as garbage (a huge
// allocation, or "Is a directory" from deep in a stream): readers of a file a user names check it first.
#pragma once
#include <filesystem>
#include <string>

#include "core/error.h"

namespace tf {

// Fails with "<what> <path> is a directory, not a file" (or "does not exist").
inline void require_regular_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return;
  const std::string why = std::filesystem::is_directory(path, ec) ? " is a directory, not a file"
                          : std::filesystem::exists(path, ec)     ? " is not a regular file"
                                                                  : " does not exist";
  fail(what + " " + path.string() + why);
}

}  // namespace tf
