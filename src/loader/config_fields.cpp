// Field readers shared by the configs the loader reads: every error names the field and the file.
#include "loader/config_fields.h"

#include <filesystem>

#include "core/error.h"
#include "loader/file_helpers.h"

namespace tf {

using Json = nlohmann::json;

const Json* find_field(const Json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

void fail_field(const std::string& field, const std::string& path, const std::string& problem) {
  fail("field \"" + field + "\" in " + path + " " + problem);
}

const Json& required_field(const Json& object, const char* field, const std::string& path) {
  const Json* value = find_field(object, field);
  if (!value) fail_field(field, path, "is missing");
  return *value;
}

int64_t required_int(const Json& object, const char* field, const std::string& path) {
  const Json& value = required_field(object, field, path);
  if (!value.is_number_integer()) fail_field(field, path, "must be an integer");
  return value.get<int64_t>();
}

int32_t read_index(const Json& value, const std::string& field, const std::string& path) {
  if (value.is_number_unsigned() && value.get<uint64_t>() <= uint64_t(INT32_MAX)) return int32_t(value.get<uint64_t>());
  if (value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() >= 0 &&
      value.get<int64_t>() <= INT32_MAX)
    return int32_t(value.get<int64_t>());
  fail_field(field, path, "must be an integer from 0 to " + std::to_string(INT32_MAX) + ", got " + value.dump());
}

void require_in_range(int64_t value, const char* field, const std::string& path, int64_t min, int64_t max) {
  if (value < min || value > max)
    fail_field(field, path, "must be from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
                                std::to_string(value));
}

double required_number(const Json& object, const char* field, const std::string& path) {
  const Json& value = required_field(object, field, path);
  if (!value.is_number()) fail_field(field, path, "must be a number");
  return value.get<double>();
}

Json read_config_object(const std::string& dir, const std::string& what, std::string* path) {
  *path = dir + "/config.json";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("the " + what + " directory " + dir + (std::filesystem::exists(dir, ec) ? " is not a directory" : " does not exist"));
  if (!file_exists(*path)) fail("no config.json in " + what + " directory " + dir);
  Json json = read_json_file(*path);
  if (!json.is_object()) fail(*path + " must hold a JSON object");
  return json;
}

std::string config_architecture(const Json& config, const std::string& path) {
  const Json& architectures = required_field(config, "architectures", path);
  if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string())
    fail_field("architectures", path, "must be a non-empty list of strings");
  return architectures[0].get<std::string>();
}

}  // namespace tf
