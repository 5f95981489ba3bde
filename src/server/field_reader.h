// Reading one JSON object's known fields: null counts as absent; a wrong type or range is an
// OpenAI-style 400 naming the field (with its path, e.g. "tools[0].function.name").
#pragma once
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "server/openai_protocol.h"

namespace tf::server {

inline ApiError invalid(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

inline std::string number_text(double value) {
  json as_json = value;
  if (value == std::floor(value) && std::fabs(value) < 1e15) as_json = int64_t(value);
  return as_json.dump();
}

// Reads one known field: null counts as absent; a wrong type or range names the field.
class FieldReader {
 public:
  explicit FieldReader(const json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  const json* find(const std::string& name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string param(const std::string& name) const { return prefix_ + name; }

  [[noreturn]] void wrong_type(const std::string& name, const char* expected) const {
    const json* value = find(name);
    throw invalid(param(name), "Invalid type for '" + param(name) + "': expected " + expected +
                                   ", but got " + (value ? value->type_name() : "null") +
                                   " instead.");
  }

  std::optional<double> number(const std::string& name, double min, double max) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number()) wrong_type(name, "a number");
    const double x = value->get<double>();
    check_range(name, x < min, x > max, number_text(min), number_text(max), "decimal");
    return x;
  }

  std::optional<int64_t> integer(const std::string& name, int64_t min, int64_t max) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number_integer()) wrong_type(name, "an integer");
    // nlohmann types non-negative numbers as unsigned; compare as integers, so one check covers
    // both types and no bound rounds through a double.
    const bool is_above_int64 =
        value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(INT64_MAX);
    const int64_t x = is_above_int64 ? INT64_MAX : value->get<int64_t>();
    check_range(name, x < min, is_above_int64 || x > max, std::to_string(min), std::to_string(max), "integer");
    return x;
  }

  std::optional<bool> boolean(const std::string& name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) wrong_type(name, "a boolean");
    return value->get<bool>();
  }

  std::optional<std::string> string(const std::string& name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_string()) wrong_type(name, "a string");
    return value->get<std::string>();
  }

  const json* array(const std::string& name) const {
    const json* value = find(name);
    if (value && !value->is_array()) wrong_type(name, "an array");
    return value;
  }

  const json* object(const std::string& name) const {
    const json* value = find(name);
    if (value && !value->is_object()) wrong_type(name, "an object");
    return value;
  }

 private:
  // The one range check for decimals and integers: the bounds and the value compare in the caller's
  // type; the message quotes the value as sent.
  // The bounds as text: an integer's exactly (a double would print 9223372036854775807 as 9.2e+18).
  void check_range(const std::string& name, bool is_below, bool is_above, const std::string& min,
                   const std::string& max, const char* kind) const {
    if (!is_below && !is_above) return;
    const std::string expected = is_below ? " below minimum value. Expected a value >= " + min
                                          : " above maximum value. Expected a value <= " + max;
    throw invalid(param(name), "Invalid '" + param(name) + "': " + kind + expected + ", but got " +
                                   find(name)->dump() + " instead.");
  }

  const json& object_;
  std::string prefix_;
};

}  // namespace tf::server
