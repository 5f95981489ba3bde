// How deeply JSON text nests arrays and objects, read without parsing. Parsing is iterative, but
// printing, the tool-call templates and the schema converter recurse: client JSON (and JSON in a
// reply) nested deeper than kMaxJsonNesting is refused or kept as text before anything walks it.
#pragma once
#include <string_view>

namespace tf {

constexpr int kMaxJsonNesting = 128;

// The deepest nesting of [ and { in `text`; brackets inside strings do not count.
inline int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace tf
