// Pieces every benchmark receipt needs: medians with ranges, timers, and where it ran.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace tf::cli {

struct Summary {
  double median, low, high;
};
// Median and range of repeated measurements (values non-empty).
Summary summarize(std::vector<double> values);

double seconds_since(std::chrono::steady_clock::time_point start);

// The receipt header lines: commit (git, when run inside the source tree) and machine.
std::string receipt_commit();
std::string receipt_machine();

// Writes `text` to `path` (tf::Error naming the path on failure).
void write_receipt(const std::string& path, const std::string& text);

}  // namespace tf::cli
