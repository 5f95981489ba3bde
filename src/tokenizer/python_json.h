// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it: what the `tojson` filter
// of transformers' chat templates puts into a prompt (", " and ": " separators, keys in the order
// given, non-ASCII kept, Python's float repr), and JSON text read as json.loads reads it.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tf {

std::string python_json_dumps(const nlohmann::ordered_json& value);

// JSON text read as Python's json.loads reads it for a template to render: an integer past 64 bits
// keeps its digits (nlohmann alone makes it a double, and 1.2345678901234568e+29 would reach the
// prompt). Such an integer is held as a binary value that python_json_dumps writes back as written,
// so a value read here is for rendering, not for arithmetic. Throws nlohmann's exceptions as
// json::parse does (a number past a double's range, integer or not, is refused as it is there).
nlohmann::ordered_json python_json_loads(std::string_view text);
nlohmann::ordered_json python_json_loads_or_discarded(std::string_view text);  // never throws

// Python's str.isspace() for one code point: what str.strip() and Jinja's `trim` remove.
bool is_python_space(char32_t codepoint);

// Python's s.strip(): leading and trailing Unicode whitespace removed.
std::string python_strip(const std::string& text);

}  // namespace tf
