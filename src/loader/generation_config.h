// generation_config.json: the sampling defaults a model ships with (temperature, top_p, top_k,
// min_p), applied by the server to requests that do not set them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tf {

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
};

// DIR/generation_config.json's sampling fields; none when the file is absent. Throws tf::Error
// naming the file and the field for a value of the wrong type or out of range.
GenerationDefaults read_generation_defaults(const std::string& model_dir);

}  // namespace tf
