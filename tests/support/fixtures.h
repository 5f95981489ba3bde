// Paths and small helpers shared by the tests.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace tf::test {

inline std::string source_path(const std::string& relative) {
  return std::string(TF_SOURCE_DIR) + "/" + relative;
}

inline std::string fixture_model(const std::string& name) {
  return source_path("tests/fixtures/models/" + name);
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace tf::test
