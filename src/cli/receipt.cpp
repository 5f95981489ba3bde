

#include "cli/receipt.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "tf_git_commit.h"

namespace tf::cli {
namespace {

std::string shell_line(const char* command) {
  std::string out;
  if (FILE* pipe = popen(command, "r")) {
    char buffer[256];
    while (fgets(buffer, sizeof(buffer), pipe)) out += buffer;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

Summary summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string build_commit() { return TF_GIT_COMMIT; }

std::string receipt_commit() {
  const std::string commit = build_commit();
  return commit.empty() ? "unknown (built outside a git checkout)" : commit;
}

namespace {
std::string invocation_text = "tensorfold";
}  // namespace

void set_invocation(int argc, char** argv) {
  // Shell-quoted where needed, so the line can be pasted back.
  std::string text;
  for (int i = 0; i < argc; ++i) {
    std::string arg = i == 0 ? "tensorfold" : argv[i];
    const bool is_plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                "0123456789-_=./,:+@%") == std::string::npos;
    if (!is_plain) {
      std::string quoted = "'";
      for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = quoted + "'";
    }
    text += (i ? " " : "") + arg;
  }
  invocation_text = text;
}

const std::string& invocation() { return invocation_text; }

std::string receipt_machine() {
  return shell_line("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'") + ", " +
         shell_line("nproc") + " cores";
}

void write_receipt(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) fail("cannot write the receipt to " + path);
  out << text;
  out.close();  // a full disk shows at the flush
  if (!out) fail("writing the receipt to " + path + " failed (is the disk full?)");
}

}  // namespace tf::cli
