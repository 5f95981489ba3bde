// Paths and small helpers shared by the tests.
#pragma once
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/backends.h"
#include "models/model.h"

namespace tf::test {

// The source tree: TF_SOURCE_DIR in the environment (tests built here and run on another machine),
// else where the tests were built from.
inline std::string source_path(const std::string& relative) {
  const char* moved = std::getenv("TF_SOURCE_DIR");
  return std::string(moved && *moved ? moved : TF_SOURCE_DIR) + "/" + relative;
}

inline std::string fixture_model(const std::string& name) {
  // "models/..." names the repository's own trained models (the embedded MLX 4-bit one, say).
  return source_path(name.rfind("models/", 0) == 0 ? name : "tests/fixtures/models/" + name);
}

// A fixture checkpoint (tests/fixtures/models/NAME) on a device.
inline std::shared_ptr<Model> load_fixture(const std::string& name, const std::string& device) {
  ModelLoadOptions options;
  options.device = device;
  return load_model(fixture_model(name), options);
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace tf::test
