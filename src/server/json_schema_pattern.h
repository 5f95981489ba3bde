// A JSON Schema `pattern` (an ECMA-262 regex subset) as a GBNF expression over a JSON string's
// content: each character it matches is written as JSON writes it ('"', '\' and U+0000-U+001F
// escaped, everything else raw).
#pragma once
#include <cstdint>
#include <string>

namespace tf::server {

// The expression for the text between a JSON string's quotes whose decoded value the pattern
// matches (unanchored ends match any text, as a regex search does). Uses the `json-char` rule of
// the schema grammar. Throws a 400 ApiError naming `path` (the pattern's place in the request)
// that says what in the pattern is wrong or unsupported.
std::string pattern_gbnf(const std::string& pattern, const std::string& path);

// The same text with the decoded value also min_length to max_length code points long (max_length
// -1: no maximum), as rules `name`-0 (the start) ... that need only `json-char`; "" when no string
// matches both. Throws as pattern_gbnf does, and also when the pattern unrolled against the bounds
// would need more states than a fixed limit.
std::string pattern_with_length_gbnf(const std::string& pattern, int64_t min_length, int64_t max_length,
                                     const std::string& name, const std::string& path);

}  // namespace tf::server
