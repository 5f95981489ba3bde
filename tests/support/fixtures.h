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

// How the GPU suite is run: TF_CUDA_GRAPHS=0 and TF_CUDA_PDL=0 (tools/gpu_run.sh) turn the CUDA
// launch choices off, as the same variables do for the command-line flags.
inline ModelLoadOptions test_load_options(const std::string& device) {
  auto is_off = [](const char* variable) {
    const char* value = std::getenv(variable);
    return value != nullptr && std::string(value) == "0";
  };
  ModelLoadOptions options;
  options.device = device;
  options.use_cuda_graphs = !is_off("TF_CUDA_GRAPHS");
  options.use_overlapped_launches = !is_off("TF_CUDA_PDL");
  return options;
}

// A fixture checkpoint (tests/fixtures/models/NAME) on a device.
inline std::shared_ptr<Model> load_fixture(const std::string& name, const std::string& device) {
  return load_model(fixture_model(name), test_load_options(device));
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace tf::test
