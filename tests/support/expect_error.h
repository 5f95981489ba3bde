// expect_error_naming: the check that a bad input fails with a tf::Error that names what was wrong.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf::test {

// Runs `action`, expects a tf::Error, and checks that its message names every part.
inline void expect_error_naming(const std::function<void()>& action, const std::vector<std::string>& parts) {
  try {
    action();
  } catch (const tf::Error& error) {
    const std::string message = error.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "\"" << part << "\" not in: " << message;
    return;
  }
  ADD_FAILURE() << "no tf::Error; expected one naming " << parts.front();
}

}  // namespace tf::test
