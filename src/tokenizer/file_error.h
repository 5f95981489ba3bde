// One wording for errors in a tokenizer.json (the file, the field, then what was wrong), and
// typed reads of its fields that fail in that wording instead of with a JSON library exception.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tf {

[[noreturn]] inline void fail_in_file(const std::string& file_path, const std::string& field, const std::string& what) {
  fail("tokenizer file " + file_path + ": " + field + ": " + what);
}

// object[key] when present and not null, else nullptr. `object` must be a JSON object.
inline const nlohmann::json* member(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

// A string member (absent or null: `fallback`); `field` is its full name for the error.
inline std::string string_member(const nlohmann::json& object, const char* key, const std::string& fallback,
                                 const std::string& file_path, const std::string& field) {
  const nlohmann::json* value = member(object, key);
  if (!value) return fallback;
  if (!value->is_string()) fail_in_file(file_path, field, "must be a string, got " + std::string(value->type_name()));
  return value->get<std::string>();
}

inline bool bool_member(const nlohmann::json& object, const char* key, bool fallback, const std::string& file_path,
                        const std::string& field) {
  const nlohmann::json* value = member(object, key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail_in_file(file_path, field, "must be true or false, got " + std::string(value->type_name()));
  return value->get<bool>();
}

// A token id: an integer from 0 to 2^31 - 1 (a larger one would wrap to another token).
inline int32_t token_id_value(const nlohmann::json& value, const std::string& file_path, const std::string& field) {
  const bool fits = value.is_number_unsigned() ? value.get<uint64_t>() <= uint64_t(INT32_MAX)
                                               : value.is_number_integer() && value.get<int64_t>() >= 0 &&
                                                     value.get<int64_t>() <= INT32_MAX;
  if (!fits)
    fail_in_file(file_path, field, "must be a token id (an integer from 0 to 2147483647), got " +
                                       (value.is_number() ? value.dump() : std::string(value.type_name())));
  return int32_t(value.get<int64_t>());
}

}  // namespace tf
