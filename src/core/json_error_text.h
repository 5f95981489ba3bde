// nlohmann's messages carry an internal tag ("[json.exception.parse_error.101] parse error at line 1,
// column 9: ..."): users read the words after it, which say where and why.
#pragma once
#include <string>

namespace tf {

inline std::string json_error_text(const std::string& what) {
  const size_t tag_end = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && tag_end != std::string::npos) return what.substr(tag_end + 2);
  return what;
}

}  // namespace tf
