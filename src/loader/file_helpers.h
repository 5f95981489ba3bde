// Small helpers of the loader: JSON files and shapes in error messages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf {

// Parses PATH as JSON; throws tf::Error naming the path when it cannot be read or parsed.
// Values of the top-level keys in `skip_keys` are dropped while parsing (tokenizer.json's
// "model" holds the whole vocabulary, which a config lookup does not need).
nlohmann::json read_json_file(const std::string& path, const std::vector<std::string>& skip_keys = {});

bool file_exists(const std::string& path);

// "[4, 8]", for messages.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace tf
