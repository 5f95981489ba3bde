// Reading generation_config.json's sampling defaults, with the ranges a request's fields have.
#include "loader/generation_config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"
#include "loader/config_fields.h"

namespace tf {
namespace {

std::optional<double> number_in(const nlohmann::json& config, const char* field, double min, double max,
                                const std::string& path) {
  const nlohmann::json* value = find_field(config, field);
  if (!value) return std::nullopt;
  if (!value->is_number()) fail_field(field, path, "is not a number");
  const double x = value->get<double>();
  if (!(x >= min && x <= max))
    fail_field(field, path, "is outside [" + nlohmann::json(min).dump() + ", " + nlohmann::json(max).dump() + "]");
  return x;
}

}  // namespace

GenerationDefaults read_generation_defaults(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "generation_config.json").string();
  GenerationDefaults defaults;
  if (!std::filesystem::exists(path)) return defaults;
  require_regular_file(path, "the generation config");
  std::ifstream file(path, std::ios::binary);
  const nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) fail("generation config " + path + " is not a JSON object");
  defaults.temperature = number_in(config, "temperature", 0.0, 2.0, path);
  defaults.top_p = number_in(config, "top_p", 0.0, 1.0, path);
  defaults.min_p = number_in(config, "min_p", 0.0, 1.0, path);
  if (const nlohmann::json* top_k = find_field(config, "top_k")) {
    if (!top_k->is_number_integer() || top_k->get<int64_t>() < 0) fail_field("top_k", path, "is not an integer >= 0");
    defaults.top_k = top_k->get<int64_t>();
  }
  return defaults;
}

}  // namespace tf
