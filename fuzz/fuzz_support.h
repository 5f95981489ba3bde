// What the fuzz targets share: a private scratch directory for file-based parsers, and the rule
// that an input may only ever be refused with a user-facing error.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tf::fuzz {

// One directory per process (libFuzzer's -jobs run several), removed at exit. Held by a pointer
// that is never freed, so the exit handler cannot outlive it.
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "tf-fuzz-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    auto* path = new std::string(pattern);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return path;
  }();
  return *dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline void remove_file(const std::string& path) { std::filesystem::remove(path); }

// A finding that is not a memory error: an invariant broken by some input.
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

// Runs body; a tf::Error (the input's fault, with a message for the user) is a fine outcome, any
// other exception is a finding: the user would read "internal error" for their own mistake.
template <typename Body>
void expect_only_user_errors(Body&& body) {
  try {
    body();
  } catch (const tf::Error&) {
  } catch (const std::exception& error) {
    broken(std::string("an input escaped as a non-user error: ") + error.what());
  }
}

// Splits s at the first occurrence of separator: {before, after}; after is empty when absent.
inline std::pair<std::string_view, std::string_view> split_once(std::string_view s, std::string_view separator) {
  const size_t at = s.find(separator);
  if (at == std::string_view::npos) return {s, {}};
  return {s.substr(0, at), s.substr(at + separator.size())};
}

}  // namespace tf::fuzz
