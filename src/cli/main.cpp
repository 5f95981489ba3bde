// tensorfold: the command-line entry point; each subcommand lives in its own file.
#include <cstdio>
#include <iostream>

#include "backends/backends.h"
#include "cli/commands.h"
#include "cli/receipt.h"
#include "core/error.h"

#ifndef TF_VERSION
#define TF_VERSION "unknown"
#endif

namespace {

// "tensorfold 0.1.0 (commit abc1234; backends: cpu, cuda; cpu numerics: avx512, fused multiply-add)":
// the commit is the one built from; the numerics are this machine's (backends.h).
std::string version_text() {
  const std::string commit = tf::cli::build_commit();
#if TF_HAVE_CUDA
  const char* backends = "cpu, cuda";
#else
  const char* backends = "cpu";
#endif
  return std::string("tensorfold ") + TF_VERSION + " (commit " + (commit.empty() ? "unknown" : commit) +
         "; backends: " + backends + "; cpu numerics: " + tf::device_numerics(tf::ModelLoadOptions{}) + ")";
}

}  // namespace

// Output that never arrived (a full disk, a closed pipe) is a failed command, not a quiet 0.
bool is_stdout_written() {
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: writing to standard output failed\n");
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  tf::cli::set_invocation(argc, argv);
  CLI::App app{"TensorFold: exact speculative inference for Qwen models"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  tf::cli::register_generate_command(app);
  tf::cli::register_tokenize_command(app);
  tf::cli::register_eval_command(app);
  tf::cli::register_quantize_command(app);
  tf::cli::register_bench_command(app);
  tf::cli::register_spec_bench_command(app);
  tf::cli::register_spec_eval_command(app);
  tf::cli::register_serve_command(app);
  try {
    app.parse(argc, argv);
    if (!is_stdout_written()) return 1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: printed, and it must have arrived
      app.exit(e);
      return is_stdout_written() ? 0 : 1;
    }
    // A flag the parser refused is the user's error like any other: the same prefix, the same status.
    std::fprintf(stderr, "error: %s\nRun with --help for the flags.\n", e.what());
    return 1;
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // tf::InternalError, or the machine failing under us
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
