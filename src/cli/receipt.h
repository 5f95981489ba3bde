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

// The commit this binary was built from ("abc1234", "abc1234-dirty" with uncommitted changes; empty
// outside a git checkout), and the receipt header lines: that commit and the machine.
std::string build_commit();
std::string receipt_commit();
std::string receipt_machine();

// The command line as typed (main() records it), for receipts: what was run, every flag included.
void set_invocation(int argc, char** argv);
const std::string& invocation();

// Writes `text` to `path` (tf::Error naming the path on failure).
void write_receipt(const std::string& path, const std::string& text);

}  // namespace tf::cli
