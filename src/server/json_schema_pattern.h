// A JSON Schema `pattern` (an ECMA-262 regex subset) as a GBNF expression over a JSON string's
// content: each character it matches is written as JSON writes it ('"', '\' and U+0000-U+001F
// escaped, everything else raw).
#pragma once
#include <string>

namespace tf::server {

// The expression for the text between a JSON string's quotes whose decoded value the pattern
// matches (unanchored ends match any text, as a regex search does). Uses the `json-char` rule of
// the schema grammar. Throws a 400 ApiError naming `path` (the pattern's place in the request)
// that says what in the pattern is wrong or unsupported.
std::string pattern_gbnf(const std::string& pattern, const std::string& path);

}  // namespace tf::server
