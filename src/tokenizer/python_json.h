// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it: what the `tojson` filter
// of transformers' chat templates puts into a prompt (", " and ": " separators, keys in the order
// given, non-ASCII kept, Python's float repr).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tf {

std::string python_json_dumps(const nlohmann::ordered_json& value);

// Python's str.isspace() for one code point: what str.strip() and Jinja's `trim` remove.
bool is_python_space(char32_t codepoint);

// Python's s.strip(): leading and trailing Unicode whitespace removed.
std::string python_strip(const std::string& text);

}  // namespace tf
