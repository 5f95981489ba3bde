// Reading fields of a config.json with errors that name the field and the file, shared by every
// config the loader reads (models, drafters).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tf {

// The field, or nullptr when it is absent or null (Hugging Face writes null for unset fields).
const nlohmann::json* find_field(const nlohmann::json& object, const char* field);
[[noreturn]] void fail_field(const std::string& field, const std::string& path, const std::string& problem);
const nlohmann::json& required_field(const nlohmann::json& object, const char* field, const std::string& path);
int64_t required_int(const nlohmann::json& object, const char* field, const std::string& path);
// A non-negative integer that fits int32 (a token id, a layer index), or an error naming the field
// (a larger id would otherwise wrap to another token).
int32_t read_index(const nlohmann::json& value, const std::string& field, const std::string& path);
// Fails naming the field unless min <= value <= max; the caps keep every product of sizes in int64.
void require_in_range(int64_t value, const char* field, const std::string& path, int64_t min, int64_t max);
double required_number(const nlohmann::json& object, const char* field, const std::string& path);

// DIR/config.json as a JSON object; `what` ("model", "drafter") names the directory in errors.
nlohmann::json read_config_object(const std::string& dir, const std::string& what, std::string* path);
// architectures[0], checked to be a string.
std::string config_architecture(const nlohmann::json& config, const std::string& path);

}  // namespace tf
