// How deeply JSON text nests arrays and objects, read without parsing. Parsing is iterative, but
// printing, the tool-call templates and the schema converter recurse: client JSON (and JSON in a
// reply) nested deeper than kMaxJsonNesting is refused or kept as text before anything walks it.
#pragma once
#include <string_view>

namespace tf {

constexpr int kMaxJsonNesting = 128;

// Walks JSON text a byte at a time and says which bytes lie outside string literals (quotes included
// in the strings), so scanners see structure and never a bracket or tag quoted inside a value.
class JsonStringTracker {
 public:
  // Whether `c`, the next byte, is outside every string literal.
  bool is_outside_strings(char c) {
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
      return false;
    }
    if (c == '"') {
      in_string_ = true;
      return false;
    }
    return true;
  }

 private:
  bool in_string_ = false, escaped_ = false;
};

// The deepest nesting of [ and { in `text`; brackets inside strings do not count.
inline int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  JsonStringTracker tracker;
  for (const char c : text) {
    if (!tracker.is_outside_strings(c)) continue;
    if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace tf
