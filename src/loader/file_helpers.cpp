// Small helpers of the loader: JSON files and shapes in error messages.
#include "loader/file_helpers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_error_text.h"
#include "core/regular_file.h"

namespace tf {

nlohmann::json read_json_file(const std::string& path, const std::vector<std::string>& skip_keys) {
  require_regular_file(path, "the JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    auto skip = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth != 1 || event != nlohmann::json::parse_event_t::key) return true;
      return std::find(skip_keys.begin(), skip_keys.end(), parsed.get<std::string>()) == skip_keys.end();
    };
    nlohmann::json::parser_callback_t callback = nullptr;
    if (!skip_keys.empty()) callback = skip;
    return nlohmann::json::parse(text.str(), callback);
  } catch (const nlohmann::json::exception& error) {
    // Re-thrown as tf::Error so callers catch one type; nlohmann's text gives line and column.
    // Not only parse_error: a number too large for a double (1e400) is an out_of_range.
    fail(path + " is not valid JSON: " + json_error_text(error.what()));
  }
}

bool file_exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); i++) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace tf
