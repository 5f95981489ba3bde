// One wording for errors in a tokenizer.json: the file, the field, then what was wrong.
#pragma once
#include <string>

#include "core/error.h"

namespace tf {

[[noreturn]] inline void fail_in_file(const std::string& file_path, const std::string& field, const std::string& what) {
  fail("tokenizer file " + file_path + ": " + field + ": " + what);
}

}  // namespace tf
